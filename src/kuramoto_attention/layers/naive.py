"""The paper's section 2 in one file: Kuramoto attention and its phase-state model on the torus, literally.

One token's state is θ_t ∈ T^k = R^k / 2πZ^k, k oscillators; a head owns d = k/H contiguous oscillators.

    ψ(θ)        = (cos θ, sin θ)                                                  the lift T^k → R^{2k}
    ρ(z)        = softplus(z) / mean_head softplus(z)                             positive gates of mean 1
    g^q_t, g^k_t = ρ(W_q ψ(θ_t) + b_q), ρ(W_k ψ(θ_t) + b_k)                      the metric gates
    s_{t,u}     = τ/√d · Σ_j g^q_{t,j} g^k_{u,j} cos(θ_{t,j} − θ_{u,j} + ω_j (t − u))    the score
    A_{t,·}     = softmax_{u ≤ t} s_{t,·}                                         the coupling matrix
    G_{t,j}     = Σ_u A_{t,u} e^{iθ_{u,j}}                                        the circular mean
    a_{t,j}     = Im(e^{−iθ_{t,j}} G_{t,j}) = Σ_u A_{t,u} sin(θ_{u,j} − θ_{t,j})  the tangent increment (Prop. 1)
    v(θ_t)      = W_v ψ(θ_t) + b_v                                                the signed value gate
    bound(x)    = r · tanh(‖x‖) · x/‖x‖        (or r ⊙ tanh(x / r), per coordinate)
    θ_t        ← θ_t + bound(v(θ_t) ⊙ a_t)                                        the attention step
    θ_t        ← θ_t + bound(SwiGLU(θ_t))                                         the feed-forward step
    logits_t    = W_o ψ(θ_t) + b_o                                                the readout: prototype alignment

Everything is written out with the T × T × d kernel: slow, exact, and the ground truth that the fused layer (one SDPA
call, hand-fused kernels) is tested against in float64. Variants outside the paper (a phase lag, no self term,
positional clocks, successor values) are written out in ``naive_variants.py``. Shapes: θ (B, T, k); per head
(B, H, T, d); A (B, H, T, T).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor


def heads(x: Tensor, n_heads: int) -> Tensor:
    """(B, T, k) -> (B, H, T, d): head h owns oscillators h·d … (h+1)·d − 1."""
    b, t, k = x.shape
    return x.view(b, t, n_heads, k // n_heads).transpose(1, 2)


def merge(x: Tensor) -> Tensor:
    """(B, H, T, d) -> (B, T, k), ``heads``' inverse."""
    b, h, t, d = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d)


def psi(theta: Tensor) -> Tensor:
    """ψ(θ) = (cos θ, sin θ): (..., k) -> (..., 2k), cosines first."""
    return torch.cat((torch.cos(theta), torch.sin(theta)), dim=-1)


def rho(z: Tensor) -> Tensor:
    """ρ(z) = softplus(z) / mean(softplus(z)) over the last axis (one head's d coordinates): positive, mean 1."""
    g = F.softplus(z)
    return g / g.mean(dim=-1, keepdim=True)


def gates(psi_theta: Tensor, weight: Tensor, bias: Tensor, n_heads: int) -> tuple[Tensor, Tensor]:
    """g^q, g^k (B, H, T, d) each, from ψ(θ) (B, T, 2k) and the stacked W = [W_q; W_k] (2k, 2k), b (2k,)."""
    z_q, z_k = (psi_theta @ weight.T + bias).chunk(2, dim=-1)
    return rho(heads(z_q, n_heads)), rho(heads(z_k, n_heads))


def kernel(theta: Tensor, omega: Tensor) -> Tensor:
    """cos(θ_{t,j} − θ_{u,j} + ω_j (t − u)) for every pair: θ (B, H, T, d), ω (H, d) -> (B, H, T, T, d)."""
    pos = torch.arange(theta.shape[-2], device=theta.device, dtype=theta.dtype)
    offset = (pos[:, None] - pos[None, :])[..., None]  # t − u: (T, T, 1)
    return torch.cos(theta[..., :, None, :] - theta[..., None, :, :] + omega[:, None, None, :] * offset)


def score(kern: Tensor, gq: Tensor, gk: Tensor, tau: Tensor) -> Tensor:
    """s_{t,u} = τ/√d Σ_j g^q_{t,j} g^k_{u,j} kernel_{t,u,j}: (B, H, T, T) before masking; tau (H,)."""
    coupling = (gq[..., :, None, :] * gk[..., None, :, :] * kern).sum(-1)
    return tau[:, None, None] / math.sqrt(kern.shape[-1]) * coupling


def causal_softmax(s: Tensor) -> Tensor:
    """A_{t,·} = softmax over u ≤ t of s_{t,·}: (B, H, T, T)."""
    t = s.shape[-1]
    mask = torch.ones(t, t, dtype=torch.bool, device=s.device).tril()
    return torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1)


def circular_mean(a: Tensor, theta: Tensor) -> tuple[Tensor, Tensor]:
    """G_{t,j} = Σ_u A_{t,u} e^{iθ_{u,j}} as (Re G, Im G); A (..., T, S), θ (..., S, d) -> (..., T, d) each."""
    return a @ torch.cos(theta), a @ torch.sin(theta)


def tangent_increment(theta: Tensor, re_g: Tensor, im_g: Tensor) -> Tensor:
    """a = Im(e^{−iθ} G) = cos θ · Im G − sin θ · Re G: G's component along the circle's tangent at θ."""
    return torch.cos(theta) * im_g - torch.sin(theta) * re_g


def kuramoto_sum(a: Tensor, theta: Tensor) -> Tensor:
    """Σ_u A_{t,u} sin(θ_{u,j} − θ_{t,j}), the Kuramoto coupling, summed term by term: (..., T, d) (Prop. 1)."""
    diff = theta[..., None, :, :] - theta[..., :, None, :]  # [t, u] = θ_u − θ_t
    return (a[..., None] * torch.sin(diff)).sum(dim=-2)


def value_gate(psi_theta: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """v(θ) = W_v ψ(θ) + b_v, one signed scalar per oscillator: (B, T, 2k) -> (B, T, k)."""
    return psi_theta @ weight.T + bias


def bound_norm(x: Tensor, radius: Tensor) -> Tensor:
    """r · tanh(‖x‖) · x/‖x‖, norm over the last axis (a token's whole increment); ‖bound(x)‖ < r, smooth at 0."""
    n = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    return radius * torch.tanh(n) * x / n.clamp_min(torch.finfo(x.dtype).tiny)


def bound_elementwise(x: Tensor, radius: Tensor) -> Tensor:
    """r ⊙ tanh(x / r): each coordinate clipped smoothly to (−r, r)."""
    return radius * torch.tanh(x / radius)


def bound(x: Tensor, kind: str, radius: Tensor) -> Tensor:
    return bound_norm(x, radius) if kind == "norm" else bound_elementwise(x, radius)


def step(theta: Tensor, a: Tensor, v: Tensor, kind: str, radius: Tensor) -> Tensor:
    """The attention step θ + bound(v ⊙ a), all (B, T, k)."""
    return theta + bound(v * a, kind, radius)


def swiglu(h: Tensor, w_gate: Tensor, w_up: Tensor, w_out: Tensor) -> Tensor:
    """SwiGLU(h) = (silu(h W_gᵀ) ⊙ h W_uᵀ) W_oᵀ: (..., k_in) -> (..., k)."""
    return (F.silu(h @ w_gate.T) * (h @ w_up.T)) @ w_out.T


def feed_forward_step(theta: Tensor, w_gate: Tensor, w_up: Tensor, w_out: Tensor, kind: str,
                      radius: Tensor) -> Tensor:
    """The feed-forward step θ + bound(SwiGLU(θ)): the block reads the raw angle θ (B, T, k) and emits an angle
    increment per coordinate."""
    return theta + bound(swiglu(theta, w_gate, w_up, w_out), kind, radius)


def readout(theta: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """logits_{t,c} = Σ_j α_{c,j} cos(θ_{t,j} − μ_{c,j}) + b_c = (W ψ(θ_t) + b)_c, row c of W being
    (α_c cos μ_c, α_c sin μ_c): the final state's alignment with each byte's prototype phases.
    (B, T, k) -> (B, T, V)."""
    return psi(theta) @ weight.T + bias
