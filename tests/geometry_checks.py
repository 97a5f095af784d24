"""What tests/layers/groups/test_su2.py and test_sphere.py both check, written once. Each check takes the group's
name, a layer or the calling file's state factory (``states(*shape, dtype=...)``: unit quaternions, unit vectors of
R^D) and, where the geometry enters, its formula as a function; the file keeps the test that calls it."""

import itertools
import math
from collections.abc import Callable
from dataclasses import replace

import pytest
import torch
from literal import literal_kernel

from kuramoto_attention.layers.gates import metric_gates
from kuramoto_attention.layers.groups.base import Geometry
from kuramoto_attention.layers.kuramoto_attention import KuramotoAttention
from kuramoto_attention.models.config import apply_overrides
from kuramoto_attention.models.kuramoto import KuramotoConfig, KuramotoLM
from kuramoto_attention.models.presets import NOMINAL, build_model, get_preset

B, T, N, H = 2, 7, 8, 2
D = N // H  # oscillators per head

States = Callable[..., torch.Tensor]
Convert = Callable[[str, torch.Tensor], torch.Tensor]

# every combination of the layer's switches, for the fused path against the reference one
FIELDS = list(itertools.product([True, False], ["learned", "zero"], ["circular", "projection"],
                                ["norm", "elementwise"], ["learned", "fixed"]))


def perturbed_layer(group: str, **fields) -> KuramotoAttention:
    """A float64 layer on ``group``, moved away from the symmetric init so that every term matters."""
    layer = KuramotoAttention(N, H, group=group, **fields).double()
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return layer


def invariant_layer(group: str, **fields) -> KuramotoAttention:
    """Gates off and a constant value gate: nothing the layer reads sees the state except through the score."""
    layer = perturbed_layer(group, gates=False, **fields)
    with torch.no_grad():
        layer.value_gate.weight.zero_()
    return layer


def set_unit_value_gate(layer: KuramotoAttention) -> None:
    """v ≡ 1: the fused step then moves by the bounded increment itself."""
    with torch.no_grad():
        layer.value_gate.weight.zero_()
        layer.value_gate.bias.fill_(1.0)


def tiny_model(group: str, **fields) -> KuramotoLM:
    cfg = KuramotoConfig(dim=8, depth=2, heads=2, ff_hidden=16)
    return KuramotoLM(apply_overrides("kuramoto", cfg, {"group": group, **fields}))  # as `--model group=...` does


# --------------------------------------------------------------------------- scores
def gates_of(layer: KuramotoAttention, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    module = layer.gate_module
    if module is None:
        ones = torch.ones(x.shape[0], H, x.shape[1], D, dtype=x.dtype)
        return ones, ones
    gq, gk = metric_gates(module(x.flatten(-2)), H).unbind(0)
    return gq, gk


def literal_scores(layer: KuramotoAttention, x: torch.Tensor,
                   drift: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """s_{t,u} = τ/√d Σ_j g^q g^k ⟨drift(tΩ_j, x_{t,j}), drift(uΩ_j, x_{u,j})⟩, loops over heads, t, u, with the
    geometry's drift written out by ``drift(angles, states)`` (a head's Ω times a position (d, …); states (B, d, C))."""
    gq, gk = gates_of(layer, x)
    omega, tau = layer.omega.view(H, D, -1), layer.log_tau.exp()
    s = torch.full((x.shape[0], H, T, T), float("-inf"), dtype=x.dtype)
    for h in range(H):
        xh = x[:, :, h * D:(h + 1) * D]
        for t in range(T):
            for u in range(t + 1):
                a = drift(t * omega[h], xh[:, t])
                b = drift(u * omega[h], xh[:, u])
                s[:, h, t, u] = tau[h] / math.sqrt(D) * (gq[:, h, t] * gk[:, h, u] * (a * b).sum(-1)).sum(-1)
    return s


def assert_scores_match_the_formula_and_remark1(layer: KuramotoAttention, x: torch.Tensor,
                                                drift: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
    """A is the causal softmax of ``literal_scores``, and the fused path's features give the same scores."""
    _, attn = layer.coupling(x)
    s = literal_scores(layer, x, drift)
    assert torch.allclose(attn, torch.softmax(s, -1), atol=1e-12)
    pos = torch.arange(T, dtype=torch.float64)
    logits = layer.gate_module(x.flatten(-2))
    qf, kf = layer.geometry.gated_query_key(x, pos, layer.omega, logits, H, layer.log_tau.exp(), torch.float64)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    assert torch.allclose((qf @ kf.transpose(-1, -2) / math.sqrt(D))[..., mask], s[..., mask], atol=1e-12)


def assert_shifting_every_position_leaves_A_unchanged(layer: KuramotoAttention, x: torch.Tensor) -> None:
    logits = layer.gate_module(x.flatten(-2))
    scores = []
    for shift in (0.0, 5.0, 1234.0):
        pos = torch.arange(T, dtype=torch.float64) + shift
        qf, kf = layer.geometry.gated_query_key(x, pos, layer.omega, logits, H, layer.log_tau.exp(), torch.float64)
        scores.append(torch.softmax((qf @ kf.transpose(-1, -2)).masked_fill(~torch.ones(T, T).tril().bool(), -1e30),
                                    -1))
    for s in scores[1:]:
        assert torch.allclose(s, scores[0], atol=1e-10)


# --------------------------------------------------------------------------- reduction to the torus
def lift_columns(w: torch.Tensor, n: int, dim: int) -> torch.Tensor:
    """A torus weight reading ψ(θ) = [cos θ, sin θ] (…, 2n) as one reading φ(x) (…, dim·n), oscillator-major: cos θ_j
    is x_j's coordinate 0, sin θ_j its coordinate 1; the other columns get noise (they multiply zeros on the circle)."""
    out = torch.randn(*w.shape[:-1], n, dim, dtype=w.dtype)
    out[..., 0], out[..., 1] = w[..., :n], w[..., n:]
    return out.flatten(-2)


def copy_converted(dst: torch.nn.Module, src: torch.nn.Module, convert: Convert) -> None:
    """Each of dst's weights set to ``convert(name, w)`` of src's namesake w."""
    weights = src.state_dict()
    with torch.no_grad():
        for name, p in dst.state_dict().items():
            p.copy_(convert(name, weights[name]))


def twin(torus: KuramotoAttention, group: str, convert: Convert) -> KuramotoAttention:
    """A ``group`` layer with the torus layer's switches and its weights through ``convert``."""
    names = ("gates", "omega", "value", "bound", "tau", "self_coupling", "clock")
    layer = KuramotoAttention(N, H, group=group, **{f: getattr(torus.config, f) for f in names}).double()
    copy_converted(layer, torus, convert)
    return layer


def assert_reduces_to_the_torus(torus: KuramotoAttention, layer: KuramotoAttention, theta: torch.Tensor,
                                embed: Callable[[torch.Tensor], torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """On the states ``embed(theta)`` the layer's update, on both paths, is the torus layer's embedded, and its A is
    the torus layer's; returns the torus's increment and the layer's, for the caller to compare."""
    for path in ("fused", "reference"):
        assert torch.allclose(layer(embed(theta), path=path), embed(torus(theta, path=path)), atol=1e-12)
    a_t, attn_t = torus.coupling(theta)
    xi, attn = layer.coupling(embed(theta))
    assert torch.allclose(attn, attn_t, atol=1e-13)
    return a_t, xi


def assert_model_reduces_to_the_torus(cfg: KuramotoConfig, group: str, convert: Convert,
                                      embed: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """The torus model of ``cfg`` (perturbed) and its ``group`` twin (the weights through ``convert``): the twin's
    embedding is the torus's embedded, and its logits are the torus's."""
    torus = KuramotoLM(cfg).double()
    other = KuramotoLM(replace(cfg, attention=replace(cfg.attention, group=group))).double()
    with torch.no_grad():
        for p in torus.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    copy_converted(other, torus, convert)
    idx = torch.randint(0, 256, (B, T))
    assert torch.allclose(other.embed(idx), embed(torus.embed(idx)), atol=1e-15)
    assert torch.allclose(other(idx), torus(idx), atol=1e-10)


# --------------------------------------------------------------------------- symmetry
def assert_a_symmetry_with_the_gates_off(group: str, x: torch.Tensor,
                                         act: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """x ↦ act(x) leaves the drifted score unchanged, and the update is equivariant, act(x'), when the gates are off
    and the value gate is constant (with or without self-coupling, a clock, drift). What breaks it: gates and the value
    gate read φ(x), which act changes; so does a per-coordinate (elementwise) bound, which does not commute with
    rotating an increment."""
    gated = perturbed_layer(group)
    kern = literal_kernel(gated, x)
    assert torch.allclose(literal_kernel(gated, act(x)), kern, atol=1e-12)
    for fields in ({}, {"self_coupling": False, "clock": 2}, {"omega": "zero"}):
        layer = invariant_layer(group, **fields)
        for path in ("fused", "reference"):
            assert torch.allclose(layer(act(x), path=path), act(layer(x, path=path)), atol=1e-12)
        _, attn = layer.coupling(x)
        assert torch.allclose(layer.coupling(act(x))[1], attn, atol=1e-12)
    broken = [perturbed_layer(group), invariant_layer(group, bound="elementwise")]
    with torch.no_grad():
        broken.append(invariant_layer(group))
        broken[-1].value_gate.weight.normal_()
    for layer in broken:
        assert not torch.allclose(layer(act(x)), act(layer(x)), atol=1e-6)


# --------------------------------------------------------------------------- staying on the manifold
def assert_unit_norm_kept_in_bf16_autocast(geometry: type[Geometry], states: States, length: int,
                                           unnormalised: Callable[..., torch.Tensor], method: str = "move") -> None:
    """2 layers of 4 oscillators applied 6 times each to ``length`` tokens under bf16 autocast (steps of radius 3):
    the state stays float32 and of unit norm to float32 rounding, and every move's re-normalisation corrects only
    rounding: ``unnormalised(x, *args)``, the move before it, has norm 1 to a few ulps, for the geometry's ``method``
    (x, *args) that moves and re-normalises."""
    torch.manual_seed(0)
    layers = [KuramotoAttention(4, 1, group=geometry.name) for _ in range(2)]
    with torch.no_grad():
        for layer in layers:
            layer.bound.log_radius.fill_(math.log(3.0))  # large steps: far from where they start
    corrections = []
    move = getattr(geometry, method)

    def recording(self, x, *args):
        corrections.append((torch.linalg.vector_norm(unnormalised(x, *args), dim=-1) - 1).abs().max().item())
        return move(self, x, *args)

    x = states(1, length, 4, dtype=torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad(), pytest.MonkeyPatch.context() as mp:
        mp.setattr(geometry, method, recording)
        for _ in range(6):
            for layer in layers:
                x = layer(x)
                assert x.dtype == torch.float32
    assert len(corrections) == 12 and max(corrections) < 1e-6
    assert (torch.linalg.vector_norm(x, dim=-1) - 1).abs().max() < 1e-6
    assert torch.isfinite(x).all()


# --------------------------------------------------------------------------- causality, cache, gradcheck, API
def assert_layer_and_model_are_causal(group: str, states: States) -> None:
    layer, x = perturbed_layer(group), states(1, T, N)
    changed = x.clone()
    changed[:, 4:] = states(1, T - 4, N)
    for path in ("fused", "reference"):
        assert torch.allclose(layer(x, path=path)[:, :4], layer(changed, path=path)[:, :4], atol=1e-12)
    model = tiny_model(group).double()
    idx = torch.randint(0, 256, (1, 12))
    other = idx.clone()
    other[:, 7:] = (other[:, 7:] + 1) % 256
    assert torch.allclose(model(idx)[:, :7], model(other)[:, :7], atol=1e-12)


def assert_cache_equals_recomputation(model: KuramotoLM) -> None:
    idx = torch.randint(0, 256, (2, 10))
    full = model(idx)
    caches = model.new_caches(4)  # grows past its first capacity on the way
    steps = [model(idx[:, :3], caches=caches)] + [model(idx[:, t:t + 1], caches=caches) for t in range(3, 10)]
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-10)
    prompt = idx[:, :4]
    assert torch.equal(model.generate(prompt, 6, temperature=0), model.generate(prompt, 6, temperature=0,
                                                                                use_cache=False))


def assert_layer_passes_gradcheck(group: str, states: States) -> None:
    layer = KuramotoAttention(4, 2, group=group).double()
    x = states(1, 4, 4).requires_grad_()
    assert torch.autograd.gradcheck(lambda s: layer(s), (x,))
    assert torch.autograd.gradcheck(lambda s: layer(s, path="reference"), (x,))


def assert_api_shapes(layer: KuramotoAttention, x: torch.Tensor, components: int, tangent: int) -> None:
    """The update (B, T, N, components), A causal and stochastic, the increment (B, T, N, tangent) and no longer than
    1 (a projection of G, a mean of unit vectors: |ξ| ≤ |G| ≤ 1)."""
    new, attn = layer(x, return_attention=True)
    assert new.shape == (B, T, N, components) and attn.shape == (B, H, T, T)
    assert torch.allclose(attn.sum(-1), torch.ones(B, H, T, dtype=torch.float64)) and (attn.triu(1) == 0).all()
    xi, attn2 = layer.coupling(x)
    assert xi.shape == (B, T, N, tangent) and torch.equal(attn, attn2)
    assert (torch.linalg.vector_norm(xi, dim=-1) <= 1 + 1e-12).all()


def assert_embedding_uniform_on_the_manifold(geo: Geometry, width: int) -> None:
    """The embedding table: 256 rows of N tangent vectors of ``width`` coordinates, none longer than π; its states are
    unit vectors, uniform (mean 0 over 256 × 8 draws, sd 1/64)."""
    table = geo.init_embedding(256, N)
    assert table.shape == (256, N, width) and (torch.linalg.vector_norm(table, dim=-1) <= math.pi + 1e-6).all()
    states = geo.embed(table, torch.arange(256)[None])
    assert (torch.linalg.vector_norm(states, dim=-1) - 1).abs().max() < 1e-6
    assert states.mean(dim=(0, 1, 2)).abs().max() < 0.05


def assert_preset_within_three_percent_of_one_million(preset: str, group: str, params: int) -> None:
    family, cfg = get_preset(preset)
    assert cfg.attention.group == group
    with torch.device("meta"):
        n = build_model(family, cfg).num_params()
    assert abs(n / NOMINAL[preset] - 1) <= 0.03
    assert n == params
