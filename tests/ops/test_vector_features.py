"""The hand-fused drifted, gated query/key features of the vector groups (ops/vectors.py ``quaternion_query_key``,
``sphere_query_key``) equal the plain expressions they replace (``Geometry.gated_query_key``: the group's ``drifted``
and ``gates.gated_features``): the forward to the bit, gradients in float64 and float32, gradcheck, bf16 autocast,
torch.compile, on both backends (the compiled CPU kernels, the Python functions); and whole models (ka-su2-1m,
ka-su2-1m-tuned, ka-sphere-1m) give the previous path's logits and gradients. The layer-level comparisons with the
literal T × T references (test_su2.py, test_sphere.py) run through these kernels too, whenever autograd records."""

import sys

import pytest
import torch
import torch.nn.functional as F

import kuramoto_attention as ka
from kuramoto_attention.layers.groups.base import Geometry
from kuramoto_attention.layers.groups.planes import VectorGeometry
from kuramoto_attention.layers.groups.sphere import Sphere
from kuramoto_attention.layers.groups.su2 import SU2

pytestmark = pytest.mark.usefixtures("backend")  # conftest.py: each test on both backends

B, T, N, H = 2, 5, 6, 2
GEOMETRIES = {"su2": SU2(), "sphere": Sphere(), "sphere6": Sphere(6), "circle": Sphere(2)}


def drift_width(geo: VectorGeometry) -> int:
    return 3 if geo.name == "su2" else geo.components // 2


def inputs(geo, dtype=torch.float64, seed=0, offset=3):
    """States (component-major, as the model keeps them), a drift whose angles t|Ω| lie on both sides of the series'
    threshold (one oscillator without drift), positions from ``offset`` (a cache's), gate logits and τ."""
    gen = torch.Generator().manual_seed(seed)
    c = geo.components
    x = F.normalize(torch.randn(B, T, N, c, generator=gen, dtype=torch.float64), dim=-1)
    x = torch.stack(x.unbind(-1)).movedim(0, -1)  # component-major, as planes.join stores it
    drift = torch.randn(N, drift_width(geo), generator=gen, dtype=torch.float64) * 0.5
    drift[0] = 0
    drift[1] *= 0.01
    z = torch.randn(B, T, 2 * N, generator=gen, dtype=torch.float64)
    tau = torch.rand(H, generator=gen, dtype=torch.float64) + 0.5
    pos = torch.arange(offset, offset + T, dtype=dtype)
    x, drift, z, tau = (t.to(dtype).requires_grad_() for t in (x, drift, z, tau))
    return x, drift, pos, z, tau


def fused(geo, x, drift, pos, z, tau, dtype=None):
    return geo.gated_query_key(x, pos, drift, z, H, tau, x.dtype if dtype is None else dtype)


def plain(geo, x, drift, pos, z, tau, dtype=None):
    return Geometry.gated_query_key(geo, x, pos, drift, z, H, tau, x.dtype if dtype is None else dtype)


def loss_and_grads(fn, geo, leaves, pos, seed=1, dtype=None):
    x, drift, z, tau = leaves
    q, k = fn(geo, x, drift, pos, z, tau, dtype)
    gen = torch.Generator().manual_seed(seed)
    wq, wk = (torch.randn(t.shape, generator=gen, dtype=torch.float64).to(t.dtype) for t in (q, k))
    grads = torch.autograd.grad((q * wq).float().sum() + (k * wk).float().sum(), leaves)
    return q, k, grads


@pytest.mark.parametrize("case", GEOMETRIES)
def test_the_fused_kernel_runs_whenever_autograd_records(case):
    geo = GEOMETRIES[case]
    x, drift, pos, z, tau = inputs(geo)
    q, _ = fused(geo, x, drift, pos, z, tau)
    assert type(q.grad_fn).__name__ == "_QueryKeyBackward"
    with torch.no_grad():  # without autograd, the plain expressions (SU(2)'s drift stacked: equal to rounding)
        torch.testing.assert_close(fused(geo, x, drift, pos, z, tau)[0], q.detach(), rtol=0, atol=1e-12)
    q_none, _ = fused(geo, x, drift, pos, None, tau)  # gates off: the plain path
    assert type(q_none.grad_fn).__name__ != "_QueryKeyBackward"


@pytest.mark.parametrize("case", GEOMETRIES)
@pytest.mark.parametrize("dtype,atol", [(torch.float64, 1e-13), (torch.float32, 1e-5)])
def test_values_to_the_bit_and_gradients_equal_the_plain_features(case, dtype, atol):
    """The forward is the plain one's operations in the same order: equal to the bit, layout included. The backward
    reorders sums only: float64 to 1e-13, float32 to a few ulps of the gradients' size."""
    geo = GEOMETRIES[case]
    x, drift, pos, z, tau = inputs(geo, dtype)
    leaves = [x, drift, z, tau]
    qf, kf, gf = loss_and_grads(fused, geo, leaves, pos)
    qp, kp, gp = loss_and_grads(plain, geo, leaves, pos)
    assert torch.equal(qf, qp) and torch.equal(kf, kp)  # (the layouts may differ: SDPA reads either alike)
    for f, p in zip(gf, gp, strict=True):
        assert f.shape == p.shape and f.dtype == p.dtype
        torch.testing.assert_close(f, p, rtol=0, atol=atol * max(1.0, p.abs().max().item()))


@pytest.mark.parametrize("case", ["su2", "sphere"])
@pytest.mark.parametrize("dtype,atol", [(torch.float64, 1e-13), (torch.float32, 1e-5)])
def test_a_token_wider_than_one_block_with_a_head_cut_by_its_edge(case, dtype, atol, monkeypatch):
    """80 oscillators in 4 heads of 20 (ka-su2-1m-tuned's token): the compiled kernels work on a token's oscillators in
    blocks of 64 and 16 lanes, so the first block ends inside head 3, whose runs are split between the blocks."""
    monkeypatch.setattr(sys.modules[__name__], "N", 80)
    monkeypatch.setattr(sys.modules[__name__], "H", 4)
    test_values_to_the_bit_and_gradients_equal_the_plain_features(case, dtype, atol)


@pytest.mark.parametrize("case", ["su2", "sphere"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_extra_features_are_appended_to_each_head_as_the_plain_concatenation_does(case, dtype):
    """``extra``: the layer's own query/key features (1, H, T, e) (its clocks), written beside each head's by the
    fused path: the plain path's concatenation (to the bit in float64), and the same gradients for every input (the
    extra features' summed over the batch)."""
    geo = GEOMETRIES[case]
    x, drift, pos, z, tau = inputs(geo, torch.float32 if dtype == torch.bfloat16 else dtype)
    gen = torch.Generator().manual_seed(2)
    eq, ek = (torch.randn(1, H, T, 3, generator=gen, dtype=torch.float64).to(dtype).requires_grad_() for _ in "qk")
    leaves = [x, drift, z, tau, eq, ek]
    outs = []
    for path in (Geometry.gated_query_key, type(geo).gated_query_key):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            q, k = path(geo, x, pos, drift, z, H, tau, dtype, None, (eq, ek))
        wq, wk = (torch.randn(t.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64).to(dtype)
                  for t in (q, k))
        outs.append((q, k, torch.autograd.grad((q * wq).float().sum() + (k * wk).float().sum(), leaves)))
    (qp, kp, gp), (qf, kf, gf) = outs
    assert type(qf.grad_fn).__name__ == "_QueryKeyBackward" and qf.shape == qp.shape
    if dtype == torch.float64:
        assert torch.equal(qf, qp) and torch.equal(kf, kp)
    else:  # the plain path rounds f and the gate to bf16 before their product, the fused one rounds the product
        torch.testing.assert_close(qf.float(), qp.float(), rtol=1e-2, atol=1e-2)
    for f, e in ((qf, eq), (kf, ek)):
        assert torch.equal(f[..., -3:], e.expand_as(f[..., -3:]))
    for f, p in zip(gf, gp, strict=True):
        assert f.dtype == p.dtype
        torch.testing.assert_close(f.float(), p.float(), rtol=0, atol=(2e-2 if dtype == torch.bfloat16 else 1e-12)
                                   * max(1.0, p.abs().max().item()))


@pytest.mark.parametrize("case", GEOMETRIES)
def test_gradcheck(case):
    geo = GEOMETRIES[case]
    x, drift, pos, z, tau = inputs(geo)
    assert torch.autograd.gradcheck(lambda *a: fused(geo, a[0], a[1], pos, a[2], a[3]), (x, drift, z, tau))


@pytest.mark.parametrize("case", ["su2", "sphere"])
def test_gradcheck_with_a_fixed_drift_and_temperature(case):
    """ω ≡ 0 (a buffer) and a fixed τ: no gradient is asked for either, the others stay exact."""
    geo = GEOMETRIES[case]
    x, drift, pos, z, tau = inputs(geo)
    drift, tau = drift.detach(), tau.detach()
    assert torch.autograd.gradcheck(lambda a, b: fused(geo, a, drift, pos, b, tau), (x, z))


@pytest.mark.parametrize("case", GEOMETRIES)
def test_under_bf16_autocast_is_close_to_the_plain_float32_features(case):
    """Under autocast the gate logits come from a bf16 matmul and the features go to SDPA in bf16: the kernel's
    float32 arithmetic, rounded once, is within bf16's rounding of the plain float32 numbers, gradients included."""
    geo = GEOMETRIES[case]
    x, drift, pos, z, tau = inputs(geo, torch.float32)
    q32, k32, g32 = loss_and_grads(plain, geo, [x, drift, z, tau], pos)
    z16 = z.detach().bfloat16().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        q16, k16, g16 = loss_and_grads(fused, geo, [x, drift, z16, tau], pos, dtype=torch.bfloat16)
    assert q16.dtype == k16.dtype == torch.bfloat16
    assert [g.dtype for g in g16] == [torch.float32, torch.float32, torch.bfloat16, torch.float32]
    for a, b in ((q16, q32), (k16, k32)):
        torch.testing.assert_close(a.float(), b, rtol=1e-2, atol=1e-2)
    for a, b in zip(g16, g32, strict=True):
        torch.testing.assert_close(a.float(), b, rtol=2e-2, atol=2e-2 * b.abs().max().item())


@pytest.mark.parametrize("case", ["su2", "sphere"])
def test_under_torch_compile_equals_eager(case):
    """The compiled graph runs the same Function (extra features included: the clocks') as eager does."""
    geo = GEOMETRIES[case]
    x, drift, pos, z, tau = inputs(geo, torch.float32)
    extra = tuple(torch.randn(1, H, T, 2, requires_grad=True) for _ in "qk")
    leaves = (x, drift, z, tau, *extra)

    def loss(a, b, c, d, eq, ek):
        q, k = geo.gated_query_key(a, pos, b, c, H, d, a.dtype, None, (eq, ek))
        return (q * q.detach().roll(1, -1)).sum() + k.square().mul(torch.arange(k.shape[-1])).sum()

    eager = torch.autograd.grad(loss(*leaves), leaves)
    compiled = torch.autograd.grad(torch.compile(loss, fullgraph=True)(*leaves), leaves)
    for e, c in zip(eager, compiled, strict=True):
        torch.testing.assert_close(c, e, rtol=1e-5, atol=1e-5 * e.abs().max().item())


@pytest.mark.parametrize("preset", ["ka-su2-1m", "ka-su2-1m-tuned", "ka-sphere-1m"])
def test_whole_model_logits_and_gradients_equal_the_previous_path(preset, monkeypatch):
    """A training step's logits and every parameter's gradient, float32, against the same model with the kernel switched
    off (the default ``gated_query_key`` of the group's ``drifted`` and ``gated_features``): the logits to the bit
    (the forward is the same operations); each gradient within 1e-6 of its size, or within twice the previous path's
    own distance from the float64 gradient (the embedding's sums over tokens: 1.4e-6 of its size), except where
    float32 cannot give that on either path: the scalars log τ and log r, sums over every token with cancellation,
    which both paths miss by 2e-6 … 5e-5 of their size (against float64; log τ over 6 seeds of each preset, both
    paths alike). There the kernel's gradient is within 2e-5 of the previous path's (or twice that path's own
    error), and within 1e-4 of the float64 gradient."""
    torch.manual_seed(0)
    model = ka.build_model(*ka.get_preset(preset))
    idx = torch.randint(0, 256, (2, 40), generator=torch.Generator().manual_seed(1))

    def step():
        model.zero_grad(set_to_none=True)
        logits = model(idx)
        logits.log_softmax(-1)[..., 0].mean().backward()
        return logits.detach(), {k: p.grad.double() for k, p in model.named_parameters() if p.grad is not None}

    new_logits, new = step()
    for cls in (SU2, Sphere):
        monkeypatch.setattr(cls, "fused_query_key", None)
    old_logits, old = step()
    model.double()
    _, exact = step()
    assert torch.equal(new_logits, old_logits)
    assert set(new) == set(old) == set(exact)
    for name, g in old.items():
        size = g.abs().max().item()
        diff, error = (new[name] - g).abs().max().item(), (new[name] - exact[name]).abs().max().item()
        rounding = (g - exact[name]).abs().max().item()  # the previous path's own float32 error
        if name.endswith(("log_tau", "log_radius")):
            assert diff <= max(2e-5 * size, 2 * rounding) and error <= 1e-4 * size, (name, diff, error, size)
        else:  # or, for a sum over many tokens (the embedding's, the clocks'), no more than twice the previous path's
            # own float32 error (two paths each that far from the exact sum; seen on an AMD EPYC: 1.12×)
            assert diff <= max(1e-6 * size, 2 * rounding), (name, diff, size, rounding)


def test_the_features_operators_pass_torch_library_opcheck(backend):
    """Schema, fake tensors against the real ones and torch.compile's dispatch of both features operators (bf16
    features with the extra columns, as under autocast)."""
    from kuramoto_attention.ops import native

    if backend != "compiled":
        pytest.skip("the compiled kernels' operators")
    gen = torch.Generator().manual_seed(0)
    x = list(F.normalize(torch.randn(4, B, T, N, generator=gen), dim=0))
    rotation = list(F.normalize(torch.randn(4, T, N, generator=gen), dim=0))
    soft = torch.rand(B * T, 2 * N, generator=gen) + 0.1
    gates = (soft, 1 / soft.view(B * T, 2 * H, -1).mean(-1), torch.rand(H, generator=gen) + 0.5)
    width = 4 * N // H + 2
    extra = torch.randn(H, T, 2, generator=gen).bfloat16()
    torch.library.opcheck(native.features_forward, ("quaternion", x, rotation, *gates, extra, extra, H, T, True, width))
    grads = [torch.randn(B, H, T, width, generator=gen).bfloat16() for _ in "qk"]
    torch.library.opcheck(native.features_backward, ("quaternion", *grads, x, rotation, *gates, H, T, True))


def test_the_features_kernel_takes_no_positions(backend):
    """T = 0 (an empty chunk given to the kernel): empty q and k of the asked width, no division by the zero length."""
    from kuramoto_attention.ops import native

    if backend != "compiled":
        pytest.skip("the compiled kernel's own edge case")
    x = [torch.zeros(B, 0, N, dtype=torch.float64) for _ in range(4)]
    rotation = [torch.zeros(0, N, dtype=torch.float64) for _ in range(4)]
    q, k = native.features_forward("quaternion", x, rotation, torch.zeros(0, 2 * N, dtype=torch.float64),
                                   torch.zeros(0, 2 * H, dtype=torch.float64), torch.ones(H, dtype=torch.float64),
                                   *(torch.zeros(H, 0, 2, dtype=torch.float64) for _ in "qk"), H, 0, False,
                                   4 * N // H + 2)
    assert q.shape == k.shape == (0, H, 0, 4 * N // H + 2)
