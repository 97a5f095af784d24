"""Daido coupling (``harmonics`` > 1): the mathematics of the higher harmonics, checked in float64."""

import itertools

import pytest
import torch
from conftest import assert_paths_agree, random_phases

from kuramoto_attention.diagnostics.flops import model_flops
from kuramoto_attention.layers.kuramoto_attention import KuramotoAttention
from kuramoto_attention.models.config import apply_overrides
from kuramoto_attention.models.presets import build_model, get_preset
from kuramoto_attention.ops.attention import KVCache

B, T, K, H = 2, 7, 8, 2


def make_layer(harmonics: int = 3, **fields) -> KuramotoAttention:
    layer = KuramotoAttention(K, H, harmonics=harmonics, **fields).double()
    with torch.no_grad():  # move away from the init (harmonic weights 0) so every term matters
        for p in layer.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return layer


@pytest.mark.parametrize(("harmonics", "self_coupling", "phase_lag", "clock", "gates"),
                         list(itertools.product((2, 3), (True, False), (False, True), (0, 2), (True, False))))
def test_fused_equals_reference_forward_and_gradients(harmonics, self_coupling, phase_lag, clock, gates):
    layer = make_layer(harmonics, self_coupling=self_coupling, phase_lag=phase_lag, clock=clock, gates=gates)
    assert_paths_agree(layer, random_phases(B, T, K))


def test_increment_is_the_daido_sum_written_out():
    layer, theta = make_layer(), random_phases(B, T, K)
    a, attn = layer.coupling(theta)
    c = torch.cat((torch.ones(1, K, dtype=theta.dtype), layer.extras.harmonics.weight))  # c_1 = 1, then c_2, c_3
    d = K // H
    want = torch.zeros_like(a)
    for b, t, u, j in itertools.product(range(B), range(T), range(T), range(K)):
        h = j // d
        coupling = sum(c[m - 1, j] * torch.sin(m * (theta[b, u, j] - theta[b, t, j])) for m in (1, 2, 3))
        want[b, t, j] += attn[b, h, t, u] * coupling
    torch.testing.assert_close(a, want, rtol=0, atol=1e-12)


def test_increment_is_gradient_of_the_harmonic_energy():
    """For fixed A, a_t = ∇_{θ_t} E_t with E_t = Σ_u A_{t,u} Σ_m (c_m/m) cos(m(θ_u − θ_t)) (the Lemma 3 analogue)."""
    layer, theta = make_layer(), random_phases(B, T, K)
    a, attn = layer.coupling(theta)
    attn = attn.detach()
    c = torch.cat((torch.ones(1, K, dtype=theta.dtype), layer.extras.harmonics.weight.detach())).view(3, H, 1, K // H)
    th = theta.view(B, T, H, K // H).transpose(1, 2)  # (B, H, T, d)
    for t in range(T):
        th_t = theta[:, t].clone().requires_grad_()
        diff = th - th_t.view(B, H, 1, K // H)  # θ_u − θ_t
        energy = sum((attn[:, :, t, :, None] * c[m - 1] / m * torch.cos(m * diff)).sum() for m in (1, 2, 3))
        (grad,) = torch.autograd.grad(energy, th_t)
        torch.testing.assert_close(grad, a[:, t], rtol=0, atol=1e-12)


def test_zero_weights_are_the_plain_layer():
    torch.manual_seed(3)
    plain = KuramotoAttention(K, H, phase_lag=True, clock=2).double()
    torch.manual_seed(3)
    daido = KuramotoAttention(K, H, phase_lag=True, clock=2, harmonics=3).double()
    assert daido.extras.harmonics.weight.abs().max() == 0  # the init
    theta = random_phases(B, T, K)
    for path in ("fused", "reference"):
        torch.testing.assert_close(daido(theta, path=path), plain(theta, path=path), rtol=0, atol=1e-13)


def test_global_rotation_equivariance_with_invariant_gates():
    """Adding α to every phase adds α to every new phase when the gates and the value gate read nothing of θ: every
    harmonic depends on differences θ_u − θ_t only."""
    layer = make_layer(gates=False)
    with torch.no_grad():
        layer.value_gate.weight.zero_()
    theta, alpha = random_phases(B, T, K), 0.7
    torch.testing.assert_close(layer(theta + alpha), layer(theta) + alpha, rtol=0, atol=1e-12)


def test_cache_equals_recomputation_and_causal():
    layer, theta = make_layer(clock=2, self_coupling=False), random_phases(B, T, K)
    full = layer(theta)
    cache = KVCache()
    steps = torch.cat([layer(theta[:, i:i + 1], cache=cache) for i in range(T)], dim=1)
    torch.testing.assert_close(steps, full, rtol=0, atol=1e-12)
    changed = theta.clone()
    changed[:, 4:] += 1.0
    torch.testing.assert_close(layer(changed)[:, :4], full[:, :4], rtol=0, atol=0)


def test_gradcheck():
    layer = make_layer(harmonics=2)
    theta = random_phases(1, 4, K).requires_grad_()
    assert torch.autograd.gradcheck(lambda x: layer(x), (theta,))


@pytest.mark.parametrize(("fields", "message"), [
    ({"harmonics": 0}, "harmonics must be an integer >= 1"),
    ({"harmonics": 2.0}, "harmonics must be an integer >= 1"),
    ({"harmonics": 2, "value": "projection"}, "harmonics > 1 needs value='circular'"),
    ({"harmonics": 2, "group": "su2"}, "harmonics=2 is not defined on the su2 group"),
])
def test_bad_fields_raise(fields, message):
    with pytest.raises(ValueError, match=message):
        KuramotoAttention(K, H, **fields)


def test_model_with_harmonics_trains_and_counts_its_wider_values():
    family, cfg = get_preset("ka-tiny")
    plain = build_model(family, cfg)
    model = build_model(family, apply_overrides(family, cfg, {"harmonics": 2}))
    assert model.num_params() == plain.num_params() + cfg.depth * (2 - 1) * cfg.dim  # c_2 per oscillator per layer
    idx = torch.randint(0, 256, (2, 16))
    model(idx).logsumexp(-1).mean().backward()
    assert all(b.attn.extras.harmonics.weight.grad.abs().sum() > 0 for b in model.blocks)
    ctx = 16
    assert model_flops(model, ctx)["d_v"] == 2 * model_flops(plain, ctx)["d_v"]
