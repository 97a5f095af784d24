"""Cross coupling (layers/cross_coupling.py): a head's oscillators mixed by learned complex C, K = I + Δ, in the score
(``cross_score``: the query's) and in the step (``cross_coupling``: the attended states')."""

import itertools
import math

import pytest
import torch
from conftest import assert_paths_agree, random_phases
from literal import literal_gates

from kuramoto_attention.diagnostics.flops import model_flops
from kuramoto_attention.layers.kuramoto_attention import KuramotoAttention
from kuramoto_attention.models.kuramoto import KuramotoConfig, KuramotoLM
from kuramoto_attention.ops.attention import KVCache

B, T, K, H = 2, 7, 8, 2
D = K // H
BOTH = {"cross_score": True, "cross_coupling": True}


def make_layer(**fields) -> KuramotoAttention:
    layer = KuramotoAttention(K, H, **fields).double()
    with torch.no_grad():  # off the symmetric init, the mixes off the identity, so that every term matters
        for p in layer.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return layer


@pytest.mark.parametrize("mixes", [{"cross_score": True}, {"cross_coupling": True}, BOTH])
@pytest.mark.parametrize("fields", [{}, {"self_coupling": False}, {"phase_lag": True, "clock": 2}, {"gates": False},
                                    {"bound": "elementwise"}])
def test_fused_equals_reference(mixes, fields):
    """Outputs and every gradient (the Δs' too), in float64."""
    layer = make_layer(**mixes, **fields)
    for mix in (layer.extras.query_mix, layer.extras.coupling_mix):
        assert mix is None or mix.delta.abs().min() > 0
    assert_paths_agree(layer, random_phases(B, T, K))


def test_scores_are_the_formula_written_out():
    """s_{t,u} = τ/√d Σ_j g^q_{t,j} g^k_{u,j} Σ_l [A_jl cos α − B_jl sin α], α = θ_{t,l} − θ_{u,j} + ω_j (t − u) + β_j,
    C = A + iB: Re(z_{t,j} e^{i(ω_j (t−u) + β_j)} e^{−iθ_{u,j}}) with z_t = C e^{iθ_t}, over l (m here) one by one."""
    layer = make_layer(phase_lag=True, cross_score=True)
    theta = random_phases(B, T, K)
    _, attn = layer.coupling(theta)
    gq, gk = literal_gates(layer, theta)
    c = layer.extras.query_mix.matrix()
    omega, lag, tau = layer.omega.view(H, D), layer.extras.lag.view(H, D), layer.log_tau.exp()
    s = torch.full((B, H, T, T), float("-inf"), dtype=theta.dtype)
    for h, t, u in itertools.product(range(H), range(T), range(T)):
        if u <= t:
            th = theta[..., h * D:(h + 1) * D]
            total = 0.0
            for j, m in itertools.product(range(D), range(D)):
                alpha = th[:, t, m] - th[:, u, j] + omega[h, j] * (t - u) + lag[h, j]
                pair = c[h, j, m].real * torch.cos(alpha) - c[h, j, m].imag * torch.sin(alpha)
                total = total + gq[:, h, t, j] * gk[:, h, u, j] * pair
            s[:, h, t, u] = tau[h] / math.sqrt(D) * total
    torch.testing.assert_close(attn, torch.softmax(s, -1), rtol=0, atol=1e-12)


def test_step_is_the_coupled_kuramoto_sum_written_out():
    """a_{t,j} = Σ_u A_{t,u} Σ_l [Re K_jl sin(θ_{u,l} − θ_{t,j}) + Im K_jl cos(θ_{u,l} − θ_{t,j})], over u and l (m
    here) one by one, with the layer's A: the Kuramoto–Sakaguchi sum of a network coupled across oscillators."""
    layer = make_layer(cross_coupling=True)
    theta = random_phases(B, T, K)
    inc, attn = layer.coupling(theta)
    kmat = layer.extras.coupling_mix.matrix()
    literal = torch.zeros_like(theta)
    for h, t, j in itertools.product(range(H), range(T), range(D)):
        col = h * D + j
        for u, m in itertools.product(range(T), range(D)):
            diff = theta[:, u, h * D + m] - theta[:, t, col]
            pair = kmat[h, j, m].real * torch.sin(diff) + kmat[h, j, m].imag * torch.cos(diff)
            literal[:, t, col] += attn[:, h, t, u] * pair
    torch.testing.assert_close(inc, literal, rtol=0, atol=1e-12)


def test_starts_as_the_paper_layer_and_a_diagonal_phase_is_a_lag():
    """Δ = 0 at init: the same output as the layer without the mixes (its other parameters drawn identically);
    C = diag(e^{iγ}) gives the scores of a phase lag β = γ."""
    torch.manual_seed(0)
    crossed = KuramotoAttention(K, H, **BOTH).double()
    torch.manual_seed(0)
    plain = KuramotoAttention(K, H).double()
    theta = random_phases(B, T, K)
    torch.testing.assert_close(crossed(theta), plain(theta), rtol=0, atol=1e-12)  # the plain path vs the fused
    gamma = torch.randn(K, dtype=torch.float64)
    lagged = KuramotoAttention(K, H, phase_lag=True).double()
    lagged.load_state_dict({**plain.state_dict(), "extras.lag": gamma})
    with torch.no_grad():
        crossed.extras.query_mix.delta[0] = torch.diag_embed(torch.cos(gamma).view(H, D) - 1)
        crossed.extras.query_mix.delta[1] = torch.diag_embed(torch.sin(gamma).view(H, D))
    torch.testing.assert_close(crossed.coupling(theta)[1], lagged.coupling(theta)[1], rtol=0, atol=1e-12)
    torch.testing.assert_close(crossed(theta), lagged(theta), rtol=0, atol=1e-12)


def test_a_query_finds_the_token_whose_other_oscillator_matches_its_own():
    """Token t's oscillator 0 holds a phase a that an earlier token u holds in oscillator 1 (the others are noise):
    with C sending 0 to 1 the query attends to u; the paper's score (C = I) cannot see the match."""
    layer = KuramotoAttention(2, 1, gates=False, omega="zero", tau="fixed", tau_init=30.0, cross_score=True,
                              self_coupling=False).double()
    theta = random_phases(1, T, 2)
    theta[0, -1, 0], theta[0, 3, 1] = 1.3, 1.3
    with torch.no_grad():  # C = [[0, 0], [1, 0]]: z_{t,1} = e^{iθ_{t,0}}, compared with the key's θ_{u,1}
        layer.extras.query_mix.delta[0] = torch.tensor([[-1.0, 0.0], [1.0, -1.0]])
    _, attn = layer.coupling(theta)
    assert attn[0, 0, -1].argmax() == 3 and attn[0, 0, -1, 3] > 0.5
    with torch.no_grad():
        layer.extras.query_mix.delta.zero_()
    assert layer.coupling(theta)[1][0, 0, -1, 3] < 0.5


def test_an_oscillator_synchronises_to_another_oscillator_of_the_attended_token():
    """With K sending oscillator 0 to 1, the step pulls θ_{t,1} toward θ_{u,0} (the phase the token before holds in
    oscillator 0), and leaves θ_{t,0} where it is: a token can copy a phase into an oscillator its own byte does not
    set, which the diagonal step cannot (it pulls 1 toward 1)."""
    layer = KuramotoAttention(2, 1, gates=False, omega="zero", cross_coupling=True, self_coupling=False,
                              radius_init=0.5).double()
    with torch.no_grad():  # K = [[0, 0], [1, 0]]: G_1 = Σ_u A_{t,u} e^{iθ_{u,0}}
        layer.extras.coupling_mix.delta[0] = torch.tensor([[-1.0, 0.0], [1.0, -1.0]])
    theta = torch.tensor([[[2.0, 0.0], [0.0, 0.5]]], dtype=torch.float64)  # token 1 attends to token 0 only
    new = layer(theta)
    assert new[0, 1, 0] == theta[0, 1, 0]  # no pull on oscillator 0 (K's row 0 is zero)
    assert abs(new[0, 1, 1] - 2.0) < abs(theta[0, 1, 1] - 2.0)  # oscillator 1 moved toward θ_{0,0} = 2


@pytest.mark.parametrize("mixes", [{"cross_score": True}, BOTH])
def test_cache_equals_recomputation(mixes):
    layer, theta = make_layer(phase_lag=True, clock=2, **mixes), random_phases(B, T, K)
    full = layer(theta)
    cache = KVCache()
    steps = torch.cat([layer(theta[:, i:i + 1], cache=cache) for i in range(T)], dim=1)
    torch.testing.assert_close(steps, full, rtol=0, atol=1e-12)


@pytest.mark.parametrize(("fields", "message"), [
    ({"group": "su2", "cross_score": True}, "cross_score=True is not defined on the su2 group"),
    ({"group": "sphere", "cross_coupling": True}, "cross_coupling=True is not defined on the sphere group"),
    ({"cross_coupling": True, "value": "projection"}, "cross_coupling mixes the averaged states: it needs"),
    ({"cross_coupling": True, "harmonics": 2}, "cross_coupling mixes the averaged states: it needs"),
])
def test_bad_combinations_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        KuramotoAttention(4, 2, **fields)


def test_model_counts_its_weights_and_flops_and_decays_toward_the_identity():
    """2d² weights per head, layer and mix; as a real 2d × 2d map each costs 4d² multiplies per head and token; Δ is
    a decayed matrix (toward the identity)."""
    def model(**mixes) -> KuramotoLM:
        return KuramotoLM(KuramotoConfig(dim=16, depth=2, heads=2, ff_hidden=32, context=32, attention=mixes))
    plain, crossed = model(), model(**BOTH)
    assert crossed.num_params() - plain.num_params() == 2 * (2 * 2 * 2 * 8 * 8)
    extra = model_flops(crossed, 32)["flops_per_token"] - model_flops(plain, 32)["flops_per_token"]
    assert extra == 2 * 6 * 2 * 2 * (2 * 8) ** 2
    for name in ("blocks.0.attn.extras.query_mix.delta", "blocks.1.attn.extras.coupling_mix.delta"):
        assert name in dict(crossed.named_parameters())
        assert name not in crossed.no_weight_decay() | crossed.phase_parameter_names()
