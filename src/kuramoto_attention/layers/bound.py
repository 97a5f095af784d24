"""The learned-radius tanh bound applied to every increment (``naive.py`` writes both kinds out)."""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor, nn

from kuramoto_attention.ops.fused import bounded_step, fused_applies
from kuramoto_attention.ops.torus import bound_elementwise, bound_norm

BoundKind = Literal["norm", "elementwise"]


class Bound(nn.Module):
    """``norm``: r·tanh(‖x‖)·x/‖x‖, one learned r, the norm over a token's whole increment (the paper's);
    ``elementwise``: r ⊙ tanh(x / r), one learned r per coordinate. The radius is stored as log r (positive)."""

    def __init__(self, dim: int, kind: BoundKind = "norm", radius_init: float = 10.0) -> None:
        super().__init__()
        if kind not in ("norm", "elementwise"):
            raise ValueError(f"bound must be 'norm' or 'elementwise', got {kind!r}")
        self.kind = kind
        self.log_radius = nn.Parameter(torch.full((dim,) if kind == "elementwise" else (1,), math.log(radius_init)))

    @property
    def radius(self) -> Tensor:
        return self.log_radius.exp()

    def forward(self, x: Tensor) -> Tensor:
        r = self.radius.to(x.dtype)
        return bound_norm(x, r) if self.kind == "norm" else bound_elementwise(x, r)

    def step(self, theta: Tensor, x: Tensor) -> Tensor:
        """θ + bound(x) in θ's dtype (x may be lower precision); hand-fused in eager training (``ops/fused.py``)."""
        if self.kind == "norm" and fused_applies():
            return bounded_step(theta, x, self.log_radius)
        return theta + self(x)
