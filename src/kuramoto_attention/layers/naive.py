"""The paper's section 2 in one file: Kuramoto attention on the torus, literally, in the paper's notation.

One token's state is θ_t ∈ T^k = R^k / 2πZ^k, k oscillators; a head owns d = k/H contiguous oscillators.

    ψ(θ)        = (cos θ, sin θ)                                                  the lift T^k → R^{2k}
    s_{t,u}     = τ/√d · Σ_j g^q_{t,j} g^k_{u,j} cos(θ_{t,j} − θ_{u,j} + ω_j (t − u) + β_j)    the score
    A_{t,·}     = softmax_{u ≤ t} s_{t,·}                                         the coupling matrix
    G_{t,j}     = Σ_u A_{t,u} e^{iθ_{u,j}}                                        the circular mean
    a_{t,j}     = Im(e^{−iθ_{t,j}} G_{t,j}) = Σ_u A_{t,u} sin(θ_{u,j} − θ_{t,j})  the tangent increment (Prop. 1)
    θ_t        ← θ_t + bound(v(θ_t) ⊙ a_t)                                        the step
    bound(x)    = r · tanh(‖x‖) · x/‖x‖        (or r ⊙ tanh(x / r), per coordinate)

β is zero in the paper (``phase_lag`` learns it; ``cross_score`` also mixes the query's oscillators, see
``kernel``); the gates g^q, g^k and the signed value gate v are read from ψ(θ) by the layer (``gates.py``,
``kuramoto_attention.py``). Everything here is written out with the T × T × d
kernel: it is slow, exact, and the ground truth that the fused path (one SDPA call, hand-fused kernels in
``ops/fused.py``) is tested against. Shapes: θ (B, T, k); per head (B, H, T, d); A (B, H, T, T).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from kuramoto_attention.ops.attention import merge_heads, split_heads

# head h owns oscillators h·d … (h+1)·d − 1: (B, T, k) <-> (B, H, T, d)
heads, merge = split_heads, merge_heads


def psi(theta: Tensor) -> Tensor:
    """ψ(θ) = (cos θ, sin θ): (..., k) -> (..., 2k), cosines first."""
    return torch.cat((torch.cos(theta), torch.sin(theta)), dim=-1)


def causal(t: int, device: torch.device, self_coupling: bool = True) -> Tensor:
    """(T, T) bool, True where t may couple to u: u ≤ t, or u < t without self-coupling (token 0 keeps its own
    term, so that its row of A stays a distribution)."""
    mask = torch.ones(t, t, dtype=torch.bool, device=device).tril(diagonal=-int(not self_coupling))
    mask[0, 0] = True
    return mask


def kernel(theta: Tensor, omega: Tensor, beta: Tensor | None = None, mix: Tensor | None = None) -> Tensor:
    """cos(θ_{t,j} − θ_{u,j} + ω_j (t − u) + β_j) for every pair: θ (B, H, T, d), ω (H, d), β (H, d)
    ->  (B, H, T, T, d).

    With ``mix`` C (H, d, d) complex (``cross_score``): Re(z_{t,j} e^{i(ω_j (t − u) + β_j)} e^{−iθ_{u,j}}),
    z_t = C e^{iθ_t}; C = I gives the cosine above."""
    t_len = theta.shape[-2]
    pos = torch.arange(t_len, device=theta.device, dtype=theta.dtype)
    offset = (pos[:, None] - pos[None, :])[..., None]  # t − u: (T, T, 1)
    drift = omega[:, None, None, :] * offset  # (H, T, T, d)
    if beta is not None:
        drift = drift + beta[:, None, None, :]
    if mix is None:
        return torch.cos(theta[..., :, None, :] - theta[..., None, :, :] + drift)
    e = torch.polar(torch.ones_like(theta), theta)  # e^{iθ}: (B, H, T, d)
    z = torch.einsum("hjl,bhtl->bhtj", mix, e)  # the query's mixed oscillators
    return (z[..., :, None, :] * torch.polar(torch.ones_like(drift), drift) * e[..., None, :, :].conj()).real


def score(kern: Tensor, gq: Tensor, gk: Tensor, tau: Tensor, extra: Tensor | None = None) -> Tensor:
    """s_{t,u} = τ/√d Σ_j g^q_{t,j} g^k_{u,j} kernel_{t,u,j}: (B, H, T, T) before masking.

    kern (B, H, T, T, d); gq, gk (B, H, T, d); tau (H,); ``extra`` (H, T, T) joins the coupling sum inside τ/√d (the
    positional clocks' term). The same for any group: only the kernel is the torus's.
    """
    coupling = (gq[..., :, None, :] * gk[..., None, :, :] * kern).sum(-1)
    if extra is not None:
        coupling = coupling + extra
    return tau[:, None, None] / math.sqrt(kern.shape[-1]) * coupling


def coupling_matrix(s: Tensor, self_coupling: bool = True) -> Tensor:
    """A = causal softmax of the scores s (B, H, T, T)."""
    mask = causal(s.shape[-1], s.device, self_coupling)
    return torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1)


def circular_mean(a: Tensor, theta: Tensor) -> tuple[Tensor, Tensor]:
    """G_{t,j} = Σ_u A_{t,u} e^{iθ_{u,j}} as (Re G, Im G); A (..., T, S), θ (..., S, d) -> (..., T, d) each."""
    return a @ torch.cos(theta), a @ torch.sin(theta)


def tangent_increment(theta: Tensor, re_g: Tensor, im_g: Tensor) -> Tensor:
    """a = Im(e^{−iθ} G) = cos θ · Im G − sin θ · Re G: G's component along the circle's tangent at θ."""
    return torch.cos(theta) * im_g - torch.sin(theta) * re_g


def kuramoto_sum(a: Tensor, theta: Tensor) -> Tensor:
    """Σ_u A_{t,u} sin(θ_{u,j} − θ_{t,j}), the Kuramoto coupling, summed term by term: (..., T, d)."""
    diff = theta[..., None, :, :] - theta[..., :, None, :]  # [t, u] = θ_u − θ_t
    return (a[..., None] * torch.sin(diff)).sum(dim=-2)


def bound_norm(x: Tensor, radius: Tensor) -> Tensor:
    """r · tanh(‖x‖) · x/‖x‖, norm over the last axis (a token's whole increment); ‖bound(x)‖ < r, smooth at 0."""
    n = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    return radius * torch.tanh(n) * x / n.clamp_min(torch.finfo(x.dtype).tiny)


def bound_elementwise(x: Tensor, radius: Tensor) -> Tensor:
    """r ⊙ tanh(x / r): each coordinate clipped smoothly to (−r, r)."""
    return radius * torch.tanh(x / radius)


def step(theta: Tensor, a: Tensor, v: Tensor, bound: str, radius: Tensor) -> Tensor:
    """θ + bound(v ⊙ a), all (B, T, k)."""
    x = v * a
    return theta + (bound_norm(x, radius) if bound == "norm" else bound_elementwise(x, radius))
