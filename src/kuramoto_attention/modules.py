"""Building blocks shared by both model families: bound, SwiGLU, RMSNorm, rotary, attention.

Nothing here is specific to phases except ``Bound``, which wraps the torus primitives
with a learned radius.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .fused import bounded_step, fused_applies
from .torus import bound_elementwise, bound_norm

BoundKind = Literal["norm", "norm-soft", "elementwise", "none"]


class Bound(nn.Module):
    """The learned-radius tanh bound applied to every increment (SPEC §2, "bound").

    ``norm``: r·tanh(‖x‖)·x/‖x‖ with one learned scalar r (norm over a token's coordinates).
    ``norm-soft``: r·tanh(‖x‖/r)·x/‖x‖ = norm(x/r): gain 1 (not r) for small increments, so
    only increments near the radius are squashed; the norm analogue of ``elementwise``.
    ``elementwise``: r ⊙ tanh(x / r) with a learned radius per coordinate.
    ``none``: identity (ablation). The radius is stored as log r so it stays positive.
    """

    def __init__(self, dim: int, kind: BoundKind = "norm", radius_init: float = 10.0) -> None:
        super().__init__()
        if kind not in ("norm", "norm-soft", "elementwise", "none"):
            raise ValueError(f"bound must be 'norm', 'norm-soft', 'elementwise' or 'none', got {kind!r}")
        self.kind = kind
        shape = (dim,) if kind == "elementwise" else (1,)
        if kind != "none":  # no radius to learn, and no unused parameter
            self.log_radius = nn.Parameter(torch.full(shape, math.log(radius_init)))

    @property
    def radius(self) -> Tensor:
        return self.log_radius.exp()

    def forward(self, x: Tensor) -> Tensor:
        if self.kind == "none":
            return x
        r = self.radius.to(x.dtype)
        if self.kind == "norm":
            return bound_norm(x, r)
        if self.kind == "norm-soft":
            return bound_norm(x / r, r)
        return bound_elementwise(x, r)

    def step(self, theta: Tensor, x: Tensor) -> Tensor:
        """θ + bound(x) in θ's dtype (x may be lower precision); hand-fused in eager training (``fused.py``)."""
        if self.kind == "norm" and fused_applies():
            return bounded_step(theta, x, self.log_radius)
        return theta + self(x)


class SwiGLU(nn.Module):
    """w_out( silu(w_gate x) ⊙ w_up x ): the feed-forward block of both model families."""

    def __init__(self, dim_in: int, hidden: int, dim_out: int) -> None:
        super().__init__()
        self.w_gate = nn.Linear(dim_in, hidden, bias=False)
        self.w_up = nn.Linear(dim_in, hidden, bias=False)
        self.w_out = nn.Linear(hidden, dim_out, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.w_out(F.silu(self.w_gate(x)) * self.w_up(x))


class RMSNorm(nn.Module):
    """Root-mean-square normalisation with a learned gain (transformer only)."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def compute_dtype(x: Tensor) -> torch.dtype:
    """The dtype a matmul of x runs in: autocast's low precision when it is on, else x's own.

    Casting a tensor that several matmuls (and the attention) read once, to this dtype, saves
    autocast a cast per use and keeps the elementwise work around them single-dtype.
    """
    device = x.device.type
    if x.dtype == torch.float32 and torch.is_autocast_enabled(device):  # autocast leaves other dtypes alone
        return torch.get_autocast_dtype(device)
    return x.dtype


def rotary_angles(head_dim: int, base: float = 10000.0) -> Tensor:
    """Geometric frequencies base^{-i/n}, i = 0..n-1: RoPE's, and the initial ω of the phase model."""
    return base ** (-torch.arange(head_dim, dtype=torch.float64) / head_dim)


def apply_rotary(x: Tensor, freqs: Tensor, positions: Tensor) -> Tensor:
    """RoPE on pairs (x_i, x_{i+n}) of the last axis: rotate pair i by freqs_i · position.

    x: (..., T, 2n) (e.g. queries and keys stacked: (2, B, H, T, 2n)); freqs: (n,); positions: (T,) absolute positions.
    """
    angle = positions[:, None].to(freqs.dtype) * freqs  # (T, n)
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


def split_heads(x: Tensor, heads: int) -> Tensor:
    """(B, T, k) -> (B, H, T, k/H): each head owns a contiguous block of the last axis."""
    b, t, k = x.shape
    return x.view(b, t, heads, k // heads).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """(B, H, T, d) -> (B, T, H·d): the inverse of ``split_heads``."""
    b, h, t, d = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d)


def causal_mask(t: int, s: int, device: torch.device, exclude_self: bool = False) -> Tensor:
    """(T, S) bool, True where query i (absolute position S − T + i) may attend key j.

    ``exclude_self`` drops the diagonal j = S − T + i, except for the very first token, which has
    nothing else to attend to (it keeps its own key, so its row stays a distribution).
    """
    mask = torch.ones(t, s, dtype=torch.bool, device=device).tril(diagonal=s - t - int(exclude_self))
    if exclude_self and s == t:
        mask[0, 0] = True
    return mask


def causal_attention(q: Tensor, k: Tensor, v: Tensor, scale: float, exclude_self: bool = False) -> Tensor:
    """Causal scaled dot-product attention where the T queries are the last T of S keys.

    q: (B, H, T, d); k, v: (B, H, S, d) with S ≥ T (S > T when earlier keys come from a
    cache). Uses the fused SDPA kernel; never materialises the S×T scores when S == T.
    ``exclude_self``: the pattern of ``causal_mask(t, s, exclude_self=True)``.
    """
    t, s = q.shape[-2], k.shape[-2]
    if exclude_self:  # row i sees keys < its own: the same causal pattern on keys shifted by one, no mask
        if t < s:
            return causal_attention(q, k[..., :-1, :], v[..., :-1, :], scale)
        first = v[..., :1, :]  # token 0 has only itself: its row is its own value (see ``causal_mask``)
        if t == 1:
            return first
        rest = F.scaled_dot_product_attention(q[..., 1:, :], k[..., :-1, :], v[..., :-1, :], is_causal=True,
                                              scale=scale)
        return torch.cat((first, rest), dim=-2)
    if t == s:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    if t == 1:  # one new token attends to everything cached
        return F.scaled_dot_product_attention(q, k, v, scale=scale)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(t, s, q.device), scale=scale)


class KVCache:
    """Per-layer keys and values of earlier tokens, for incremental generation.

    For the transformer these are the rotated keys and the values; for Kuramoto attention
    they are exactly what the fused path reads for each earlier token: the gated, drifted
    key features g^k ⊙ ψ(θ_u + ω u) and the lift ψ(θ_u) (or the projected value).

    Stored in buffers whose capacity doubles when full, so appending one token copies one
    token (amortised), not the whole history (a ``torch.cat`` per step made copying the
    largest cost of cached generation). ``capacity``, when the final length is known, sizes
    the first buffers so that they never grow: under torch.compile every growth (and a
    buffer filled exactly) is a new graph. New entries are cast to the buffers' dtype, fixed
    by the first update.
    """

    def __init__(self, capacity: int = 16) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1 token, got {capacity}")
        self._k: Tensor | None = None
        self._v: Tensor | None = None
        self.length = 0
        self.first_capacity = capacity  # the first buffers' size; later ones double

    def _grow(self, buf: Tensor | None, like: Tensor, capacity: int) -> Tensor:
        new = like.new_empty(*like.shape[:-2], capacity, like.shape[-1], dtype=like.dtype if buf is None else buf.dtype)
        if buf is not None:
            new[..., : self.length, :] = buf[..., : self.length, :]
        return new

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append (B, H, T, d) keys/values; return all keys/values so far, (B, H, S, d) views."""
        end = self.length + k.shape[-2]
        if self._k is None or self._v is None or end > self._k.shape[-2]:
            capacity = max(end, self.first_capacity if self._k is None else 2 * self._k.shape[-2])
            self._k, self._v = self._grow(self._k, k, capacity), self._grow(self._v, v, capacity)
        self._k[..., self.length : end, :] = k
        self._v[..., self.length : end, :] = v
        self.length = end
        return self._k[..., :end, :], self._v[..., :end, :]
