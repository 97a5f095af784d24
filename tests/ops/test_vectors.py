"""The hand-fused moves of vector-valued oscillators (ops/vectors.py) equal their plain expressions (the geometry
modules' arithmetic), values and gradients in float64, gradcheck, bf16 autocast and torch.compile; each on both
backends: the compiled CPU kernels (ops/native.py) and the Python functions."""

import pytest
import torch
import torch.nn.functional as F

from kuramoto_attention.layers.bound import NormBound
from kuramoto_attention.layers.groups.planes import dot, exp_parts, split
from kuramoto_attention.layers.groups.sphere import Sphere, exp_map, project
from kuramoto_attention.layers.groups.su2 import SU2, mul
from kuramoto_attention.ops import native
from kuramoto_attention.ops.vectors import (
    cos_sinc_grad,
    lift_states,
    quaternion_move,
    quaternion_step,
    sphere_move,
    sphere_step,
    to_heads,
)

B, T, N = 2, 3, 5
pytestmark = pytest.mark.usefixtures("backend")  # conftest.py: each test on both backends


def test_backend_is_the_one_asked_for(backend):
    assert native.available(torch.zeros(1, dtype=torch.float64)) == (backend == "compiled")
    assert not native.available(torch.zeros(1, dtype=torch.bfloat16))  # float32 and float64 only


def test_a_failed_build_says_so_in_one_line_and_falls_back(monkeypatch, capsys):
    from torch.utils import cpp_extension

    def fail(*args, **kwargs):
        raise RuntimeError("Error building extension 'kuramoto_vectors'\nthe compiler's own output")

    monkeypatch.setattr(cpp_extension, "load", fail)
    monkeypatch.setattr(native, "_loaded", {})
    monkeypatch.delenv(native.ENV, raising=False)
    assert not native.available(torch.zeros(1))
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and native.ENV in err
    x, w = inputs(4, 3)
    assert quaternion_move(split(x), split(w)).shape == (B, T, N, 4)  # the Python functions run instead


def test_a_compiled_caller_follows_the_switch(monkeypatch):
    """Under torch.compile the build is a constant, but KURAMOTO_NATIVE is read on each call: switching it from 1 to 0
    after compiling turns the kernels off (dynamo guards a variable that is set; one unset while compiling it does
    not watch)."""
    torch._dynamo.reset()
    f = torch.compile(lambda x: x + 1 if native.available(x) else x - 1, backend="eager")
    monkeypatch.setenv(native.ENV, "1")
    expected = 1.0 if native.available(torch.zeros(1)) else -1.0
    assert f(torch.zeros(2)).tolist() == [expected] * 2
    monkeypatch.setenv(native.ENV, "0")
    assert f(torch.zeros(2)).tolist() == [-1.0, -1.0]


def plain_quaternion_move(q, w):
    new = mul(q, exp_parts(w))
    norm = torch.sqrt(sum(c * c for c in new))
    return tuple(c / norm for c in new)


def plain_sphere_move(x, w):
    return exp_map(x, project(x, w))


CASES = {"su2": (4, 3, quaternion_move, plain_quaternion_move), "sphere": (4, 4, sphere_move, plain_sphere_move),
         "sphere6": (6, 6, sphere_move, plain_sphere_move)}


def inputs(components, tangent, dtype=torch.float64, scale=1.0, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = F.normalize(torch.randn(B, T, N, components, generator=gen, dtype=torch.float64), dim=-1)
    w = scale * torch.randn(B, T, N, tangent, generator=gen, dtype=torch.float64)
    w[0, 0, 0] = 0  # the move by zero, and steps on both sides of the series' threshold
    w[0, 0, 1] = 0.03 * w[0, 0, 1] / w[0, 0, 1].norm()
    w[0, 0, 2] = 0.2 * w[0, 0, 2] / w[0, 0, 2].norm()
    return x.to(dtype).requires_grad_(), w.to(dtype).requires_grad_()


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("scale", [1e-3, 0.5, 3.0, 20.0])  # angles up to ~60 rad: the kernels' own sin and cos
def test_move_equals_plain_values_and_gradients(case, scale):
    components, tangent, fused, plain = CASES[case]
    x, w = inputs(components, tangent, scale=scale)
    outs = [fused(split(x), split(w)), torch.stack(plain(split(x), split(w)), -1)]
    weight = torch.randn_like(outs[0])
    grads = [torch.autograd.grad((weight * o).sum(), (x, w)) for o in outs]
    slack = max(1.0, scale)  # cos and sin of an angle a are known to about a · 1e-16
    torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=1e-14 * slack)
    for f, p in zip(*grads, strict=True):
        torch.testing.assert_close(f, p, rtol=0, atol=1e-12 * slack)


@pytest.mark.parametrize("case", CASES)
def test_move_reads_any_layout_alike(case):
    """Interleaved parts (read in place, every c-th number), component-major planes, and parts that are no single
    evenly strided run (every other token: copied first) give the same numbers, bit for bit."""
    components, tangent, fused, _ = CASES[case]
    x, w = (t.detach() for t in inputs(components, tangent))
    stored = [(x, w), (x.movedim(-1, 0).contiguous().movedim(0, -1), w.movedim(-1, 0).contiguous().movedim(0, -1))]
    outs = [fused(split(a), split(b)) for a, b in stored]
    assert torch.equal(outs[0], outs[1])
    assert torch.equal(fused(split(x[:, ::2]), split(w[:, ::2])), outs[0][:, ::2])


@pytest.mark.parametrize("case", CASES)
def test_move_gradcheck(case):
    components, tangent, fused, _ = CASES[case]
    x, w = inputs(components, tangent)
    assert torch.autograd.gradcheck(lambda a, b: fused(split(a), split(b)), (x, w))


def test_series_derivative_of_sinc_is_continuous_and_exact():
    a2 = torch.tensor([0.0, 1e-6, 0.0099999, 0.01, 0.0100001, 0.5, 4.0], dtype=torch.float64, requires_grad=True)
    _, sinc, dsinc = cos_sinc_grad(a2)
    (auto,) = torch.autograd.grad(sinc.sum(), a2)
    torch.testing.assert_close(dsinc, auto, rtol=0, atol=1e-14)
    assert dsinc[0] == -1 / 6


@pytest.mark.parametrize("case", CASES)
def test_move_under_bf16_autocast_is_close_to_fp32(case):
    components, tangent, fused, plain = CASES[case]
    x, w = inputs(components, tangent, dtype=torch.float32)
    ref = torch.stack(plain(split(x), split(w)), -1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = fused(split(x), split(w))
    assert out.dtype == torch.float32  # elementwise arithmetic on float32 states stays float32
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-6)


def test_move_under_torch_compile_equals_eager():
    components, tangent, fused, _ = CASES["su2"]
    x, w = inputs(components, tangent, dtype=torch.float32)

    def step(a, b):
        return fused(split(a), split(b)).square().mul(torch.arange(4.0)).sum()

    eager = torch.autograd.grad(step(x, w), (x, w))
    compiled = torch.autograd.grad(torch.compile(step, fullgraph=True)(x, w), (x, w))
    for e, c in zip(eager, compiled, strict=True):
        torch.testing.assert_close(c, e, rtol=1e-5, atol=1e-6)


STEPS = {"su2": (SU2(), quaternion_step), "sphere": (Sphere(), sphere_step), "sphere6": (Sphere(6), sphere_step)}


def plain_step(geometry, x, mean, value, log_radius):
    """The attention's move written plainly: w = v ⊙ ξ(x, G), the norm bound over each token, the group's move."""
    w = tuple(value * c for c in geometry.tangent_part(x, mean))
    factor = NormBound(log_radius).factor(dot(w, w).sum(-1, keepdim=True))
    return geometry.exp_move(x, tuple(factor * c for c in w))


def step_inputs(geometry, dtype=torch.float64, radius=1.5, seed=0):
    gen = torch.Generator().manual_seed(seed)
    c = geometry.components
    x = F.normalize(torch.randn(B, T, N, c, generator=gen, dtype=torch.float64), dim=-1)
    mean = torch.randn(B, T, N, c, generator=gen, dtype=torch.float64) * 0.7  # an average of unit vectors
    value = torch.randn(B, T, N, generator=gen, dtype=torch.float64)
    value[0, 0] = 0  # a token that does not move
    log_radius = torch.tensor([radius], dtype=torch.float64).log()
    return [t.to(dtype).requires_grad_() for t in (x, mean, value, log_radius)]


@pytest.mark.parametrize("case", STEPS)
@pytest.mark.parametrize("radius", [1e-3, 1.5, 10.0])
def test_step_equals_plain_values_and_gradients(case, radius):
    geometry, fused = STEPS[case]
    x, mean, value, log_radius = leaves = step_inputs(geometry, radius=radius)
    outs = [fused(split(x), split(mean), value, log_radius),
            torch.stack(plain_step(geometry, split(x), split(mean), value, log_radius), -1)]
    weight = torch.randn_like(outs[0])
    grads = [torch.autograd.grad((weight * o).sum(), leaves) for o in outs]
    torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=1e-14)
    for f, p in zip(*grads, strict=True):
        torch.testing.assert_close(f, p, rtol=0, atol=1e-12)


@pytest.mark.parametrize("case", STEPS)
@pytest.mark.parametrize("heads", [2, 3])
@pytest.mark.parametrize("dtypes", [(torch.float64, torch.float64), (torch.float32, torch.bfloat16)])
def test_step_reads_the_attention_output_where_the_attention_left_it(case, heads, dtypes):
    """G as the attention leaves it, (B, H, T, c·d), in the state's dtype or in bfloat16 (autocast's): the same move
    as G given as c planes of its values, and dG comes back in G's own layout and dtype."""
    geometry, fused = STEPS[case]
    (state, stored), (c, n) = dtypes, (geometry.components, 6)
    gen = torch.Generator().manual_seed(1)
    x = F.normalize(torch.randn(B, T, n, c, generator=gen, dtype=torch.float64), dim=-1).to(state)
    value, log_radius = torch.randn(B, T, n, generator=gen).to(state), torch.tensor([1.5]).log().to(state)
    g = (0.7 * torch.randn(B, heads, T, c * n // heads, generator=gen)).to(stored).requires_grad_()
    planes = [p.to(state).requires_grad_() for p in g.detach().unflatten(-1, (c, -1)).permute(3, 0, 2, 1, 4)
              .reshape(c, B, T, n)]
    outs = [fused(split(x), g, value, log_radius), fused(split(x), tuple(planes), value, log_radius)]
    assert torch.equal(outs[0], outs[1])
    weight = torch.randn_like(outs[0])
    (dg,), dplanes = (torch.autograd.grad((weight * o).sum(), leaves)
                      for o, leaves in zip(outs, ([g], planes), strict=True))
    assert dg.dtype == stored
    want = torch.stack(dplanes).view(c, B, T, heads, -1).permute(1, 3, 2, 0, 4).reshape(g.shape).to(stored)
    assert torch.equal(dg, want)


@pytest.mark.parametrize("case", STEPS)
def test_step_gradcheck(case):
    geometry, fused = STEPS[case]
    leaves = step_inputs(geometry)
    assert torch.autograd.gradcheck(lambda x, g, v, r: fused(split(x), split(g), v, r), leaves)


@pytest.mark.parametrize("case", STEPS)
def test_step_under_bf16_autocast_is_close_to_fp32(case):
    geometry, fused = STEPS[case]
    x, mean, value, log_radius = step_inputs(geometry, dtype=torch.float32)
    ref = torch.stack(plain_step(geometry, split(x), split(mean), value, log_radius), -1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = fused(split(x), split(mean), value, log_radius)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-5)


@pytest.mark.parametrize("components", [3, 4, 8])
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
@pytest.mark.parametrize("kind", ["lift", "heads"])
def test_layout_changes_equal_the_plain_copies_and_send_gradients_back_in_the_states_layout(kind, dtype, components):
    """The lift (B, T, n·c) and the values' heads layout (B, H, T, c·d), copied from component-major states (to bf16:
    cast first, then moved; by the compiled kernels for 2, 4, 6 or 8 components): the plain copy's numbers both
    ways, with autograd recording or not, and the gradient stored as the states are (no relayout later)."""
    state = torch.float32 if dtype == torch.bfloat16 else torch.float64
    x = torch.stack(torch.randn(B, T, 4, components, dtype=state).unbind(-1)).movedim(0, -1).requires_grad_()
    fused, plain = {
        "lift": (lambda y: lift_states(y, dtype), lambda y: y.flatten(-2).to(dtype)),
        "heads": (lambda y: to_heads(y, 2, dtype),
                  lambda y: y.unflatten(2, (2, -1)).permute(0, 2, 1, 4, 3).reshape(B, 2, T, -1).to(dtype)),
    }[kind]
    out, ref = fused(x), plain(x)
    assert out.dtype == dtype and torch.equal(out, ref)
    with torch.no_grad():
        assert torch.equal(fused(x.detach()), ref)  # (a leaf needing grad records even here)
    w = torch.randn(out.shape, dtype=torch.float64).to(dtype)
    (grad,), (grad_ref,) = (torch.autograd.grad((y * w).sum(), x) for y in (out, ref))
    assert torch.equal(grad, grad_ref) and grad.stride() == x.stride()


def test_the_layout_and_move_operators_pass_torch_library_opcheck(backend):
    """Schema, fake tensors against the real ones and torch.compile's dispatch of the lift's and the heads' layout
    operators, and of the moves' and the steps'."""
    if backend != "compiled":
        pytest.skip("the compiled kernels' operators")
    x = list(torch.randn(4, B * T, 6))
    x = list(torch.stack(x) / torch.stack(x).norm(dim=0))  # unit quaternions
    w, dy = list(0.3 * torch.randn(3, B * T, 6)), torch.randn(4, B * T, 6)
    torch.library.opcheck(native.move_forward, ("quaternion", x, w))
    torch.library.opcheck(native.move_backward, ("quaternion", dy, x, w))
    mean, value, log_radius = torch.randn(B, 2, T, 12).bfloat16(), torch.rand(B * T, 6), torch.zeros(1)
    _, sq, h = native.step_forward("quaternion", x, mean, value, log_radius)
    torch.library.opcheck(native.step_forward, ("quaternion", x, mean, value, log_radius))
    torch.library.opcheck(native.step_backward, ("quaternion", dy, x, mean, value, log_radius, sq, h))
    torch.library.opcheck(native.lift_forward, (x, True))
    torch.library.opcheck(native.lift_backward, (torch.randn(B, T, 24).bfloat16(), 6, torch.float32))
    torch.library.opcheck(native.heads_forward, (x, 2, T, True))
    torch.library.opcheck(native.heads_backward, (torch.randn(B, 2, T, 12).bfloat16(), 6, torch.float32))


def test_the_layout_operators_name_bad_arguments(backend):
    """A direct call with shapes that do not fit raises one clear error (no read out of bounds, no division by 0)."""
    if backend != "compiled":
        pytest.skip("the compiled kernels' operators")
    x = list(torch.randn(4, B * T, 6))
    with pytest.raises(RuntimeError, match="split evenly into the heads"):
        native.heads_forward(x, 4, T, False)
    with pytest.raises(RuntimeError, match="B rows of T positions"):
        native.heads_forward(x, 2, T + 1, False)
    with pytest.raises(RuntimeError, match="splitting evenly into the H heads"):
        native.heads_backward(torch.randn(B, 4, T, 12), 6, torch.float32)
    with pytest.raises(RuntimeError, match=r"\(…, n·c\) with n ≥ 1"):
        native.lift_backward(torch.randn(B, T, 25), 6, torch.float32)


@pytest.mark.parametrize("kind", ["lift", "heads"])
def test_a_layout_change_of_no_positions_keeps_the_batch(kind):
    """T = 0: (B, 0, …) in, (B, …, 0, …) out (the plain copy's shape), its gradient of x's shape."""
    x = torch.zeros(B, 0, 4, 4, dtype=torch.float64, requires_grad=True)
    out = lift_states(x, torch.float64) if kind == "lift" else to_heads(x, 2, torch.float64)
    assert out.shape == ((B, 0, 16) if kind == "lift" else (B, 2, 0, 8))
    (grad,) = torch.autograd.grad(out.sum(), x)
    assert grad.shape == x.shape


@pytest.mark.parametrize("kind", ["lift", "heads"])
def test_the_layout_change_of_an_expanded_state_gives_a_plain_gradient(kind):
    """A broadcast view (overlapping memory) cannot take its gradient in its own strides: it gets a plain one."""
    base = torch.randn(1, T, 4, 4, dtype=torch.float64, requires_grad=True)
    x = base.expand(B, -1, -1, -1)
    out = lift_states(x, torch.float64) if kind == "lift" else to_heads(x, 2, torch.float64)
    (grad,) = torch.autograd.grad((out * 2).sum(), base)
    assert torch.equal(grad, torch.full_like(base, 2.0 * B))


@pytest.mark.parametrize("case", ["su2", "sphere"])
def test_a_bf16_step_moves_as_its_float32_value_and_gets_a_bf16_gradient(case):
    """The feed-forward's step comes from a bf16 matmul under autocast: the move reads it as it is (the float32 value
    of each bf16 number) and gives its gradient back in bf16, rounded once from the float32 one."""
    components, tangent, fused, _ = CASES[case]
    gen = torch.Generator().manual_seed(4)
    x = F.normalize(torch.randn(B, T, N, components, generator=gen), dim=-1).requires_grad_()
    w16 = (0.3 * torch.randn(B, T, N, tangent, generator=gen)).bfloat16().requires_grad_()
    w32 = w16.detach().float().requires_grad_()
    out16, out32 = fused(x, w16), fused(x, w32)
    assert torch.equal(out16, out32)
    g = torch.randn(out16.shape, generator=gen)
    (dx16, dw16), (dx32, dw32) = (torch.autograd.grad((o * g).sum(), (x, w)) for o, w in ((out16, w16), (out32, w32)))
    assert torch.equal(dx16, dx32) and dw16.dtype == torch.bfloat16 and torch.equal(dw16, dw32.bfloat16())
