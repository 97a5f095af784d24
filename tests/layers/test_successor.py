"""Successor coupling (``successor_heads``): in the chosen heads key u comes with the state of u + 1, so a token that
matches an earlier context moves toward what followed it. Float64, on every group."""

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_paths_agree, random_phases
from literal import literal_increment, literal_step

from kuramoto_attention.layers.kuramoto_attention import KuramotoAttention
from kuramoto_attention.models.config import apply_overrides
from kuramoto_attention.models.kuramoto import KuramotoConfig, KuramotoLM
from kuramoto_attention.ops.attention import KVCache

B, T, N, H = 2, 7, 8, 2
STATES = {"torus": lambda *s: random_phases(*s),
          "su2": lambda *s: F.normalize(torch.randn(*s, 4, dtype=torch.float64), dim=-1),
          "sphere": lambda *s: F.normalize(torch.randn(*s, 4, dtype=torch.float64), dim=-1)}


def make_layer(group: str, **fields) -> KuramotoAttention:
    layer = KuramotoAttention(N, H, group=group, self_coupling=False, **fields).double()
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return layer


@pytest.mark.parametrize("group", list(STATES))
@pytest.mark.parametrize("heads", [1, 2])
@pytest.mark.parametrize("fields", [{}, {"clock": 2}, {"value": "projection"}])
def test_fused_equals_the_literal_successor_sum(group, heads, fields):
    """Both paths give Σ_u A_{t,u} (the pair term of x_t and x_{u+1}), outputs and gradients."""
    assert_paths_agree(make_layer(group, successor_heads=heads, **fields), STATES[group](B, T, N))


@pytest.mark.parametrize("group", list(STATES))
def test_a_successor_head_reads_the_state_after_the_attended_one(group):
    """The scores are the plain layer's; only the values move on by one: with A on key u = t − 2 the successor
    head's increment is the plain head's with A on u + 1 = t − 1. Token 0 (which attends itself) does not move."""
    layer, plain = make_layer(group, successor_heads=H), make_layer(group)
    plain.load_state_dict(layer.state_dict())
    x = STATES[group](1, T, N)
    _, inc, attn = literal_step(layer, x)
    torch.testing.assert_close(attn, literal_step(plain, x)[2])
    assert inc[:, 0].abs().max() < 1e-15
    on_two_back, on_one_back = torch.zeros_like(attn), torch.zeros_like(attn)
    on_two_back[..., 0, 0] = on_two_back[..., 1, 0] = on_one_back[..., 0, 0] = on_one_back[..., 1, 1] = 1.0
    for t in range(2, T):
        on_two_back[..., t, t - 2] = on_one_back[..., t, t - 1] = 1.0
    torch.testing.assert_close(literal_increment(layer, x, on_two_back), literal_increment(plain, x, on_one_back),
                               rtol=0, atol=1e-12)


@pytest.mark.parametrize("group", list(STATES))
def test_causal_the_output_at_t_ignores_every_later_state(group):
    layer, x = make_layer(group, successor_heads=1), STATES[group](1, T, N)
    changed = x.clone()
    changed[:, 4:] = STATES[group](1, T - 4, N)
    for path in ("fused", "reference"):
        assert torch.allclose(layer(x, path=path)[:, :4], layer(changed, path=path)[:, :4], atol=1e-12)


@pytest.mark.parametrize("group", list(STATES))
def test_cached_decoding_equals_recomputation(group):
    """The cache holds every token's key and value; a new token's row reads keys 0 … t − 1 with values 1 … t (its
    own value included): one token at a time, and a chunk after a cached prompt, equal the whole sequence at once."""
    layer, x = make_layer(group, successor_heads=1, clock=2), STATES[group](B, T, N)
    full = layer(x)
    cache = KVCache(2)
    steps = torch.cat([layer(x[:, i:i + 1], cache=cache) for i in range(T)], dim=1)
    torch.testing.assert_close(steps, full, rtol=0, atol=1e-12)
    cache = KVCache()
    chunks = torch.cat((layer(x[:, :3], cache=cache), layer(x[:, 3:], cache=cache)), dim=1)
    torch.testing.assert_close(chunks, full, rtol=0, atol=1e-12)


def test_the_model_generates_with_the_cache_as_without_and_adds_no_parameters():
    cfg = apply_overrides("kuramoto", KuramotoConfig(dim=8, depth=2, heads=2, ff_hidden=16),
                          {"self_coupling": False, "successor_heads": 1})
    model = KuramotoLM(cfg).double().eval()
    plain = KuramotoLM(apply_overrides("kuramoto", cfg, {"successor_heads": 0}))
    assert model.num_params() == plain.num_params()
    prompt = torch.randint(0, 256, (2, 4))
    assert torch.equal(model.generate(prompt, 6, temperature=0), model.generate(prompt, 6, temperature=0,
                                                                                use_cache=False))


def test_refused_with_the_self_term_or_more_heads_than_there_are():
    with pytest.raises(ValueError, match="successor_heads needs self_coupling=False"):
        KuramotoAttention(N, H, successor_heads=1)
    with pytest.raises(ValueError, match="exceeds heads"):
        KuramotoAttention(N, H, successor_heads=3, self_coupling=False)
