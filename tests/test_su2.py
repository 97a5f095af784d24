"""Kuramoto attention on SU(2) (issue 25): its mathematics in float64, as tests/test_layer.py checks the torus's."""

import itertools
import math
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_paths_agree, random_phases

from kuramoto_attention.layers import naive_su2
from kuramoto_attention.layers.gates import metric_gates
from kuramoto_attention.layers.kuramoto_attention import KuramotoAttention
from kuramoto_attention.layers.su2 import SU2, conj, exp_pure, im_conj_mul, log_unit, qmul
from kuramoto_attention.models.config import apply_overrides
from kuramoto_attention.models.kuramoto import KuramotoConfig, KuramotoLM
from kuramoto_attention.models.presets import NOMINAL, build_model, get_preset

B, T, N, H = 2, 7, 8, 2
D = N // H


def random_quaternions(*shape: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Haar-uniform unit quaternions (..., 4)."""
    return F.normalize(torch.randn(*shape, 4, dtype=dtype), dim=-1)


def make_layer(**fields) -> KuramotoAttention:
    layer = KuramotoAttention(N, H, group="su2", **fields).double()
    with torch.no_grad():  # away from the symmetric init so that every term matters
        for p in layer.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return layer


def gates_of(layer: KuramotoAttention, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    module = layer.gate_module
    if module is None:
        ones = torch.ones(q.shape[0], H, q.shape[1], D, dtype=q.dtype)
        return ones, ones
    gq, gk = metric_gates(module(q.flatten(-2)), H).unbind(0)
    return gq, gk


# --------------------------------------------------------------------------- primitives
def test_quaternion_primitives_match_the_written_out_products():
    p, q = random_quaternions(5, 3), random_quaternions(5, 3)
    assert torch.allclose(qmul(p, q), naive_su2.product(p, q), atol=1e-15)
    assert torch.allclose(qmul(q, conj(q)), torch.tensor([1.0, 0, 0, 0], dtype=torch.float64).expand(5, 3, 4),
                          atol=1e-15)
    assert torch.allclose(im_conj_mul(p, q), naive_su2.product(naive_su2.conjugate(p), q)[..., 1:], atol=1e-15)
    i, j, k = torch.eye(4, dtype=torch.float64)[1:]
    assert torch.equal(qmul(i, j), k) and torch.equal(qmul(j, i), -k)  # non-abelian: ij = k = −ji
    for scale in (1e-9, 1e-3, 0.0999, 0.1001, 1.0, 3.0, 10.0):  # both sides of the series' threshold |w| = 0.1
        w = F.normalize(torch.randn(50, 3, dtype=torch.float64), dim=-1) * scale
        assert torch.allclose(exp_pure(w), naive_su2.exponential(w), atol=1e-14, rtol=0)
        if scale < math.pi:
            assert torch.allclose(log_unit(exp_pure(w)), w, atol=1e-12)
    assert torch.equal(exp_pure(torch.zeros(3, dtype=torch.float64)), torch.tensor([1.0, 0, 0, 0],
                                                                                   dtype=torch.float64))


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
    with torch.no_grad():
        layer.value_gate.weight.zero_()
        layer.value_gate.bias.fill_(1.0)
    xi_fused = log_unit(qmul(conj(q), layer(q)))  # q' = q exp(ξ), |ξ| ≤ 1 < π
    qh = q.view(B, T, H, D, 4).transpose(1, 2)  # (B, H, T, d, 4)
    g = torch.einsum("bhtu,bhujc->bhtjc", attn, qh)
    tangent = im_conj_mul(qh, g).transpose(1, 2).reshape(B, T, N, 3)
    lohe = torch.zeros(B, H, T, D, 3, dtype=torch.float64)
    for t, u in itertools.product(range(T), range(T)):
        lohe[:, :, t] += attn[:, :, t, u, None, None] * naive_su2.product(naive_su2.conjugate(qh[:, :, t]),
                                                                          qh[:, :, u])[..., 1:]
    lohe = lohe.transpose(1, 2).reshape(B, T, N, 3)
    for xi in (xi_ref, xi_fused, tangent):
        assert torch.allclose(xi, lohe, atol=1e-10)


def literal_scores(layer: KuramotoAttention, q: torch.Tensor) -> torch.Tensor:
    """s_{t,u} = τ/√d Σ_j g^q g^k ⟨exp(tΩ_j) q_{t,j}, exp(uΩ_j) q_{u,j}⟩, loops over heads, t, u."""
    gq, gk = gates_of(layer, q)
    omega, tau = layer.omega.view(H, D, 3), layer.log_tau.exp()
    s = torch.full((q.shape[0], H, T, T), float("-inf"), dtype=q.dtype)
    for h in range(H):
        qh = q[:, :, h * D:(h + 1) * D]
        for t in range(T):
            for u in range(t + 1):
                a = naive_su2.product(naive_su2.exponential(t * omega[h]), qh[:, t])
                b = naive_su2.product(naive_su2.exponential(u * omega[h]), qh[:, u])
                s[:, h, t, u] = tau[h] / math.sqrt(D) * (gq[:, h, t] * gk[:, h, u] * (a * b).sum(-1)).sum(-1)
    return s


def test_scores_match_the_issue_formula_and_remark1():
    """A is the causal softmax of the drifted, gated quaternion dot products (the reference path writes the kernel
    in its relative form ⟨q_t, exp((u − t)Ω) q_u⟩); Remark 1's analogue: the drift is a left rotation of queries
    and keys, the fused path's features exp(tΩ) q_t give the same scores."""
    layer, q = make_layer(), random_quaternions(B, T, N)
    _, attn = layer.coupling(q)
    s = literal_scores(layer, q)
    assert torch.allclose(attn, torch.softmax(s, -1), atol=1e-12)
    pos = torch.arange(T, dtype=torch.float64)
    logits = layer.gate_module(q.flatten(-2))
    qf, kf = layer.geometry.query_key(q, pos, layer.omega, logits, H, layer.log_tau.exp(), torch.float64)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    assert torch.allclose((qf @ kf.transpose(-1, -2) / math.sqrt(D))[..., mask], s[..., mask], atol=1e-12)


def test_relative_position_shifting_every_position_leaves_A_unchanged():
    layer, q = make_layer(), random_quaternions(B, T, N)
    logits = layer.gate_module(q.flatten(-2))
    scores = []
    for shift in (0.0, 5.0, 1234.0):
        pos = torch.arange(T, dtype=torch.float64) + shift
        qf, kf = layer.geometry.query_key(q, pos, layer.omega, logits, H, layer.log_tau.exp(), torch.float64)
        scores.append(torch.softmax((qf @ kf.transpose(-1, -2)).masked_fill(~torch.ones(T, T).tril().bool(), -1e30),
                                    -1))
    for s in scores[1:]:
        assert torch.allclose(s, scores[0], atol=1e-10)


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


FIELDS = list(itertools.product([True, False], ["learned", "zero"], ["circular", "projection"],
                                ["norm", "elementwise"], ["learned", "fixed"]))


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
    """A torus weight reading ψ(θ) = [cos θ, sin θ] (…, 2n) as one reading φ(q) (…, 4n), oscillator-major: cos θ_j is
    q_j's real part, sin θ_j its i part; the j and k columns get noise (they multiply zeros in U(1))."""
    out = torch.randn(*w.shape[:-1], n, 4, dtype=w.dtype)
    out[..., 0], out[..., 1] = w[..., :n], w[..., n:]
    return out.flatten(-2)


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
    names = ("gates", "omega", "value", "bound", "tau", "self_coupling", "clock")
    fields = {f: getattr(torus.config, f) for f in names}
    layer = KuramotoAttention(N, H, group="su2", **fields).double()
    n = N
    src = dict(torus.state_dict())
    with torch.no_grad():
        for name, p in layer.state_dict().items():
            w = src[name]
            if name == "omega":
                p.copy_(tangent_rows(w[:, None]).view(n, 3))  # Ω_j = ω_j i
            elif name in ("gates.proj.weight", "value_gate.weight"):
                p.copy_(lift_columns(w, n))
            elif name == "value_proj.weight":
                p.copy_(tangent_rows(lift_columns(w, n)))
            elif name == "bound.log_radius" and torus.config.bound == "elementwise":
                p.copy_(tangent_rows(w[:, None]).view(-1) + torch.tensor([0.0, 1.0, 1.0]).repeat(n).double())
            else:
                p.copy_(w)
    return layer


@pytest.mark.parametrize("fields", [{}, {"gates": False}, {"bound": "elementwise"}, {"value": "projection"},
                                    {"omega": "zero", "tau": "fixed"}, {"self_coupling": False, "clock": 3}])
def test_reduction_to_the_torus(fields):
    """States, drifts and weights confined to U(1) = {cos θ + i sin θ}: the SU(2) layer's update is the torus
    layer's, on both paths, and its A is the torus layer's A."""
    torus = KuramotoAttention(N, H, **fields).double()
    with torch.no_grad():
        for p in torus.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    layer, theta = su2_twin(torus), random_phases(B, T, N)
    for path in ("fused", "reference"):
        assert torch.allclose(layer(u1(theta), path=path), u1(torus(theta, path=path)), atol=1e-12)
    a_t, attn_t = torus.coupling(theta)
    xi, attn = layer.coupling(u1(theta))
    assert torch.allclose(attn, attn_t, atol=1e-13)
    if torus.config.value == "circular":
        assert torch.allclose(xi, tangent_rows(a_t.transpose(0, 2)).view(N, 3, T, B).permute(3, 2, 0, 1), atol=1e-13)


def test_reduction_to_the_torus_of_the_whole_model():
    """Embedding (w = θ i), every layer, the feed-forward through the shared P and the readout: the SU(2) model on
    U(1) gives the torus model's logits."""
    cfg = KuramotoConfig(dim=N, depth=2, heads=H, ff_hidden=16, ff_proj="shared")
    torus = KuramotoLM(cfg).double()
    su2 = KuramotoLM(replace(cfg, attention=replace(cfg.attention, group="su2"))).double()
    with torch.no_grad():
        for p in torus.parameters():
            p.add_(torch.randn_like(p) * 0.1)
        src = torus.state_dict()
        for name, p in su2.state_dict().items():
            w = src[name]
            if name == "phase_embedding":
                p.copy_(torch.stack((w, torch.zeros_like(w), torch.zeros_like(w)), dim=-1))  # w = θ i
            elif name.endswith("omega"):
                p.copy_(tangent_rows(w[:, None]).view(N, 3))
            elif name.endswith(("gates.proj.weight", "value_gate.weight")) or name in ("shared_ff_proj.weight",
                                                                                       "prototypes.weight"):
                p.copy_(lift_columns(w, N))
            elif name.endswith("mlp.w_out.weight"):
                p.copy_(tangent_rows(w))
            else:
                p.copy_(w)
    idx = torch.randint(0, 256, (B, T))
    assert torch.allclose(su2.embed(idx), u1(torus.embed(idx)), atol=1e-15)
    assert torch.allclose(su2(idx), torus(idx), atol=1e-10)


# --------------------------------------------------------------------------- symmetry
def invariant_layer(**fields) -> KuramotoAttention:
    """Gates off and a constant value gate: nothing the layer reads sees the state except through the score."""
    layer = make_layer(gates=False, **fields)
    with torch.no_grad():
        layer.value_gate.weight.zero_()
    return layer


def test_right_multiplication_is_a_symmetry():
    """q ↦ q h leaves the drifted score unchanged (left rotations and right multiplication commute with ⟨·,·⟩),
    and the update is equivariant, q'_t h, when the gates are off and the value gate is constant."""
    q, h = random_quaternions(B, T, N), random_quaternions(N)
    gated = make_layer()
    kern = gated.geometry.reference_kernel(q, gated.omega, H)
    assert torch.allclose(gated.geometry.reference_kernel(qmul(q, h), gated.omega, H), kern, atol=1e-12)
    for fields in ({}, {"self_coupling": False, "clock": 2}, {"omega": "zero"}):
        layer = invariant_layer(**fields)
        for path in ("fused", "reference"):
            assert torch.allclose(layer(qmul(q, h), path=path), qmul(layer(q, path=path), h), atol=1e-12)
        _, attn = layer.coupling(q)
        assert torch.allclose(layer.coupling(qmul(q, h))[1], attn, atol=1e-12)
    # what breaks it: gates and the value gate read φ(q), which right multiplication changes; so does a per-coordinate
    # (elementwise) bound, which does not commute with rotating an increment
    broken = [make_layer(), invariant_layer(bound="elementwise")]
    with torch.no_grad():
        broken.append(invariant_layer())
        broken[-1].value_gate.weight.normal_()
    for layer in broken:
        assert not torch.allclose(layer(qmul(q, h)), qmul(layer(q), h), atol=1e-6)


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
    torch.manual_seed(0)
    layers = [KuramotoAttention(4, 1, group="su2") for _ in range(2)]
    with torch.no_grad():
        for layer in layers:
            layer.bound.log_radius.fill_(math.log(3.0))  # large steps: exp(w) far from 1
    corrections = []
    move = SU2.move

    def recording(self, x, step, bound):
        w = bound(step).to(x.dtype).unflatten(-1, (-1, 3))
        corrections.append((torch.linalg.vector_norm(qmul(x, exp_pure(w)), dim=-1) - 1).abs().max().item())
        return move(self, x, step, bound)

    q = random_quaternions(1, 4096, 4, dtype=torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad(), pytest.MonkeyPatch.context() as mp:
        mp.setattr(SU2, "move", recording)
        for _ in range(6):
            for layer in layers:
                q = layer(q)
                assert q.dtype == torch.float32
    assert len(corrections) == 12 and max(corrections) < 1e-6
    assert (torch.linalg.vector_norm(q, dim=-1) - 1).abs().max() < 1e-6
    assert torch.isfinite(q).all()


# --------------------------------------------------------------------------- causality, cache, gradcheck, API
def test_layer_and_model_are_causal():
    layer, q = make_layer(), random_quaternions(1, T, N)
    changed = q.clone()
    changed[:, 4:] = random_quaternions(1, T - 4, N)
    for path in ("fused", "reference"):
        assert torch.allclose(layer(q, path=path)[:, :4], layer(changed, path=path)[:, :4], atol=1e-12)
    model = tiny_model().double()
    idx = torch.randint(0, 256, (1, 12))
    other = idx.clone()
    other[:, 7:] = (other[:, 7:] + 1) % 256
    assert torch.allclose(model(idx)[:, :7], model(other)[:, :7], atol=1e-12)


def tiny_model(**fields) -> KuramotoLM:
    cfg = KuramotoConfig(dim=8, depth=2, heads=2, ff_hidden=16)
    return KuramotoLM(apply_overrides("kuramoto", cfg, {"group": "su2", **fields}))  # as `--model group=su2` does


@pytest.mark.parametrize("fields", [{}, {"ff_proj": "shared", "self_coupling": False, "clock": 2}])
def test_cache_equals_recomputation(fields):
    model = tiny_model(**fields).double().eval()
    idx = torch.randint(0, 256, (2, 10))
    full = model(idx)
    caches = model.new_caches(4)  # grows past its first capacity on the way
    steps = [model(idx[:, :3], caches=caches)] + [model(idx[:, t:t + 1], caches=caches) for t in range(3, 10)]
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-10)
    prompt = idx[:, :4]
    assert torch.equal(model.generate(prompt, 6, temperature=0), model.generate(prompt, 6, temperature=0,
                                                                                use_cache=False))


def test_gradcheck_layer():
    layer = KuramotoAttention(4, 2, group="su2").double()
    q = random_quaternions(1, 4, 4).requires_grad_()
    assert torch.autograd.gradcheck(lambda x: layer(x), (q,))
    assert torch.autograd.gradcheck(lambda x: layer(x, path="reference"), (q,))


def test_api_shapes_and_refusals():
    layer, q = make_layer(), random_quaternions(B, T, N)
    new, attn = layer(q, return_attention=True)
    assert new.shape == (B, T, N, 4) and attn.shape == (B, H, T, T)
    assert torch.allclose(attn.sum(-1), torch.ones(B, H, T, dtype=torch.float64)) and (attn.triu(1) == 0).all()
    xi, attn2 = layer.coupling(q)
    assert xi.shape == (B, T, N, 3) and torch.equal(attn, attn2)
    assert (torch.linalg.vector_norm(xi, dim=-1) <= 1 + 1e-12).all()  # |Im(conj(q) G)| ≤ |G| ≤ 1
    with pytest.raises(ValueError, match=r"\(B, T, 8, 4\)"):
        layer(random_phases(B, T, N))
    with pytest.raises(ValueError, match="torus only"):
        KuramotoAttention(N, H, group="su2", phase_lag=True)
    with pytest.raises(ValueError, match="torus only"):
        KuramotoConfig(dim=N, heads=H, ff="angles", attention=replace(KuramotoConfig().attention, group="su2"))
    with pytest.raises(ValueError, match="group"):
        KuramotoAttention(N, H, group="so3")


def test_init_drift_embedding_and_optimizer_groups():
    geo = SU2()
    omega = geo.init_drift(N, H, 10000.0)
    assert omega.shape == (N, 3)  # RoPE's magnitudes within each head, axes spread over the sphere
    rates = (10000.0 ** (-torch.arange(D, dtype=torch.float64) / D)).repeat(H)
    assert torch.allclose(geo.drift_rate(omega).double(), rates, atol=1e-6)
    table = geo.init_embedding(256, N)
    assert table.shape == (256, N, 3) and (torch.linalg.vector_norm(table, dim=-1) <= math.pi + 1e-6).all()
    states = geo.embed(table, torch.arange(256)[None])
    assert (torch.linalg.vector_norm(states, dim=-1) - 1).abs().max() < 1e-6
    assert states.mean(dim=(0, 1, 2)).abs().max() < 0.05  # Haar-uniform: mean 0 over 256 × 8 draws (sd 1/64)
    model = tiny_model()
    assert model.phase_parameter_names() == {"phase_embedding", "blocks.0.attn.omega", "blocks.1.attn.omega"}


def test_preset_within_three_percent_of_one_million():
    family, cfg = get_preset("ka-su2-1m")
    assert cfg.attention.group == "su2"
    with torch.device("meta"):
        n = build_model(family, cfg).num_params()
    assert abs(n / NOMINAL["ka-su2-1m"] - 1) <= 0.03
    assert n == 1_000_216  # 64 quaternions, 4 layers of 4 heads, ff 524 behind a shared P (256 -> 64)
