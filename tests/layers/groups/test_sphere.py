"""Kuramoto attention on the sphere S^{D−1} (issue 25's stretch goal): its mathematics in float64, as
tests/layers/groups/test_su2.py checks SU(2)'s."""

import itertools
import math
from dataclasses import replace
from functools import partial

import geometry_checks as checks
import pytest
import torch
import torch.nn.functional as F
from conftest import assert_paths_agree, random_phases
from geometry_checks import FIELDS, B, D, H, N, T

from kuramoto_attention.diagnostics import flops
from kuramoto_attention.diagnostics.measure import diagnose, global_order, local_order
from kuramoto_attention.layers.groups import naive_sphere, sphere
from kuramoto_attention.layers.groups.planes import cos_sinc, dot, join, split
from kuramoto_attention.layers.groups.sphere import AMBIENT, Sphere
from kuramoto_attention.layers.kuramoto_attention import GEOMETRIES, KuramotoAttention
from kuramoto_attention.models.config import apply_overrides
from kuramoto_attention.models.kuramoto import KuramotoConfig
from kuramoto_attention.models.presets import build_model, get_preset
from kuramoto_attention.training.config import TrainConfig
from kuramoto_attention.training.optim import make_optimizer

C = AMBIENT  # the sphere's ambient dimension: states are unit vectors of R^C
P = C // 2  # drift planes per oscillator


def random_states(*shape: int, dim: int = C, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Unit vectors (..., dim), uniform on the sphere."""
    return F.normalize(torch.randn(*shape, dim, dtype=dtype), dim=-1)


make_layer = partial(checks.perturbed_layer, "sphere")
invariant_layer = partial(checks.invariant_layer, "sphere")
tiny_model = partial(checks.tiny_model, "sphere")  # as `--model group=sphere` does


def project(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return join(sphere.project(split(x), split(w)))


def exp_map(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return join(sphere.exp_map(split(x), split(w)))


def rotate_planes(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    return join(sphere.rotate_planes(split(x), split(angles)))


def rotation_matrix(angles: torch.Tensor) -> torch.Tensor:
    """The block-diagonal rotation R(angles) (..., D, D) written as a matrix: plane p turned by angles[..., p]."""
    out = torch.zeros(*angles.shape[:-1], 2 * angles.shape[-1], 2 * angles.shape[-1], dtype=angles.dtype)
    for p in range(angles.shape[-1]):
        c, s = angles[..., p].cos(), angles[..., p].sin()
        out[..., 2 * p, 2 * p], out[..., 2 * p, 2 * p + 1] = c, -s
        out[..., 2 * p + 1, 2 * p], out[..., 2 * p + 1, 2 * p + 1] = s, c
    return out


def log_map(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """log_x(y), the tangent vector at x whose geodesic reaches y (for y ≠ −x; 0 for y = x)."""
    w = project(x, y)
    size = torch.linalg.vector_norm(w, dim=-1, keepdim=True)
    return torch.atan2(size, (x * y).sum(-1, keepdim=True)) * w / torch.where(size > 0, size, torch.ones_like(size))


# --------------------------------------------------------------------------- primitives
def test_rotation_and_exponential_primitives_match_their_written_out_forms():
    x, angles = random_states(5, 3), torch.randn(5, 3, P, dtype=torch.float64) * 4
    rot = rotation_matrix(angles)
    assert torch.allclose(rotate_planes(x, angles), (rot @ x[..., None])[..., 0], atol=1e-15)
    assert torch.allclose(rot @ rot.transpose(-1, -2), torch.eye(C, dtype=torch.float64).expand(5, 3, C, C),
                          atol=1e-15)  # orthogonal
    other = torch.randn(5, 3, P, dtype=torch.float64)
    assert torch.allclose(rotate_planes(rotate_planes(x, angles), other), rotate_planes(x, angles + other),
                          atol=1e-14)  # a one-parameter group per plane: R(a) R(b) = R(a + b), so they commute
    for scale in (1e-9, 1e-3, 0.0999, 0.1001, 1.0, 3.0):  # both sides of exp_pure's series threshold |w| = 0.1
        w = F.normalize(project(x, torch.randn(5, 3, C, dtype=torch.float64)), dim=-1) * scale
        y = exp_map(x, w)
        assert torch.allclose(y, naive_sphere.exponential(x, w), atol=1e-14, rtol=0)
        assert (torch.linalg.vector_norm(y, dim=-1) - 1).abs().max() < 1e-15
        assert torch.allclose(log_map(x, y), w, atol=1e-12)  # a geodesic: it goes the distance |w| along w
    # w = 0 returns x itself, to rounding: the norm is computed two ways, whose last bit differs between CPUs
    assert torch.allclose(exp_map(x, torch.zeros_like(x)), x, atol=2e-16, rtol=0)


def test_exp_map_is_smooth_at_zero_and_across_the_series_threshold():
    x = random_states(2)
    for w in (torch.zeros(2, C), project(x, torch.full((2, C), 0.05)), project(x, torch.full((2, C), 0.06)),
              project(x, torch.randn(2, C, dtype=torch.float64))):
        assert torch.autograd.gradcheck(lambda v: exp_map(x, v), (w.double().requires_grad_(),))
    jac = torch.autograd.functional.jacobian(lambda v: exp_map(x[0], v), torch.zeros(C, dtype=torch.float64))
    assert torch.allclose(jac, torch.eye(C, dtype=torch.float64) - torch.outer(x[0], x[0]), atol=1e-15)  # P_x


@pytest.mark.parametrize("bound", ["norm", "elementwise"])
def test_the_move_is_the_literal_geodesic_step(bound):
    """The move by the bound of a step (the exponential map of its tangent part, shared by both paths) equals
    ``naive_sphere.step`` written out, for steps far from tangent and far from small (|w| up to several radians)."""
    layer, x = make_layer(bound=bound, radius_init=3.0), random_states(B, T, N)
    xi, v = torch.randn(B, T, N * C, dtype=torch.float64) * 3, torch.randn(B, T, N, dtype=torch.float64)
    moved = layer.bound.move(layer.geometry, x, layer.geometry.tangent_gate(v) * xi)
    assert torch.allclose(moved, naive_sphere.step(x, xi, v, layer.bound), atol=1e-13)
    assert (torch.linalg.vector_norm(moved, dim=-1) - 1).abs().max() < 1e-15


# --------------------------------------------------------------------------- the layer's identities
def test_tangent_identity_on_both_paths():
    """ξ = P_{x_t} G_t equals Σ_u A_{t,u} (x_u − ⟨x_u, x_t⟩ x_t): from ``coupling`` (reference), written out here,
    and read back from the fused step (v ≡ 1, a bound of radius 10⁶ that is the identity to 1e-12); ξ ⊥ x_t."""
    layer, x = make_layer(bound="elementwise", radius_init=1e6), random_states(B, T, N)
    xi_ref, attn = layer.coupling(x)
    assert xi_ref.shape == (B, T, N, C)
    checks.set_unit_value_gate(layer)
    xi_fused = log_map(x, layer(x))  # x' = exp_x(ξ), |ξ| ≤ 1 < π
    xh = x.view(B, T, H, D, C).transpose(1, 2)  # (B, H, T, d, C)
    g = torch.einsum("bhtu,bhujc->bhtjc", attn, xh)
    tangent = project(xh, g).transpose(1, 2).reshape(B, T, N, C)
    terms = torch.zeros(B, H, T, D, C, dtype=torch.float64)
    for t, u in itertools.product(range(T), range(T)):
        x_t, x_u = xh[:, :, t], xh[:, :, u]
        terms[:, :, t] += attn[:, :, t, u, None, None] * (x_u - (x_u * x_t).sum(-1, keepdim=True) * x_t)
    terms = terms.transpose(1, 2).reshape(B, T, N, C)
    for xi in (xi_ref, xi_fused, tangent):
        assert torch.allclose(xi, terms, atol=1e-10)
    assert (xi_ref * x).sum(-1).abs().max() < 1e-14


def rotation_drift(angles: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """R(tΩ_j) x_{t,j} with rotation matrices (the literal scores' drift): s_{t,u} = τ/√d Σ_j g^q g^k ⟨R(tΩ_j) x_{t,j},
    R(uΩ_j) x_{u,j}⟩."""
    return (rotation_matrix(angles) @ x[..., None])[..., 0]


def test_scores_match_the_issue_formula_and_remark1():
    """A is the causal softmax of the drifted, gated dot products (the reference path writes the kernel in its
    relative form ⟨x_t, R((u − t)Ω) x_u⟩); Remark 1's analogue: the drift is a rotation of queries and keys, the fused
    path's features R(tΩ) x_t give the same scores."""
    layer, x = make_layer(), random_states(B, T, N)
    checks.assert_scores_match_the_formula_and_remark1(layer, x, rotation_drift)


def test_relative_position_shifting_every_position_leaves_A_unchanged():
    checks.assert_shifting_every_position_leaves_A_unchanged(make_layer(), random_states(B, T, N))


def test_lemma3_increment_is_the_riemannian_gradient_of_the_coherence_energy():
    """For fixed A, ξ_t is the Riemannian gradient of E_t = Σ_u A_{t,u} Σ_j ⟨x_{t,j}, x_{u,j}⟩: the Euclidean
    gradient projected onto the tangent space, and the gradient along the geodesics exp_{x_t}(P ε) at ε = 0."""
    layer, x = make_layer(), random_states(B, T, N)
    xi, attn = layer.coupling(x)
    attn = attn.detach()
    xh = x.view(B, T, H, D, C).transpose(1, 2)

    def energy(state: torch.Tensor, t: int) -> torch.Tensor:
        return (attn[:, :, t, :, None] * (state.view(B, H, D, C)[:, :, None] * xh).sum(-1)).sum()

    for t in range(T):
        x_t = x[:, t].clone().requires_grad_()
        (euclid,) = torch.autograd.grad(energy(x_t, t), x_t)
        assert torch.allclose(project(x[:, t], euclid), xi[:, t], atol=1e-12)
        eps = torch.zeros(B, N, C, dtype=torch.float64, requires_grad=True)
        (along,) = torch.autograd.grad(energy(exp_map(x[:, t], project(x[:, t], eps)), t), eps)
        assert torch.allclose(along, xi[:, t], atol=1e-12)


def assert_fused_equals_reference(layer: KuramotoAttention) -> torch.Tensor:
    """Both paths give the same output and the same gradients (the state and every parameter); returns it."""
    return assert_paths_agree(layer, random_states(B, T, N))


@pytest.mark.parametrize("gates,omega,value,bound,tau", FIELDS)
def test_fused_equals_reference_forward_and_gradients(gates, omega, value, bound, tau):
    assert_fused_equals_reference(make_layer(gates=gates, omega=omega, value=value, bound=bound, tau=tau))


@pytest.mark.parametrize("self_coupling,clock", [(False, 0), (True, 3), (False, 3)])
def test_self_coupling_and_clock_fused_equal_reference(self_coupling, clock):
    assert_fused_equals_reference(make_layer(self_coupling=self_coupling, clock=clock, clock_init=2.0))


def test_inputs_through_a_shared_map_fused_equal_reference():
    proj = torch.nn.Linear(C * N, 5, bias=False).double()
    assert_fused_equals_reference(make_layer(self_coupling=False, gate_input=proj, value_input=proj))


# --------------------------------------------------------------------------- reduction to the torus
class Circle(Sphere):
    """S¹ ⊂ R², D = 2: the sphere's code on the torus's manifold (registered only inside the tests)."""

    name = "circle"

    def __init__(self) -> None:
        super().__init__(2)


def circle_states(theta: torch.Tensor, dim: int) -> torch.Tensor:
    """(cos θ, sin θ, 0, …): (…, n) -> (…, n, dim), the great circle in the first drift plane."""
    out = torch.zeros(*theta.shape, dim, dtype=theta.dtype)
    out[..., 0], out[..., 1] = theta.cos(), theta.sin()
    return out


def sphere_twin(torus: KuramotoAttention, group: str) -> KuramotoAttention:
    """A sphere layer whose weights act on great-circle states exactly as the torus layer's do on phases."""
    dim = GEOMETRIES[group]().components

    def convert(name: str, w: torch.Tensor) -> torch.Tensor:
        if name == "omega":  # plane 0 drifts at ω; the others at anything (the states have no part there)
            return torch.cat((w[:, None], torch.randn(N, dim // 2 - 1, dtype=w.dtype)), dim=-1)
        if name in ("gates.proj.weight", "value_gate.weight"):
            return checks.lift_columns(w, N, dim)
        return w

    return checks.twin(torus, group, convert)


@pytest.mark.parametrize("group", ["sphere", "circle"])
@pytest.mark.parametrize("fields", [{}, {"gates": False}, {"omega": "zero", "tau": "fixed"},
                                    {"self_coupling": False, "clock": 3}])
def test_reduction_to_the_torus(group, fields, monkeypatch):
    """States confined to the great circle (cos θ, sin θ, 0, 0) of S³, drift ω in that plane and the torus's weights
    mapped: the sphere layer's update is the torus layer's, on both paths, and so are A and the increment
    (ξ = a (−sin θ, cos θ, 0, 0)). D = 2 (``circle``, the same code on S¹): the same, with no coordinates left over.
    The elementwise bound and the value projection do not reduce: they act on ambient coordinates, which on the
    circle mix the tangent direction with the radial one (a torus weight has no fixed ambient image)."""
    monkeypatch.setitem(GEOMETRIES, "circle", Circle)
    torus = checks.perturbed_layer("torus", **fields)
    layer, theta = sphere_twin(torus, group), random_phases(B, T, N)
    dim = layer.geometry.components
    a_t, xi = checks.assert_reduces_to_the_torus(torus, layer, theta, partial(circle_states, dim=dim))
    assert torch.allclose(xi, a_t[..., None] * circle_states(theta + math.pi / 2, dim), atol=1e-13)


def test_reduction_to_the_torus_of_the_whole_model():
    """Embedding (w = (θ, 0, 0)), every layer and the readout: the sphere model on the great circle gives the torus
    model's logits (no feed-forward: its ambient output, like the value projection's, has no torus image)."""

    def convert(name: str, w: torch.Tensor) -> torch.Tensor:
        if name == "phase_embedding":
            return torch.stack((w, torch.zeros_like(w), torch.zeros_like(w)), dim=-1)  # w = (θ, 0, 0)
        if name.endswith("omega"):
            return torch.stack((w, torch.randn_like(w)), dim=-1)
        if name.endswith(("gates.proj.weight", "value_gate.weight")) or name == "prototypes.weight":
            return checks.lift_columns(w, N, C)
        return w

    cfg = KuramotoConfig(dim=N, depth=2, heads=H, ff="none")
    checks.assert_model_reduces_to_the_torus(cfg, "sphere", convert, partial(circle_states, dim=C))


# --------------------------------------------------------------------------- symmetry
def random_orthogonal(n: int) -> torch.Tensor:
    """n random orthogonal matrices (n, C, C), reflections included (Q from the QR of a Gaussian, signs fixed)."""
    q, r = torch.linalg.qr(torch.randn(n, C, C, dtype=torch.float64))
    return q * torch.diagonal(r, dim1=-2, dim2=-1).sign()[:, None, :]


def act(q: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """x_{t,j} ↦ Q_j x_{t,j}: one orthogonal matrix per oscillator, the same for every token."""
    return torch.einsum("jcd,btjd->btjc", q, x)


def test_rotations_that_commute_with_the_drift_are_a_symmetry():
    """x ↦ Q x with Q turning each drift plane (Q = R(β_j), which commutes with R(tΩ_j)) leaves the drifted score
    unchanged, and the update is equivariant, Q x'_t, when the gates are off and the value gate is constant: ξ ↦ Q ξ,
    the norm bound sees the same norm, and exp_{Qx}(Q w) = Q exp_x(w)."""
    x, q = random_states(B, T, N), rotation_matrix(torch.randn(N, P, dtype=torch.float64) * 3)
    checks.assert_a_symmetry_with_the_gates_off("sphere", x, partial(act, q))


def test_every_orthogonal_map_is_a_symmetry_only_without_drift():
    x, q = random_states(B, T, N), random_orthogonal(N)
    still, drifting = invariant_layer(omega="zero"), invariant_layer()
    for path in ("fused", "reference"):
        assert torch.allclose(still(act(q, x), path=path), act(q, still(x, path=path)), atol=1e-12)
    assert not torch.allclose(drifting(act(q, x)), act(q, drifting(x)), atol=1e-6)


# --------------------------------------------------------------------------- staying on S^{D−1}
def test_norm_preserved_over_many_layers_and_a_long_sequence_in_bf16_autocast():
    """T = 1024, 2 layers applied 6 times each under bf16 autocast: the state stays float32 and on S³ to float32
    rounding, and every move's re-normalisation corrects only rounding (its input's norm is 1 to a few ulps)."""

    def unnormalised(q, w):  # cos|w| x + sin|w| w/|w| for w = P_x(the bounded step), before the division by its norm
        w = sphere.project(q, w)
        cos, sinc = cos_sinc(dot(w, w))
        return join(tuple(cos * e + sinc * c for e, c in zip(q, w, strict=True)))

    checks.assert_unit_norm_kept_in_bf16_autocast(Sphere, random_states, 1024, unnormalised, method="exp_move")


# --------------------------------------------------------------------------- causality, cache, gradcheck, API
def test_layer_and_model_are_causal():
    checks.assert_layer_and_model_are_causal("sphere", random_states)


@pytest.mark.parametrize("fields", [{}, {"ff_proj": "shared", "self_coupling": False, "clock": 2}])
def test_cache_equals_recomputation(fields):
    checks.assert_cache_equals_recomputation(tiny_model(**fields).double().eval())


def test_gradcheck_layer():
    checks.assert_layer_passes_gradcheck("sphere", random_states)


def test_api_shapes_and_refusals():
    layer, x = make_layer(), random_states(B, T, N)
    checks.assert_api_shapes(layer, x, C, C)  # |P_x G| ≤ |G| ≤ 1
    for wrong in (random_phases(B, T, N), random_states(B, T, N, dim=3), random_states(B, T, N + 1)):
        with pytest.raises(ValueError, match=r"\(B, T, 8, 4\)"):
            layer(wrong)
    for name, value in (("phase_lag", True), ("harmonics", 2)):
        with pytest.raises(ValueError, match=f"{name}={value}.*sphere"):
            KuramotoAttention(N, H, group="sphere", **{name: value})
    with pytest.raises(ValueError, match="ff='angles'"):
        KuramotoConfig(dim=N, heads=H, ff="angles", attention=replace(KuramotoConfig().attention, group="sphere"))
    for ambient in (3, 0, 2.0):
        with pytest.raises(ValueError, match="even integer"):
            Sphere(ambient)


def test_init_drift_embedding_and_optimizer_groups():
    geo = Sphere()
    assert (geo.components, geo.tangent, geo.state_shape(N)) == (4, 4, (N, 4))
    omega = geo.init_drift(N, H, 10000.0)
    assert omega.shape == (N, P)  # RoPE's frequencies over each head's d·D/2 planes, an oscillator's side by side
    rope = 10000.0 ** (-torch.arange(D * P, dtype=torch.float64) / (D * P))
    assert torch.allclose(omega.double(), rope.view(D, P).repeat(H, 1), rtol=1e-6)
    assert torch.allclose(geo.drift_rate(omega), omega.square().mean(-1).sqrt())
    torus_omega = KuramotoAttention(N, H).omega.detach()
    assert torch.allclose(Circle().init_drift(N, H, 10000.0)[:, 0], torus_omega)  # D = 2: the torus's ω
    checks.assert_embedding_uniform_on_the_manifold(geo, C - 1)  # uniform on S³
    theta = random_phases(5, N)[..., None]
    assert torch.allclose(Circle().embed(theta, torch.arange(5)[None])[0], circle_states(theta[..., 0], 2))
    model = tiny_model()
    assert model.phase_parameter_names() == {"phase_embedding", "blocks.0.attn.omega", "blocks.1.attn.omega"}
    assert model.omega_parameter_names() == {"blocks.0.attn.omega", "blocks.1.attn.omega"}


# --------------------------------------------------------------------------- the model, diagnostics, FLOPs
def test_model_trains_a_step_and_samples_with_the_cache():
    model = tiny_model(ff_proj="shared")
    opt = make_optimizer(model, TrainConfig(steps=3))
    idx = torch.randint(0, 256, (2, 17))
    losses = []
    for _ in range(3):
        logits = model(idx[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), idx[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]  # it learns the batch
    for state in model.phases(idx):
        assert (torch.linalg.vector_norm(state, dim=-1) - 1).abs().max() < 1e-5
    model.eval()
    out = model.generate(idx[:, :3], 5, temperature=0)
    assert out.shape == (2, 8) and torch.equal(out, model.generate(idx[:, :3], 5, temperature=0, use_cache=False))


def test_diagnostics_are_defined_as_on_the_torus():
    """On the sphere the order parameters are norms of A-weighted / sequence means of the unit vectors (in [0, 1]; 1
    for identical states), the rms plane rate is the drift rate, and the JSON names the group."""
    import json

    model = tiny_model()
    d = diagnose(model, torch.randint(0, 256, (3, T)))
    assert d.group == "sphere" and json.loads(json.dumps(d.to_dict()))["group"] == "sphere"
    assert d.states[0].shape == (3, T, 8, 4) and d.omega.shape == (2, 2, 4)
    assert torch.allclose(d.omega[0], model.blocks[0].attn.omega.detach().square().mean(-1).sqrt().view(2, 4))
    for order in (d.local_order, d.global_order):
        assert ((order >= 0) & (order <= 1 + 1e-6)).all()
    same = diagnose(tiny_model(omega="zero"), torch.full((2, T), 65))
    assert torch.allclose(same.global_order, torch.ones(3, 2), atol=1e-5)
    x, attn = d.states[1], d.attention[1]
    xh = x.view(3, T, 2, 4, C).transpose(1, 2)
    want_local = torch.linalg.vector_norm(torch.einsum("bhtu,bhujc->bhtjc", attn, xh), dim=-1).mean(dim=(0, 2, 3))
    assert torch.allclose(local_order(attn, x, Sphere()), want_local, atol=1e-6)
    assert torch.allclose(d.local_order[1], want_local, atol=1e-6)
    want_global = torch.linalg.vector_norm(xh.mean(dim=2), dim=-1).mean(dim=(0, 2))
    assert torch.allclose(global_order(x, 2, Sphere()), want_global, atol=1e-6)
    pytest.importorskip("matplotlib")
    from kuramoto_attention.diagnostics.report import fig_quaternions

    titles = [ax.get_title() for ax in fig_quaternions(d).axes]  # the report's portraits (SU(2)'s, drawn alike)
    assert any(title.startswith("oscillator 0, after layer") for title in titles)


def test_model_flops_count_the_ambient_widths():
    """n = 16 unit vectors of R⁴: φ is 4n = 64 wide; gates 4n→2n, value gate 4n→n, ff 4n→32 (×2)→4n (the ambient
    increment), readout 4n→256; the attention reads 4n query/key features and averages 4n values (4n for the
    value projection too: its increment is 4n wide)."""
    family, cfg = get_preset("ka-tiny")
    model = build_model(family, apply_overrides(family, cfg, {"group": "sphere"}))
    n_mm = 2 * (64 * 32 + 64 * 16 + 2 * 64 * 32 + 32 * 64) + 64 * 256
    assert flops.model_flops(model, 32) == {"matmul_params": n_mm, "d_qk": 64, "d_v": 64,
                                            "flops_per_token": 6 * n_mm + 6 * 2 * 32 * (64 + 64)}
    projected = build_model(family, apply_overrides(family, cfg, {"group": "sphere", "value": "projection"}))
    assert flops.model_flops(projected, 32)["d_v"] == 64


@pytest.mark.parametrize("fields", [{}, {"value": "projection"},
                                    {"ff_proj": "shared", "value_gate_input": "ff-proj", "gates_input": "ff-proj",
                                     "clock": 3, "self_coupling": False}])
def test_model_flops_count_what_a_forward_pass_multiplies(fields, monkeypatch):
    """The analytic count against hooks on a real forward pass (as tests/benchmarks/test_bench.py checks the torus and
    SU(2)): every nn.Linear weight times its calls, and the query/key and value widths the attention is asked for."""
    from kuramoto_attention.ops import attention

    family, cfg = get_preset("ka-tiny")
    model = build_model(family, apply_overrides(family, cfg, {"group": "sphere", **fields}))
    calls, widths, sdpa = [], [], attention.sdpa
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            m.register_forward_hook(lambda mod, *_: calls.append(mod.weight.numel()))

    def recording(q, k, v, **kw):
        widths.append((q.shape[1] * q.shape[-1], v.shape[1] * v.shape[-1]))
        return sdpa(q, k, v, **kw)

    def recording_no_self(q, k, v, *args):
        widths.append((q.shape[1] * q.shape[-1], v.shape[1] * v.shape[-1]))
        return no_self(q, k, v, *args)

    no_self = attention.no_self_flash
    monkeypatch.setattr(attention, "sdpa", recording)
    monkeypatch.setattr(attention, "no_self_flash", recording_no_self)
    counted = flops.model_flops(model, 8)
    model(torch.zeros(1, 8, dtype=torch.long))
    assert counted["matmul_params"] == sum(calls)
    assert set(widths) == {(counted["d_qk"], counted["d_v"])} and len(widths) == cfg.depth


def test_preset_within_three_percent_of_one_million():
    # 64 unit vectors of R⁴, 4 layers of 4 heads, ff 437 behind a shared P (256 -> 64)
    checks.assert_preset_within_three_percent_of_one_million("ka-sphere-1m", "sphere", 1_000_472)
