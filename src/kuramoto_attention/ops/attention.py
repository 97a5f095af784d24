"""Attention plumbing both model families share: causal SDPA (with the no-self-coupling pattern), the
KV cache, heads, rotary frequencies, and the matmul dtype under autocast."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from kuramoto_attention.ops.operators import whole_operator


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


def with_extra(q: Tensor, k: Tensor, extra: tuple[Tensor, Tensor] | None) -> tuple[Tensor, Tensor]:
    """q and k (B, H, T, ·) with the extra features (1, H, T, e) of every batch row appended to each head's."""
    if extra is None:
        return q, k
    return tuple(torch.cat((f, e.to(f.dtype).expand(f.shape[0], -1, -1, -1)), dim=-1)  # type: ignore[return-value]
                 for f, e in zip((q, k), extra, strict=True))


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


def sdpa(q: Tensor, k: Tensor, v: Tensor, **kw: object) -> Tensor:
    """``scaled_dot_product_attention`` on the flash kernel even when the values' width differs from the queries':
    the fused CPU kernels need equal widths and would otherwise fall back to the math path, which materialises the
    T×S scores. The narrower side is padded with zeros (zero query/key features add nothing to a score; zero value
    features come out as zeros and are cut off)."""
    dq, dv = q.shape[-1], v.shape[-1]
    if dq == dv:
        return F.scaled_dot_product_attention(q, k, v, **kw)
    if dv < dq:
        return F.scaled_dot_product_attention(q, k, F.pad(v, (0, dq - dv)), **kw)[..., :dv]
    return F.scaled_dot_product_attention(F.pad(q, (0, dv - dq)), F.pad(k, (0, dv - dq)), v, **kw)


def causal_attention(q: Tensor, k: Tensor, v: Tensor, scale: float, exclude_self: bool = False,
                     successor_heads: int = 0) -> Tensor:
    """Causal scaled dot-product attention where the T queries are the last T of S keys.

    q: (B, H, T, d); k, v: (B, H, S, d) with S ≥ T (S > T when earlier keys come from a
    cache). Uses the fused SDPA kernel; never materialises the S×T scores when S == T.
    ``exclude_self``: the pattern of ``causal_mask(t, s, exclude_self=True)``.
    ``successor_heads``: in the last this many heads key u comes with the value of u + 1 (needs ``exclude_self``, so
    that u + 1 ≤ t; token 0, which keeps its own key, reads its own value).
    """
    t, s = q.shape[-2], k.shape[-2]
    if successor_heads and not exclude_self:
        raise ValueError("successor values need exclude_self (with the self term a token reads its own successor)")
    if exclude_self:  # row i sees keys < its own: the same causal pattern on keys shifted by one, no mask
        if t < s:
            return causal_attention(q, k[..., :-1, :], keyed_values(v, successor_heads), scale)
        first = v[..., :1, :]  # token 0 has only itself: its row is its own value (see ``causal_mask``)
        if t == 1:
            return first
        if _shifted_applies(q, k, v):
            return no_self_flash(q, k, v, scale, successor_heads)
        rest = sdpa(q[..., 1:, :], k[..., :-1, :], keyed_values(v, successor_heads), is_causal=True, scale=scale)
        return torch.cat((first, rest), dim=-2)
    if t == s:
        return sdpa(q, k, v, is_causal=True, scale=scale)
    if t == 1:  # one new token attends to everything cached
        return sdpa(q, k, v, scale=scale)
    return sdpa(q, k, v, attn_mask=causal_mask(t, s, q.device), scale=scale)


_FLASH = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
_FLASH_BACKWARD = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)


def _shifted_applies(q: Tensor, k: Tensor, v: Tensor) -> bool:
    """Whether ``_NoSelf`` runs: training on the CPU (eager or compiled) where SDPA itself would take the flash kernel
    (its own operators present and not switched off, rows contiguous, the dtypes autocast would leave alone), values no
    wider than the features."""
    tensors = (q, k, v)
    low = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None
    return (_FLASH is not None and _FLASH_BACKWARD is not None and _flash_enabled()
            and q.device.type == "cpu" and torch.is_grad_enabled()
            and v.shape[-1] <= q.shape[-1] and all(t.stride(-1) == 1 for t in tensors)
            and len({t.dtype for t in tensors}) == 1 and (low is None or q.dtype == low))


# read once, when torch.compile traces a graph (a later switch of the backend needs a new compile)
@torch.compiler.assume_constant_result
def _flash_enabled() -> bool:
    return torch.backends.cuda.flash_sdp_enabled()


# ``causal_attention`` without the self term over S == T, on the CPU's flash kernel, as the plain path computes it (the
# same operator on the same shifted views: the same numbers), but with the gradients written straight into
# whole-length tensors: autograd's way (slice backward: zeros, then a copy; the values' padding and slices the same
# again) writes each of q's, k's and v's gradients two to four times, and torch.compile's way fuses that bookkeeping
# into loops over the heads' transposed layout that it does not vectorise. Both directions are custom operators, so
# that torch.compile runs them as they are.
def _no_self_forward(q: Tensor, k: Tensor, v: Tensor, scale: float,
                     successor_heads: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(mean (B, H, T, e), the keyed values padded to d (B, H, T − 1, d), the flash kernel's output and logsumexp)."""
    b, heads, t, width = v.shape
    keyed = v.new_empty(b, heads, t - 1, q.shape[-1])  # written once: the shifted values, then zeros (``sdpa``)
    split = heads - successor_heads  # heads whose keys bring v_u, then those that bring v_{u+1}
    keyed[:, :split, :, :width] = v[:, :split, :-1]
    keyed[:, split:, :, :width] = v[:, split:, 1:]
    keyed[..., width:] = 0
    out, lse = _FLASH(q[..., 1:, :], k[..., :-1, :], keyed, 0.0, True, scale=scale)
    mean = v.new_empty(v.shape)
    mean[..., :1, :] = v[..., :1, :]  # token 0 reads its own value
    mean[..., 1:, :] = out[..., :width]
    return mean, keyed, out, lse


def _no_self_backward(grad: Tensor, q: Tensor, k: Tensor, keyed: Tensor, out: Tensor, lse: Tensor, scale: float,
                      successor_heads: int) -> tuple[Tensor, Tensor, Tensor]:
    """(dq, dk, dv) from dL/dmean and what ``no_self_forward`` kept."""
    b, heads, t, width = grad.shape
    # rows 1 … T − 1 of dL/dmean, padded as the values were, written once in the flash kernel's own layout
    # (B, T, H, d) (given (B, H, T, d) it copies them into that layout itself)
    rest = grad.new_empty(b, t - 1, heads, keyed.shape[-1]).transpose(1, 2)
    rest[..., :width] = grad[..., 1:, :]
    rest[..., width:] = 0
    dqs, dks, dkeyed = _FLASH_BACKWARD(rest, q[..., 1:, :], k[..., :-1, :], keyed, out, lse, 0.0, True, scale=scale)
    dq, dk, dv = dqs.new_empty(q.shape), dks.new_empty(k.shape), grad.new_empty(grad.shape)
    dq[..., :1, :].zero_()
    dq[..., 1:, :] = dqs
    dk[..., -1:, :].zero_()
    dk[..., :-1, :] = dks
    split = heads - successor_heads
    dv[:, :split, -1:].zero_()
    dv[:, :split, :-1] = dkeyed[:, :split, :, :width]
    dv[:, split:, :1].zero_()
    dv[:, split:, 1:] = dkeyed[:, split:, :, :width]
    dv[..., :1, :] += grad[..., :1, :]
    return dq, dk, dv


# operators that torch.compile calls whole
no_self_forward = whole_operator("no_self_forward", _no_self_forward)
no_self_backward = whole_operator("no_self_backward", _no_self_backward)


class _NoSelf(torch.autograd.Function):
    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, q: Tensor, k: Tensor, v: Tensor,  # type: ignore[override]
                scale: float, successor_heads: int) -> Tensor:
        mean, keyed, out, lse = no_self_forward(q, k, v, scale, successor_heads)
        ctx.save_for_backward(q, k, keyed, out, lse)
        ctx.scale, ctx.successor_heads = scale, successor_heads
        return mean

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        q, k, keyed, out, lse = ctx.saved_tensors
        return (*no_self_backward(grad, q, k, keyed, out, lse, ctx.scale, ctx.successor_heads), None, None)


def no_self_flash(q: Tensor, k: Tensor, v: Tensor, scale: float, successor_heads: int) -> Tensor:
    """``causal_attention(..., exclude_self=True)`` over S == T on the CPU's flash kernel with hand-written gradient
    plumbing (``_NoSelf``): q, k (B, H, T, d), v (B, H, T, e ≤ d) -> (B, H, T, e)."""
    return _NoSelf.apply(q, k, v, scale, successor_heads)


def keyed_values(v: Tensor, successor_heads: int = 0) -> Tensor:
    """The values that come with keys 0 … S − 2 (every key but the newest): v_u, or v_{u+1} in the last
    ``successor_heads`` heads. (B, H, S, d) -> (B, H, S − 1, d)."""
    if not successor_heads:
        return v[..., :-1, :]
    split = v.shape[1] - successor_heads
    return torch.cat((v[:, :split, :-1], v[:, split:, 1:]), dim=1)


def explicit_attention(q: Tensor, k: Tensor, v: Tensor, scale: float, exclude_self: bool = False,
                       successor_heads: int = 0) -> tuple[Tensor, Tensor]:
    """``causal_attention`` of T queries over their own T keys with the coupling matrix materialised: (out (B, H, T, d),
    A (B, H, T, T))."""
    t = q.shape[-2]
    if successor_heads and not exclude_self:
        raise ValueError("successor values need exclude_self (with the self term a token reads its own successor)")
    scores = (q @ k.transpose(-1, -2)) * scale
    attn = torch.softmax(scores.masked_fill(~causal_mask(t, t, q.device, exclude_self), float("-inf")), dim=-1)
    if not successor_heads:
        return attn @ v, attn
    # key u with value u + 1; the newest key's successor is never read (no row attends it without the self term)
    shifted = torch.cat((keyed_values(v, successor_heads), v[..., -1:, :]), dim=-2)
    out = attn @ shifted
    out[..., :1, :] = v[..., :1, :]  # token 0 attends only itself and reads its own value
    return out, attn


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

