"""The layer's variants outside the paper, written out literally on the torus beside ``naive.py`` (the ground truth the
fused layer's options are tested against in float64).

    phase lag β        s_{t,u} ∝ Σ_j g^q g^k cos(θ_{t,j} − θ_{u,j} + ω_j (t − u) + β_j)
    query mix C        s_{t,u} ∝ Σ_j g^q g^k Re(z_{t,j} e^{i(ω_j (t − u) + β_j)} e^{−iθ_{u,j}}),  z_t = C e^{iθ_t}
    no self term       A_{t,·} = softmax over u < t (token 0 keeps its own term, so its row stays a distribution)
    clocks             s_{t,u} gains τ/√d Σ_c w_c cos(ω_c (t − u) + β_c) per head
    successor values   G_{t,j} = Σ_u A_{t,u} e^{iθ_{u+1,j}} in the chosen heads: a token moves toward what followed
                       the tokens it attends to (no self term, so u + 1 ≤ t; token 0 reads its own state)

The torus's harmonics and its step mix K write their literal sums beside their modules (``groups/harmonics.py``,
``groups/cross_coupling.py``). Shapes: θ (B, T, k); per head (B, H, T, d); A (B, H, T, T).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def kernel(theta: Tensor, omega: Tensor, beta: Tensor | None = None, mix: Tensor | None = None) -> Tensor:
    """The score's kernel with a phase lag β (H, d) and a complex query mix C (H, d, d): (B, H, T, T, d)."""
    pos = torch.arange(theta.shape[-2], device=theta.device, dtype=theta.dtype)
    offset = (pos[:, None] - pos[None, :])[..., None]  # t − u: (T, T, 1)
    drift = omega[:, None, None, :] * offset  # (H, T, T, d)
    if beta is not None:
        drift = drift + beta[:, None, None, :]
    if mix is None:
        return torch.cos(theta[..., :, None, :] - theta[..., None, :, :] + drift)
    e = torch.polar(torch.ones_like(theta), theta)  # e^{iθ}: (B, H, T, d)
    z = torch.einsum("hjl,bhtl->bhtj", mix, e)  # the query's mixed oscillators
    return (z[..., :, None, :] * torch.polar(torch.ones_like(drift), drift) * e[..., None, :, :].conj()).real


def clock_score(weight: Tensor, omega: Tensor, lag: Tensor, t: int, tau: Tensor, d: int) -> Tensor:
    """τ/√d Σ_c w_c cos(ω_c (t − u) + β_c) per head: weight, omega, lag (H, c) -> (H, T, T)."""
    pos = torch.arange(t, dtype=weight.dtype, device=weight.device)
    offset = (pos[:, None] - pos[None, :])[..., None]
    terms = weight[:, None, None, :] * torch.cos(omega[:, None, None, :] * offset + lag[:, None, None, :])
    return tau[:, None, None] / math.sqrt(d) * terms.sum(-1)


def causal_mask(t: int, self_coupling: bool = True, device: torch.device | None = None) -> Tensor:
    """(T, T) bool, True where t may couple to u: u ≤ t, or u < t without the self term (token 0 keeps its own)."""
    mask = torch.ones(t, t, dtype=torch.bool, device=device).tril(diagonal=-int(not self_coupling))
    mask[0, 0] = True
    return mask


def coupling_matrix(s: Tensor, self_coupling: bool = True) -> Tensor:
    """A = the causal softmax of s (B, H, T, T) under ``causal_mask``."""
    mask = causal_mask(s.shape[-1], self_coupling, s.device)
    return torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1)


def successor_states(theta: Tensor) -> Tensor:
    """What key u brings to the mean in a successor head: θ_{u+1} for u < T − 1 (the newest key's successor is never
    read without the self term; it keeps θ_{T−1}). (B, H, T, d) -> (B, H, T, d)."""
    return torch.cat((theta[..., 1:, :], theta[..., -1:, :]), dim=-2)


def successor_sum(a: Tensor, theta: Tensor) -> Tensor:
    """Σ_u A_{t,u} sin(θ_{u+1,j} − θ_{t,j}) term by term, token 0 reading its own state (a zero increment): A (B, H,
    T, T) without the self term, θ (B, H, T, d) -> (B, H, T, d)."""
    succ = successor_states(theta)
    diff = succ[..., None, :, :] - theta[..., :, None, :]  # [t, u] = θ_{u+1} − θ_t
    out = (a[..., None] * torch.sin(diff)).sum(dim=-2)
    out[..., 0, :] = 0.0  # token 0: its own state, sin 0
    return out
