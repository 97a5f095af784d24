"""Daido coupling on the torus: higher harmonics of the Kuramoto term, with learned signed weights.

    a_{t,j} = Σ_u A_{t,u} Σ_{m=1..M} c_{m,j} sin(m (θ_{u,j} − θ_{t,j}))        c_{1,j} = 1; c_{m>1,j} learned
            = Σ_m c_{m,j} Im(e^{−imθ_{t,j}} G^{(m)}_{t,j}),    G^{(m)}_{t,j} = Σ_u A_{t,u} e^{imθ_{u,j}}

The plain Kuramoto term sin(Δ) has one stable locked state per pair (in phase, Δ = 0); with sin(2Δ) beside it an
oscillator can also lock in anti-phase (Δ = π), so a phase can hold two-cluster patterns the first harmonic
cannot (Daido's generalised coupling function). For fixed A the increment is still a gradient: of
E_t = Σ_u A_{t,u} Σ_m (c_m / m) cos(m(θ_u − θ_t)) along θ_t (tested).

The scores and A are the first harmonic's (unchanged): only what A averages grows, from ψ(θ_u) to
ψ(θ_u), ψ(2θ_u), …, ψ(Mθ_u), so the fused path stays one SDPA call, with values M times as wide. The weights start
at 0, so a model with harmonics starts as the plain layer does. They are ordinary weights (decayed toward the plain
Kuramoto coupling).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from kuramoto_attention.ops.attention import merge_heads, split_heads
from kuramoto_attention.ops.torus import lift, tangent_projection


class Harmonics(nn.Module):
    """The weights c_{m,j}, m = 2..M, of the harmonics beyond the first, (M − 1, n), and their share of the step."""

    def __init__(self, oscillators: int, order: int) -> None:
        super().__init__()
        if not isinstance(order, int) or order < 2:
            raise ValueError(f"Harmonics needs order >= 2 (the first harmonic is the plain layer), got {order!r}")
        self.order = order
        self.weight = nn.Parameter(torch.zeros(order - 1, oscillators))

    def multiples(self, x: Tensor) -> Tensor:
        """m θ for m = 2..M: (M − 1, B, T, n)."""
        m = torch.arange(2, self.order + 1, device=x.device, dtype=x.dtype)
        return m.view(-1, 1, 1, 1) * x

    def values(self, x: Tensor, heads: int, dtype: torch.dtype) -> Tensor:
        """ψ(mθ_u) per head for m = 2..M, harmonic-major: (B, H, T, 2d(M − 1)) in ``dtype``."""
        b, t, _ = x.shape  # per head [cos mθ_h, sin mθ_h], as the torus's own values
        per_head = [lift(mx).view(b, t, 2, heads, -1).permute(0, 3, 1, 2, 4).reshape(b, heads, t, -1)
                    for mx in self.multiples(x)]
        return torch.cat(per_head, dim=-1).to(dtype)

    def increment(self, x: Tensor, mean: Tensor) -> Tensor:
        """Σ_{m≥2} c_m Im(e^{−imθ_t} G^{(m)}_t) from the attention output of ``values`` (B, H, T, 2d(M − 1)):
        (B, T, n) in x's dtype."""
        out = x.new_zeros(x.shape)
        for m_x, g, c in zip(self.multiples(x), mean.to(x.dtype).chunk(self.order - 1, dim=-1), self.weight,
                             strict=True):
            re_g, im_g = (merge_heads(half) for half in g.chunk(2, dim=-1))  # (B, T, n) each
            out = out + c.to(x.dtype) * tangent_projection(torch.cos(m_x), torch.sin(m_x), re_g, im_g)
        return out

    def reference_increment(self, x: Tensor, attn: Tensor) -> Tensor:
        """Σ_u A_{t,u} Σ_{m≥2} c_m sin(m(θ_u − θ_t)), summed term by term: (B, T, n); attn (B, H, T, T)."""
        theta = split_heads(x, attn.shape[1])  # (B, H, T, d)
        diff = theta[..., None, :, :] - theta[..., :, None, :]  # [t, u] = θ_u − θ_t: (B, H, T, T, d)
        heads, d = attn.shape[1], theta.shape[-1]
        total = torch.zeros_like(theta)
        for m, c in enumerate(self.weight, start=2):
            coupling = c.to(x.dtype).view(heads, 1, 1, d) * torch.sin(m * diff)
            total = total + (attn[..., None] * coupling).sum(dim=-2)
        return merge_heads(total)
