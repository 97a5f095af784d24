"""The mathematics of Kuramoto attention (the paper), checked in float64."""

import itertools
import math

import literal
import pytest
import torch
from conftest import assert_paths_agree, random_phases

from kuramoto_attention.layers import naive, naive_variants
from kuramoto_attention.layers.gates import PhaseGates, metric_gates
from kuramoto_attention.layers.kuramoto_attention import KuramotoAttention
from kuramoto_attention.ops.torus import lift

B, T, K, H = 2, 7, 8, 2


def make_layer(**fields) -> KuramotoAttention:
    layer = KuramotoAttention(K, H, **fields).double()
    with torch.no_grad():  # move away from the symmetric init so every term matters
        for p in layer.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return layer


def gates_of(layer: KuramotoAttention, theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """g^q, g^k (B, H, T, k/H) the layer reads from θ (ones with gates off)."""
    module = layer.gate_module
    if module is None:
        ones = torch.ones(theta.shape[0], H, theta.shape[1], K // H, dtype=theta.dtype)
        return ones, ones
    gq, gk = metric_gates(module(lift(theta)), H).unbind(0)
    return gq, gk


def scores_of(layer: KuramotoAttention, theta: torch.Tensor) -> torch.Tensor:
    """The masked scores (B, H, T, T) from the literal references with the layer's parameters (tests/literal.py)."""
    mask = naive_variants.causal_mask(theta.shape[1], layer.config.self_coupling)
    return literal.literal_scores(layer, theta).masked_fill(~mask, float("-inf"))


def literal_scores(layer: KuramotoAttention, theta: torch.Tensor) -> torch.Tensor:
    """s_{t,u} with explicit loops over heads, t, u: the paper's formula, nothing shared."""
    gq, gk = gates_of(layer, theta)  # (B, H, T, k/H)
    omega = layer.omega.view(H, -1)
    tau = layer.log_tau.exp()
    d = K // H
    s = torch.full((B, H, T, T), float("-inf"), dtype=theta.dtype)
    for h in range(H):
        th = theta[..., h * d : (h + 1) * d]
        for t in range(T):
            for u in range(t + 1):
                kern = gq[:, h, t] * gk[:, h, u] * torch.cos(th[:, t] - th[:, u] + omega[h] * (t - u))
                s[:, h, t, u] = tau[h] / math.sqrt(d) * kern.sum(-1)
    return s


def test_scores_match_paper_formula():
    layer, theta = make_layer(), random_phases(B, T, K)
    _, attn = layer.coupling(theta)
    assert torch.allclose(attn, torch.softmax(literal_scores(layer, theta), -1), atol=1e-12)


def test_gates_positive_mean_one():
    gates = PhaseGates(PhaseGates.projection(2 * K, K)).double()
    gq, gk = metric_gates(gates(lift(random_phases(B, T, K))), H)
    for g in (gq, gk):
        assert (g > 0).all()
        assert torch.allclose(g.mean(-1), torch.ones_like(g.mean(-1)))


def test_proposition1_kuramoto_identity():
    """a = -sin θ Re G + cos θ Im G equals Σ_u A_{t,u} sin(θ_u − θ_t)."""
    # an elementwise bound of radius 10⁶ is the identity to 1e-13 at these increments: the fused step's move is a
    layer, theta = make_layer(bound="elementwise", radius_init=1e6), random_phases(B, T, K)
    a_ref, attn = layer.coupling(theta)
    with torch.no_grad():  # v(θ) ≡ 1 and no bound: the fused step's increment is a itself
        layer.value_gate.weight.zero_()
        layer.value_gate.bias.fill_(1.0)
    a_fused = layer(theta) - theta
    d = K // H
    th = theta.view(B, T, H, d).transpose(1, 2)
    re = attn @ th.cos()
    im = attn @ th.sin()
    tangent = (-th.sin() * re + th.cos() * im).transpose(1, 2).reshape(B, T, K)
    kuramoto = torch.einsum("bhtu,bhtuj->bhtj", attn, torch.sin(th[:, :, None] - th[:, :, :, None]))
    kuramoto = kuramoto.transpose(1, 2).reshape(B, T, K)
    for a in (a_ref, a_fused, tangent):
        assert torch.allclose(a, kuramoto, atol=1e-12)


def test_proposition2_softmax_solves_entropy_regularised_selection():
    layer, theta = make_layer(), random_phases(1, T, K)
    s = scores_of(layer, theta)[0]  # (H, T, T)
    attn = torch.softmax(s, -1)

    def objective(p: torch.Tensor, row: torch.Tensor) -> torch.Tensor:
        ent = -(p * torch.log(p.clamp_min(1e-300))).sum(-1)
        return (p * row).sum(-1) + ent

    for h, t in itertools.product(range(H), range(T)):
        row = s[h, t, : t + 1]
        best = objective(attn[h, t, : t + 1], row)
        assert torch.allclose(best, torch.logsumexp(row, -1), atol=1e-12)
        rivals = torch.distributions.Dirichlet(torch.ones(t + 1, dtype=torch.float64) * 0.5).sample((2000,))
        rivals = torch.cat((rivals, torch.eye(t + 1, dtype=torch.float64)))
        assert (objective(rivals, row) <= best + 1e-12).all()
        # and a small perturbation inside the simplex strictly lowers it
        if t > 0:
            nudged = attn[h, t, : t + 1] + 1e-3 * (rivals[0] - attn[h, t, : t + 1])
            assert objective(nudged, row) < best


def test_lemma3_increment_is_gradient_of_coherence_energy():
    layer, theta = make_layer(), random_phases(B, T, K)
    a, attn = layer.coupling(theta)
    attn = attn.detach()  # fixed coupling A
    d = K // H
    th_fixed = theta.view(B, T, H, d).transpose(1, 2)
    for t in range(T):
        th_t = theta[:, t].clone().requires_grad_()
        th_t_h = th_t.view(B, H, d)
        # E_t = Σ_u A_{t,u} Σ_j cos(θ_{u,j} − θ_{t,j})
        energy = (attn[:, :, t, :, None] * torch.cos(th_fixed - th_t_h[:, :, None])).sum()
        (grad,) = torch.autograd.grad(energy, th_t)
        assert torch.allclose(grad, a[:, t], atol=1e-12)


def test_remark1_drift_is_rotary_on_the_circle():
    """cos(θ_t − θ_u + ω(t−u)) = cos((θ_t + ωt) − (θ_u + ωu)): RoPE on the unit circle."""
    layer, theta = make_layer(), random_phases(B, T, K)
    s = literal_scores(layer, theta)
    pos = torch.arange(T, dtype=torch.float64)[:, None]
    rotated = theta + layer.omega.detach() * pos  # rotate each query/key phase by ω·position
    # gates read the unrotated phases: rotate only the kernel's phases
    gq, gk = gates_of(layer, theta)
    d = K // H
    rot = rotated.view(B, T, H, d).transpose(1, 2)
    q = torch.cat((gq * rot.cos(), gq * rot.sin()), -1)
    k = torch.cat((gk * rot.cos(), gk * rot.sin()), -1)
    tau = layer.log_tau.exp().view(H, 1, 1)
    dot = tau / math.sqrt(d) * q @ k.transpose(-1, -2)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    assert torch.allclose(dot[..., mask], s[..., mask], atol=1e-12)


FIELDS = list(
    itertools.product(
        [True, False],
        ["learned", "zero"],
        ["circular", "projection"],
        ["norm", "elementwise"],
        ["learned", "fixed"],
    )
)


@pytest.mark.parametrize("gates,omega,value,bound,tau", FIELDS)
def test_fused_equals_reference_forward_and_gradients(gates, omega, value, bound, tau):
    assert_fused_equals_reference(make_layer(gates=gates, omega=omega, value=value, bound=bound, tau=tau))


def assert_fused_equals_reference(layer: KuramotoAttention) -> torch.Tensor:
    """Both paths give the same output and the same gradients (the state and every parameter); returns it."""
    return assert_paths_agree(layer, random_phases(B, T, K))


@pytest.mark.parametrize("value", ["circular", "projection"])
def test_without_self_coupling_fused_equals_reference(value):
    assert_fused_equals_reference(make_layer(value=value, self_coupling=False))


@pytest.mark.parametrize("self_coupling", [True, False])
def test_phase_lag_fused_equals_reference_and_literal_scores(self_coupling):
    layer = make_layer(phase_lag=True, self_coupling=self_coupling)
    th = assert_fused_equals_reference(layer)
    if self_coupling:  # s_{t,u} = τ/√d Σ_j g^q g^k cos(θ_t − θ_u + ω_j (t − u) + β_j), written out
        lag = layer.extras.lag.view(H, -1)
        scores = scores_of(layer, th)
        gq, gk = gates_of(layer, th)
        d = K // H
        for h, t, u in itertools.product(range(H), range(T), range(T)):
            if u <= t:
                angle = th[:, t, h * d:(h + 1) * d] - th[:, u, h * d:(h + 1) * d] + layer.omega.view(H, -1)[h] * (t - u)
                kern = gq[:, h, t] * gk[:, h, u] * torch.cos(angle + lag[h])
                literal = layer.log_tau[h].exp() / math.sqrt(d) * kern.sum(-1)
                assert torch.allclose(scores[:, h, t, u], literal, atol=1e-12)


@pytest.mark.parametrize("reader", ["value", "gates"])
def test_inputs_through_a_projection_fused_equal_reference(reader):
    """v(θ) = W_v P ψ(θ) + b, or gates ρ(W P ψ(θ) + b), with a P the layer does not own: both paths agree, P gets
    gradients, and the step (value) or the gates, written out, read P ψ(θ)."""
    proj = torch.nn.Linear(2 * K, 5, bias=False).double()
    layer = make_layer(self_coupling=False, **{{"value": "value_input", "gates": "gate_input"}[reader]: proj})
    assert not any(p is proj.weight for p in layer.parameters())
    th = assert_fused_equals_reference(layer)
    psi = lift(th)
    if reader == "value":
        assert layer.value_gate.in_features == 5
        a, _ = layer.coupling(th)
        v = proj(psi) @ layer.value_gate.weight.T + layer.value_gate.bias
        assert torch.allclose(layer(th, path="reference"), th + layer.bound(v * a), atol=1e-12)
    else:
        assert layer.gates.proj.in_features == 5
        g = torch.nn.functional.softplus(proj(psi) @ layer.gates.proj.weight.T + layer.gates.proj.bias)
        gq = g[..., :K].view(B, T, H, -1)
        assert torch.allclose(gates_of(layer, th)[0], (gq / gq.mean(-1, keepdim=True)).transpose(1, 2), atol=1e-12)
    layer(th.requires_grad_()).sum().backward()
    assert proj.weight.grad is not None and proj.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("shared", [False, True])
def test_gates_and_value_gate_reading_one_map_compute_it_once(shared):
    """When the metric gates and the value gate read the same P (ka-1m-tuned), the fused path computes P ψ(θ) once
    per call (twice when they read different maps); P's gradient is the reference path's."""
    proj = torch.nn.Linear(2 * K, 5, bias=False).double()
    other = torch.nn.Linear(2 * K, 5, bias=False).double()
    layer = make_layer(self_coupling=False, gate_input=proj, value_input=proj if shared else other)
    calls = []
    for m in (proj, other):
        m.register_forward_hook(lambda *_: calls.append(1))
    th = assert_fused_equals_reference(layer).requires_grad_()
    for grad in (False, True):  # the plain expressions and the hand-fused path
        calls.clear()
        with torch.set_grad_enabled(grad):
            fused = layer(th)
        assert len(calls) == (1 if shared else 2) == len(layer.input_maps())
    (g_fused,) = torch.autograd.grad(fused.sum(), [proj.weight])
    (g_ref,) = torch.autograd.grad(layer(th, path="reference").sum(), [proj.weight])
    assert torch.allclose(g_fused, g_ref, atol=1e-10, rtol=0)


def test_gates_read_through_a_map_of_their_input_width_only():
    with pytest.raises(ValueError, match="the gates read 5 inputs, P gives 6"):
        PhaseGates(PhaseGates.projection(5, K), torch.nn.Linear(2 * K, 6, bias=False))
    plain = PhaseGates(PhaseGates.projection(2 * K, K))  # reads the lift: a precomputed P ψ(θ) is a mistake
    psi = torch.randn(1, 3, 2 * K)
    with pytest.raises(ValueError, match="reads the lift"):
        plain(psi, mapped=psi)


@pytest.mark.parametrize("self_coupling", [True, False])
def test_clock_fused_equals_reference_and_literal_scores(self_coupling):
    """s_{t,u} + τ/√d Σ_c w_c cos(ω_c (t − u) + β_c): the clock term written out; the values keep their width."""
    layer = make_layer(clock=3, self_coupling=self_coupling, clock_init=2.0)
    th = assert_fused_equals_reference(layer)
    if self_coupling:
        clock, d = layer.clock, K // H
        scores = scores_of(layer, th)
        base = literal_scores(layer, th)
        for h, t, u in itertools.product(range(H), range(T), range(T)):
            if u <= t:
                term = (clock.weight[h] * torch.cos(clock.omega[h] * (t - u) + clock.lag[h])).sum()
                literal = base[:, h, t, u] + layer.log_tau[h].exp() / math.sqrt(d) * term
                assert torch.allclose(scores[:, h, t, u], literal, atol=1e-12)
    fresh = KuramotoAttention(K, H, clock=3).double()  # w = 0 at init: the paper's score
    plain = KuramotoAttention(K, H).double()
    plain.load_state_dict({k: v for k, v in fresh.state_dict().items() if not k.startswith("clock.")})
    theta = random_phases(B, T, K)
    torch.testing.assert_close(fresh(theta), plain(theta), rtol=0, atol=1e-12)
    assert torch.equal(KuramotoAttention(K, H, clock=2, clock_init=3.0).clock.weight, torch.full((H, 2), 3.0))
    with pytest.raises(ValueError, match="clock"):
        KuramotoAttention(K, H, clock=-1)


def test_phase_lag_lets_a_head_prefer_an_earlier_offset_by_position():
    """Tokens with identical phases: without β the kernel Σ_j cos(ω_j (t − u)) peaks at u = t; with
    β_j = −2 ω_j it peaks at u = t − 2."""
    layer = KuramotoAttention(K, 1, gates=False, tau="fixed", tau_init=8.0).double()
    with torch.no_grad():
        layer.omega.copy_(torch.linspace(0.1, 0.5, K))
    theta = torch.full((1, T, K), 0.7, dtype=torch.float64)
    _, attn = layer.coupling(theta)
    assert (attn[0, 0].argmax(-1) == torch.arange(T)).all()
    lagged = KuramotoAttention(K, 1, gates=False, tau="fixed", tau_init=8.0, phase_lag=True).double()
    with torch.no_grad():
        lagged.omega.copy_(layer.omega)
        lagged.extras.lag.copy_(-2 * layer.omega)
    _, attn = lagged.coupling(theta)
    assert (attn[0, 0, 2:].argmax(-1) == torch.arange(T - 2)).all()


def test_dropping_self_coupling_rescales_the_increment():
    """sin(θ_t − θ_t) = 0: without the self term, a_t = a_t(with it) / (1 − A_tt); the first token's is 0."""
    layer, theta = make_layer(), random_phases(B, T, K)
    a_with, attn = layer.coupling(theta)
    layer.config.self_coupling = False
    a_without, attn_without = layer.coupling(theta)
    self_weight = torch.diagonal(attn, dim1=-2, dim2=-1)  # (B, H, T)
    scale = (1.0 / (1.0 - self_weight[..., 1:])).repeat_interleave(K // H, dim=1).transpose(1, 2)
    assert torch.allclose(a_without[:, 1:], a_with[:, 1:] * scale, atol=1e-12)
    assert a_without[:, 0].abs().max() < 1e-15  # Im(e^{−iθ} e^{iθ}) = 0, to rounding
    assert torch.diagonal(attn_without, dim1=-2, dim2=-1)[..., 1:].abs().max() == 0


def test_shared_gates_fused_equals_reference():
    shared = PhaseGates(PhaseGates.projection(2 * K, K)).double()
    layer = KuramotoAttention(K, H, shared_gates=shared).double()
    assert not any(n.startswith("gates") for n, _ in layer.named_parameters())
    theta = random_phases(B, T, K)
    assert torch.allclose(layer(theta), layer(theta, path="reference"), atol=1e-10)


@pytest.mark.parametrize("dtype,atol", [(torch.float32, 1e-4)])
def test_fused_equals_reference_float32(dtype, atol):
    layer = make_layer().to(dtype)
    theta = random_phases(B, 32, K, dtype=dtype)
    assert torch.allclose(layer(theta), layer(theta, path="reference"), atol=atol)


def test_fused_equals_reference_bf16_autocast():
    layer = make_layer().float()
    theta = random_phases(B, 32, K, dtype=torch.float32)
    ref = layer(theta, path="reference")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fused = layer(theta)
    assert fused.dtype == torch.float32  # phases stay fp32
    # bf16 keeps ~3 significant digits of the increment, whose scale is the bound radius
    assert (fused - ref).abs().max() < 1e-2 * layer.bound.radius.item()


def test_causal_attention_without_self_is_the_masked_softmax():
    """The shifted-key form of ``exclude_self`` equals SDPA with ``causal_mask(exclude_self=True)``, for a
    full sequence, a chunk after a cache, one new token, and the very first token."""
    from kuramoto_attention.ops.attention import causal_attention, causal_mask

    q_all, k_all, v_all = (torch.randn(2, 3, 9, 4, dtype=torch.float64) for _ in range(3))
    for t, s in ((9, 9), (4, 9), (1, 9), (1, 1)):
        q, k, v = q_all[..., s - t:s, :], k_all[..., :s, :], v_all[..., :s, :]
        mask = causal_mask(t, s, q.device, exclude_self=True)
        want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.5)
        got = causal_attention(q, k, v, scale=0.5, exclude_self=True)
        assert got.shape == (2, 3, t, 4) and torch.allclose(got, want, atol=1e-12)


def test_return_attention_and_coupling_api():
    layer, theta = make_layer(), random_phases(B, T, K)
    new, attn = layer(theta, return_attention=True)
    assert new.shape == (B, T, K) and attn.shape == (B, H, T, T)
    assert torch.allclose(attn.sum(-1), torch.ones(B, H, T, dtype=torch.float64))
    assert (attn.triu(1) == 0).all()  # causal
    a, attn2 = layer.coupling(theta)
    assert a.shape == (B, T, K) and torch.equal(attn, attn2)
    assert (a.abs() <= 1 + 1e-12).all()


@pytest.mark.parametrize("value", ["circular", "projection"])
def test_attention_step_is_2pi_periodic(value):
    layer = make_layer(value=value)
    theta = random_phases(B, T, K)
    shift = 2 * math.pi * torch.randint(-3, 4, theta.shape, dtype=torch.float64)
    out, out_shifted = layer(theta), layer(theta + shift)
    # every input is read through ψ(θ), so the increment is periodic: same point of the torus
    assert torch.allclose(out_shifted - shift, out, atol=1e-10)


def test_layer_causal():
    layer, theta = make_layer(), random_phases(1, T, K)
    changed = theta.clone()
    changed[:, 4:] += 1.0
    assert torch.allclose(layer(theta)[:, :4], layer(changed)[:, :4], atol=1e-12)


def test_gradcheck_layer():
    layer = KuramotoAttention(4, 2).double()
    theta = random_phases(1, 4, 4).requires_grad_()
    assert torch.autograd.gradcheck(lambda x: layer(x), (theta,))
    assert torch.autograd.gradcheck(lambda x: layer(x, path="reference"), (theta,))


def test_bad_fields_raise():
    with pytest.raises(ValueError, match="divisible"):
        KuramotoAttention(10, 3)
    with pytest.raises(ValueError, match="omega"):
        KuramotoAttention(8, 2, omega="fast")
    with pytest.raises(ValueError, match="bound"):
        KuramotoAttention(8, 2, bound="clip")
    with pytest.raises(TypeError, match="no field 'content_lag'"):  # retired fields are gone, not ignored
        KuramotoAttention(8, 2, content_lag=True)
    for bad in (dict(heads=0), dict(dim=-16), dict(tau_init=float("inf")), dict(radius_init=0.0)):
        with pytest.raises(ValueError):
            KuramotoAttention(**{"dim": 8, "heads": 2, **bad})


@pytest.mark.parametrize("fields", [{}, {"gates": False}, {"bound": "elementwise"}])
def test_fused_equals_the_paper_in_one_file(fields):
    """The fused layer against ``naive.py``'s literal formulas alone, fed the layer's parameters: gates ρ, scores with
    the T × T kernel, causal softmax, circular mean, tangent increment (Prop. 1), value gate, bound, step."""
    layer = make_layer(**fields)
    theta = random_phases(B, T, K)
    psi = naive.psi(theta)
    if layer.gates is None:
        gq = gk = torch.ones(B, H, T, K // H, dtype=theta.dtype)
    else:
        gq, gk = naive.gates(psi, layer.gates.proj.weight, layer.gates.proj.bias, H)
    kern = naive.kernel(naive.heads(theta, H), layer.omega.view(H, -1))
    attn = naive.causal_softmax(naive.score(kern, gq, gk, layer.log_tau.exp()))
    re_g, im_g = naive.circular_mean(attn, naive.heads(theta, H))
    a = naive.merge(naive.tangent_increment(naive.heads(theta, H), re_g, im_g))
    torch.testing.assert_close(a, naive.merge(naive.kuramoto_sum(attn, naive.heads(theta, H))), rtol=0, atol=1e-12)
    v = naive.value_gate(psi, layer.value_gate.weight, layer.value_gate.bias)
    want = naive.step(theta, a, v, layer.config.bound, layer.bound.radius)
    torch.testing.assert_close(layer(theta), want, rtol=0, atol=1e-10)


@pytest.mark.parametrize("fields", [{"self_coupling": False, "phase_lag": True, "clock": 2, "clock_init": 1.5},
                                    {"self_coupling": False, "successor_heads": 1},
                                    {"self_coupling": False, "successor_heads": 2, "phase_lag": True, "harmonics": 2}])
def test_fused_equals_the_variants_written_out(fields):
    """The variants outside the paper against ``naive_variants.py`` (and the harmonics' literal sum)."""
    assert_fused_equals_reference(make_layer(**fields))


def test_every_preset_and_ablation_stays_on_a_fused_attention_kernel():
    """Restricted to the fused SDPA backends, a training step of every Kuramoto preset and layer ablation runs
    (PyTorch raises when it would fall back to the math path, which materialises the T×T scores)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from kuramoto_attention.models.presets import PRESETS, build_model, get_preset

    variants = [(name, {}) for name, (family, _) in PRESETS.items() if family == "kuramoto"]
    variants += [("ka-tiny", {"value": "projection"}), ("ka-tiny", {"clock": 2}), ("ka-tiny", {"gates": False}),
                 ("ka-tiny", {"self_coupling": False, "clock": 3}), ("ka-1m-tuned", {"harmonics": 2}),
                 ("ka-1m-tuned", {"successor_heads": 2}), ("ka-tiny", {"bound": "elementwise"}),
                 ("ka-su2-1m-tuned", {"successor_heads": 4})]
    from kuramoto_attention.models.config import apply_overrides

    for name, fields in variants:
        family, cfg = get_preset(name)
        cfg = apply_overrides(family, cfg, {**fields, "depth": 1})
        model = build_model(family, cfg)
        idx = torch.randint(0, 256, (1, 16))
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
            model(idx).sum().backward()
            with torch.no_grad():
                model(idx)


def test_the_elementwise_bound_is_no_norm_bound():
    """A geometry is never handed an elementwise bound as a per-token rescaling."""
    assert KuramotoAttention(K, H, bound="elementwise").bound.norm() is None
