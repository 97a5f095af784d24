"""Oscillators with several real components (SU(2)'s unit quaternions, the sphere's unit vectors), held as planes.

A state (B, T, n, c) is n oscillators of c components each. The layer's arithmetic on them is elementwise per
oscillator, so it is written on ``Parts``: the c components as c tensors (..., n), each a contiguous plane of n
oscillators. With the c components innermost instead, torch.compile's CPU kernels loop and reduce over runs of c = 3
or 4 numbers, which they cannot vectorise. ``join`` stores a state component-major (a view of the (c, B, T, n) stack),
so that the next ``split`` is free; the public shape stays (B, T, n, c), and any layout of it is read alike.

Inside a head, query, key and value features are laid out component-major too, (B, H, T, c, d): the score is a dot
product and the mean is read back the same way, so their order is no one else's business (``per_head``, ``from_heads``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from kuramoto_attention.layers.bound import Bound
from kuramoto_attention.layers.gates import token_major_gates

Parts = tuple[Tensor, ...]
_SERIES = 1e-2  # |w|² below which exp uses its Taylor series (error < |w|¹⁰/3.6e6 < 3e-17 there)


def split(x: Tensor) -> Parts:
    """(..., n, c) -> c tensors (..., n): views, contiguous when x's memory is component-major (``join``'s)."""
    return x.unbind(-1)


def join(parts: Parts) -> Tensor:
    """c tensors (..., n) -> (..., n, c), stored component-major."""
    return torch.stack(parts).movedim(0, -1)


def dot(a: Parts, b: Parts) -> Tensor:
    """⟨a, b⟩ per oscillator: (..., n)."""
    return sum(x * y for x, y in zip(a, b, strict=True))


def per_head(x: Parts, heads: int) -> Tensor:
    """c planes (B, T, n) -> (B, H, T, c, d): head h's oscillators h·d … (h+1)·d − 1, component-major within it."""
    return torch.stack(x, dim=2).unflatten(-1, (heads, -1)).permute(0, 3, 1, 2, 4)


def token_major(x: Parts, heads: int) -> Tensor:
    """c planes (B, T, n) -> (B, T, H, c, d): ``per_head``'s layout within a token, the tokens outermost (what the
    query/key features are computed in before the heads are split by a view)."""
    return torch.stack(x, dim=2).unflatten(-1, (heads, -1)).transpose(2, 3)


def from_heads(out: Tensor, components: int) -> Parts:
    """An attention output (B, H, T, c·d) laid out as ``per_head``'s features -> its c planes (B, T, n)."""
    b, _, t, _ = out.shape
    return out.unflatten(-1, (components, -1)).permute(3, 0, 2, 1, 4).reshape(components, b, t, -1).unbind(0)


def gated_features(feat: Tensor, logits: Tensor | None, heads: int, tau: Tensor, dtype: torch.dtype,
                   query: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """q = τ g^q ⊙ feat, k = g^k ⊙ feat, one gate per oscillator over its c components: feat (B, T, H, c, d)
    (``token_major``) -> (B, H, T, c·d) each (views of token-major tensors), in ``dtype``; ``query``: the query's own
    features where they differ (the torus's phase lag or mix); ``logits`` the gates' (B, T, 2n), or None (every gate
    1)."""
    feats = (feat if query is None else query, feat)
    if logits is None:  # τ on the query, nothing on the key
        gates: tuple[Tensor | None, ...] = (tau.to(dtype).view(heads, 1, 1), None)
    else:
        g = token_major_gates(logits, heads, q_scale=tau).to(dtype)  # (B, T, 2, H, d): τ g^q, g^k
        gates = (g[:, :, 0, :, None, :], g[:, :, 1, :, None, :])
    q, k = ((f.to(dtype) if gate is None else f.to(dtype) * gate).flatten(-2).transpose(1, 2)
            for f, gate in zip(feats, gates, strict=True))
    return q, k


def cos_sinc(a2: Tensor) -> tuple[Tensor, Tensor]:
    """(cos a, sin(a)/a) from a² = |w|², smooth at 0 with exact gradients: below a² = 1e-2 both are their Taylor series
    in a² to the a⁸ term, so neither 0/0 nor the cancellation in d(sin a / a) = (a cos a − sin a)/a² … is ever
    evaluated; above it the closed form, whose square root sees only a² ≥ 1e-2 (the ``where`` is double-guarded so
    that the unused branch cannot send a NaN gradient back)."""
    small = a2 < _SERIES
    a = torch.sqrt(torch.where(small, torch.ones_like(a2), a2))
    cos = torch.where(small, 1 - a2 / 2 * (1 - a2 / 12 * (1 - a2 / 30 * (1 - a2 / 56))), torch.cos(a))
    sinc = torch.where(small, 1 - a2 / 6 * (1 - a2 / 20 * (1 - a2 / 42 * (1 - a2 / 72))), torch.sin(a) / a)
    return cos, sinc


def exp_parts(w: Parts) -> Parts:
    """(cos|w|, sinc|w| · w): a vector w of any length k -> the unit vector of k + 1 components it points to from
    the pole (1, 0, …) (for k = 3 the exponential of the pure quaternion w)."""
    cos, sinc = cos_sinc(dot(w, w))
    return (cos, *(sinc * c for c in w))


def norm_bounded(w: Parts, bound: Bound) -> Parts:
    """The norm bound over all of a token's increment w (c planes (B, T, n)), applied as its per-token factor."""
    factor = bound.norm_factor(dot(w, w).sum(-1, keepdim=True))
    return tuple(factor * c for c in w)


def log_unit(x: Tensor) -> Tensor:
    """``exp_parts``' inverse: unit vectors (..., k + 1) -> w (..., k), |w| ∈ [0, π], exp_parts(log_unit(x)) = x
    (for k = 3 the principal logarithm of unit quaternions, as rotation vectors). Used to draw the embeddings' initial
    parameters (not differentiated)."""
    vec = x[..., 1:]
    n = torch.linalg.vector_norm(vec, dim=-1, keepdim=True)
    angle = torch.atan2(n, x[..., :1])
    return vec * torch.where(n > 0, angle / n.clamp_min(torch.finfo(x.dtype).tiny), torch.ones_like(n))
