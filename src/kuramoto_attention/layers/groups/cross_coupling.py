"""Cross coupling on the torus: oscillators of one head couple to each other's phases through a learned complex mix.

The paper's layer couples oscillator j of token t to oscillator j of token u only, in the score and in the step. A
mix C = I + Δ (d × d complex per head, Δ from 0) of a token's oscillators, z = C e^{iθ}, lets j meet the others:

    score (``cross_score``)    s_{t,u} = τ/√d Σ_j g^q_{t,j} g^k_{u,j} Re(z_{t,j} e^{i(ω_j (t−u) + β_j)} e^{−iθ_{u,j}})
    step (``cross_coupling``)  a_{t,j} = Σ_u A_{t,u} Im(e^{−iθ_{t,j}} (K e^{iθ_u})_j)
                                       = Σ_u A_{t,u} Σ_l [Re K_jl sin(θ_ul − θ_tj) + Im K_jl cos(θ_ul − θ_tj)]

with C (the query's) and K (the step's) two such mixes. C = K = I is the paper's layer; a diagonal C = diag(e^{iγ}) is
one more phase lag. The step stays a Kuramoto step: that of an oscillator network whose coupling between oscillator
j of t and l of u is K_{jl} = |K_{jl}| e^{iα_{jl}} (Kuramoto–Sakaguchi, with lag α_{jl}), the attention its strength.

Why: a head that finds the byte after an earlier copy of the current one (an induction head) has, in the diagonal
layer, no direct way to do it. The earlier token would hold its predecessor's phases in oscillators its own byte
does not set, and the query would compare its byte (in l) with the key's predecessor (in j): with K a token's
oscillator j can synchronise to oscillator l of the token before, and C maps the query's l to j.
C mixes before the drift, q_t = e^{i(ωt + β)} ⊙ C e^{iθ_t}, so the score still depends on positions through t − u
only; K mixes the mean G = Σ_u A_{t,u} e^{iθ_u} (linear, so it commutes with A: one SDPA call still averages the
states). Δ is an ordinary weight, decayed toward 0 (toward the paper's layer).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from kuramoto_attention.ops.attention import merge_heads, split_heads
from kuramoto_attention.ops.torus import lift


class OscillatorMix(nn.Module):
    """Δ = (Re Δ, Im Δ) (2, H, d, d) of one mix C = I + Δ of each head's d oscillators."""

    def __init__(self, heads: int, head_dim: int) -> None:
        super().__init__()
        self.delta = nn.Parameter(torch.zeros(2, heads, head_dim, head_dim))

    def parts(self) -> tuple[Tensor, Tensor]:
        """(A, B) of C = A + iB = I + Δ, (H, d, d) each."""
        eye = torch.eye(self.delta.shape[-1], device=self.delta.device, dtype=self.delta.dtype)
        return eye + self.delta[0], self.delta[1]

    def matrix(self, like: torch.dtype | None = None) -> Tensor:
        """C as a complex (H, d, d) tensor (the literal reference's), as precise as the real dtype ``like``."""
        c = torch.complex(*self.parts())
        return c if like is None else c.to(torch.promote_types(like, torch.complex64))

    def real_map(self, dtype: torch.dtype) -> Tensor:
        """C as a real map of [Re w | Im w] to [Re Cw | Im Cw], (H, 2d, 2d) acting on the right: with C = A + iB,
        [x, y] @ [[Aᵀ, Bᵀ], [−Bᵀ, Aᵀ]] = [A x − B y, B x + A y]."""
        a, b = (m.mT for m in self.parts())
        return torch.cat((torch.cat((a, b), dim=-1), torch.cat((-b, a), dim=-1)), dim=-2).to(dtype)

    def forward(self, w: Tensor) -> Tensor:
        """C w for w = [Re | Im] per head, (B, H, T, 2d) -> (B, H, T, 2d) (K G: the mixed mean)."""
        return w @ self.real_map(w.dtype)

    def query(self, theta: Tensor, angle: Tensor) -> Tensor:
        """e^{i·angle} ⊙ C e^{iθ} as [Re | Im]: θ (B, T, H, d) token-major, angle ωt + β broadcastable to it
        -> (B, T, H, 2d) in θ's dtype."""
        re, im = self(lift(theta).transpose(1, 2)).transpose(1, 2).to(theta.dtype).chunk(2, dim=-1)
        cos_a, sin_a = torch.cos(angle), torch.sin(angle)
        return torch.cat((re * cos_a - im * sin_a, re * sin_a + im * cos_a), dim=-1)

    def reference_increment(self, x: Tensor, attn: Tensor) -> Tensor:
        """Σ_u A_{t,u} Im(e^{−iθ_{t,j}} (K e^{iθ_u})_j), summed over u term by term: x (B, T, n), attn (B, H, T, T)
        -> (B, T, n). (The tests expand (K e^{iθ_u})_j over l too.)"""
        theta = split_heads(x, attn.shape[1])  # (B, H, T, d)
        k = self.matrix(x.dtype)
        e = torch.polar(torch.ones_like(theta), theta)
        mixed = torch.einsum("hjl,bhul->bhuj", k, e)  # (K e^{iθ_u})_j
        pair = (e.conj()[..., :, None, :] * mixed[..., None, :, :]).imag  # [t, u, j] = Im(e^{−iθ_{t,j}} (K e^{iθ_u})_j)
        return merge_heads((attn[..., None] * pair).sum(dim=-2))
