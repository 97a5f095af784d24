"""Kuramoto attention on SU(2) (issue 25): its mathematics in float64, as tests/layers/test_layer.py checks the
torus's."""

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

from kuramoto_attention.layers.groups import naive_su2
from kuramoto_attention.layers.groups.planes import exp_parts, join, log_unit, split
from kuramoto_attention.layers.groups.su2 import SU2, im_conj_mul, mul, stacked_exp, stacked_mul
from kuramoto_attention.layers.kuramoto_attention import KuramotoAttention
from kuramoto_attention.models.kuramoto import KuramotoConfig


def random_quaternions(*shape: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Haar-uniform unit quaternions (..., 4)."""
    return F.normalize(torch.randn(*shape, 4, dtype=dtype), dim=-1)


make_layer = partial(checks.perturbed_layer, "su2")
invariant_layer = partial(checks.invariant_layer, "su2")
tiny_model = partial(checks.tiny_model, "su2")  # as `--model group=su2` does


# --------------------------------------------------------------------------- primitives
def exp_pure(w: torch.Tensor) -> torch.Tensor:
    return join(exp_parts(split(w)))


def qmul(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    return join(mul(split(p), split(q)))


def test_quaternion_primitives_match_the_written_out_products():
    p, q = random_quaternions(5, 3), random_quaternions(5, 3)
    assert torch.allclose(qmul(p, q), naive_su2.product(p, q), atol=1e-15)
    assert torch.allclose(qmul(q, naive_su2.conjugate(q)),
                          torch.tensor([1.0, 0, 0, 0], dtype=torch.float64).expand(5, 3, 4), atol=1e-15)
    xi = torch.stack(im_conj_mul(split(p), split(q)), dim=-1)
    assert torch.allclose(xi, naive_su2.product(naive_su2.conjugate(p), q)[..., 1:], atol=1e-15)
    i, j, k = torch.eye(4, dtype=torch.float64)[1:]
    assert torch.equal(qmul(i, j), k) and torch.equal(qmul(j, i), -k)  # non-abelian: ij = k = −ji
    for scale in (1e-9, 1e-3, 0.0999, 0.1001, 1.0, 3.0, 10.0):  # both sides of the series' threshold |w| = 0.1
        w = F.normalize(torch.randn(50, 3, dtype=torch.float64), dim=-1) * scale
        assert torch.allclose(exp_pure(w), naive_su2.exponential(w), atol=1e-14, rtol=0)
        if scale < math.pi:
            assert torch.allclose(log_unit(exp_pure(w)), w, atol=1e-12)
    assert torch.equal(exp_pure(torch.zeros(3, dtype=torch.float64)), torch.tensor([1.0, 0, 0, 0],
                                                                                   dtype=torch.float64))


def test_the_stacked_forms_for_decoding_equal_the_plane_forms():
    """Without autograd (eager decoding) the product, the exponential, the drift and the move run stacked (…, 4):
    the same numbers as the plane forms, w = 0 and either side of the series' threshold included, and a model's
    logits without a gradient those with one."""
    p, q = random_quaternions(5, 3), random_quaternions(5, 3)
    assert torch.allclose(stacked_mul(p, q), qmul(p, q), atol=1e-15)
    for scale in (0.0, 1e-9, 1e-3, 0.0999, 0.1001, 1.0, 3.0):
        w = F.normalize(torch.randn(50, 3, dtype=torch.float64), dim=-1) * scale
        assert torch.allclose(stacked_exp(w), exp_pure(w), atol=1e-15, rtol=0)
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 1e-5)):
        model = tiny_model().to(dtype)
        idx = torch.randint(0, 256, (2, 9))
        with torch.no_grad():
            decoding = model(idx)
        torch.testing.assert_close(decoding, model(idx).detach(), rtol=0, atol=tol)


def test_states_are_stored_component_major_and_any_layout_is_read_alike():
    """The embedding and every move return states whose components are contiguous planes (``split`` is free); a
    state laid out the usual way, components innermost, gives the same numbers."""
    model = tiny_model().double()
    idx = torch.randint(0, 256, (2, 7))
    x = model.embed(idx)
    assert all(c.is_contiguous() for c in split(x))
    layer = model.blocks[0].attn
    y = layer(x)
    assert all(c.is_contiguous() for c in split(y))
    torch.testing.assert_close(layer(x.contiguous()), y, rtol=0, atol=1e-15)


def test_exp_is_smooth_at_zero_and_across_the_series_threshold():
    for w in (torch.zeros(2, 3), torch.full((2, 3), 0.0577), torch.full((2, 3), 0.0578), torch.randn(2, 3)):
        assert torch.autograd.gradcheck(exp_pure, (w.double().requires_grad_(),))
    w = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    jac = torch.autograd.functional.jacobian(exp_pure, w)  # d exp at 0: (0; I)
    assert torch.equal(jac, torch.cat((torch.zeros(1, 3), torch.eye(3))).double())


# --------------------------------------------------------------------------- the layer's identities
def test_lohe_identity_on_both_paths():
    """ξ = Im(conj(q_t) G_t) equals Σ_u A_{t,u} Im(conj(q_t) q_u): from ``coupling`` (reference), written out here,
    and read back from the fused step (v ≡ 1, a bound of radius 10⁶ that is the identity to 1e-12)."""
    layer, q = make_layer(bound="elementwise", radius_init=1e6), random_quaternions(B, T, N)
    xi_ref, attn = layer.coupling(q)
    assert xi_ref.shape == (B, T, N, 3)
    checks.set_unit_value_gate(layer)
    xi_fused = log_unit(qmul(naive_su2.conjugate(q), layer(q)))  # q' = q exp(ξ), |ξ| ≤ 1 < π
    qh = q.view(B, T, H, D, 4).transpose(1, 2)  # (B, H, T, d, 4)
    g = torch.einsum("bhtu,bhujc->bhtjc", attn, qh)
    tangent = torch.stack(im_conj_mul(split(qh), split(g)), dim=-1).transpose(1, 2).reshape(B, T, N, 3)
    lohe = torch.zeros(B, H, T, D, 3, dtype=torch.float64)
    for t, u in itertools.product(range(T), range(T)):
        lohe[:, :, t] += attn[:, :, t, u, None, None] * naive_su2.product(naive_su2.conjugate(qh[:, :, t]),
                                                                          qh[:, :, u])[..., 1:]
    lohe = lohe.transpose(1, 2).reshape(B, T, N, 3)
    for xi in (xi_ref, xi_fused, tangent):
        assert torch.allclose(xi, lohe, atol=1e-10)


def left_drift(angles: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """exp(tΩ_j) q_{t,j} written out (the literal scores' drift): s_{t,u} = τ/√d Σ_j g^q g^k ⟨exp(tΩ_j) q_{t,j},
    exp(uΩ_j) q_{u,j}⟩."""
    return naive_su2.product(naive_su2.exponential(angles), q)


def test_scores_match_the_issue_formula_and_remark1():
    """A is the causal softmax of the drifted, gated quaternion dot products (the reference path writes the kernel
    in its relative form ⟨q_t, exp((u − t)Ω) q_u⟩); Remark 1's analogue: the drift is a left rotation of queries
    and keys, the fused path's features exp(tΩ) q_t give the same scores."""
    layer, q = make_layer(), random_quaternions(B, T, N)
    checks.assert_scores_match_the_formula_and_remark1(layer, q, left_drift)


def test_relative_position_shifting_every_position_leaves_A_unchanged():
    checks.assert_shifting_every_position_leaves_A_unchanged(make_layer(), random_quaternions(B, T, N))


def test_lemma3_increment_is_the_gradient_of_the_coherence_energy():
    """For fixed A, ξ_t = ∇_ε E_t(q_t exp(ε)) at ε = 0, E_t = Σ_u A_{t,u} Σ_j ⟨q_{t,j}, q_{u,j}⟩."""
    layer, q = make_layer(), random_quaternions(B, T, N)
    xi, attn = layer.coupling(q)
    attn = attn.detach()
    qh = q.view(B, T, H, D, 4).transpose(1, 2)
    for t in range(T):
        eps = torch.zeros(B, N, 3, dtype=torch.float64, requires_grad=True)
        moved = qmul(q[:, t], exp_pure(eps)).view(B, H, D, 4)
        energy = (attn[:, :, t, :, None] * (moved[:, :, None] * qh).sum(-1)).sum()
        (grad,) = torch.autograd.grad(energy, eps)
        assert torch.allclose(grad, xi[:, t], atol=1e-12)


def assert_fused_equals_reference(layer: KuramotoAttention) -> torch.Tensor:
    """Both paths give the same output and the same gradients (the state and every parameter); returns it."""
    return assert_paths_agree(layer, random_quaternions(B, T, N))


@pytest.mark.parametrize("gates,omega,value,bound,tau", FIELDS)
def test_fused_equals_reference_forward_and_gradients(gates, omega, value, bound, tau):
    assert_fused_equals_reference(make_layer(gates=gates, omega=omega, value=value, bound=bound, tau=tau))


@pytest.mark.parametrize("self_coupling,clock", [(False, 0), (True, 3), (False, 3)])
def test_self_coupling_and_clock_fused_equal_reference(self_coupling, clock):
    assert_fused_equals_reference(make_layer(self_coupling=self_coupling, clock=clock, clock_init=2.0))


def test_inputs_through_a_shared_map_fused_equal_reference():
    proj = torch.nn.Linear(4 * N, 5, bias=False).double()
    assert_fused_equals_reference(make_layer(self_coupling=False, gate_input=proj, value_input=proj))


# --------------------------------------------------------------------------- reduction to the torus
def lift_columns(w: torch.Tensor, n: int) -> torch.Tensor:
    """A torus weight reading ψ(θ) (…, 2n) as one reading φ(q) (…, 4n): cos θ_j is q_j's real part, sin θ_j its i
    part; the j and k columns get noise (they multiply zeros in U(1))."""
    return checks.lift_columns(w, n, 4)


def tangent_rows(w: torch.Tensor) -> torch.Tensor:
    """A torus map emitting an increment (n, …) as one emitting (3n, …): the i axis; zero along j and k."""
    out = torch.zeros(w.shape[0], 3, *w.shape[1:], dtype=w.dtype)
    out[:, 0] = w
    return out.flatten(0, 1)


def u1(theta: torch.Tensor) -> torch.Tensor:
    """cos θ + i sin θ: (…, n) -> (…, n, 4)."""
    zero = torch.zeros_like(theta)
    return torch.stack((theta.cos(), theta.sin(), zero, zero), dim=-1)


def su2_twin(torus: KuramotoAttention) -> KuramotoAttention:
    """An SU(2) layer whose weights act on U(1) states exactly as the torus layer's do on phases."""

    def convert(name: str, w: torch.Tensor) -> torch.Tensor:
        if name == "omega":
            return tangent_rows(w[:, None]).view(N, 3)  # Ω_j = ω_j i
        if name in ("gates.proj.weight", "value_gate.weight"):
            return lift_columns(w, N)
        if name == "value_proj.weight":
            return tangent_rows(lift_columns(w, N))
        if name == "bound.log_radius" and torus.config.bound == "elementwise":
            return tangent_rows(w[:, None]).view(-1) + torch.tensor([0.0, 1.0, 1.0]).repeat(N).double()
        return w

    return checks.twin(torus, "su2", convert)


@pytest.mark.parametrize("fields", [{}, {"gates": False}, {"bound": "elementwise"}, {"value": "projection"},
                                    {"omega": "zero", "tau": "fixed"}, {"self_coupling": False, "clock": 3}])
def test_reduction_to_the_torus(fields):
    """States, drifts and weights confined to U(1) = {cos θ + i sin θ}: the SU(2) layer's update is the torus
    layer's, on both paths, and its A is the torus layer's A."""
    torus = checks.perturbed_layer("torus", **fields)
    layer, theta = su2_twin(torus), random_phases(B, T, N)
    a_t, xi = checks.assert_reduces_to_the_torus(torus, layer, theta, u1)
    if torus.config.value == "circular":
        assert torch.allclose(xi, tangent_rows(a_t.transpose(0, 2)).view(N, 3, T, B).permute(3, 2, 0, 1), atol=1e-13)


def test_reduction_to_the_torus_of_the_whole_model():
    """Embedding (w = θ i), every layer, the feed-forward through the shared P and the readout: the SU(2) model on
    U(1) gives the torus model's logits."""

    def convert(name: str, w: torch.Tensor) -> torch.Tensor:
        if name == "phase_embedding":
            return torch.stack((w, torch.zeros_like(w), torch.zeros_like(w)), dim=-1)  # w = θ i
        if name.endswith("omega"):
            return tangent_rows(w[:, None]).view(N, 3)
        if name.endswith(("gates.proj.weight", "value_gate.weight")) or name in ("shared_ff_proj.weight",
                                                                                 "prototypes.weight"):
            return lift_columns(w, N)
        if name.endswith("mlp.w_out.weight"):
            return tangent_rows(w)
        return w

    cfg = KuramotoConfig(dim=N, depth=2, heads=H, ff_hidden=16, ff_proj="shared")
    checks.assert_model_reduces_to_the_torus(cfg, "su2", convert, u1)


# --------------------------------------------------------------------------- symmetry
def test_right_multiplication_is_a_symmetry():
    """q ↦ q h leaves the drifted score unchanged (left rotations and right multiplication commute with ⟨·,·⟩),
    and the update is equivariant, q'_t h, when the gates are off and the value gate is constant."""
    q, h = random_quaternions(B, T, N), random_quaternions(N)
    checks.assert_a_symmetry_with_the_gates_off("su2", q, lambda x: qmul(x, h))


def test_left_multiplication_is_a_symmetry_only_without_drift():
    q, h = random_quaternions(B, T, N), random_quaternions(N)
    still, drifting = invariant_layer(omega="zero"), invariant_layer()
    assert torch.allclose(still(qmul(h, q)), qmul(h, still(q)), atol=1e-12)
    assert not torch.allclose(drifting(qmul(h, q)), qmul(h, drifting(q)), atol=1e-6)


# --------------------------------------------------------------------------- staying on S³
def test_the_move_renormalises_only_rounding():
    q = random_quaternions(B, T, N)
    for dtype, tol in ((torch.float64, 4e-16), (torch.float32, 4e-7)):
        w = torch.randn(B, T, N, 3, dtype=dtype) * 3
        raw = qmul(q.to(dtype), exp_pure(w))
        assert (torch.linalg.vector_norm(raw, dim=-1) - 1).abs().max() < 4 * tol  # the division corrects only this


def test_norm_preserved_over_many_layers_and_a_long_sequence_in_bf16_autocast():
    """T = 4096, 2 layers applied 6 times each under bf16 autocast: the state stays float32 and on S³ to float32
    rounding, and every move's re-normalisation corrects only rounding (its input's norm is 1 to a few ulps)."""

    def unnormalised(q, w):  # the attention's step moves by an increment already bounded, kept in components
        return join(mul(q, exp_parts(w)))

    checks.assert_unit_norm_kept_in_bf16_autocast(SU2, random_quaternions, 4096, unnormalised, method="exp_move")


# --------------------------------------------------------------------------- causality, cache, gradcheck, API
def test_layer_and_model_are_causal():
    checks.assert_layer_and_model_are_causal("su2", random_quaternions)


# the last: ka-su2-1m-tuned's recipe (one pair of gates for all layers, they and the value gate reading P)
@pytest.mark.parametrize("fields", [{}, {"ff_proj": "shared", "self_coupling": False, "clock": 2},
                                    {"ff_proj": "shared", "self_coupling": False, "clock": 2, "shared_gates": True,
                                     "value_gate_input": "ff-proj", "gates_input": "ff-proj"}])
def test_cache_equals_recomputation(fields):
    checks.assert_cache_equals_recomputation(tiny_model(**fields).double().eval())


def test_gradcheck_layer():
    checks.assert_layer_passes_gradcheck("su2", random_quaternions)


def test_api_shapes_and_refusals():
    layer, q = make_layer(), random_quaternions(B, T, N)
    checks.assert_api_shapes(layer, q, 4, 3)  # |Im(conj(q) G)| ≤ |G| ≤ 1
    with pytest.raises(ValueError, match=r"\(B, T, 8, 4\)"):
        layer(random_phases(B, T, N))
    with pytest.raises(ValueError, match="phase_lag"):
        KuramotoAttention(N, H, group="su2", phase_lag=True)
    with pytest.raises(ValueError, match="ff='angles'"):
        KuramotoConfig(dim=N, heads=H, ff="angles", attention=replace(KuramotoConfig().attention, group="su2"))
    with pytest.raises(ValueError, match="group"):
        KuramotoAttention(N, H, group="so3")


def test_init_drift_embedding_and_optimizer_groups():
    geo = SU2()
    omega = geo.init_drift(N, H, 10000.0)
    assert omega.shape == (N, 3)  # RoPE's magnitudes within each head, axes spread over the sphere
    rates = (10000.0 ** (-torch.arange(D, dtype=torch.float64) / D)).repeat(H)
    assert torch.allclose(geo.drift_rate(omega).double(), rates, atol=1e-6)
    checks.assert_embedding_uniform_on_the_manifold(geo, 3)  # Haar-uniform
    model = tiny_model()
    assert model.phase_parameter_names() == {"phase_embedding", "blocks.0.attn.omega", "blocks.1.attn.omega"}


def test_preset_within_three_percent_of_one_million():
    # 64 quaternions, 4 layers of 4 heads, ff 524 behind a shared P (256 -> 64)
    checks.assert_preset_within_three_percent_of_one_million("ka-su2-1m", "su2", 1_000_216)
    # the tuned recipe: 80 quaternions, one pair of gates for all layers on P, ff 494
    checks.assert_preset_within_three_percent_of_one_million("ka-su2-1m-tuned", "su2", 999_864)
