"""Kuramoto attention on the sphere S^{D−1}, literally: the T × T kernel and the tangent sum, the ground truth for
``sphere.py``.

One token's state is n unit vectors x_{t,j} ∈ S^{D−1} ⊂ R^D (D even); a head owns d = n/H contiguous oscillators.
The drift R(tΩ_j) rotates each of the D/2 coordinate planes (x_{2p}, x_{2p+1}) by the angle tΩ_{j,p}.

    kernel_{t,u,j} = ⟨x_{t,j}, R((u − t) Ω_j) x_{u,j}⟩        (= ⟨R(tΩ_j) x_{t,j}, R(uΩ_j) x_{u,j}⟩)
    s_{t,u}        = τ/√d Σ_j g^q_{t,j} g^k_{u,j} kernel_{t,u,j}    (``naive.score``, the same for every group)
    ξ_{t,j}        = Σ_u A_{t,u} (x_{u,j} − ⟨x_{u,j}, x_{t,j}⟩ x_{t,j})   the tangent coupling, summed term by term
    x_t           ← cos|w| x_t + sin|w| w/|w|,   w = P_{x_t} bound(v ⊙ ξ_t)   the geodesic step

P_x w = w − ⟨w, x⟩ x is the projection onto the tangent space at x. Written with the relative form of the score (one
rotation per offset t − u, spelled out plane by plane) so that it shares no code path with the fused features
R(tΩ) x_t. Shapes: x (B, T, n, D); per head (B, H, T, d, D); A (B, H, T, T).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor


def heads(x: Tensor, n_heads: int) -> Tensor:
    """(B, T, n, D) -> (B, H, T, d, D): head h owns oscillators h·d … (h+1)·d − 1."""
    b, t, n, c = x.shape
    return x.view(b, t, n_heads, n // n_heads, c).transpose(1, 2)


def merge(x: Tensor) -> Tensor:
    """(B, H, T, d, D) -> (B, T, H·d·D), oscillator-major."""
    b, h, t, d, c = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d * c)


def kernel(x: Tensor, omega: Tensor) -> Tensor:
    """⟨x_{t,j}, R((u − t)Ω_j) x_{u,j}⟩ for every pair: x (B, H, T, d, D), Ω (H, d, D/2) -> (B, H, T, T, d).

    In one plane, with (a, b) = x_u's pair and (c, e) = x_t's: ⟨(c, e), R(α)(a, b)⟩ = cos α (ca + eb) + sin α (ea − cb).
    """
    t_len = x.shape[-3]
    pos = torch.arange(t_len, device=x.device, dtype=x.dtype)
    offset = pos[None, :] - pos[:, None]  # [t, u] = u − t
    alpha = offset[None, :, :, None, None] * omega[:, None, None, :, :]  # (H, T, T, d, P)
    pairs = x.unflatten(-1, (-1, 2))  # (B, H, T, d, P, 2)
    c, e = pairs[..., :, None, :, :, 0], pairs[..., :, None, :, :, 1]  # x_t at [.., t, u]
    a, b = pairs[..., None, :, :, :, 0], pairs[..., None, :, :, :, 1]  # x_u at [.., t, u]
    return (torch.cos(alpha) * (c * a + e * b) + torch.sin(alpha) * (e * a - c * b)).sum(-1)


def tangent_sum(attn: Tensor, x: Tensor) -> Tensor:
    """Σ_u A_{t,u} (x_u − ⟨x_u, x_t⟩ x_t), term by term: A (B, H, T, T), x (B, H, T, d, D) -> (B, H, T, d, D)."""
    x_t, x_u = x[..., :, None, :, :], x[..., None, :, :, :]  # [t, u]
    pair = x_u - (x_u * x_t).sum(-1, keepdim=True) * x_t
    return (attn[..., None, None] * pair).sum(dim=-3)


def exponential(x: Tensor, w: Tensor) -> Tensor:
    """exp_x(w) = cos|w| x + sin|w| w/|w| for w tangent at x; x at w = 0 (no gradients needed here at 0: the tests
    differentiate the reference only where |w| > 0, or through ``sphere.Sphere.move``)."""
    a = torch.linalg.vector_norm(w, dim=-1, keepdim=True)
    return torch.cos(a) * x + torch.sin(a) * w / torch.where(a > 0, a, torch.ones_like(a))


def step(x: Tensor, xi: Tensor, v: Tensor, bounded: Callable[[Tensor], Tensor]) -> Tensor:
    """exp_{x_t}(P_{x_t} bound(v ⊙ ξ_t)): x (B, T, n, D), ξ (B, T, n·D), v (B, T, n) one gate per oscillator."""
    dim = x.shape[-1]
    w = bounded(v.repeat_interleave(dim, dim=-1) * xi).unflatten(-1, (-1, dim))
    return exponential(x, w - (w * x).sum(-1, keepdim=True) * x)
