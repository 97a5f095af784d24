"""Cross coupling on the torus: the score compares each key oscillator with a learned complex mix of the query's.

    z_{t,j}  = Σ_l C_{jl} e^{iθ_{t,l}}                         C = I + Δ (d × d complex per head), Δ from 0
    s_{t,u}  = τ/√d Σ_j g^q_{t,j} g^k_{u,j} Re(z_{t,j} e^{i(ω_j (t − u) + β_j)} e^{−iθ_{u,j}})

With C = I, z = e^{iθ_t} and the score is the paper's cos(θ_t − θ_u + ω(t − u) + β); a diagonal C = diag(e^{iβ'})
is one more phase lag. The paper's score compares oscillator j of the query with oscillator j of the key only (the
gates weigh each pair, they do not mix them), so a query can find a token whose phases match its own but not one
whose phase in j matches its own in l: what a transformer's W_q, W_k do when a head looks for the token after an
earlier copy of the current one. C lets a query ask for that. Only the score changes: A still averages the states
themselves, and the increment is the Kuramoto term of each oscillator (the step is unchanged).

C mixes before the drift: q_t = e^{i(ωt + β)} ⊙ z_t, so the score still depends on the positions through t − u
only. Δ is an ordinary weight, decayed toward 0 (toward the paper's score).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from kuramoto_attention.ops.torus import lift


class CrossCoupling(nn.Module):
    """Δ = (Re Δ, Im Δ) (2, H, d, d) of one layer's C = I + Δ."""

    def __init__(self, heads: int, head_dim: int) -> None:
        super().__init__()
        self.delta = nn.Parameter(torch.zeros(2, heads, head_dim, head_dim))

    def matrix(self) -> Tensor:
        """C = I + Δ as a complex (H, d, d) tensor (the literal reference's)."""
        eye = torch.eye(self.delta.shape[-1], device=self.delta.device, dtype=self.delta.dtype)
        return torch.complex(eye + self.delta[0], self.delta[1])

    def real_map(self, dtype: torch.dtype) -> Tensor:
        """C as a real map of [cos θ | sin θ] to [Re z | Im z], (H, 2d, 2d) acting on the right: with C = A + iB,
        [cos, sin] @ [[Aᵀ, Bᵀ], [−Bᵀ, Aᵀ]] = [A cos − B sin, B cos + A sin]."""
        eye = torch.eye(self.delta.shape[-1], device=self.delta.device, dtype=self.delta.dtype)
        a, b = (eye + self.delta[0]).mT, self.delta[1].mT
        return torch.cat((torch.cat((a, b), dim=-1), torch.cat((-b, a), dim=-1)), dim=-2).to(dtype)

    def query(self, theta: Tensor, angle: Tensor) -> Tensor:
        """e^{i·angle} ⊙ C e^{iθ} as [Re | Im]: θ (B, H, T, d) per head, angle ωt + β broadcastable to it
        -> (B, H, T, 2d) in θ's dtype."""
        z = lift(theta) @ self.real_map(theta.dtype)  # (B, H, T, 2d) @ (H, 2d, 2d): [Re z | Im z]
        re, im = z.to(theta.dtype).chunk(2, dim=-1)
        cos_a, sin_a = torch.cos(angle), torch.sin(angle)
        return torch.cat((re * cos_a - im * sin_a, re * sin_a + im * cos_a), dim=-1)
