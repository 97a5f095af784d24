"""The bound applied to every increment before it moves a state (``naive.py`` writes the paper's two kinds out).

    norm         r · tanh(‖x‖) · x/‖x‖          one learned r; the norm over a token's whole increment
    elementwise  r ⊙ tanh(x / r)                 one learned r per coordinate

Trained, an increment sits far past the norm bound's knee, so every token moves by r whatever its coupling says. The
radius is stored as its log (positive).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Protocol

import torch
from torch import Tensor, nn

from kuramoto_attention.ops.torus import bound_elementwise, norm_factor

BoundKind = Literal["norm", "elementwise"]


@dataclass(frozen=True)
class NormBound:
    """The norm bound's parameters as a group receives them (never the module): bound(w) = w · factor(‖w‖²)."""

    log_radius: Tensor

    def factor(self, sq_norm: Tensor) -> Tensor:
        """r·tanh(‖w‖)/‖w‖ per token from ‖w‖² (..., 1), in its dtype: bound(w) = w · factor."""
        return norm_factor(sq_norm, self.log_radius.exp().to(sq_norm.dtype))


class Manifold(Protocol):
    """What a bound needs of a geometry (groups/base.py's ``Geometry``) to move a state by a bounded step."""

    def move(self, x: Tensor, step: Tensor) -> Tensor: ...
    def norm_move(self, x: Tensor, step: Tensor, bound: NormBound) -> Tensor: ...
    def norm_step(self, x: Tensor, lifted: Tensor, mean: Tensor, value: Tensor, bound: NormBound,
                  extras: nn.Module | None = None) -> Tensor: ...
    def increment(self, x: Tensor, lifted: Tensor, mean: Tensor, extras: nn.Module | None = None) -> Tensor: ...
    def tangent_gate(self, value: Tensor) -> Tensor: ...


class Bound(nn.Module):
    """One bound of a layer, for increments ``width`` = n·tangent wide (n oscillators of ``tangent`` coordinates)."""

    def __init__(self, width: int, kind: BoundKind = "norm", radius_init: float = 10.0) -> None:
        super().__init__()
        if kind not in ("norm", "elementwise"):
            raise ValueError(f"bound must be 'norm' or 'elementwise', got {kind!r}")
        self.kind = kind
        self.log_radius = nn.Parameter(torch.full((width if kind == "elementwise" else 1,), math.log(radius_init)))

    @property
    def radius(self) -> Tensor:
        return self.log_radius.exp()

    def norm(self) -> NormBound | None:
        """The norm bound's parameters, or None (elementwise)."""
        if self.kind == "elementwise":
            return None
        return NormBound(self.log_radius)

    def forward(self, x: Tensor) -> Tensor:
        """bound(x), (..., n·tangent)."""
        if self.kind == "elementwise":
            return bound_elementwise(x, self.radius.to(x.dtype))
        norm = self.norm()
        assert norm is not None
        return x * norm.factor(torch.linalg.vecdot(x, x).unsqueeze(-1))

    def move(self, geometry: Manifold, x: Tensor, step: Tensor) -> Tensor:
        """x moved along the geometry's manifold by bound(step)."""
        norm = self.norm()
        if norm is None:
            return geometry.move(x, self(step))
        return geometry.norm_move(x, step, norm)

    def gated_move(self, geometry: Manifold, x: Tensor, lifted: Tensor, mean: Tensor, value: Tensor,
                   extras: nn.Module | None = None) -> Tensor:
        """The attention's move: x moved by bound(v ⊙ increment(G)); value (B, T, n)."""
        norm = self.norm()
        if norm is not None:
            return geometry.norm_step(x, lifted, mean, value, norm, extras)
        inc = geometry.increment(x, lifted, mean, extras)
        return self.move(geometry, x, geometry.tangent_gate(value.to(inc.dtype)) * inc)

    def drive(self, x: Tensor) -> Tensor:
        """The tanh's argument for increment x (..., k): ‖x‖ per token for the norm bound (..., ), |x_j|/r_j per
        coordinate (..., k) for the elementwise one. Past about 2 the step's length no longer follows x, and the
        gradient reaching x's length vanishes (sech² of it)."""
        if self.kind == "elementwise":
            return x.abs() / self.radius.to(x.dtype)
        return x.norm(dim=-1)
