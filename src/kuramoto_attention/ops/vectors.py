"""Hand-fused moves of vector-valued oscillators (SU(2)'s unit quaternions, the sphere's unit vectors).

A state is given as its c components, c tensors (..., n) (``layers/groups/planes.py``'s ``Parts``). A move by a
tangent step written as plain operations materialises a dozen (..., n) tensors forward and as many again in
autograd's backward; each function here computes the whole move in one forward and writes its backward out, saving
only the inputs and a few per-oscillator scalars.

    quaternion_move:  y = normalise(q exp(w))                           q unit quaternion, w ∈ R³ (pure quaternion)
    sphere_move:      y = normalise(cos|u| x + sinc|u| u),  u = w − ⟨w, x⟩ x      x unit vector of R^D, w ∈ R^D
    quaternion_step:  the move by h(‖w‖²) w,  w = v ⊙ Im(conj(q) G)      G the attention output, v the value gate
    sphere_step:      the move by h(‖w‖²) w,  w = v ⊙ P_x G              h the norm bound, one factor per token

with exp(w) = (cos|w|, sinc|w| w), sinc a = sin(a)/a, and normalise(m) = m/|m| (which only undoes rounding).
The plain expressions (the geometry modules' ``exp_move``) are what the tests compare these with.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx, once_differentiable

from kuramoto_attention.ops.torus import norm_factor

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
# A move: m = the unnormalised moved state from (x, w), and its backward given dL/dm. A tangent part: ξ from (x, G),
# and its backward given dL/dξ. Each backward returns (dx, dw) or (dx, dG) as parts.
def _quaternion_move(q: Parts, w: Parts) -> tuple[Parts, Parts]:
    """m = q exp(w); also what the backward needs: (cos, sinc, sinc')."""
    cos, sinc, dsinc = cos_sinc_grad(dot(w, w))
    return _hamilton(q, (cos, *(sinc * c for c in w))), (cos, sinc, dsinc)


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


def _sphere_move(x: Parts, w: Parts) -> tuple[Parts, Parts]:
    """m = cos|u| x + sinc|u| u, u = P_x w; also (⟨w, x⟩, cos, sinc, sinc')."""
    u, along = _project(x, w)
    cos, sinc, dsinc = cos_sinc_grad(dot(u, u))
    return tuple(cos * e + sinc * c for e, c in zip(x, u, strict=True)), (along, cos, sinc, dsinc)


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


# kind -> (move, its backward, tangent part, its backward)
_KINDS = {
    "quaternion": (_quaternion_move, _quaternion_move_backward, _quaternion_tangent, _quaternion_tangent_backward),
    "sphere": (_sphere_move, _sphere_move_backward, _sphere_tangent, _sphere_tangent_backward),
}


class _Move(torch.autograd.Function):
    @staticmethod
    def forward(ctx: FunctionCtx, kind: str, dim: int, *xw: Tensor) -> tuple[Tensor, ...]:  # type: ignore[override]
        x, w = xw[:dim], xw[dim:]
        m, aux = _KINDS[kind][0](x, w)
        y, norm = _normalise(m)
        ctx.kind, ctx.dim, ctx.naux = kind, dim, len(aux)
        ctx.save_for_backward(*xw, *aux, norm, *y)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, *grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        saved = ctx.saved_tensors
        dim, split = ctx.dim, len(saved) - ctx.dim - 1 - ctx.naux
        x, w, aux = saved[:dim], saved[dim:split], saved[split:split + ctx.naux]
        norm, y = saved[split + ctx.naux], saved[split + ctx.naux + 1:]
        dx, dw = _KINDS[ctx.kind][1](_normalise_backward(grad, y, norm), x, w, aux)
        return (None, None, *dx, *dw)


def quaternion_move(q: Parts, w: Parts) -> Parts:
    """normalise(q exp(w)): unit quaternions q (4 parts) moved by pure quaternions w (3 parts)."""
    return _Move.apply("quaternion", 4, *q, *w)


def sphere_move(x: Parts, w: Parts) -> Parts:
    """normalise(exp_x(P_x w)): unit vectors x (D parts) moved along the tangent part of w (D parts)."""
    return _Move.apply("sphere", len(x), *x, *w)


def _bound_backward(along: Tensor, sq: Tensor, log_radius: Tensor, need_radius: bool) -> tuple[Tensor, Tensor | None]:
    """(dL/ds, dL/dlog r) of h = r tanh(√s)/√s per token, given dL/dh: this (B, T, 1) chain is left to autograd."""
    with torch.enable_grad():
        s = sq.detach().requires_grad_()
        lr = log_radius.detach().requires_grad_(need_radius)
        h = norm_factor(s, lr.exp().to(s.dtype))
        grads = torch.autograd.grad(h, (s, lr) if need_radius else (s,), grad_outputs=along)
    return grads[0], grads[1] if need_radius else None


class _Step(torch.autograd.Function):
    @staticmethod
    def forward(ctx: FunctionCtx, kind: str, dim: int, value: Tensor, log_radius: Tensor,  # type: ignore[override]
                *xg: Tensor) -> tuple[Tensor, ...]:
        move, _, tangent, _ = _KINDS[kind]
        x, g = xg[:dim], xg[dim:]
        xi = tangent(x, g)
        w = tuple(value * c for c in xi)
        sq = dot(w, w).sum(-1, keepdim=True)  # one norm per token, over all its oscillators
        h = norm_factor(sq, log_radius.exp().to(sq.dtype))
        m, aux = move(x, tuple(h * c for c in w))
        y, norm = _normalise(m)
        ctx.kind, ctx.dim, ctx.naux = kind, dim, len(aux)
        ctx.save_for_backward(value, log_radius, sq, h, norm, *xg, *aux, *y)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, *grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        _, move_backward, tangent, tangent_backward = _KINDS[ctx.kind]
        value, log_radius, sq, h, norm, *rest = ctx.saved_tensors
        dim = ctx.dim
        x, g, aux, y = rest[:dim], rest[dim:2 * dim], rest[2 * dim:2 * dim + ctx.naux], rest[2 * dim + ctx.naux:]
        xi = tangent(x, g)  # recomputed: cheaper than keeping it
        w = tuple(value * c for c in xi)
        dx, dstep = move_backward(_normalise_backward(grad, y, norm), x, tuple(h * c for c in w), aux)
        # step = h(‖w‖²) w:  dw = h dstep + 2 w dL/ds,  dL/dh = Σ ⟨dstep, w⟩ over the token
        ds, grad_radius = _bound_backward(dot(dstep, w).sum(-1, keepdim=True), sq, log_radius,
                                          ctx.needs_input_grad[3])
        dw = tuple(torch.addcmul(h * d, c, 2 * ds) for d, c in zip(dstep, w, strict=True))
        grad_value = dot(dw, xi) if ctx.needs_input_grad[2] else None
        dx_xi, dg = tangent_backward(tuple(value * d for d in dw), x, g)
        return (None, None, grad_value, grad_radius, *(a + b for a, b in zip(dx, dx_xi, strict=True)), *dg)


def quaternion_step(q: Parts, mean: Parts, value: Tensor, log_radius: Tensor) -> Parts:
    """normalise(q exp(h w)) with w = v ⊙ Im(conj(q) G) and h = r tanh(‖w‖)/‖w‖ over each token: the attention's move
    on unit quaternions. q, G 4 parts (B, T, n); value v (B, T, n); log_radius (1,); all in one dtype."""
    return _Step.apply("quaternion", 4, value, log_radius, *q, *mean)


def sphere_step(x: Parts, mean: Parts, value: Tensor, log_radius: Tensor) -> Parts:
    """normalise(exp_x(P_x(h w))) with w = v ⊙ P_x G and h the norm bound over each token: the attention's move on
    unit vectors. x, G D parts (B, T, n); value v (B, T, n); log_radius (1,); all in one dtype."""
    return _Step.apply("sphere", len(x), value, log_radius, *x, *mean)
