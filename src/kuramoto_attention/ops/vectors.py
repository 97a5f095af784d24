"""Hand-fused moves of vector-valued oscillators (SU(2)'s unit quaternions, the sphere's unit vectors).

A state (..., n, c) is given whole, in any layout, and read as its c component planes (..., n) (``planes.py``'s
``Parts``; the stored layout is component-major, so that each plane is contiguous). A move by a tangent step written
as plain operations materialises a dozen (..., n) tensors forward and as many again in
autograd's backward; each function here computes the whole move in one forward and writes its backward out, saving
only the inputs and a few per-token scalars (the Python functions also |m| and the output, returned as one
component-major state; the compiled kernels make those again in the backward).

    quaternion_move:  y = normalise(q exp(w))                           q unit quaternion, w ∈ R³ (pure quaternion)
    sphere_move:      y = normalise(cos|u| x + sinc|u| u),  u = w − ⟨w, x⟩ x      x unit vector of R^D, w ∈ R^D
    quaternion_step:  the move by h(‖w‖²) w,  w = v ⊙ Im(conj(q) G)      G the attention output, v the value gate
    sphere_step:      the move by h(‖w‖²) w,  w = v ⊙ P_x G              h the norm bound, one factor per token

with exp(w) = (cos|w|, sinc|w| w), sinc a = sin(a)/a, and normalise(m) = m/|m| (which only undoes rounding).
The plain expressions (the geometry modules' ``exp_move``) are what the tests compare these with.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import FunctionCtx, once_differentiable

from kuramoto_attention.ops import native
from kuramoto_attention.ops.attention import with_extra
from kuramoto_attention.ops.fused import _at_least_fp32, _gates_backward, _gates_forward, _no_autocast, _softplus_means
from kuramoto_attention.ops.torus import norm_factor, norm_factor_backward

Parts = tuple[Tensor, ...]
_SERIES = 1e-2  # |w|² below which cos, sinc and sinc' use their Taylor series (as planes.cos_sinc)


def dot(a: Parts, b: Parts) -> Tensor:
    """⟨a, b⟩ per oscillator: (..., n)."""
    out = a[0] * b[0]
    for x, y in zip(a[1:], b[1:], strict=True):
        out = out.addcmul_(x, y) if not out.requires_grad else out + x * y
    return out


def cos_sinc_grad(a2: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(cos a, sin(a)/a, d sinc / d a²) from a² ≥ 0: the Taylor series in a² below 1e-2 (to the a⁸ term; no 0/0 and
    no cancellation), the closed forms above it. d cos / d a² = −sinc/2 needs nothing more."""
    small = a2 < _SERIES
    a = torch.sqrt(torch.where(small, torch.ones_like(a2), a2))
    cos = torch.where(small, 1 - a2 / 2 * (1 - a2 / 12 * (1 - a2 / 30 * (1 - a2 / 56))), torch.cos(a))
    sinc = torch.where(small, 1 - a2 / 6 * (1 - a2 / 20 * (1 - a2 / 42 * (1 - a2 / 72))), torch.sin(a) / a)
    series = -1 / 6 + a2 / 60 * (1 - a2 / 28 * (1 - a2 / 54 * (1 - a2 / 88)))
    dsinc = torch.where(small, series, (cos - sinc) / (2 * torch.where(small, torch.ones_like(a2), a2)))
    return cos, sinc, dsinc


def _normalise(m: Parts) -> tuple[Parts, Tensor]:
    norm = torch.sqrt(dot(m, m))
    return tuple(c / norm for c in m), norm


def _normalise_backward(grad: Parts, y: Parts, norm: Tensor) -> Parts:
    """dL/dm of y = m/|m|: (dy − ⟨dy, y⟩ y)/|m|."""
    along = dot(grad, y)
    return tuple((g - along * c) / norm for g, c in zip(grad, y, strict=True))


def _hamilton(p: Parts, q: Parts) -> Parts:
    """The Hamilton product pq of quaternions as 4 parts, real part first."""
    p0, p1, p2, p3 = p
    q0, q1, q2, q3 = q
    return (p0 * q0 - p1 * q1 - p2 * q2 - p3 * q3,
            p0 * q1 + p1 * q0 + p2 * q3 - p3 * q2,
            p0 * q2 + p2 * q0 + p3 * q1 - p1 * q3,
            p0 * q3 + p3 * q0 + p1 * q2 - p2 * q1)


def _conj(q: Parts) -> Parts:
    return (q[0], -q[1], -q[2], -q[3])


# --------------------------------------------------------------------------- each group's pieces, forward and backward
# A move: m = the unnormalised moved state from (x, w) and its aux (what both directions need), and its backward
# given dL/dm. A tangent part: ξ from (x, G),
# and its backward given dL/dξ. Each backward returns (dx, dw) or (dx, dG) as parts.
def _quaternion_aux(q: Parts, w: Parts) -> Parts:
    """What the move's backward needs besides (q, w): (cos, sinc, sinc') of |w|."""
    return cos_sinc_grad(dot(w, w))


def _quaternion_move(q: Parts, w: Parts, aux: Parts) -> Parts:
    """m = q exp(w), given ``_quaternion_aux(q, w)``."""
    cos, sinc, _ = aux
    return _hamilton(q, (cos, *(sinc * c for c in w)))


def _quaternion_move_backward(dm: Parts, q: Parts, w: Parts, aux: Parts) -> tuple[Parts, Parts]:
    cos, sinc, dsinc = aux
    e = (cos, *(sinc * c for c in w))
    dq = _hamilton(dm, _conj(e))  # m = q e: dq = dm conj(e), de = conj(q) dm
    de = _hamilton(_conj(q), dm)
    # e = (cos, sinc w), a² = |w|²: dw = sinc de⃗ + 2 w (−sinc/2 de₀ + sinc' ⟨de⃗, w⟩)
    da2 = 2 * (dsinc * dot(de[1:], w) - sinc / 2 * de[0])
    return dq, tuple(sinc * d + da2 * c for d, c in zip(de[1:], w, strict=True))


def _quaternion_tangent(q: Parts, g: Parts) -> Parts:
    """ξ = Im(conj(q) G) = q₀ g⃗ − g₀ q⃗ − q⃗ × g⃗."""
    return _hamilton(_conj(q), g)[1:]


def _quaternion_tangent_backward(dxi: Parts, q: Parts, g: Parts) -> tuple[Parts, Parts]:
    """With D = (0, dξ): dG = q D, dq = G conj(D) (the adjoints of G ↦ conj(q) G and of q ↦ conj(q) G)."""
    pure = (torch.zeros_like(dxi[0]), *dxi)
    return _hamilton(g, _conj(pure)), _hamilton(q, pure)


def _project(x: Parts, w: Parts) -> tuple[Parts, Tensor]:
    """P_x w = w − ⟨w, x⟩ x, and ⟨w, x⟩."""
    along = dot(w, x)
    return tuple(c - along * e for c, e in zip(w, x, strict=True)), along


def _project_backward(du: Parts, x: Parts, w: Parts, along: Tensor) -> tuple[Parts, Parts]:
    """u = w − ⟨w, x⟩ x:  dx = −⟨w, x⟩ du − ⟨du, x⟩ w,  dw = du − ⟨du, x⟩ x."""
    du_x = dot(du, x)
    return (tuple(-along * d - du_x * c for d, c in zip(du, w, strict=True)),
            tuple(d - du_x * e for d, e in zip(du, x, strict=True)))


def _sphere_aux(x: Parts, w: Parts) -> Parts:
    """What the move's backward needs besides (x, w): (⟨w, x⟩, cos, sinc, sinc') of |u|, u = P_x w."""
    u, along = _project(x, w)
    return (along, *cos_sinc_grad(dot(u, u)))


def _sphere_move(x: Parts, w: Parts, aux: Parts) -> Parts:
    """m = cos|u| x + sinc|u| u, u = P_x w, given ``_sphere_aux(x, w)``."""
    along, cos, sinc, _ = aux
    return tuple(cos * e + sinc * (c - along * e) for e, c in zip(x, w, strict=True))


def _sphere_move_backward(dm: Parts, x: Parts, w: Parts, aux: Parts) -> tuple[Parts, Parts]:
    along, cos, sinc, dsinc = aux
    u = tuple(c - along * e for c, e in zip(w, x, strict=True))
    # m = cos x + sinc u with a² = |u|²:  du = sinc dm + 2 u (−sinc/2 ⟨dm, x⟩ + sinc' ⟨dm, u⟩)
    da2 = 2 * (dsinc * dot(dm, u) - sinc / 2 * dot(dm, x))
    du = tuple(sinc * d + da2 * c for d, c in zip(dm, u, strict=True))
    dx, dw = _project_backward(du, x, w, along)
    return tuple(a + cos * g for a, g in zip(dx, dm, strict=True)), dw


def _sphere_tangent(x: Parts, g: Parts) -> Parts:
    return _project(x, g)[0]


def _sphere_tangent_backward(dxi: Parts, x: Parts, g: Parts) -> tuple[Parts, Parts]:
    return _project_backward(dxi, x, g, dot(g, x))


# kind -> (move, its backward, tangent part, its backward, the move's aux: computed again in the backward)
_KINDS = {
    "quaternion": (_quaternion_move, _quaternion_move_backward, _quaternion_tangent, _quaternion_tangent_backward,
                   _quaternion_aux),
    "sphere": (_sphere_move, _sphere_move_backward, _sphere_tangent, _sphere_tangent_backward, _sphere_aux),
}


def _compiled(x: Parts, *others: Tensor) -> bool:
    """Whether the compiled kernels apply: 2, 4, 6 or 8 components (``csrc/vectors.cpp``'s), every plane of one shape
    (no broadcasting), a CPU float32 or float64 tensor (``native.available``)."""
    return len(x) in (2, 4, 6, 8) and all(t.shape == x[0].shape for t in others) and native.available(x[0])


def _whole(x: Tensor | Parts) -> Tensor:
    """A state or tangent vector (..., n, c) as one tensor (in any layout), or its c parts (..., n) stacked."""
    return x if isinstance(x, Tensor) else torch.stack(x, dim=-1)


def _stacked(parts: Parts | Tensor, like: Tensor) -> Tensor:
    """A gradient of ``like`` (..., n, c), given as c parts or as the kernels' (c, N, n), component-major."""
    return (torch.stack(parts) if isinstance(parts, tuple) else parts.view(-1, *like.shape[:-1])).movedim(0, -1)


class _Move(torch.autograd.Function):
    # takes the state and the step whole and gives their gradients back as the kernels write them (the state's
    # component-major, the step's oscillator-major, as each is stored: no stacking pass); saves the inputs, and for
    # the Python functions |m| and the output (stacked: the layer's next state, which its readers save anyway); what
    # the move's backward needs besides is recomputed from the inputs, which is cheaper than keeping it. On the CPU
    # the compiled kernels (``native.py``) do each direction in one loop, the backward making the output and |m| again
    @staticmethod
    def forward(ctx: FunctionCtx, kind: str, x: Tensor, w: Tensor) -> Tensor:  # type: ignore[override]
        ctx.step_dtype = w.dtype  # w read in x's dtype, or in bf16 (the feed-forward's, as it is); else cast first
        if not (w.dtype == x.dtype or (w.dtype == torch.bfloat16 and x.dtype == torch.float32)):
            w = w.to(x.dtype)
        xs, ws = x.unbind(-1), w.unbind(-1)
        if compiled := _compiled(xs, *ws):
            out, norm = native.move_forward(kind, list(xs), list(ws)).view(len(xs), *xs[0].shape), None
        else:
            ws = w.to(x.dtype).unbind(-1)
            move, _, _, _, aux = _KINDS[kind]
            y, norm = _normalise(move(xs, ws, aux(xs, ws)))
            out = torch.stack(y)
        ctx.kind, ctx.compiled = kind, compiled
        ctx.save_for_backward(x, w, norm, None if compiled else out)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        x, w, norm, out = ctx.saved_tensors
        if ctx.compiled:  # dw comes back as w is stored, oscillator-major, in w's dtype
            dx, dw = native.move_backward(ctx.kind, grad, list(x.unbind(-1)), list(w.unbind(-1)))
            return None, _stacked(dx, x), dw.view(w.shape).to(ctx.step_dtype)
        xs, ws = x.unbind(-1), w.to(x.dtype).unbind(-1)
        _, move_backward, _, _, aux = _KINDS[ctx.kind]
        dm = _normalise_backward(grad.unbind(0), out.unbind(0), norm)
        dx, dw = move_backward(dm, xs, ws, aux(xs, ws))
        return None, _stacked(dx, x), _stacked(dw, w).to(ctx.step_dtype)


def quaternion_move(q: Tensor | Parts, w: Tensor | Parts) -> Tensor:
    """normalise(q exp(w)): unit quaternions q (..., n, 4) moved by pure quaternions w (..., n, 3) (in q's dtype, or
    bfloat16 for float32 q), each whole or as its parts (..., n); the state (..., n, 4) stored component-major
    (``planes.join``'s layout)."""
    return _Move.apply("quaternion", _whole(q), _whole(w)).movedim(0, -1)


def sphere_move(x: Tensor | Parts, w: Tensor | Parts) -> Tensor:
    """normalise(exp_x(P_x w)): unit vectors x (..., n, D) moved along the tangent part of w (..., n, D) (dtypes as
    ``quaternion_move``'s), each whole or as its parts; the state (..., n, D) stored component-major."""
    return _Move.apply("sphere", _whole(x), _whole(w)).movedim(0, -1)


def _dense(x: Tensor) -> bool:
    """Whether x's strides lay its elements out without gaps or overlaps, in some order of its axes."""
    expect = 1
    for size, stride in sorted((d for d in zip(x.shape, x.stride(), strict=True) if d[0] != 1), key=lambda d: d[1]):
        if stride != expect:
            return False
        expect *= size
    return True


def _copied(src: Tensor, dtype: torch.dtype) -> Tensor:
    """A new contiguous tensor of ``src``'s values (a strided view) in ``dtype``. Narrowing, the cast runs first, in
    src's own memory order (a plain vectorised pass), and the layout change then moves the narrower elements: a
    transposing copy that casts as it goes is about twice as slow (ka-su2-1m-tuned's lift to bf16: 1.6 against
    0.85 ms). The same numbers either way: a cast rounds each element alone."""
    if dtype.itemsize < src.dtype.itemsize:
        src = src.to(dtype)
    return src.new_empty(src.shape, dtype=dtype).copy_(src)


class _Relayout(torch.autograd.Function):
    # y = arrange(x) copied in ``dtype`` (``_copied``), and the gradient goes back in one pass, widening as it moves,
    # into x's own layout (that of x's other gradients, so that autograd sums them on matching strides)
    @staticmethod
    def forward(ctx: FunctionCtx, x: Tensor, dtype: torch.dtype,  # type: ignore[override]
                arrange: Callable[[Tensor], Tensor]) -> Tensor:
        ctx.shape, ctx.dtype, ctx.arrange = x.shape, x.dtype, arrange
        ctx.stride = x.stride() if _dense(x) else None  # (an expanded x: a plain gradient)
        return _copied(arrange(x), dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad: Tensor) -> tuple[Tensor, None, None]:  # type: ignore[override]
        dx = (torch.empty(ctx.shape, dtype=ctx.dtype, device=grad.device) if ctx.stride is None else
              torch.empty_strided(ctx.shape, ctx.stride, dtype=ctx.dtype, device=grad.device))
        ctx.arrange(dx).copy_(grad)
        return dx, None, None


def relayout(x: Tensor, dtype: torch.dtype, arrange: Callable[[Tensor], Tensor]) -> Tensor:
    """``arrange(x)`` (a view of x) as a new tensor in ``dtype`` (``_copied``; torch.compile fuses the plain copy
    itself), its gradient in one pass."""
    if torch.compiler.is_compiling():
        src = arrange(x)
        return x.new_empty(src.shape, dtype=dtype).copy_(src)
    if not x.requires_grad:
        return _copied(arrange(x), dtype)
    return _Relayout.apply(x, dtype, arrange)


class _Lift(torch.autograd.Function):
    # the compiled kernels' lift: the planes read and the oscillator-major copy written in one pass each way, the
    # gradient coming back component-major (as the states are stored, and as their other gradients are)
    @staticmethod
    def forward(ctx: FunctionCtx, x: Tensor, bf16: bool) -> Tensor:  # type: ignore[override]
        ctx.dtype, ctx.shape = x.dtype, x.shape
        return native.lift_forward(list(x.unbind(-1)), bf16).view(*x.shape[:-2], x.shape[-2] * x.shape[-1])

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad: Tensor) -> tuple[Tensor, None]:  # type: ignore[override]
        *lead, n, c = ctx.shape
        dx = native.lift_backward(grad, n, ctx.dtype)  # (c, N, n)
        return dx.view(c, *lead, n).movedim(0, -1), None


def _kernel_dtype(dtype: torch.dtype, state: torch.dtype) -> bool:
    """Whether the kernels write ``dtype`` from states of dtype ``state``: their own, or bfloat16 from float32."""
    return dtype == state or (dtype == torch.bfloat16 and state == torch.float32)


def _kernel_layout(x: Tensor, dtype: torch.dtype) -> bool:
    """Whether the compiled kernels change x's layout: while autograd records (as the other kernels; without it the
    plain copy runs, and nothing builds the kernels), non-empty (B, T, n, c) states of 2, 4, 6 or 8 components on the
    CPU, into a dtype ``_kernel_dtype`` allows."""
    return (torch.is_grad_enabled() and x.dim() == 4 and x.numel() > 0 and _kernel_dtype(dtype, x.dtype)
            and _compiled(x.unbind(-1)))


def lift_states(x: Tensor, dtype: torch.dtype) -> Tensor:
    """States (B, T, n, c) -> their c·n real components (B, T, n·c), oscillator-major, in ``dtype`` (the compiled
    kernels' one pass where they run, else ``relayout``, whatever x's memory layout)."""
    if _kernel_layout(x, dtype):
        return _Lift.apply(x, dtype != x.dtype)
    return relayout(x, dtype, lambda y: y).flatten(-2)


class _ToHeads(torch.autograd.Function):
    # the compiled kernels' relayout: the planes read and the heads' layout written in one pass each way, the gradient
    # coming back component-major (as the states are stored, and as their other gradients are)
    @staticmethod
    def forward(ctx: FunctionCtx, x: Tensor, heads: int, bf16: bool) -> Tensor:  # type: ignore[override]
        ctx.dtype, ctx.n, ctx.c = x.dtype, x.shape[2], x.shape[3]
        return native.heads_forward(list(x.unbind(-1)), heads, x.shape[1], bf16)

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad: Tensor) -> tuple[Tensor, None, None]:  # type: ignore[override]
        b, _, t, _ = grad.shape
        dx = native.heads_backward(grad, ctx.n, ctx.dtype)  # (c, B·T, n)
        return dx.view(ctx.c, b, t, ctx.n).movedim(0, -1), None, None


def to_heads(x: Tensor, heads: int, dtype: torch.dtype) -> Tensor:
    """States (B, T, n, c) -> (B, H, T, c·d) in ``dtype``: head h's oscillators h·d … (h+1)·d − 1, component-major
    within it (the compiled kernels' one pass where they run, else ``relayout``, whatever x's memory layout)."""
    if _kernel_layout(x, dtype) and x.shape[2] % heads == 0:
        return _ToHeads.apply(x, heads, dtype != x.dtype)
    return relayout(x, dtype, lambda y: y.unflatten(2, (heads, -1)).permute(0, 2, 1, 4, 3)).flatten(-2)


def from_heads(mean: Tensor, components: int, dtype: torch.dtype) -> Parts:
    """The attention output in the heads' layout (B, H, T, c·d) -> its c planes (B, T, n) in ``dtype`` (one pass: the
    layout and the dtype change together)."""
    b, heads, t, _ = mean.shape
    planes = mean.new_empty((components, b, t, heads, mean.shape[-1] // components), dtype=dtype)
    planes.copy_(mean.unflatten(-1, (components, -1)).permute(3, 0, 2, 1, 4))
    return planes.flatten(-2).unbind(0)


def _heads_of(parts: Parts, heads: int, like: Tensor) -> Tensor:
    """``from_heads``' inverse: c planes (B, T, n) -> (B, H, T, c·d) in ``like``'s dtype."""
    (b, t, _), c = parts[0].shape, len(parts)
    return torch.stack(parts).view(c, b, t, heads, -1).permute(1, 3, 2, 0, 4).reshape(b, heads, t, -1).to(like.dtype)


def _as_heads(mean: Tensor | Parts) -> Tensor:
    """G as given to the steps: the heads' layout as it is, or c planes (B, T, n) as one head (B, 1, T, c·n)."""
    return mean if isinstance(mean, Tensor) else torch.stack(mean, dim=-2).flatten(-2).unsqueeze(1)


def _compiled_step(x: Parts, mean: Tensor, value: Tensor) -> bool:
    """``_compiled``, and G (B, H, T, c·d) over x's (B, T, n) tokens, in x's dtype or bfloat16 (the kernels read it
    where it is)."""
    b, t, n = x[0].shape if x[0].dim() == 3 else (0, 0, 0)
    heads = mean.shape[1] if mean.dim() == 4 else 0
    return (heads > 0 and n % heads == 0 and mean.shape == (b, heads, t, len(x) * n // heads)
            and mean.dtype in (x[0].dtype, torch.bfloat16) and _compiled(x, value))


class _Step(torch.autograd.Function):
    # saves as _Move does: the inputs, the bound's per-token numbers, and for the Python functions |m| and the stacked
    # output; ξ, w and the move's (cos, sinc, …) are recomputed in the backward. On the CPU the compiled kernels do
    # each direction in two loops over every token's oscillators (the bound's sum, then the move), reading G where
    # the attention left it
    @staticmethod
    def forward(ctx: FunctionCtx, kind: str, value: Tensor, log_radius: Tensor,  # type: ignore[override]
                mean: Tensor, state: Tensor) -> Tensor:
        x, dim = state.unbind(-1), state.shape[-1]
        if compiled := _compiled_step(x, mean, value):
            out, sq, h = native.step_forward(kind, list(x), mean, value, log_radius)
            token = (*x[0].shape[:-1], 1)
            out, sq, h, norm = out.view(dim, *x[0].shape), sq.view(token), h.view(token), None
        else:
            move, _, tangent, _, aux = _KINDS[kind]
            xi = tangent(x, from_heads(mean, dim, x[0].dtype))
            w = tuple(value * c for c in xi)
            sq = dot(w, w).sum(-1, keepdim=True)  # one norm per token, over all its oscillators
            h = norm_factor(sq, log_radius.exp().to(sq.dtype))
            step = tuple(h * c for c in w)
            y, norm = _normalise(move(x, step, aux(x, step)))
            out = torch.stack(y)
        ctx.kind, ctx.compiled = kind, compiled
        ctx.save_for_backward(value, log_radius, sq, h, norm, mean, state, None if compiled else out)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        value, log_radius, sq, h, norm, mean, state, out = ctx.saved_tensors
        x = state.unbind(-1)
        if ctx.compiled:
            dx, dmean, grad_value, grad_radius = native.step_backward(ctx.kind, grad, list(x), mean, value,
                                                                      log_radius, sq, h)
            return (None, grad_value.view(value.shape) if ctx.needs_input_grad[1] else None,
                    grad_radius if ctx.needs_input_grad[2] else None, dmean, _stacked(dx, state))
        _, move_backward, tangent, tangent_backward, aux = _KINDS[ctx.kind]
        g = from_heads(mean, len(x), x[0].dtype)
        xi = tangent(x, g)
        w = tuple(value * c for c in xi)
        step = tuple(h * c for c in w)
        dm = _normalise_backward(grad.unbind(0), out.unbind(0), norm)
        dx, dstep = move_backward(dm, x, step, aux(x, step))
        # step = h(‖w‖²) w:  dw = h dstep + 2 w dL/ds,  dL/dh = Σ ⟨dstep, w⟩ over the token
        ds, grad_radius = norm_factor_backward(dot(dstep, w).sum(-1, keepdim=True), sq, log_radius,
                                               ctx.needs_input_grad[2])
        dw = tuple(torch.addcmul(h * d, c, 2 * ds) for d, c in zip(dstep, w, strict=True))
        grad_value = dot(dw, xi) if ctx.needs_input_grad[1] else None
        dx_xi, dg = tangent_backward(tuple(value * d for d in dw), x, g)
        return (None, grad_value, grad_radius, _heads_of(dg, mean.shape[1], mean),
                _stacked(tuple(a + b for a, b in zip(dx, dx_xi, strict=True)), state))


def quaternion_step(q: Tensor | Parts, mean: Tensor | Parts, value: Tensor, log_radius: Tensor) -> Tensor:
    """normalise(q exp(h w)) with w = v ⊙ Im(conj(q) G) and h = r tanh(‖w‖)/‖w‖ over each token: the attention's move
    on unit quaternions. q (B, T, n, 4), or its 4 parts (B, T, n); G the attention output in the heads' layout
    (B, H, T, 4d), in q's dtype or bfloat16, or as 4 parts (B, T, n); value v (B, T, n) and log_radius (1,) in q's
    dtype. Returns the state (B, T, n, 4), stored component-major."""
    return _Step.apply("quaternion", value, log_radius, _as_heads(mean), _whole(q)).movedim(0, -1)


def sphere_step(x: Tensor | Parts, mean: Tensor | Parts, value: Tensor, log_radius: Tensor) -> Tensor:
    """normalise(exp_x(P_x(h w))) with w = v ⊙ P_x G and h the norm bound over each token: the attention's move on
    unit vectors. x (B, T, n, D) or its D parts; G as ``quaternion_step``'s, (B, H, T, D·d) or D parts; value v
    (B, T, n); log_radius (1,). Returns the state (B, T, n, D), stored component-major."""
    return _Step.apply("sphere", value, log_radius, _as_heads(mean), _whole(x)).movedim(0, -1)


# --------------------------------------------------------------------------- the drifted, gated query/key features
# The drift turns oscillator j at position t by a rotation R_{t,j} that depends on (t, Ω_j) alone: its parts are
# (T, n) tensors, computed once for every batch row. Each kind gives: the rotation's parts from (pos, Ω) and what its
# backward needs; the features f = R x, written in the same operations, in the same order, as the geometry module's
# plain expression (so that the forward is the unfused one's to the bit); and the backward: dx = Rᵀ df, and dΩ through
# dR = Σ_b df ∂f/∂R (only when Ω is learned). The forward's arithmetic on (B, T, n) planes is plain (an FMA would round
# differently); the backward accumulates with addcmul.
def _products(terms: list[tuple[float, Tensor, Tensor]], out: Tensor | None = None) -> Tensor:
    """Σ sign · a · b over the terms (signs ±1), accumulated in place (into ``out``, contiguous, when given)."""
    terms = sorted(terms, key=lambda term: term[0] < 0)  # a positive term first: no negation pass
    (sign, a, b), *rest = terms
    acc = torch.mul(a, b) if out is None else torch.mul(a, b, out=out)
    if sign < 0:
        acc = acc.neg_()
    for sign, a, b in rest:
        acc = acc.addcmul_(a, b, value=sign)
    return acc


# The Hamilton product pq, term by term: component i of pq = Σ sign · p[a] · q[b] over _HAMILTON[i]
_HAMILTON = (((1, 0, 0), (-1, 1, 1), (-1, 2, 2), (-1, 3, 3)),
             ((1, 0, 1), (1, 1, 0), (1, 2, 3), (-1, 3, 2)),
             ((1, 0, 2), (1, 2, 0), (1, 3, 1), (-1, 1, 3)),
             ((1, 0, 3), (1, 3, 0), (1, 1, 2), (-1, 2, 1)))


def _hamilton_accumulated(p: Parts, q: Parts, conj_p: bool = False, conj_q: bool = False,
                          out: Tensor | None = None) -> Parts:
    """(p or conj p)(q or conj q), each component accumulated in place (4 passes, where the plain form takes 7);
    into ``out`` (4, …) when given."""
    def sign(s: int, a: int, b: int) -> float:
        return float(s * (-1 if conj_p and a else 1) * (-1 if conj_q and b else 1))
    return tuple(_products([(sign(s, a, b), p[a], q[b]) for s, a, b in row], None if out is None else out[i])
                 for i, row in enumerate(_HAMILTON))


def _batch_sum(x: Tensor, shape: torch.Size) -> Tensor:
    """x (B, T, n) summed over the rows that broadcasting added to ``shape`` (T, n)."""
    return x.sum_to_size(shape) if x.shape != shape else x


def _quaternion_rotation(pos: Tensor, drift: Tensor) -> tuple[Parts, Parts]:
    """exp(tΩ_j) as 4 parts (T, n), su2.py's ``exp_parts`` of a = t Ω_j; also (a, cos, sinc, sinc') for the backward."""
    a = tuple(pos[:, None] * c for c in drift.unbind(-1))
    cos, sinc, dsinc = cos_sinc_grad(a[0] * a[0] + a[1] * a[1] + a[2] * a[2])
    return (cos, *(sinc * c for c in a)), (*a, sinc, dsinc)


def _quaternion_rotate(r: Parts, x: Parts) -> Parts:
    """r x, as su2.py's ``mul(r, x)`` computes it: (r₀x₀ − r⃗·x⃗, r₀x⃗ + x₀r⃗ + r⃗ × x⃗)."""
    r0, r1, r2, r3 = r
    x0, x1, x2, x3 = x
    real = r0 * x0 - r1 * x1 - r2 * x2 - r3 * x3
    cross = (r2 * x3 - r3 * x2, r3 * x1 - r1 * x3, r1 * x2 - r2 * x1)
    return (real, *(r0 * b + x0 * a + c for a, b, c in zip((r1, r2, r3), (x1, x2, x3), cross, strict=True)))


def _quaternion_rotate_again(r: Parts, x: Parts) -> Parts:
    """r x for the backward, accumulated in place (16 passes where the exact forward takes 28)."""
    return _hamilton_accumulated(r, x)


def _quaternion_rotate_backward(df: Parts, x: Parts, f: Parts, r: Parts, pos: Tensor, aux: Parts,
                                need_drift: bool, out: Tensor) -> Tensor | None:
    """f = r x:  dx = conj(r) df (written into ``out`` (4, B, T, n)),  dr = Σ_b df conj(x), then dΩ
    (``_quaternion_drift``)."""
    _hamilton_accumulated(r, df, conj_p=True, out=out)
    if not need_drift:
        return None
    return _quaternion_drift(tuple(_batch_sum(c, r[0].shape) for c in _hamilton_accumulated(df, x, conj_q=True)),
                             pos, aux)


def _quaternion_drift(dr: Parts, pos: Tensor, aux: Parts) -> Tensor:
    """dΩ from dr (4 parts (T, n)): r = (cos|a|, sinc|a| a) with a = tΩ:
    da = sinc dr⃗ + 2 a (sinc' ⟨dr⃗, a⟩ − sinc/2 dr₀),  dΩ = Σ_t t da."""
    *a, sinc, dsinc = aux
    da2 = 2 * (dsinc * (dr[1] * a[0] + dr[2] * a[1] + dr[3] * a[2]) - sinc / 2 * dr[0])
    return torch.stack([pos @ (sinc * d + da2 * c) for d, c in zip(dr[1:], a, strict=True)], dim=-1)


def _plane_rotation(pos: Tensor, drift: Tensor) -> tuple[Parts, Parts]:
    """R(tΩ_j) as (cos, sin) of each plane's angle t Ω_{j,p}: 2 · D/2 parts (T, n)."""
    out: list[Tensor] = []
    for c in drift.unbind(-1):
        turn = pos[:, None] * c
        out += (torch.cos(turn), torch.sin(turn))
    return tuple(out), ()


def _plane_rotate(r: Parts, x: Parts) -> Parts:
    """R x, as sphere.py's ``rotate_planes`` computes it: each pair (x_{2p}, x_{2p+1}) turned by its angle."""
    out: list[Tensor] = []
    for p in range(len(r) // 2):
        a, b, cos, sin = x[2 * p], x[2 * p + 1], r[2 * p], r[2 * p + 1]
        out += (a * cos - b * sin, a * sin + b * cos)
    return tuple(out)


def _plane_rotate_again(r: Parts, x: Parts) -> Parts:
    """R x for the backward, accumulated in place."""
    out: list[Tensor] = []
    for p in range(len(r) // 2):
        a, b, cos, sin = x[2 * p], x[2 * p + 1], r[2 * p], r[2 * p + 1]
        out += (torch.mul(a, cos).addcmul_(b, sin, value=-1.0), torch.mul(a, sin).addcmul_(b, cos))
    return tuple(out)


def _plane_rotate_backward(df: Parts, x: Parts, f: Parts, r: Parts, pos: Tensor, aux: Parts,
                           need_drift: bool, out: Tensor) -> Tensor | None:
    """f = R x:  dx = Rᵀ df (each pair turned back; written into ``out`` (D, B, T, n)),
    d angle_p = Σ_b (df_{2p+1} f_{2p} − df_{2p} f_{2p+1}),  dΩ = Σ_t t d angle."""
    dangle: list[Tensor] = []
    for p in range(len(r) // 2):
        da, db, cos, sin = df[2 * p], df[2 * p + 1], r[2 * p], r[2 * p + 1]
        torch.mul(da, cos, out=out[2 * p]).addcmul_(db, sin)
        torch.mul(db, cos, out=out[2 * p + 1]).addcmul_(da, sin, value=-1.0)
        if need_drift:
            dangle.append(pos @ _batch_sum(torch.mul(db, f[2 * p]).addcmul_(da, f[2 * p + 1], value=-1.0), cos.shape))
    return torch.stack(dangle, dim=-1) if need_drift else None


def _plane_drift(dangle: Parts, pos: Tensor, aux: Parts) -> Tensor:
    """dΩ = Σ_t t d angle, from d angle (D/2 parts (T, n), in the first D/2 of the D the kernels return)."""
    return torch.stack([pos @ d for d in dangle[:len(dangle) // 2]], dim=-1)


# kind -> (the rotation's parts, R x exactly as the plain forward, R x recomputed for the backward, the backward,
# dΩ from the batch-summed gradient of the rotation's parts, as the compiled kernels give it)
_DRIFTS = {
    "quaternion": (_quaternion_rotation, _quaternion_rotate, _quaternion_rotate_again, _quaternion_rotate_backward,
                   _quaternion_drift),
    "sphere": (_plane_rotation, _plane_rotate, _plane_rotate_again, _plane_rotate_backward, _plane_drift),
}


def _gated(f: Parts, g: Tensor, heads: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """q = g^q f, k = g^k f as (B, T, H, c·d) in ``dtype``: the c planes copied once into the token-major layout
    (B, T, H, c, d), then one product per gate over all c components (``gates.gated_features``' numbers)."""
    b, t, n = f[0].shape
    feat = f[0].new_empty(b, t, heads, len(f), n // heads)
    for i, part in enumerate(f):
        feat[:, :, :, i].copy_(part.view(b, t, heads, -1))
    q, k = (feat * g[:, :, i, :, None, :] for i in range(2))  # g (B, T, 2, H, d)
    return tuple(x.to(dtype).view(b, t, heads, -1) for x in (q, k))


class _QueryKey(torch.autograd.Function):
    @staticmethod
    @_no_autocast
    def forward(ctx: FunctionCtx, x: Tensor, drift: Tensor, pos: Tensor, z: Tensor,  # type: ignore[override]
                tau: Tensor, kind: str, out_dtype: torch.dtype, extra_q: Tensor | None,
                extra_k: Tensor | None) -> tuple[Tensor, Tensor]:
        rotation, rotate, _, _, _ = _DRIFTS[kind]
        b, t, n, c = x.shape
        heads = tau.shape[0]
        r, aux = rotation(pos, drift)
        parts = x.unbind(-1)
        # the compiled kernels: the gates from softplus(z), the rotation, the heads' layout and the dtype in one pass
        bf16 = out_dtype != x.dtype
        compiled = _at_least_fp32(z) == x.dtype and _kernel_dtype(out_dtype, x.dtype) and _compiled(parts)
        width = c * (n // heads)
        room = 0 if extra_q is None or extra_k is None else extra_q.shape[-1]
        if compiled:  # the gates made and the extra features written in the same pass
            sp, inv_mean = _softplus_means(z, heads)
            scale = None  # the kernels multiply 1/mean by τ as they go
            extras = [e.to(out_dtype).reshape(heads, t, room) if room else x.new_zeros(heads, t, 0, dtype=out_dtype)
                      for e in (extra_q, extra_k)]
            q, key = native.features_forward(kind, list(parts), list(r), sp.view(b * t, 2 * n),
                                             inv_mean.view(b * t, 2 * heads), tau.to(x.dtype), *extras, heads, t, bf16,
                                             width + room)
        else:
            g, scale, inv_mean = _gates_forward(z, tau)  # (B, T, 2, H, d), at least float32
            q, key = with_extra(*(y.transpose(1, 2) for y in _gated(rotate(r, parts), g, heads, out_dtype)),
                                None if room == 0 else (extra_q, extra_k))
        # the features and the gates are recomputed in the backward: only the inputs, 1/mean (B, T, 2, H, 1), the
        # rotation's (T, n) parts and (outside the kernels) scale are kept
        ctx.save_for_backward(x, pos, z, tau, scale, inv_mean, *r, *aux)
        ctx.kind, ctx.nrot, ctx.compiled, ctx.extra = kind, len(r), compiled, (width, room)
        return q, key

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad_q: Tensor, grad_k: Tensor) -> tuple[Tensor | None, ...]:
        _, _, rotate, rotate_backward, drift_grad = _DRIFTS[ctx.kind]
        x, pos, z, tau, scale, inv_mean, *rest = ctx.saved_tensors
        r, aux = rest[:ctx.nrot], rest[ctx.nrot:]
        b, t, n, c = x.shape
        heads = tau.shape[0]
        parts = x.unbind(-1)
        width, room = ctx.extra  # the extra features' gradients: their columns, summed over the batch
        extras = [grad[..., width:].sum(0, keepdim=True) if room and ctx.needs_input_grad[i] else None
                  for i, grad in ((7, grad_q), (8, grad_k))]
        if ctx.compiled:  # the gradients read where they are (bfloat16 under autocast, the extra columns skipped)
            if grad_q.dtype != grad_k.dtype or grad_q.dtype not in (x.dtype, torch.bfloat16):
                grad_q, grad_k = grad_q.to(x.dtype), grad_k.to(x.dtype)
            zs = z.to(x.dtype)
            need_drift, need_tau = ctx.needs_input_grad[1], ctx.needs_input_grad[4]
            dx, grad_sp, tau_dot, dr = native.features_backward(ctx.kind, grad_q, grad_k, list(parts), list(r),
                                                                F.softplus(zs).view(b * t, 2 * n),
                                                                inv_mean.view(b * t, 2 * heads), tau.to(x.dtype), heads,
                                                                t, need_drift)
            grad_drift = drift_grad(dr.view(-1, b, t, n).sum(1).unbind(0), pos, aux) if need_drift else None
            grad_z = grad_sp.view(z.shape).mul_(torch.sigmoid(zs)).to(z.dtype)  # softplus' = sigmoid
            grad_tau = (tau_dot.sum(0) / tau).to(tau.dtype) if need_tau else None  # g^q is linear in τ
            return dx.view(c, b, t, n).movedim(0, -1), grad_drift, None, grad_z, grad_tau, None, None, *extras
        # g recomputed from z exactly as the forward computed it (softplus, times the saved scale)
        g = F.softplus(z.to(scale.dtype)).view(b, t, 2, heads, -1).mul_(scale)
        f = rotate(r, parts)
        rows = g.view(b, t, 2, n)  # g^q, g^k as (B, T, n) rows
        # dq and dk as whole rows, in one buffer (B, T, 2, c, n) in x's dtype: one copy each
        grads = grad_q.new_empty(b, t, 2, c, heads, n // heads, dtype=x.dtype)
        for i, grad in enumerate((grad_q, grad_k)):
            grads[:, :, i].copy_(grad[..., :width].transpose(1, 2).unflatten(-1, (c, -1)).transpose(2, 3))
        grads = grads.view(b, t, 2, c, n)
        # q = g^q f, k = g^k f per component:  dg = Σ_c d(q|k)_c f_c (both gates at once),  df_c = g^q dq_c + g^k dk_c
        grad_g = _products([(1.0, grads[:, :, :, i], f[i].unsqueeze(2)) for i in range(c)]).view(g.shape)
        df = tuple(grads[:, :, 0, i].mul_(rows[:, :, 0]).addcmul_(grads[:, :, 1, i], rows[:, :, 1]) for i in range(c))
        dx = x.new_empty(c, b, t, n)  # component-major, as the states are stored
        grad_drift = rotate_backward(df, parts, f, r, pos, aux, ctx.needs_input_grad[1], dx)
        grad_z, grad_tau = _gates_backward(grad_g, g, scale, inv_mean, z, tau, ctx.needs_input_grad[4])
        return dx.movedim(0, -1), grad_drift, None, grad_z, grad_tau, None, None, *extras


def quaternion_query_key(x: Tensor, drift: Tensor, pos: Tensor, z: Tensor, tau: Tensor, out_dtype: torch.dtype,
                         extra: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
    """SU(2)'s gated, drifted query and key features q = τ g^q ⊙ exp(tΩ) x_t, k = g^k ⊙ exp(tΩ) x_t, (B, H, T, 4d)
    each in ``out_dtype``, component-major within a head (``to_heads``' layout), then the ``extra`` query and key
    features (1, H, T, e) of every batch row, if given (the layer's clocks).

    x (B, T, n, 4) unit quaternions (any layout); drift Ω (n, 3) and pos (T,) in x's dtype; z (B, T, 2n) the gate
    logits (query half, then key half); tau (H,)."""
    return _QueryKey.apply(x, drift, pos, z, tau, "quaternion", out_dtype, *(extra or (None, None)))


def sphere_query_key(x: Tensor, drift: Tensor, pos: Tensor, z: Tensor, tau: Tensor, out_dtype: torch.dtype,
                     extra: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
    """The sphere's q = τ g^q ⊙ R(tΩ) x_t, k = g^k ⊙ R(tΩ) x_t, as ``quaternion_query_key``'s: x (B, T, n, D) unit
    vectors; drift Ω (n, D/2), one angle per token for each coordinate plane (x_{2p}, x_{2p+1})."""
    return _QueryKey.apply(x, drift, pos, z, tau, "sphere", out_dtype, *(extra or (None, None)))
