"""The learned-radius tanh bound applied to every increment."""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor, nn

from kuramoto_attention.ops.fused import bounded_step, fused_applies
from kuramoto_attention.ops.torus import bound_elementwise, bound_norm

BoundKind = Literal["norm", "norm-soft", "elementwise", "none"]


class Bound(nn.Module):
    """The learned-radius tanh bound applied to every increment (SPEC §2, "bound").

    ``norm``: r·tanh(‖x‖)·x/‖x‖ with one learned scalar r (norm over a token's coordinates).
    ``norm-soft``: r·tanh(‖x‖/r)·x/‖x‖ = norm(x/r): gain 1 (not r) for small increments, so
    only increments near the radius are squashed; the norm analogue of ``elementwise``.
    ``elementwise``: r ⊙ tanh(x / r) with a learned radius per coordinate.
    ``none``: identity (ablation). The radius is stored as log r so it stays positive.
    """

    def __init__(self, dim: int, kind: BoundKind = "norm", radius_init: float = 10.0) -> None:
        super().__init__()
        if kind not in ("norm", "norm-soft", "elementwise", "none"):
            raise ValueError(f"bound must be 'norm', 'norm-soft', 'elementwise' or 'none', got {kind!r}")
        self.kind = kind
        shape = (dim,) if kind == "elementwise" else (1,)
        if kind != "none":  # no radius to learn, and no unused parameter
            self.log_radius = nn.Parameter(torch.full(shape, math.log(radius_init)))

    @property
    def radius(self) -> Tensor:
        return self.log_radius.exp()

    def forward(self, x: Tensor) -> Tensor:
        if self.kind == "none":
            return x
        r = self.radius.to(x.dtype)
        if self.kind == "norm":
            return bound_norm(x, r)
        if self.kind == "norm-soft":
            return bound_norm(x / r, r)
        return bound_elementwise(x, r)

    def step(self, theta: Tensor, x: Tensor) -> Tensor:
        """θ + bound(x) in θ's dtype (x may be lower precision); hand-fused in eager training (``fused.py``)."""
        if self.kind == "norm" and fused_applies():
            return bounded_step(theta, x, self.log_radius)
        return theta + self(x)

