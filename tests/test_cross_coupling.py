"""Cross coupling (layers/cross_coupling.py): the query's oscillators mixed by a learned complex C = I + Δ."""

import itertools
import math

import pytest
import torch
from conftest import assert_paths_agree, random_phases
from test_layer import gates_of

from kuramoto_attention.diagnostics.flops import model_flops
from kuramoto_attention.layers.kuramoto_attention import KuramotoAttention
from kuramoto_attention.models.kuramoto import KuramotoConfig, KuramotoLM
from kuramoto_attention.ops.attention import KVCache

B, T, K, H = 2, 7, 8, 2
D = K // H


def make_layer(**fields) -> KuramotoAttention:
    layer = KuramotoAttention(K, H, cross_coupling=True, **fields).double()
    with torch.no_grad():  # off the symmetric init, C off the identity, so that every term matters
        for p in layer.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return layer


@pytest.mark.parametrize("fields", [{}, {"self_coupling": False}, {"phase_lag": True, "clock": 2},
                                    {"phase_lag": True, "lag_from_state": True}, {"gates": False}])
def test_fused_equals_reference(fields):
    """Outputs and every gradient (Δ's too), in float64."""
    layer = make_layer(**fields)
    assert layer.cross.delta.abs().min() > 0
    assert_paths_agree(layer, random_phases(B, T, K))


def test_scores_are_the_formula_written_out():
    """s_{t,u} = τ/√d Σ_j g^q_{t,j} g^k_{u,j} Σ_l [A_{jl} cos(α_{tu,jl}) − B_{jl} sin(α_{tu,jl})],
    α_{tu,jl} = θ_{t,l} − θ_{u,j} + ω_j (t − u) + β_j and C = A + iB: Re(z_{t,j} e^{i(ω_j (t−u) + β_j)} e^{−iθ_{u,j}})
    with z_t = C e^{iθ_t}, summed over the query's oscillators l (m here) one by one."""
    layer = make_layer(phase_lag=True)
    theta = random_phases(B, T, K)
    _, attn = layer.coupling(theta)
    gq, gk = gates_of(layer, theta)
    c = layer.cross.matrix()
    omega, lag, tau = layer.omega.view(H, D), layer.lag.view(H, D), layer.log_tau.exp()
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


def test_starts_as_the_paper_score_and_a_diagonal_phase_is_a_lag():
    """Δ = 0 at init: the same output as the layer without it (its other parameters drawn identically);
    C = diag(e^{iγ}) gives the scores of a phase lag β = γ."""
    torch.manual_seed(0)
    crossed = KuramotoAttention(K, H, cross_coupling=True).double()
    torch.manual_seed(0)
    plain = KuramotoAttention(K, H).double()
    theta = random_phases(B, T, K)
    torch.testing.assert_close(crossed(theta), plain(theta), rtol=0, atol=1e-12)  # the plain path vs the fused
    gamma = torch.randn(K, dtype=torch.float64)
    lagged = KuramotoAttention(K, H, phase_lag=True).double()
    lagged.load_state_dict({**plain.state_dict(), "lag": gamma})
    with torch.no_grad():
        crossed.cross.delta[0] = torch.diag_embed(torch.cos(gamma).view(H, D) - 1)
        crossed.cross.delta[1] = torch.diag_embed(torch.sin(gamma).view(H, D))
    torch.testing.assert_close(crossed.coupling(theta)[1], lagged.coupling(theta)[1], rtol=0, atol=1e-12)
    torch.testing.assert_close(crossed(theta), lagged(theta), rtol=0, atol=1e-12)


def test_a_query_finds_the_token_whose_other_oscillator_matches_its_own():
    """Token t's oscillator 0 holds a phase a that an earlier token u holds in oscillator 1 (the others are noise):
    with C swapping the two, the query attends to u; the paper's score (C = I) cannot see the match."""
    layer = KuramotoAttention(2, 1, gates=False, omega="zero", tau="fixed", tau_init=30.0, cross_coupling=True,
                              self_coupling=False).double()
    theta = random_phases(1, T, 2)
    theta[0, -1, 0], theta[0, 3, 1] = 1.3, 1.3
    with torch.no_grad():  # C = [[0, 0], [1, 0]]: z_{t,1} = e^{iθ_{t,0}}, compared with the key's θ_{u,1}
        layer.cross.delta[0] = torch.tensor([[-1.0, 0.0], [1.0, -1.0]])
    _, attn = layer.coupling(theta)
    assert attn[0, 0, -1].argmax() == 3 and attn[0, 0, -1, 3] > 0.5
    with torch.no_grad():
        layer.cross.delta.zero_()
    assert layer.coupling(theta)[1][0, 0, -1, 3] < 0.5


def test_cache_equals_recomputation():
    layer, theta = make_layer(phase_lag=True, clock=2), random_phases(B, T, K)
    full = layer(theta)
    cache = KVCache()
    steps = torch.cat([layer(theta[:, i:i + 1], cache=cache) for i in range(T)], dim=1)
    torch.testing.assert_close(steps, full, rtol=0, atol=1e-12)


def test_refused_off_the_torus():
    for group in ("su2", "sphere"):
        with pytest.raises(ValueError, match=f"cross_coupling=True is defined on the torus only, got group='{group}'"):
            KuramotoAttention(4, 2, group=group, cross_coupling=True)


def test_model_counts_its_weights_and_flops_and_decays_toward_the_identity():
    """2d² weights per head and layer; as a real 2d × 2d map it costs 4d² multiplies per head and token; Δ is a
    decayed matrix (toward C = I)."""
    cfg = KuramotoConfig(dim=16, depth=2, heads=2, ff_hidden=32, context=32)
    plain = KuramotoLM(cfg)
    crossed = KuramotoLM(KuramotoConfig(dim=16, depth=2, heads=2, ff_hidden=32, context=32,
                                        attention={"cross_coupling": True}))
    assert crossed.num_params() - plain.num_params() == 2 * 2 * 2 * 8 * 8
    extra = model_flops(crossed, 32)["flops_per_token"] - model_flops(plain, 32)["flops_per_token"]
    assert extra == 6 * 2 * 2 * (2 * 8) ** 2
    assert "blocks.0.attn.cross.delta" not in crossed.no_weight_decay() | crossed.phase_parameter_names()
