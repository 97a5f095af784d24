"""Drift rates learned in log space: ω = exp(ℓ), the optimiser stepping ℓ (``omega="log"``; the torus only).

Adam's step is about the same size for every parameter of a group, so a rate learned as itself moves by an absolute
amount each step, the same for RoPE's fastest rate (1 rad per token) as for its slowest (1e-4). Learned as log ω, a
step moves each rate by a factor of about e^{±lr·mult} instead, whatever its size, and no rate can change sign.

``learn_in_log(module, "omega")`` re-parametrises a module's positive rate parameter in place (torch's parametrize):
``module.omega`` still reads ω, so every path and diagnostic is unchanged, but writes must assign
(``module.omega = w`` under ``torch.no_grad()``, which stores log w): ``module.omega.copy_(w)`` or ``.data = w``
change a computed tensor and are lost. ``raw(module, "omega")`` is the parameter the optimiser holds (ℓ, or ω itself
when not re-parametrised).
"""

import torch
from torch import Tensor, nn
from torch.nn.utils import parametrize


class LogRate(nn.Module):
    """ω = exp(ℓ); ``right_inverse`` gives ℓ = log ω for the initial rates (which must be > 0)."""

    def forward(self, log_rate: Tensor) -> Tensor:
        return log_rate.exp()

    def right_inverse(self, rate: Tensor) -> Tensor:
        if not rate.is_meta and not bool((rate > 0).all()):  # a meta tensor (a model sized, not built) has no values
            raise ValueError(f"rates learned as log ω must be > 0, got a minimum of {rate.min().item():.3g}")
        return rate.log()


def learn_in_log(module: nn.Module, name: str) -> None:
    """Re-parametrise ``module.<name>`` (a positive rate parameter) as exp of a learned log rate."""
    with torch.no_grad():
        parametrize.register_parametrization(module, name, LogRate())


def raw(module: nn.Module, name: str) -> Tensor:
    """The tensor the optimiser steps for ``module.<name>``: its log rate when re-parametrised, else itself."""
    if parametrize.is_parametrized(module, name):
        return getattr(module.parametrizations, name).original
    return getattr(module, name)
