"""Fast primitives on the torus T^k = R^k / 2πZ^k: the lift, the tangent projection and the norm bound.

Each is the fast form of a formula written out literally in ``layers/naive.py`` (and tested against it).
Every function here is elementwise or reduces over the last (coordinate) axis, so it works for any leading shape.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

TWO_PI = 2.0 * math.pi
_SMALL = 2**16  # elements; below this, launching operators costs more than copying the halves (measured on CPU)


def lift(theta: Tensor) -> Tensor:
    """ψ(θ) = (cos θ, sin θ): the embedding T^k → R^{2k}.

    theta: (..., k) angles  ->  (..., 2k), cosines first, then sines.
    In eager mode hand-fused (``_Lift``): cos and sin are written straight into the two
    halves of the output, and the backward dθ = cos θ · g_sin − sin θ · g_cos reuses them
    instead of evaluating sin and cos again (once differentiable: no double backward).
    Under torch.compile the plain expression is used: the compiler fuses it anyway, and
    ``out=`` into a slice would break its graph. So is it for small inputs without a graph (a
    cached decoding step's one token): three operators cost less to launch than the halves' five.
    """
    recording = theta.requires_grad and torch.is_grad_enabled()
    if torch.compiler.is_compiling() or not theta.is_floating_point() or (not recording and theta.numel() <= _SMALL):
        return torch.cat((torch.cos(theta), torch.sin(theta)), dim=-1)
    if recording:
        return _Lift.apply(theta)
    return _lift_into_halves(theta)  # no graph to record: skip the Function's Python overhead


def _lift_into_halves(theta: Tensor) -> Tensor:
    k = theta.shape[-1]
    out = theta.new_empty(*theta.shape[:-1], 2 * k)
    torch.cos(theta, out=out[..., :k])
    torch.sin(theta, out=out[..., k:])
    return out


class _Lift(torch.autograd.Function):
    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, theta: Tensor) -> Tensor:
        out = _lift_into_halves(theta)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: Tensor) -> Tensor:
        (out,) = ctx.saved_tensors
        cos, sin = out.chunk(2, dim=-1)
        grad_cos, grad_sin = grad.chunk(2, dim=-1)
        return torch.addcmul(cos * grad_sin, sin, grad_cos, value=-1.0)


def wrap(theta: Tensor) -> Tensor:
    """The principal representative of θ in [-π, π) (same point of the torus)."""
    return torch.remainder(theta + math.pi, TWO_PI) - math.pi


def tangent_projection(cos_theta: Tensor, sin_theta: Tensor, re_g: Tensor, im_g: Tensor) -> Tensor:
    """a = Im(conj(e^{iθ}) G) from cos θ and sin θ (already computed for the lift), in one pass: the fast form of
    ``naive.tangent_increment``. All inputs (..., k)."""
    return torch.addcmul(cos_theta * im_g, sin_theta, re_g, value=-1.0)


def tanh_ratio(sq_norm: Tensor) -> Tensor:
    """tanh(n)/n as a function of s = n², continuous and with finite gradient at s = 0.

    Below n = 1e-6 the ratio is held at its value there, 1 − 3.3e-13 (tanh(n)/n = 1 − n²/3 + …),
    rather than switching to a series: one clamp instead of two ``where`` branches keeps the bound
    at a handful of elementwise operations (cached decoding pays per operation, not per element).
    In float16, where 1e-12 underflows to 0, the floor is the smallest normal number instead.
    """
    n = sq_norm.clamp_min(ratio_floor(sq_norm.dtype)).sqrt()
    return torch.tanh(n) / n


def ratio_floor(dtype: torch.dtype) -> float:
    """The s below which ``tanh_ratio`` is held constant: 1e-12, or the dtype's smallest normal number."""
    return max(1e-12, torch.finfo(dtype).tiny)


def bound_norm(x: Tensor, radius: Tensor) -> Tensor:
    """bound(x) = r · tanh(‖x‖) · x/‖x‖, norm over the last axis (one token's increment).

    Small increments are scaled by r and keep their proportions; large ones are squashed
    toward norm r. ‖bound(x)‖ < r always, the direction of x is kept, and the function is
    smooth at x = 0 (where it is r·x to first order). x: (..., k); radius broadcasts.
    """
    return x * norm_factor(torch.linalg.vecdot(x, x).unsqueeze(-1), radius)  # one pass over x


def norm_factor(sq_norm: Tensor, radius: Tensor) -> Tensor:
    """The norm bound as a rescaling, bound(x) = x · r tanh(‖x‖)/‖x‖, from s = ‖x‖² (..., 1): cheap, and the caller
    may hold x in any layout."""
    return radius * tanh_ratio(sq_norm)


def norm_factor_backward(along: Tensor, sq_norm: Tensor, log_radius: Tensor,
                         need_radius: bool) -> tuple[Tensor, Tensor | None]:
    """(dL/ds, dL/dlog r) of ``norm_factor(s, exp(log r))`` per token, given dL/dh (..., 1). The operations are
    those autograd runs for it, in its order, so the numbers are its own to the bit; written out, because an autograd
    call inside a backward breaks torch.compile's graph. h = r q with q = tanh(n)/n and n = √max(s, floor):
    dq = r dh, dn = tanh'·dq/n − dq·q/n, ds = dn/(2n) above the floor (the clamp makes s constant below it)."""
    floor = ratio_floor(sq_norm.dtype)
    radius = log_radius.exp()
    r = radius.to(sq_norm.dtype)
    n = sq_norm.clamp_min(floor).sqrt()
    t = torch.tanh(n)
    grad_q = along * r
    grad_n = torch.ops.aten.tanh_backward(grad_q / n, t) + (-grad_q) * ((t / n) / n)
    grad_s = torch.where(sq_norm >= floor, grad_n / (2 * n), 0.0)
    if not need_radius:
        return grad_s, None
    return grad_s, (along * (t / n)).sum_to_size(r.shape).to(log_radius.dtype) * radius


def bound_elementwise(x: Tensor, radius: Tensor) -> Tensor:
    """bound(x) = r ⊙ tanh(x / r): each coordinate clipped smoothly to (-r, r)."""
    return radius * torch.tanh(x / radius)
