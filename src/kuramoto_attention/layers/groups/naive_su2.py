"""Kuramoto attention on SU(2), literally: the T × T kernel and the Lohe sum, the ground truth for ``su2.py``.

One token's state is n unit quaternions q_{t,j} ∈ S³ (real part first); a head owns d = n/H contiguous oscillators.

    kernel_{t,u,j} = ⟨q_{t,j}, exp((u − t) Ω_j) q_{u,j}⟩        (= ⟨exp(tΩ_j) q_{t,j}, exp(uΩ_j) q_{u,j}⟩)
    s_{t,u}        = τ/√d Σ_j g^q_{t,j} g^k_{u,j} kernel_{t,u,j}    (``naive.score``, the same for every group)
    ξ_{t,j}        = Σ_u A_{t,u} Im(conj(q_{t,j}) q_{u,j})          the Lohe coupling, summed term by term
    q_t           ← q_t exp(bound(v ⊙ ξ_t))

Written with the relative form of the score (one exp per offset t − u) so that it shares no code path with the fused
features exp(tΩ) q_t. Every quaternion product is spelled out in components here, not taken from ``su2.py``.
Shapes: q (B, T, n, 4); per head (B, H, T, d, 4); A (B, H, T, T).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor


def heads(q: Tensor, n_heads: int) -> Tensor:
    """(B, T, n, 4) -> (B, H, T, d, 4): head h owns oscillators h·d … (h+1)·d − 1."""
    b, t, n, c = q.shape
    return q.view(b, t, n_heads, n // n_heads, c).transpose(1, 2)


def merge(x: Tensor) -> Tensor:
    """(B, H, T, d, 3) -> (B, T, 3·H·d), oscillator-major."""
    b, h, t, d, c = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d * c)


def product(p: Tensor, q: Tensor) -> Tensor:
    """The Hamilton product, component by component: (..., 4) × (..., 4) -> (..., 4)."""
    a1, b1, c1, d1 = p.unbind(-1)
    a2, b2, c2, d2 = q.unbind(-1)
    return torch.stack((a1 * a2 - b1 * b2 - c1 * c2 - d1 * d2,
                        a1 * b2 + b1 * a2 + c1 * d2 - d1 * c2,
                        a1 * c2 - b1 * d2 + c1 * a2 + d1 * b2,
                        a1 * d2 + b1 * c2 - c1 * b2 + d1 * a2), dim=-1)


def conjugate(q: Tensor) -> Tensor:
    w, x, y, z = q.unbind(-1)
    return torch.stack((w, -x, -y, -z), dim=-1)


def exponential(w: Tensor) -> Tensor:
    """exp(w) = cos|w| + (w/|w|) sin|w| for a pure quaternion w (..., 3); 1 at w = 0 (no gradients needed here at 0:
    the tests differentiate the reference only where |w| > 0, or through ``planes.exp_parts``)."""
    a = torch.linalg.vector_norm(w, dim=-1, keepdim=True)
    axis = w / torch.where(a > 0, a, torch.ones_like(a))
    return torch.cat((torch.cos(a), torch.sin(a) * axis), dim=-1)


def kernel(q: Tensor, omega: Tensor) -> Tensor:
    """⟨q_{t,j}, exp((u − t)Ω_j) q_{u,j}⟩ for every pair: q (B, H, T, d, 4), Ω (H, d, 3) -> (B, H, T, T, d)."""
    t_len = q.shape[-3]
    pos = torch.arange(t_len, device=q.device, dtype=q.dtype)
    offset = pos[None, :] - pos[:, None]  # [t, u] = u − t
    rot = exponential(offset[None, :, :, None, None] * omega[:, None, None, :, :])  # (H, T, T, d, 4)
    moved = product(rot, q[..., None, :, :, :])  # exp((u − t)Ω) q_u at [.., t, u, j]: (B, H, T, T, d, 4)
    return (q[..., :, None, :, :] * moved).sum(-1)


def lohe_sum(a: Tensor, q: Tensor) -> Tensor:
    """Σ_u A_{t,u} Im(conj(q_{t,j}) q_{u,j}), term by term: A (B, H, T, T), q (B, H, T, d, 4) -> (B, H, T, d, 3)."""
    pair = product(conjugate(q)[..., :, None, :, :], q[..., None, :, :, :])  # [t, u] = conj(q_t) q_u
    return (a[..., None, None] * pair[..., 1:]).sum(dim=-3)


def step(q: Tensor, xi: Tensor, v: Tensor, bounded: Callable[[Tensor], Tensor]) -> Tensor:
    """q_t exp(bound(v ⊙ ξ_t)): q (B, T, n, 4), ξ (B, T, 3n), v (B, T, n) one gate per oscillator."""
    w = bounded(v.repeat_interleave(3, dim=-1) * xi).unflatten(-1, (-1, 3))
    return product(q, exponential(w))
