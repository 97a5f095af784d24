"""The learned-radius tanh bound applied to every increment (``naive.py`` writes both kinds out)."""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor, nn

from kuramoto_attention.ops.fused import bounded_step, fused_applies
from kuramoto_attention.ops.torus import bound_elementwise, bound_norm, norm_factor

BoundKind = Literal["norm", "elementwise"]
BoundScale = Literal["one", "learned"]


class Bound(nn.Module):
    """``norm``: r·tanh(‖x‖/s)·x/‖x‖, one learned r, the norm over a token's whole increment; s = 1 (``scale="one"``,
    the paper's reading) or one learned s (``"learned"``, from s = r: gain 1 for small steps, as r ⊙ tanh(x/r)).
    With s = 1 trained increments sit on the bound (‖x‖ ≫ 1), so every token moves by r whatever its coupling; a
    learned s lets the step's length follow the increment's. ``elementwise``: r ⊙ tanh(x / r), one learned r per
    coordinate. Radius and scale are stored as logs (positive)."""

    def __init__(self, dim: int, kind: BoundKind = "norm", radius_init: float = 10.0,
                 scale: BoundScale = "one") -> None:
        super().__init__()
        if kind not in ("norm", "elementwise"):
            raise ValueError(f"bound must be 'norm' or 'elementwise', got {kind!r}")
        if scale not in ("one", "learned") or (scale == "learned" and kind != "norm"):
            raise ValueError(f"bound_scale must be 'one', or 'learned' with the norm bound, got {scale!r} "
                             f"with bound={kind!r}")
        self.kind = kind
        self.log_radius = nn.Parameter(torch.full((dim,) if kind == "elementwise" else (1,), math.log(radius_init)))
        self.log_scale = nn.Parameter(torch.full((1,), math.log(radius_init))) if scale == "learned" else None

    @property
    def radius(self) -> Tensor:
        return self.log_radius.exp()

    @property
    def fusable(self) -> bool:
        """Whether the hand-fused kernels (``ops/fused.py``: the norm bound with s = 1) compute this bound now."""
        return self.kind == "norm" and self.log_scale is None and fused_applies()

    def forward(self, x: Tensor) -> Tensor:
        r = self.radius.to(x.dtype)
        if self.kind == "elementwise":
            return bound_elementwise(x, r)
        return bound_norm(x if self.log_scale is None else x / self.log_scale.exp().to(x.dtype), r)

    def drive(self, x: Tensor) -> Tensor:
        """The tanh's argument for increment x (..., k): ‖x‖/s per token for the norm bound (..., ), |x_j|/r_j per
        coordinate (..., k) for the elementwise one. Past about 2 the step's length no longer follows x, and the
        gradient reaching x's length vanishes (sech² of it): how far past the knee a layer pushes."""
        if self.kind == "elementwise":
            return x.abs() / self.radius.to(x.dtype)
        return x.norm(dim=-1) / (1.0 if self.log_scale is None else self.log_scale.exp().to(x.dtype))

    def norm_factor(self, sq_norm: Tensor) -> Tensor:
        """The norm bound as a per-token rescaling, bound(x) = m · x, from ‖x‖² (..., 1), so that a caller may hold x
        in any layout (SU(2) keeps its components apart): with s, bound(x) = bound_1(x/s) = x · h(‖x‖²/s²) / s."""
        if self.kind != "norm":
            raise ValueError("norm_factor is the norm bound's; an elementwise bound is no rescaling")
        r = self.radius.to(sq_norm.dtype)
        if self.log_scale is None:
            return norm_factor(sq_norm, r)
        s = self.log_scale.exp().to(sq_norm.dtype)
        return norm_factor(sq_norm / (s * s), r) / s

    def step(self, theta: Tensor, x: Tensor) -> Tensor:
        """θ + bound(x) in θ's dtype (x may be lower precision); hand-fused in eager training (``ops/fused.py``)."""
        if self.fusable:
            return bounded_step(theta, x, self.log_radius)
        return theta + self(x)
