"""Oscillators with several real components (SU(2)'s unit quaternions, the sphere's unit vectors), held as planes.

A state (B, T, n, c) is n oscillators of c components each. The layer's arithmetic on them is elementwise per
oscillator, so it is written on ``Parts``: the c components as c tensors (..., n), each a contiguous plane of n
oscillators. With the c components innermost instead, torch.compile's CPU kernels loop and reduce over runs of c = 3
or 4 numbers, which they cannot vectorise. ``join`` stores a state component-major (a view of the (c, B, T, n) stack),
so that the next ``split`` is free; the public shape stays (B, T, n, c), and any layout of it is read alike.

Inside a head, query, key and value features are laid out component-major too, (B, H, T, c, d): the score is a dot
product and the mean is read back the same way, so their order is no one else's business (``to_heads`` and
``from_heads`` in ops/vectors.py).

``VectorGeometry`` is what such groups share: the lift is the state's own coordinates, what A averages is the state
itself, the embedding reads tangent vectors at a base point through the exponential, and the norm bound is applied
to the whole token's increment as one factor per token. A group says three things: how the drift moves a state
(``rotated``), what part of the mean is tangent at the state (``tangent_part``), and how a state moves along a tangent
step (``exp_move``, renormalised).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from kuramoto_attention.layers.bound import NormBound
from kuramoto_attention.layers.groups.base import Geometry
from kuramoto_attention.ops import native
from kuramoto_attention.ops.fused import fused_applies
from kuramoto_attention.ops.gather import select_rows
from kuramoto_attention.ops.vectors import from_heads, lift_states, to_heads

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


def token_major(x: Parts, heads: int) -> Tensor:
    """c planes (B, T, n) -> (B, T, H, c, d): ``to_heads``' layout within a token, the tokens outermost (what the
    query/key features are computed in before the heads are split by a view)."""
    return torch.stack(x, dim=2).unflatten(-1, (heads, -1)).transpose(2, 3)


def cos_sinc(a2: Tensor) -> tuple[Tensor, Tensor]:
    """(cos a, sin(a)/a) from a² = |w|², smooth at 0 with exact gradients: below a² = 1e-2 both are their Taylor series
    in a² to the a⁸ term, so neither 0/0 nor the cancellation in d(sin a / a) = (a cos a − sin a)/a² … is ever
    evaluated; above it the closed form, whose square root sees only a² ≥ 1e-2 (the ``where`` is double-guarded so
    that the unused branch cannot send a NaN gradient back)."""
    small = a2 < _SERIES
    if not a2.requires_grad and not torch.compiler.is_compiling() and not bool(small.any()):
        a = torch.sqrt(a2)  # no gradient to guard and no small |w|: the closed form alone, the same numbers (and 4
        return torch.cos(a), torch.sin(a) / a  # operators, not 30: what sets the rate of cached decoding)
    a = torch.sqrt(torch.where(small, torch.ones_like(a2), a2))
    cos = torch.where(small, 1 - a2 / 2 * (1 - a2 / 12 * (1 - a2 / 30 * (1 - a2 / 56))), torch.cos(a))
    sinc = torch.where(small, 1 - a2 / 6 * (1 - a2 / 20 * (1 - a2 / 42 * (1 - a2 / 72))), torch.sin(a) / a)
    return cos, sinc


def exp_parts(w: Parts) -> Parts:
    """(cos|w|, sinc|w| · w): a vector w of any length k -> the unit vector of k + 1 components it points to from
    the pole (1, 0, …) (for k = 3 the exponential of the pure quaternion w)."""
    cos, sinc = cos_sinc(dot(w, w))
    return (cos, *(sinc * c for c in w))


def log_unit(x: Tensor) -> Tensor:
    """``exp_parts``' inverse: unit vectors (..., k + 1) -> w (..., k), |w| ∈ [0, π], exp_parts(log_unit(x)) = x
    (for k = 3 the principal logarithm of unit quaternions, as rotation vectors). Used to draw the embeddings' initial
    parameters (not differentiated)."""
    vec = x[..., 1:]
    n = torch.linalg.vector_norm(vec, dim=-1, keepdim=True)
    angle = torch.atan2(n, x[..., :1])
    return vec * torch.where(n > 0, angle / n.clamp_min(torch.finfo(x.dtype).tiny), torch.ones_like(n))


def _exp_state(w: Tensor) -> Tensor:
    """Tangent vectors at the pole (..., n, c − 1) -> the states (..., n, c) they point to, component-major."""
    return join(exp_parts(split(w)))


def _fused(x: Tensor) -> bool:
    """Whether the hand-fused functions run: in eager training (``fused_applies``), and under torch.compile too where
    the compiled CPU kernels run them (``ops/native.py``: single operators to the compiler, faster than what it makes
    of the plain expressions)."""
    return fused_applies() or (torch.is_grad_enabled() and torch.compiler.is_compiling() and native.available(x))


class VectorGeometry(Geometry):
    """Oscillators that are unit vectors of R^c: states (B, T, n, c), increments (B, T, n·tangent) oscillator-major.

    ``fused_move(x, w)``, ``fused_step(x, G, v, log_radius)`` and ``fused_query_key(x, Ω, pos, z, τ, dtype, extra)``: a
    group's hand-fused ``exp_move``, norm-bounded value-gated step on planes, and gated drifted query/key features
    (``ops/vectors.py``), with their backward written out; used where they pay (eager training, and under
    torch.compile where the compiled CPU kernels run them), the plain expressions otherwise.
    """

    steps_read_lift = False  # the step reads the states themselves
    fused_move: Callable[[Tensor, Tensor], Tensor] | None = None  # these two return the state (..., n, c), as join
    fused_step: Callable[[Tensor, Tensor, Tensor, Tensor], Tensor] | None = None
    fused_query_key: Callable[..., tuple[Tensor, Tensor]] | None = None

    def check_state(self, x: Tensor, oscillators: int) -> None:
        """The shape check, and no zero vector: a zero oscillator has no direction, and normalising it gives NaN."""
        super().check_state(x, oscillators)
        if x.numel() and not torch.compiler.is_compiling() and bool((x.detach().norm(dim=-1) == 0).any()):
            raise ValueError(f"the {self.state_name} hold a zero vector, which has no direction on the group (its "
                             "normalisation would be NaN at every later position): give unit vectors")

    def state_shape(self, oscillators: int) -> tuple[int, ...]:
        return (oscillators, self.components)

    def init_embedding(self, vocab: int, oscillators: int) -> Tensor:
        x = F.normalize(torch.randn(vocab, oscillators, self.components, dtype=torch.float64), dim=-1)  # uniform
        return log_unit(x).float()  # (vocab, n, c − 1), |w| ∈ [0, π]

    def embed(self, table: Tensor, idx: Tensor) -> Tensor:
        vocab, n, k = table.shape  # (vocab, n, c − 1) tangent vectors at the pole
        if idx.numel() < vocab:  # a few tokens (decoding): the exponential of the rows read
            return _exp_state(F.embedding(idx, table.view(vocab, n * k)).unflatten(-1, (n, k)))
        # the exponential acts row by row, so taking it of each row once and then reading gives the same numbers
        rows = torch.stack(exp_parts(split(table)))  # (c, vocab, n)
        return select_rows(rows, 1, idx.flatten()).unflatten(1, idx.shape).movedim(0, -1)  # component-major

    def lift(self, x: Tensor) -> Tensor:
        return x.flatten(-2)

    def lift_as(self, x: Tensor, dtype: torch.dtype) -> Tensor:
        return x.flatten(-2) if dtype == x.dtype and x.is_contiguous() else lift_states(x, dtype)

    # ------------------------------------------------------------------ what each group says
    def rotated(self, x: Parts, pos: Tensor, drift: Tensor) -> Parts:
        """drift_t x_t as c planes (B, T, n); pos (T,)."""
        raise NotImplementedError

    def tangent_part(self, x: Parts, mean: Parts) -> Parts:
        """The increment ξ at x from the attended mean G, as ``tangent`` planes (B, T, n)."""
        raise NotImplementedError

    def exp_move(self, x: Parts, w: Parts) -> Parts:
        """x moved along the tangent step w (``tangent`` planes), of unit norm."""
        raise NotImplementedError

    # ------------------------------------------------------------------ the step, on planes
    def drifted(self, x: Tensor, pos: Tensor, drift: Tensor, heads: int,
                extras: nn.Module | None = None) -> tuple[Tensor, Tensor]:
        feat = token_major(self.rotated(split(x), pos, drift.to(x.dtype)), heads)
        return feat, feat

    def gated_query_key(self, x: Tensor, pos: Tensor, drift: Tensor, logits: Tensor | None, heads: int, tau: Tensor,
                        dtype: torch.dtype, extras: nn.Module | None = None,
                        extra: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        # drift, gates, the heads' layout and the extra features in one pass, forward and backward (the default's
        # numbers)
        if self.fused_query_key is not None and logits is not None and _fused(x):
            return self.fused_query_key(x, drift.to(x.dtype), pos, logits, tau, dtype, extra)
        return super().gated_query_key(x, pos, drift, logits, heads, tau, dtype, extras, extra)

    def values(self, x: Tensor, lifted: Tensor, heads: int, extras: nn.Module | None = None) -> Tensor:
        return to_heads(x, heads, lifted.dtype)  # x_u, laid out as the features are

    def _xi(self, x: Tensor, mean: Tensor) -> Parts:
        return self.tangent_part(split(x), from_heads(mean, self.components, x.dtype))

    def increment(self, x: Tensor, lifted: Tensor, mean: Tensor, extras: nn.Module | None = None) -> Tensor:
        return torch.stack(self._xi(x, mean), dim=-1).flatten(-2)  # (B, T, n·tangent), oscillator-major

    def move(self, x: Tensor, step: Tensor) -> Tensor:
        w = step.unflatten(-1, (-1, self.tangent))
        if self.fused_move is not None and _fused(x):
            return self.fused_move(x, w)  # whole and in its own dtype: no cast, no stacking pass, either way
        return join(self.exp_move(split(x), split(w.to(x.dtype))))

    def norm_step(self, x: Tensor, lifted: Tensor, mean: Tensor, value: Tensor, bound: NormBound,
                  extras: nn.Module | None = None) -> Tensor:
        # the increment stays in planes: the bound is one factor per token over all of them
        v = value.to(x.dtype)
        if self.fused_step is not None and _fused(x):
            return self.fused_step(x, mean, v, bound.log_radius)  # G read where the attention left it
        w = tuple(v * c for c in self._xi(x, mean))
        factor = bound.factor(dot(w, w).sum(-1, keepdim=True))
        return join(self.exp_move(split(x), tuple(factor * c for c in w)))
