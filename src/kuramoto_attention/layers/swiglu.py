"""The SwiGLU feed-forward of both model families."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn


class SwiGLU(nn.Module):
    """w_out( silu(w_gate x) ⊙ w_up x ): the feed-forward block of both model families."""

    def __init__(self, dim_in: int, hidden: int, dim_out: int) -> None:
        super().__init__()
        self.w_gate = nn.Linear(dim_in, hidden, bias=False)
        self.w_up = nn.Linear(dim_in, hidden, bias=False)
        self.w_out = nn.Linear(hidden, dim_out, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.w_out(F.silu(self.w_gate(x)) * self.w_up(x))

