"""The compiled CPU kernels of ``vectors.py``'s moves, features and layouts (``csrc/vectors.cpp``) and of the torus's
query/key products (``csrc/torus.cpp``), built on first use.

``vectors.py``'s fused Functions written as PyTorch operators make one memory pass per scalar operation per
component; on the CPU the kernels here do each move in one vectorised loop over every token's oscillators. They are
built with ``torch.utils.cpp_extension`` (a C++ compiler and ninja; about a minute, once: torch caches the build) the
first time a float32 or float64 CPU tensor asks for them, and registered as the custom operators ``kuramoto::*`` so
that torch.compile sees them as single nodes. Where they cannot be built, or with ``KURAMOTO_NATIVE=0``, the Python
functions run instead: the same numbers up to rounding, slower (the reason is printed once).

    move_forward(kind, x, w)                    -> y (c, N, n)
    move_backward(kind, dy, x, w)               -> (dx (c, N, n), dw (N, n, tangent) in w's dtype)
    step_forward(kind, x, G, v, log r)          -> (y (c, N, n), ‖w‖² (N, 1), h (N, 1))
    step_backward(kind, dy, x, G, v, log r, ‖w‖², h)  -> (dx (c, N, n), dG, dv (N, n), dL/dlog r (1,))

    lift_forward(x, bf16)                       -> the lift (N, n·c), oscillator-major (what the matmuls read)
    lift_backward(dφ, n, dtype)                 -> dx (c, N, n)
    heads_forward(x, H, T, bf16)                -> the states in the heads' layout (B, H, T, c·d) (the values)
    heads_backward(dv, n, dtype)                -> dx (c, N, n)

    features_forward(kind, x, R, sp, 1/mean, τ, eq, ek, H, T, bf16, W) -> (q, k (B, H, T, W): c·d, then eq / ek)
    features_backward(kind, dq, dk, x, R, sp, 1/mean, τ, H, T, need_drift) -> (dx (c, N, n), dL/dsp (N, 2n),
                                                                            Σ dg^q g^q (N, H), dR (parts, N, n))

    torus_features_forward(cos_q, sin_q, cos, sin, g, H, T, dtype) -> (q, k (B, T, H, 2d))
    torus_features_backward(dq, dk, cos, sin, cos_q, sin_q, g, need_query) -> (dg, dφ, the query's dφ)

(the torus's, called from ``fused.query_key``'s operators, which are already single nodes; rows (B·T, k), g
(B·T, 2, k), the same numbers as the Python body's to the bit)

x, w: lists of c (or tangent) planes of one shape (..., n), N the number of tokens; G the attention output in the
heads' layout (B, H, T, c·d), in x's dtype or bfloat16 (read as stored; dG comes back so); kind "quaternion" or
"sphere"; R the drift's rotation as parts (T, n); sp = softplus(z) of the gate logits (N, 2n: the query's, then the
key's), 1/mean of each head's sp (N, 2H) and τ (H,), in x's dtype (the kernels turn them into the gates as
``fused._gates_forward`` does); eq, ek the extra query and key features (H, T, W − c·d) of every batch row; q, k in
x's dtype or bfloat16, and their gradients read as stored (any strides but the last); dR summed over the batch is the
rotation's gradient.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from types import ModuleType

import torch
from torch import Tensor

ENV = "KURAMOTO_NATIVE"  # "0": never use (or build) the compiled kernels
CSRC = Path(__file__).with_name("csrc")
SOURCE = CSRC / "vectors.cpp"  # the module: the vector geometries' kernels, and it registers torus.cpp's
SOURCES = (SOURCE, CSRC / "torus.cpp")
# the instruction sets the loops are compiled for, by the CPU's capability as torch reads it; the build is named after
# it, so that a cache shared by several machines never hands one a build its CPU cannot run
# (KURAMOTO_FMA: torch's kernels for these are compiled with FMA contraction, which torus.cpp repeats)
_ISA = {"AVX512": ["-mavx512f", "-mavx512dq", "-mavx512vl", "-mavx2", "-mfma", "-DKURAMOTO_FMA"],
        "AVX2": ["-mavx2", "-mfma", "-DKURAMOTO_FMA"]}
_loaded: dict[str, ModuleType | None] = {}


def compile_flags() -> list[str]:
    """The C++ flags the kernels are built with on this CPU."""
    # no errno and no trapping: what lets the compiler vectorise sqrt and compute both sides of a select (no change
    # to any result: the kernels never read errno or floating-point exceptions); -fopenmp: ATen's parallel_for is
    # inlined from its headers, and without it runs on one thread; no contraction into FMAs: the features' forward
    # is then the Python one's to the bit
    return ["-O3", "-fopenmp", "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=off", _headers_digest(),
            *_ISA.get(torch.backends.cpu.get_cpu_capability(), [])]


def _headers_digest() -> str:
    """A define naming the headers' contents, so that an edited header changes the build's flags, and with them the
    build's name in torch's cache, whatever the cache's dependency tracking sees."""
    digest = hashlib.sha1(b"".join(p.read_bytes() for p in sorted(CSRC.glob("*.h")))).hexdigest()[:12]
    return f"-DKURAMOTO_HEADERS={digest}"


def _build() -> ModuleType | None:
    from torch.utils import cpp_extension  # imported here: it pulls in setuptools

    capability = torch.backends.cpu.get_cpu_capability()
    try:
        return cpp_extension.load(f"kuramoto_vectors_{capability.lower()}", [str(p) for p in SOURCES],
                                  extra_cflags=compile_flags(),
                                  extra_ldflags=["-fopenmp"], verbose=False)
    except Exception as exc:  # no compiler, no ninja, a failed build: the Python path still runs
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        print(f"kuramoto-attention: the compiled CPU kernels could not be built ({first}); the vector geometries "
              f"and the torus's query/key run their Python kernels instead (slower; the same numbers, up to rounding "
              f"for the vector geometries). Set {ENV}=0 to skip the build.", file=sys.stderr)
        return None


def _module() -> ModuleType | None:
    if "module" not in _loaded:
        _loaded["module"] = _build()
    return _loaded["module"]


# evaluated eagerly on each torch.compile trace (building the kernels the first time) and baked into the graph,
# unguarded: the build's non-tensor calls would break the graph, and a build cannot change once done
@torch.compiler.assume_constant_result
def _built() -> bool:
    return _module() is not None


def available(like: Tensor) -> bool:
    """Whether the compiled kernels run for tensors like ``like``: a CPU float32 or float64 tensor, kernels that
    built, and ``KURAMOTO_NATIVE`` not 0."""
    if like.device.type != "cpu" or like.dtype not in (torch.float32, torch.float64):
        return False
    return os.environ.get(ENV, "1") != "0" and _built()


def _planes(x: list[Tensor], count: int) -> Tensor:
    n = x[0].shape[-1]
    return x[0].new_empty(count, x[0].numel() // n, n)


@torch.library.custom_op("kuramoto::move_forward", mutates_args=())
def move_forward(kind: str, x: list[Tensor], w: list[Tensor]) -> Tensor:
    return _module().move_forward(kind, x, w)


@move_forward.register_fake
def _(kind: str, x: list[Tensor], w: list[Tensor]) -> Tensor:
    return _planes(x, len(x))


@torch.library.custom_op("kuramoto::move_backward", mutates_args=())
def move_backward(kind: str, grad: Tensor, x: list[Tensor], w: list[Tensor]) -> tuple[Tensor, Tensor]:
    dx, dw = _module().move_backward(kind, grad, x, w)
    return dx, dw


@move_backward.register_fake
def _(kind: str, grad: Tensor, x: list[Tensor], w: list[Tensor]) -> tuple[Tensor, Tensor]:
    n = x[0].shape[-1]
    return _planes(x, len(x)), w[0].new_empty(x[0].numel() // n, n, len(w))


@torch.library.custom_op("kuramoto::step_forward", mutates_args=())
def step_forward(kind: str, x: list[Tensor], g: Tensor, value: Tensor,
                 log_radius: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    radius = float(log_radius.exp().to(x[0].dtype))
    out, sq, h = _module().step_forward(kind, x, g, value, radius)
    return out, sq, h


@step_forward.register_fake
def _(kind: str, x: list[Tensor], g: Tensor, value: Tensor, log_radius: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    tokens = x[0].numel() // x[0].shape[-1]
    return _planes(x, len(x)), x[0].new_empty(tokens, 1), x[0].new_empty(tokens, 1)


@torch.library.custom_op("kuramoto::step_backward", mutates_args=())
def step_backward(kind: str, grad: Tensor, x: list[Tensor], g: Tensor, value: Tensor, log_radius: Tensor,
                  sq: Tensor, h: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    radius = float(log_radius.exp().to(x[0].dtype))
    dx, dg, dv, per_token = _module().step_backward(kind, grad, x, g, value, radius, sq, h)
    return dx, dg, dv, per_token.sum().reshape(log_radius.shape).to(log_radius.dtype)


@step_backward.register_fake
def _(kind: str, grad: Tensor, x: list[Tensor], g: Tensor, value: Tensor, log_radius: Tensor,
      sq: Tensor, h: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    return _planes(x, len(x)), g.new_empty(g.shape), _planes(x, 1)[0], log_radius.new_empty(log_radius.shape)


@torch.library.custom_op("kuramoto::lift_forward", mutates_args=())
def lift_forward(x: list[Tensor], bf16: bool) -> Tensor:
    return _module().lift_forward(x, bf16)


@lift_forward.register_fake
def _(x: list[Tensor], bf16: bool) -> Tensor:
    n = x[0].shape[-1]
    return x[0].new_empty(x[0].numel() // n, n * len(x), dtype=torch.bfloat16 if bf16 else x[0].dtype)


@torch.library.custom_op("kuramoto::lift_backward", mutates_args=())
def lift_backward(grad: Tensor, oscillators: int, dtype: torch.dtype) -> Tensor:
    return _module().lift_backward(grad, oscillators, dtype)


@lift_backward.register_fake
def _(grad: Tensor, oscillators: int, dtype: torch.dtype) -> Tensor:
    c = grad.shape[-1] // oscillators
    return grad.new_empty(c, grad.numel() // (c * oscillators), oscillators, dtype=dtype)


@torch.library.custom_op("kuramoto::heads_forward", mutates_args=())
def heads_forward(x: list[Tensor], heads: int, positions: int, bf16: bool) -> Tensor:
    return _module().heads_forward(x, heads, positions, bf16)


@heads_forward.register_fake
def _(x: list[Tensor], heads: int, positions: int, bf16: bool) -> Tensor:
    n = x[0].shape[-1]
    shape = (x[0].numel() // n // positions if positions else 0, heads, positions, len(x) * n // heads)
    return x[0].new_empty(shape, dtype=torch.bfloat16 if bf16 else x[0].dtype)


@torch.library.custom_op("kuramoto::heads_backward", mutates_args=())
def heads_backward(grad: Tensor, oscillators: int, dtype: torch.dtype) -> Tensor:
    return _module().heads_backward(grad, oscillators, dtype)


@heads_backward.register_fake
def _(grad: Tensor, oscillators: int, dtype: torch.dtype) -> Tensor:
    b, heads, t, width = grad.shape
    return grad.new_empty(width * heads // oscillators, b * t, oscillators, dtype=dtype)


@torch.library.custom_op("kuramoto::features_forward", mutates_args=())
def features_forward(kind: str, x: list[Tensor], rotation: list[Tensor], soft: Tensor, inv_mean: Tensor, tau: Tensor,
                     extra_q: Tensor, extra_k: Tensor, heads: int, positions: int, bf16: bool,
                     width: int) -> tuple[Tensor, Tensor]:
    q, k = _module().features_forward(kind, x, rotation, soft, inv_mean, tau, extra_q, extra_k, heads, positions, bf16,
                                      width)
    return q, k


@features_forward.register_fake
def _(kind: str, x: list[Tensor], rotation: list[Tensor], soft: Tensor, inv_mean: Tensor, tau: Tensor,
      extra_q: Tensor, extra_k: Tensor, heads: int, positions: int, bf16: bool, width: int) -> tuple[Tensor, Tensor]:
    n = x[0].shape[-1]
    shape = (x[0].numel() // n // positions if positions else 0, heads, positions, width)
    dtype = torch.bfloat16 if bf16 else x[0].dtype
    return x[0].new_empty(shape, dtype=dtype), x[0].new_empty(shape, dtype=dtype)


@torch.library.custom_op("kuramoto::features_backward", mutates_args=())
def features_backward(kind: str, grad_q: Tensor, grad_k: Tensor, x: list[Tensor], rotation: list[Tensor],
                      soft: Tensor, inv_mean: Tensor, tau: Tensor, heads: int, positions: int,
                      need_drift: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    dx, dsoft, tau_dot, dr = _module().features_backward(kind, grad_q, grad_k, x, rotation, soft, inv_mean, tau,
                                                         heads, positions, need_drift)
    return dx, dsoft, tau_dot, dr


@features_backward.register_fake
def _(kind: str, grad_q: Tensor, grad_k: Tensor, x: list[Tensor], rotation: list[Tensor], soft: Tensor,
      inv_mean: Tensor, tau: Tensor, heads: int, positions: int,
      need_drift: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    n = x[0].shape[-1]
    tokens = x[0].numel() // n
    return (x[0].new_empty(len(x), tokens, n), x[0].new_empty(tokens, 2 * n), x[0].new_empty(tokens, heads),
            x[0].new_empty(len(rotation) if need_drift else 0, tokens, n))


def torus_features_forward(cos_q: Tensor, sin_q: Tensor, cos: Tensor, sin: Tensor, gates: Tensor, heads: int,
                           positions: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    q, k = _module().torus_features_forward(cos_q, sin_q, cos, sin, gates, heads, positions, dtype)
    return q, k


def torus_features_backward(grad_q: Tensor, grad_k: Tensor, cos: Tensor, sin: Tensor, cos_q: Tensor, sin_q: Tensor,
                            gates: Tensor, need_query: bool) -> tuple[Tensor, Tensor, Tensor]:
    dg, dphi, dphi_q = _module().torus_features_backward(grad_q, grad_k, cos, sin, cos_q, sin_q, gates, need_query)
    return dg, dphi, dphi_q
