"""The hand-fused stretches (fused.py) equal their plain expressions, values and gradients (float64); the query and
key's custom operators pass opcheck and run whole under torch.compile; autocast does not reach inside."""

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import random_phases

from kuramoto_attention.ops.fused import bounded_step, gated_step, query_key
from kuramoto_attention.ops.torus import bound_norm, lift

B, T, K, H = 2, 5, 8, 2
D = K // H


def plain_query_key(theta, omega, pos, lag, z, tau):
    """q_t = τ g^q ⊙ ψ(θ_t + ω t + β), k_u = g^k ⊙ ψ(θ_u + ω u), g = softplus(z) / its head mean."""
    g = F.softplus(z).view(B, T, 2, H, D)
    g = g / g.mean(-1, keepdim=True)
    phi = theta + omega * pos[:, None]
    phi_q = phi if lag is None else phi + lag

    def features(angle, gate):
        a = angle.view(B, T, H, D)
        return torch.cat((gate * a.cos(), gate * a.sin()), -1).transpose(1, 2)  # (B, H, T, 2d)

    return features(phi_q, g[:, :, 0] * tau.view(H, 1)), features(phi, g[:, :, 1])


def leaves(*tensors):
    return [t.clone().requires_grad_() if t is not None else None for t in tensors]


def assert_same(fused, plain, inputs, atol=1e-12):
    """Equal outputs, and equal gradients of a random weighting of them with respect to ``inputs``."""
    fused, plain = (out if isinstance(out, tuple) else (out,) for out in (fused, plain))
    weights = [torch.randn_like(p) for p in plain]
    grads = [torch.autograd.grad(sum((w * o).sum() for w, o in zip(weights, out, strict=True)), inputs)
             for out in (fused, plain)]
    for f, p in zip(fused, plain, strict=True):
        assert f.shape == p.shape and torch.allclose(f, p, atol=atol)
    for f, p in zip(*grads, strict=True):
        assert f.shape == p.shape and torch.allclose(f, p, atol=100 * atol)


@pytest.mark.parametrize("lag_shape", [None, (K,), (B, T, K)])
def test_query_key_equals_plain(lag_shape):
    f64 = torch.float64
    theta, omega, z, tau = leaves(random_phases(B, T, K), torch.rand(K, dtype=f64),
                                  torch.randn(B, T, 2 * K, dtype=f64), torch.rand(H, dtype=f64) + 0.5)
    lag = None if lag_shape is None else leaves(torch.randn(lag_shape, dtype=f64))[0]
    pos = torch.arange(3, 3 + T, dtype=f64)  # an offset, as with a cache
    plain = plain_query_key(theta, omega, pos, lag, z, tau)
    inputs = [x for x in (theta, omega, lag, z, tau) if x is not None]
    assert_same(query_key(theta, omega, pos, lag, z, tau, f64), plain, inputs)
    assert plain[0].shape == (B, H, T, 2 * D)
    with torch.no_grad():  # the graph-free forward is the same function
        for f, p in zip(query_key(theta, omega, pos, lag, z, tau, f64), plain, strict=True):
            assert torch.allclose(f, p, atol=1e-12)


@pytest.mark.parametrize("lag_shape", [None, (K,)])
def test_torus_plain_path_equals_the_fused_kernel(lag_shape):
    """What runs without autograd (the geometry's plain expressions, token-major) is the fused kernel's function:
    values and gradients."""
    from kuramoto_attention.layers.groups.base import Geometry
    from kuramoto_attention.layers.groups.torus import Torus

    f64 = torch.float64
    theta, omega, z, tau = leaves(random_phases(B, T, K), torch.rand(K, dtype=f64),
                                  torch.randn(B, T, 2 * K, dtype=f64), torch.rand(H, dtype=f64) + 0.5)
    lag = None if lag_shape is None else leaves(torch.randn(lag_shape, dtype=f64))[0]
    pos = torch.arange(3, 3 + T, dtype=f64)
    inputs = [x for x in (theta, omega, lag, z, tau) if x is not None]
    fused = query_key(theta, omega, pos, lag, z, tau, f64)
    extras = torch.nn.Module()
    extras.lag, extras.query_mix = lag, None
    assert_same(fused, Geometry.gated_query_key(Torus(), theta, pos, omega, z, H, tau, f64, extras), inputs)


def query_key_case(lag_shape, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    theta = (torch.rand(B, T, K, generator=gen) * 6 - 3).requires_grad_()
    omega, tau = torch.rand(K, generator=gen).requires_grad_(), (torch.rand(H, generator=gen) + 0.5).requires_grad_()
    z = torch.randn(B, T, 2 * K, generator=gen).to(dtype).requires_grad_()
    lag = None if lag_shape is None else torch.randn(lag_shape, generator=gen).requires_grad_()
    return theta, omega, torch.arange(T, dtype=torch.float32), lag, z, tau


@pytest.mark.parametrize("lag_shape", [None, (K,)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compiled_query_key_runs_the_operators_to_the_bit(lag_shape, dtype):
    """Under torch.compile (one graph) the query and key are the two custom operators, not inductor's own loops over
    them: eager's values and gradients to the bit."""
    case = query_key_case(lag_shape, dtype)
    inputs = [x for x in case if isinstance(x, torch.Tensor) and x.requires_grad]
    weights = [torch.randn(B, H, T, 2 * D, generator=torch.Generator().manual_seed(s)) for s in (1, 2)]
    torch._dynamo.reset()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm

    def run(*args):
        return query_key(*args, dtype)

    results = []
    for fn in (run, torch.compile(run, backend=backend, fullgraph=True)):
        out = fn(*case)
        loss = sum((o.float() * w).sum() for o, w in zip(out, weights, strict=True))
        results.append((out, torch.autograd.grad(loss, inputs)))
    (want, want_grads), (got, got_grads) = results
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(got_grads, want_grads, strict=True))
    targets = [str(node.target) for gm in graphs for module in gm.modules() if isinstance(module, torch.fx.GraphModule)
               for node in module.graph.nodes if node.op == "call_function"]
    assert any("query_key_forward" in t for t in targets) and any("query_key_backward" in t for t in targets)
    assert not any(name in t for t in targets for name in ("cos", "sin", "softplus"))


@pytest.mark.parametrize("lag_shape", [None, (K,), (B, T, K)])
def test_query_key_operators_pass_opcheck(lag_shape):
    """Schema, fake tensors (shapes and strides as the real kernels give them), autograd registration and
    torch.compile's dispatch, as ``torch.library.opcheck`` checks them."""
    from kuramoto_attention.ops.fused import query_key_backward, query_key_forward

    theta, omega, pos, lag, z, tau = (x.detach() if isinstance(x, torch.Tensor) else x
                                      for x in query_key_case(lag_shape, torch.bfloat16))
    torch.library.opcheck(query_key_forward, (theta, omega, pos, lag, z, tau, torch.bfloat16))
    q, k, *saved = query_key_forward(theta, omega, pos, lag, z, tau, torch.bfloat16)
    grads = (torch.randn(q.shape).bfloat16(), torch.randn(k.shape).bfloat16())
    torch.library.opcheck(query_key_backward, (*grads, *saved, z, pos, tau, None if lag is None else list(lag.shape),
                                               True, True, True))


def test_query_key_casts_on_store():
    """fp32 phases, bf16 gate logits (autocast's matmul output), bf16 features: the attention's inputs."""
    theta, omega, z = random_phases(B, T, K, dtype=torch.float32), torch.rand(K), torch.randn(B, T, 2 * K).bfloat16()
    pos, tau = torch.arange(T, dtype=torch.float32), torch.rand(H) + 0.5
    fused = query_key(theta, omega, pos, None, z, tau, torch.bfloat16)
    plain = plain_query_key(theta, omega, pos, None, z.float(), tau)
    for f, p in zip(fused, plain, strict=True):
        assert f.dtype == torch.bfloat16 and torch.allclose(f.float(), p, atol=2e-2, rtol=1e-2)


def plain_gated_step(theta, out, value, log_radius):
    psi = lift(theta)
    cos, sin = (c.view(B, T, H, D) for c in psi.chunk(2, -1))
    g = out.transpose(1, 2)
    a = (cos * g[..., D:] - sin * g[..., :D]).reshape(B, T, K)
    return theta + bound_norm(value * a, log_radius.exp())


@pytest.mark.parametrize("layout", ["heads-first", "tokens-first"])
def test_gated_step_equals_plain(layout):
    theta, value, log_radius = leaves(random_phases(B, T, K), torch.randn(B, T, K, dtype=torch.float64),
                                      torch.tensor([math.log(2.0)], dtype=torch.float64))
    raw = torch.randn(B, H, T, 2 * D, dtype=torch.float64) if layout == "heads-first" else \
        torch.randn(B, T, H, 2 * D, dtype=torch.float64).transpose(1, 2)  # what SDPA returns, either way
    (out,) = leaves(raw)
    fused = gated_step(theta, lift(theta), out, value, log_radius)
    assert_same(fused, plain_gated_step(theta, out, value, log_radius), (theta, out, value, log_radius))


def test_bounded_step_equals_plain_and_keeps_dtypes():
    theta, x, log_radius = leaves(random_phases(B, T, K), torch.randn(B, T, K, dtype=torch.float64),
                                  torch.tensor([0.3], dtype=torch.float64))
    assert_same(bounded_step(theta, x, log_radius), theta + bound_norm(x, log_radius.exp()), (theta, x, log_radius))
    theta32 = random_phases(B, T, K, dtype=torch.float32)
    x16 = torch.randn(B, T, K).bfloat16().requires_grad_()
    out = bounded_step(theta32, x16, torch.zeros(1))
    assert out.dtype == torch.float32  # phases stay in θ's dtype
    out.sum().backward()
    assert x16.grad.dtype == torch.bfloat16


def test_functions_pass_gradcheck_and_zero_increment_is_smooth():
    theta, x = leaves(random_phases(1, 3, K), torch.randn(1, 3, K, dtype=torch.float64))
    log_radius = leaves(torch.tensor([0.1], dtype=torch.float64))[0]
    assert torch.autograd.gradcheck(bounded_step, (theta, x, log_radius))
    (out,) = leaves(torch.randn(1, H, 3, 2 * D, dtype=torch.float64))
    assert torch.autograd.gradcheck(lambda th, o, v, r: gated_step(th, lift(th).detach(), o, v, r),
                                    (theta, out, x, log_radius))
    zero = torch.zeros(1, 3, K, dtype=torch.float64, requires_grad=True)
    bounded_step(theta, zero, log_radius).sum().backward()
    assert torch.isfinite(zero.grad).all() and torch.allclose(zero.grad, log_radius.exp().detach().expand_as(zero))


def test_autocast_does_not_reach_inside():
    """Under bf16 autocast the functions compute exactly as without it (their dtypes are explicit)."""
    theta, x = random_phases(B, T, K, dtype=torch.float32), torch.randn(B, T, K)
    log_radius = torch.tensor([0.5])
    out = torch.randn(B, H, T, 2 * D)
    case = query_key_case((K,))
    inputs = [x for x in case if isinstance(x, torch.Tensor) and x.requires_grad]

    def run():
        q, k = query_key(*case, torch.bfloat16)
        step = bounded_step(theta, x, log_radius), gated_step(theta, lift(theta), out, x, log_radius)
        return (q, k, *step), torch.autograd.grad((q.float().sum() + k.float().sum()), inputs)

    plain, plain_grads = run()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cast, cast_grads = run()
    for a, b in zip(plain + plain_grads, cast + cast_grads, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("lag_shape", [None, (K,)])
@pytest.mark.parametrize(("dtype", "out_dtype"), [(torch.float32, torch.bfloat16), (torch.float32, torch.float32),
                                                  (torch.float64, torch.float64)])
@pytest.mark.parametrize("grad_layout", ["heads-first", "tokens-first"])
def test_native_products_equal_the_python_ones_to_the_bit(monkeypatch, lag_shape, dtype, out_dtype, grad_layout):
    """The query and key's products with their gates and their backward (csrc/torus.cpp) give the Python body's
    numbers to the bit: features, and every gradient, whatever the gradients' layout."""
    from kuramoto_attention.ops import native

    if not native.available(torch.zeros(1)):
        pytest.skip("the compiled CPU kernels are not built here")
    theta, omega, pos, lag, z, tau = query_key_case(lag_shape, seed=3)
    theta, omega, z = (x.detach().to(dtype).requires_grad_() for x in (theta, omega, z))
    pos = pos.to(dtype)
    inputs = [x for x in (theta, omega, lag, z, tau) if x is not None]
    gen = torch.Generator().manual_seed(4)
    shape = (B, H, T, 2 * D) if grad_layout == "heads-first" else (B, T, H, 2 * D)
    weights = [torch.randn(shape, generator=gen).to(out_dtype) for _ in "qk"]
    weights = [w if grad_layout == "heads-first" else w.transpose(1, 2) for w in weights]

    def run():
        q, k = query_key(theta, omega, pos, lag, z, tau, out_dtype)
        grads = torch.autograd.grad((q, k), inputs, weights)
        return q, k, *grads

    calls = count_kernel_calls(monkeypatch)
    native_run = run()
    assert sorted(set(calls)) == ["torus_features_backward", "torus_features_forward"]
    monkeypatch.setenv(native.ENV, "0")
    calls.clear()
    python_run = run()
    assert not calls and native_run[0].dtype == out_dtype
    assert all(torch.equal(a, b) for a, b in zip(native_run, python_run, strict=True))


def count_kernel_calls(monkeypatch):
    """The names of ``native``'s torus kernels as fused.py calls them, in a list that fills as it does."""
    from kuramoto_attention.ops import native

    calls = []

    def counted(name, real):
        def call(*args):
            calls.append(name)
            return real(*args)

        return call

    for name in ("torus_features_forward", "torus_features_backward"):
        monkeypatch.setattr(native, name, counted(name, getattr(native, name)))
    return calls


@pytest.mark.parametrize(("theta_dtype", "z_dtype", "pos_dtype", "out_dtype"), [
    (torch.float64, torch.float64, torch.float64, torch.bfloat16),  # bf16 features need float32 rows
    (torch.float32, torch.float32, torch.float32, torch.float16),
    (torch.float32, torch.bfloat16, torch.float32, torch.float16),
])
def test_query_key_falls_back_to_python_where_the_kernels_do_not_apply(monkeypatch, theta_dtype, z_dtype, pos_dtype,
                                                                        out_dtype):
    """Dtypes the kernels do not take run the Python products: no kernel call, no error, its numbers."""
    theta, omega, pos, _, z, tau = query_key_case(None, seed=5)
    theta, omega = (x.detach().to(theta_dtype).requires_grad_() for x in (theta, omega))
    z, pos = z.detach().to(z_dtype).requires_grad_(), pos.to(pos_dtype)
    calls = count_kernel_calls(monkeypatch)
    q, k = query_key(theta, omega, pos, None, z, tau, out_dtype)
    grads = torch.autograd.grad((q.float().sum() + k.float().sum()), (theta, omega, z, tau))
    assert not calls and q.dtype == k.dtype == out_dtype and all(g.isfinite().all() for g in grads)
