"""Hand-fused elementwise stretches of Kuramoto attention's fused path (eager mode; the query and key in compiled
training too).

Eager PyTorch pays one pass over memory per operator, and autograd's generic backward of a
chain of views, casts and broadcasts adds zero-fills, copies and reductions of its own: in a
training step of ``ka-1m`` these, not the matmuls, were most of the time (BENCHMARKS.md). Each
function here computes one stretch of the layer with its backward written out, in the fewest
passes over (B, T, k) tensors. The math is the layer's (layer.py); the plain expressions there
are what ``torch.compile`` traces (it fuses them itself; the query and key where ``fused_query_key`` says), what
runs without autograd (decoding one token per call pays per operator call, where these save nothing), and what the
tests compare these with.

On the CPU the query and key's products with their gates, cast into the heads' layout, and the backward of those
products are one pass each of ``csrc/torus.cpp`` (``native.torus_features_*``): the same numbers to the bit. The
cosines, sines and gates around them stay PyTorch's operators, whose exact results a kernel of ours could not repeat.

Shapes: θ, φ (B, T, k) with k = H·d, seen per head as (B, T, H, d) views (no transposes: the
attention takes q, k and returns G as (B, H, T, 2d) views of (B, T, H, 2d) memory).

    query_key:  φ = θ + ω t;  q = τ g^q ⊙ ψ(φ + β),  k = g^k ⊙ ψ(φ)
                g = softplus(z) / mean_head(softplus(z))        (z = W ψ(θ) + b, the gate logits)
    gated_step: a = cos θ · Im G − sin θ · Re G;  x = v ⊙ a;  θ' = θ + h(‖x‖²) x
    bounded_step:                                              θ' = θ + h(‖x‖²) x
                h(s) = r · tanh(√s)/√s (the norm bound of ``torus.bound_norm``)
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import FunctionCtx, once_differentiable

from kuramoto_attention.ops import native
from kuramoto_attention.ops.operators import whole_operator
from kuramoto_attention.ops.torus import norm_factor, norm_factor_backward


def fused_applies() -> bool:
    """Whether ``gated_step`` and ``bounded_step`` pay off: eager mode (torch.compile fuses the plain expressions
    itself) with autograd recording (without it, the plain expressions run with fewer Python calls)."""
    return torch.is_grad_enabled() and not torch.compiler.is_compiling()


def fused_query_key(theta: Tensor, heads: int) -> bool:
    """Whether ``query_key`` pays off: in eager training, and in compiled training on the CPU where a head's d is not
    a multiple of 16 floats (an AVX-512 vector). There inductor's fusion of the plain expressions with their
    neighbours indexes the heads' layout element by element, unvectorised, evaluating cos and sin again for each
    output, and the operators, called whole, are faster; where d is a multiple its loops vectorise and beat them
    (``python -m benchmarks.query_key_ab`` measures both). On CUDA inductor writes its own kernels."""
    if not torch.is_grad_enabled():
        return False
    if not torch.compiler.is_compiling():
        return True
    return operators_when_compiled(theta.device.type, theta.shape[-1] // heads)


def operators_when_compiled(device_type: str, head_d: int) -> bool:
    """``fused_query_key``'s rule under torch.compile: the CPU, a head's d not a multiple of 16."""
    return device_type == "cpu" and head_d % 16 != 0


def _no_autocast(forward: Callable[..., Any]) -> Callable[..., Any]:
    """Run a Function's forward with autocast off: its dtypes are chosen explicitly (autocast would, e.g.,
    run ``linalg.vecdot`` in bf16 and so round the bound's norm)."""

    @functools.wraps(forward)
    def wrapped(ctx: Any, *args: Any) -> Any:
        with torch.autocast(args[0].device.type, enabled=False):
            return forward(ctx, *args)

    return wrapped


def _softplus_means(z: Tensor, heads: int) -> tuple[Tensor, Tensor]:
    """sp = softplus(z) (B, T, 2, H, d), at least float32, from logits z (B, T, 2k), and 1/mean of each head's d
    (B, T, 2, H, 1)."""
    b, t, _ = z.shape
    sp = F.softplus(z.to(_at_least_fp32(z))).view(b, t, 2, heads, -1)
    return sp, sp.mean(dim=-1, keepdim=True).reciprocal_()


def _gates_forward(z: Tensor, q_scale: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """g (B, T, 2, H, d), at least float32, from logits z (B, T, 2k): softplus over its head mean, g^q scaled by
    ``q_scale`` (H,). Also the per-(token, head) scale (B, T, 2, H, 1) and 1/mean."""
    heads = q_scale.shape[0]
    sp, inv_mean = _softplus_means(z, heads)
    q_scale = q_scale.to(sp.dtype)
    scale = inv_mean * torch.stack((q_scale, torch.ones_like(q_scale))).view(2, heads, 1)
    return sp.mul_(scale), scale, inv_mean


def _at_least_fp32(x: Tensor) -> torch.dtype:
    return torch.promote_types(x.dtype, torch.float32)


def _features(parts: tuple[Tensor, ...], gate: Tensor, heads: int, dtype: torch.dtype) -> Tensor:
    """(B, T, H, c·d) in ``dtype``: per head (gate ⊙ parts[0], …, gate ⊙ parts[c − 1]), each part (B, T, k).

    The products are taken in the inputs' dtype on whole rows and then copied (and cast) into the
    head-interleaved layout: on the CPU an elementwise op whose output dtype differs from its inputs'
    is not vectorised, and these three passes are faster than one such op."""
    b, t, k = parts[0].shape
    out = parts[0].new_empty(b, t, heads, len(parts), k // heads, dtype=dtype)
    view = (b, t, heads, k // heads)
    for i, part in enumerate(parts):
        out[:, :, :, i].copy_((part * gate).view(view))
    return out.view(b, t, heads, -1)


def _halves(grad: Tensor, dtype: torch.dtype, parts: int = 2) -> Tensor:
    """(B, H, T, c·d), any layout  ->  (B, T, c, k) in ``dtype`` (c = ``parts``): the cosine and the sine halves of
    every head (the c components of a vector feature) as whole rows (the inverse arrangement of ``_features``), in one
    copy: on the CPU an elementwise op on d-long runs is slower than on whole rows, and the backward has many."""
    b, heads, t, width = grad.shape
    out = grad.new_empty(b, t, parts, heads, width // parts, dtype=dtype)
    out.copy_(grad.transpose(1, 2).unflatten(-1, (parts, width // parts)).transpose(2, 3))
    return out.view(b, t, parts, -1)


def _gates_backward(grad_g: Tensor, g: Tensor, scale: Tensor, inv_mean: Tensor, z: Tensor, tau: Tensor,
                    need_tau: bool) -> tuple[Tensor, Tensor | None]:
    """(dL/dz, dL/dτ) from dL/dg (B, T, 2, H, d), overwritten; ``_gates_forward``'s g, scale, 1/mean and z."""
    heads, d = tau.shape[0], g.shape[-1]
    # g = scale · sp with scale = c/mean(sp):  dsp = scale ⊙ dg − mean(dg ⊙ g) / mean(sp)
    dot = (grad_g * g).mean(dim=-1, keepdim=True)  # (B, T, 2, H, 1)
    grad_tau = dot[:, :, 0].sum(dim=(0, 1)).view(heads) * d / tau if need_tau else None  # g^q is linear in τ
    grad_sp = grad_g.mul_(scale).sub_(dot * inv_mean)
    grad_z = grad_sp.view(*z.shape).mul_(torch.sigmoid(z.to(grad_sp.dtype))).to(z.dtype)
    return grad_z, grad_tau


# set while an operator runs on fake tensors (torch.compile finding its outputs' shapes): no kernel reads their data
_FAKE = contextvars.ContextVar("kuramoto_fake", default=False)


def _on_fake_tensors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` as an operator's fake implementation: the Python products, the native kernels' shapes and strides."""

    @functools.wraps(fn)
    def fake(*args: Any) -> Any:
        token = _FAKE.set(True)
        try:
            return fn(*args)
        finally:
            _FAKE.reset(token)

    return fake


def _native_products(dtype: torch.dtype, g: Tensor, *rows: Tensor) -> bool:
    """Whether ``native``'s torus kernels compute the products of the query and key with their gates g: real,
    contiguous, non-empty CPU rows of g's dtype, float32 or float64, the features (``dtype``) in that dtype or
    bfloat16 (float32 rows), and the kernels built."""
    if _FAKE.get() or g.numel() == 0 or not all(r.dtype == g.dtype and r.is_contiguous() for r in (g, *rows)):
        return False
    return (dtype == g.dtype or (dtype == torch.bfloat16 and g.dtype == torch.float32)) and native.available(g)


def _query_key_forward(theta: Tensor, omega: Tensor, pos: Tensor, lag: Tensor | None, z: Tensor, tau: Tensor,
                       out_dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor,
                                                        Tensor, Tensor]:
    """(q, k) as ``query_key`` returns them, then what the backward reads: cos φ, sin φ, cos and sin of φ + β (empty
    without a lag), g, scale, 1/mean."""
    b, t, k = theta.shape
    heads = tau.shape[0]
    # autocast reaches inside an operator's body; the dtypes here are chosen explicitly
    with torch.autocast(theta.device.type, enabled=False):
        phi = theta + omega * pos[:, None]  # (B, T, k)
        cos, sin = torch.cos(phi), torch.sin(phi)
        if lag is not None:
            phi_q = phi.add_(lag)  # phi itself is not needed again
            cos_q, sin_q = torch.cos(phi_q), torch.sin(phi_q)
        else:
            cos_q, sin_q = cos, sin
        g, scale, inv_mean = _gates_forward(z, tau)
        if _native_products(out_dtype, g, cos, sin, cos_q, sin_q):  # the products below in one pass
            q, key = native.torus_features_forward(*(x.view(b * t, k) for x in (cos_q, sin_q, cos, sin)),
                                                   g.view(b * t, 2, k), heads, t, out_dtype)
        else:
            rows = g.view(b, t, 2, k)  # g^q, g^k as (B, T, k) rows
            q = _features((cos_q, sin_q), rows[:, :, 0], heads, out_dtype)
            key = _features((cos, sin), rows[:, :, 1], heads, out_dtype)
    if lag is None:  # an operator's outputs may not be one another
        cos_q, sin_q = cos.new_empty(0), sin.new_empty(0)
    return q.transpose(1, 2), key.transpose(1, 2), cos, sin, cos_q, sin_q, g, scale, inv_mean


def _products_backward(grad_q: Tensor, grad_k: Tensor, cos: Tensor, sin: Tensor, cos_q: Tensor, sin_q: Tensor,
                       g: Tensor) -> tuple[Tensor, Tensor, list[Tensor]]:
    """(dL/dg, dL/dφ, [the query's dL/dφ, the key's]) of q = g^q ψ(φ + β), k = g^k ψ(φ) from dL/dq and dL/dk: what
    ``native.torus_features_backward`` computes in one pass."""
    b, t, k = cos.shape
    rows = g.view(b, t, 2, k)
    grad_g = torch.empty_like(g)
    grad_rows = grad_g.view(b, t, 2, k)
    phi_grads = []
    for i, (grad, c, s) in enumerate(((grad_q, cos_q, sin_q), (grad_k, cos, sin))):
        dc, ds = _halves(grad, g.dtype).unbind(2)  # (B, T, k) each, our own copy
        torch.mul(dc, c, out=grad_rows[:, :, i]).addcmul_(ds, s)  # Re w
        phi_grads.append(ds.mul_(c).addcmul_(dc, s, value=-1.0).mul_(rows[:, :, i]))  # g Im w
    return grad_g, phi_grads[0] + phi_grads[1], phi_grads


def _query_key_backward(grad_q: Tensor, grad_k: Tensor, cos: Tensor, sin: Tensor, cos_q: Tensor, sin_q: Tensor,
                        g: Tensor, scale: Tensor, inv_mean: Tensor, z: Tensor, pos: Tensor, tau: Tensor,
                        lag_shape: list[int] | None, need_omega: bool, need_lag: bool,
                        need_tau: bool) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(dL/dθ, dL/dω, dL/dβ, dL/dz, dL/dτ) from dL/dq and dL/dk (``lag_shape``: β's, None without a lag); those not
    needed (no lag, ``need_*`` false) empty."""
    b, t, k = cos.shape
    if lag_shape is None:
        cos_q, sin_q = cos, sin
    need_lag = need_lag and lag_shape is not None
    with torch.autocast(cos.device.type, enabled=False):  # Σ t · dφ below is a matmul
        # q = g e^{iφ} as a complex number per coordinate: w = e^{−iφ} dq gives dg = Re w and dφ = g Im w
        rows_last = grad_q.stride(-1) == grad_k.stride(-1) == 1
        if rows_last and _native_products(grad_q.dtype, g, cos, sin, cos_q, sin_q):
            rows = (x.view(b * t, k) for x in (cos, sin, cos_q, sin_q))
            gates = g.view(b * t, 2, k)
            grad_g, grad_phi, grad_phi_q = native.torus_features_backward(grad_q, grad_k, *rows, gates, need_lag)
            grad_g, grad_phi = grad_g.view(g.shape), grad_phi.view(b, t, k)
            phi_grads = [grad_phi_q.view(b, t, k) if need_lag else grad_phi_q]
        else:
            grad_g, grad_phi, phi_grads = _products_backward(grad_q, grad_k, cos, sin, cos_q, sin_q, g)
        # contiguous: β of the full (B, T, k) shape would otherwise get a view whose strides depend on the path
        grad_lag = phi_grads[0].sum_to_size(lag_shape).contiguous() if need_lag else cos.new_empty(0)  # type: ignore[arg-type]
        grad_omega = pos @ grad_phi.sum(0) if need_omega else cos.new_empty(0)  # Σ_{b,t} t · dφ
        grad_z, grad_tau = _gates_backward(grad_g, g, scale, inv_mean, z, tau, need_tau)
    return grad_phi, grad_omega, grad_lag, grad_z, cos.new_empty(0) if grad_tau is None else grad_tau


# operators that torch.compile calls whole where its own loops are slower (``fused_query_key``)
query_key_forward = whole_operator("query_key_forward", _query_key_forward, _on_fake_tensors(_query_key_forward))
query_key_backward = whole_operator("query_key_backward", _query_key_backward, _on_fake_tensors(_query_key_backward))


class _QueryKey(torch.autograd.Function):
    @staticmethod
    def forward(ctx: FunctionCtx, theta: Tensor, omega: Tensor, pos: Tensor, lag: Tensor | None,
                z: Tensor, tau: Tensor, out_dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        q, key, *saved = query_key_forward(theta, omega, pos, lag, z, tau, out_dtype)
        ctx.save_for_backward(*saved, z, pos, tau)
        ctx.lag_shape = None if lag is None else list(lag.shape)
        return q, key

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad_q: Tensor, grad_k: Tensor) -> tuple[Tensor | None, ...]:
        need = ctx.needs_input_grad
        grads = query_key_backward(grad_q, grad_k, *ctx.saved_tensors, ctx.lag_shape, need[1], need[3], need[5])
        grad_phi, grad_omega, grad_lag, grad_z, grad_tau = grads
        return (grad_phi, grad_omega if need[1] else None, None, grad_lag if need[3] else None,
                grad_z, grad_tau if need[5] else None, None)


def query_key(theta: Tensor, omega: Tensor, pos: Tensor, lag: Tensor | None, z: Tensor, tau: Tensor,
              out_dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """The attention's gated, drifted query and key features, (B, H, T, 2d) each, in ``out_dtype``.

    theta (B, T, k) float; omega (k,); pos (T,) positions in θ's dtype; lag: β broadcastable to
    (B, T, k), or None; z (B, T, 2k) gate logits (query half, then key half); tau (H,).
    """
    return _QueryKey.apply(theta, omega, pos, lag, z, tau, out_dtype)


def _bound_factor(sq_norm: Tensor, log_radius: Tensor) -> Tensor:
    """h(s) = r · tanh(√s)/√s per token, (B, T, 1) in s's dtype."""
    return norm_factor(sq_norm, log_radius.exp().to(sq_norm.dtype))


def _bound_backward(grad: Tensor, x: Tensor, sq_norm: Tensor, log_radius: Tensor,
                    need_radius: bool) -> tuple[Tensor, Tensor | None]:
    """(dL/dx, dL/dlog r) of θ' = θ + h(‖x‖²) x: dx = h ⊙ dθ' + 2 x (dθ'·x) h'(s)."""
    along = torch.linalg.vecdot(grad, x).unsqueeze(-1)  # dL/dh per token
    grad_s, grad_radius = norm_factor_backward(along, sq_norm, log_radius, need_radius)
    grad_x = torch.mul(grad, _bound_factor(sq_norm, log_radius)).addcmul_(x, grad_s, value=2.0)
    return grad_x, grad_radius


def _interleave(rows: Tensor, heads: int, dtype: torch.dtype) -> Tensor:
    """(B, T, 2, k) rows  ->  (B, H, T, 2d) in ``dtype``, the layout the attention reads (``_halves``'s inverse)."""
    b, t, _, k = rows.shape
    out = rows.new_empty(b, t, heads, 2, k // heads, dtype=dtype)
    out.copy_(rows.view(b, t, 2, heads, -1).transpose(2, 3))
    return out.view(b, t, heads, -1).transpose(1, 2)


class _GatedStep(torch.autograd.Function):
    @staticmethod
    @_no_autocast
    def forward(ctx: FunctionCtx, theta: Tensor, psi: Tensor, out: Tensor, value: Tensor,
                log_radius: Tensor) -> Tensor:
        # G as whole rows (Re G, Im G) and v in θ's dtype, each converted once (a mixed-dtype op on the CPU
        # converts its operand on every call)
        re_g, im_g = _halves(out, theta.dtype).unbind(2)  # (B, T, k) each
        value_f = value.to(theta.dtype)
        cos, sin = psi.chunk(2, dim=-1)
        a = torch.mul(cos, im_g).addcmul_(sin, re_g, value=-1.0)
        x = a * value_f
        sq = torch.linalg.vecdot(x, x).unsqueeze(-1)
        new = torch.addcmul(theta, x, _bound_factor(sq, log_radius))
        ctx.save_for_backward(psi, re_g, im_g, value_f, a, x, sq, log_radius)
        ctx.out_dtype, ctx.value_dtype, ctx.heads = out.dtype, value.dtype, out.shape[1]
        return new

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad: Tensor) -> tuple[Tensor | None, ...]:
        psi, re_g, im_g, value, a, x, sq, log_radius = ctx.saved_tensors
        grad_x, grad_radius = _bound_backward(grad, x, sq, log_radius, ctx.needs_input_grad[4])
        grad_value = (grad_x * a).to(ctx.value_dtype) if ctx.needs_input_grad[3] else None
        grad_a = grad_x.mul_(value)
        cos, sin = psi.chunk(2, dim=-1)
        # a = cos θ Im G − sin θ Re G:  dIm G = cos θ da,  dRe G = −sin θ da,  dθ = −(sin θ Im G + cos θ Re G) da
        grad_rows = grad_a.new_empty(*grad_a.shape[:-1], 2, grad_a.shape[-1])
        torch.mul(grad_a, sin, out=grad_rows[..., 0, :]).neg_()
        torch.mul(grad_a, cos, out=grad_rows[..., 1, :])
        radial = torch.mul(sin, im_g).addcmul_(cos, re_g)
        grad_theta = torch.addcmul(grad, grad_a, radial, value=-1.0)
        return grad_theta, None, _interleave(grad_rows, ctx.heads, ctx.out_dtype), grad_value, grad_radius


def gated_step(theta: Tensor, psi: Tensor, out: Tensor, value: Tensor, log_radius: Tensor) -> Tensor:
    """θ + bound(v ⊙ a) with a = Im(conj(e^{iθ}) G) and the norm bound, (B, T, k) in θ's dtype.

    theta (B, T, k); psi = ψ(θ) (B, T, 2k) in θ's dtype, read as constants (the gradient through cos θ
    and sin θ is part of θ's); out: G as (B, H, T, 2d) = (Re G, Im G) per head, any float dtype;
    value: v(θ) (B, T, k), any float dtype; log_radius (1,).
    """
    return _GatedStep.apply(theta, psi.detach(), out, value, log_radius)


class _BoundedStep(torch.autograd.Function):
    @staticmethod
    @_no_autocast
    def forward(ctx: FunctionCtx, theta: Tensor, x: Tensor, log_radius: Tensor) -> Tensor:
        xf = x.to(theta.dtype)
        sq = torch.linalg.vecdot(xf, xf).unsqueeze(-1)
        ctx.save_for_backward(xf, sq, log_radius)
        ctx.x_dtype = x.dtype
        return torch.addcmul(theta, xf, _bound_factor(sq, log_radius))

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad: Tensor) -> tuple[Tensor | None, ...]:
        xf, sq, log_radius = ctx.saved_tensors
        grad_x, grad_radius = _bound_backward(grad, xf, sq, log_radius, ctx.needs_input_grad[2])
        return grad, grad_x.to(ctx.x_dtype), grad_radius


def bounded_step(theta: Tensor, x: Tensor, log_radius: Tensor) -> Tensor:
    """θ + bound(x) with the norm bound, in θ's dtype (x may be lower precision)."""
    return _BoundedStep.apply(theta, x, log_radius)
