"""The dynamics diagnostics (issue 5) on tiny untrained models, against cases with known answers."""

import json
import math

import pytest
import torch

from kuramoto_attention import KuramotoConfig, KuramotoLM, TransformerConfig, TransformerLM
from kuramoto_attention.diagnostics.measure import (
    attention_distance,
    attention_entropy,
    diagnose,
    gate_sign_fractions,
    knockout,
    offset_profile,
    omega_timescale,
    saturation,
)
from kuramoto_attention.errors import ConfigError
from kuramoto_attention.layers.bound import Bound
from kuramoto_attention.models.config import apply_overrides

T = 10


def tiny(**fields) -> KuramotoLM:
    """A 2-layer model; ``fields`` by name, the attention's too (``bound="elementwise"``, ``group="su2"``)."""
    return KuramotoLM(apply_overrides("kuramoto", KuramotoConfig(dim=8, depth=2, heads=2, ff_hidden=16), fields))


def causal_uniform(t: int) -> torch.Tensor:
    a = torch.ones(t, t).tril()
    return (a / a.sum(-1, keepdim=True))[None, None]  # (1, 1, T, T)


def test_shapes_and_ranges():
    d = diagnose(tiny(), torch.randint(0, 256, (3, T)))
    assert d.local_order.shape == d.entropy.shape == d.distance.shape == (2, 2)
    assert d.global_order.shape == (3, 2)  # before layer 0 and after each layer
    assert d.omega.shape == (2, 2, 4) and d.timescale.shape == (2, 2) and d.layer_timescale.shape == (2,)
    assert len(d.attention) == 2 and d.attention[0].shape == (3, 2, T, T)
    assert len(d.states) == 3 and len(d.value_gates) == 2
    assert (d.local_order <= 1 + 1e-6).all() and (d.local_order > 0).all()
    assert ((d.global_order >= 0) & (d.global_order <= 1 + 1e-6)).all()
    assert ((d.entropy >= 0) & (d.entropy <= math.log(T) + 1e-5)).all()
    assert ((d.distance >= 0) & (d.distance <= T - 1)).all()


def test_identical_tokens_without_drift_are_fully_synchronised():
    """ω = 0 and one repeated byte: every token has the same phases, no layer can separate them."""
    d = diagnose(tiny(omega="zero"), torch.full((2, T), 65))
    assert torch.allclose(d.global_order, torch.ones(3, 2), atol=1e-5)
    assert torch.allclose(d.local_order, torch.ones(2, 2), atol=1e-5)


def test_uniform_attention_entropy_and_distance():
    """τ → 0 makes every score 0, so A is uniform over u ≤ t: entropy log(t+1), distance t/2."""
    model = tiny()
    for block in model.blocks:
        block.attn.log_tau.data.fill_(-1e4)
    d = diagnose(model, torch.randint(0, 256, (2, T)))
    expected_entropy = sum(math.log(t + 1) for t in range(T)) / T
    assert torch.allclose(d.entropy, torch.full((2, 2), expected_entropy), atol=1e-5)
    assert torch.allclose(d.distance, torch.full((2, 2), (T - 1) / 4), atol=1e-5)  # mean of t/2
    assert attention_entropy(causal_uniform(T)).item() == pytest.approx(expected_entropy, abs=1e-6)


def test_distance_by_hand():
    attn = torch.tensor([[1.0, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]])[None, None]
    # rows: 0; 0.5·1; 0.2·2 + 0.3·1 = 0.7  -> mean 0.4
    assert attention_distance(attn).item() == pytest.approx(0.4)
    one_hot = torch.tensor([[1.0, 0], [1.0, 0]])[None, None]  # query 1 looks one token back
    assert attention_entropy(one_hot).item() == 0.0
    assert attention_distance(one_hot).item() == pytest.approx(0.5)


def test_offset_profile_by_hand():
    attn = torch.tensor([[1.0, 0, 0, 0], [0.5, 0.5, 0, 0], [0.2, 0.3, 0.5, 0], [0.1, 0.6, 0.1, 0.2]])[None, None]
    # queries t ≥ 2 only: Δ=0 (0.5, 0.2), Δ=1 (0.3, 0.1), Δ=2 (0.2, 0.6)
    assert torch.allclose(offset_profile(attn, 2), torch.tensor([[0.35, 0.2, 0.4]]))
    with pytest.raises(ValueError, match="more than 4 positions"):
        offset_profile(attn, 4)


def test_offset_profile_in_diagnostics():
    d = diagnose(tiny(), torch.randint(0, 256, (2, T)))
    assert d.offset_profile.shape == (2, 2, 9) and d.peak_offset.shape == (2, 2)
    assert (d.offset_profile.sum(-1) <= 1 + 1e-6).all()
    assert torch.equal(d.peak_offset, d.offset_profile.argmax(-1))
    assert json.loads(json.dumps(d.to_dict()))["peak_offset"] == d.peak_offset.tolist()


def test_omega_timescale_and_medians():
    assert omega_timescale(torch.tensor([0.5, 0.0, 2 * math.pi])).tolist() == pytest.approx([4 * math.pi, math.inf, 1])
    model = tiny()
    for block in model.blocks:
        block.attn.omega.data = torch.tensor([0.1, -0.2, 0.3, 0.4, 1.0, 2.0, -3.0, 4.0])
    d = diagnose(model, torch.randint(0, 256, (1, 4)))
    assert d.median_abs_omega[0].tolist() == pytest.approx([0.2, 2.0])  # torch.median: the lower middle
    assert d.timescale[0].tolist() == pytest.approx([2 * math.pi / 0.2, math.pi])
    assert d.layer_median_abs_omega.tolist() == pytest.approx([0.4, 0.4])


def test_zero_omega_is_null_in_json(tmp_path):
    d = diagnose(tiny(omega="zero", ff="none"), torch.randint(0, 256, (1, 6)))
    assert torch.isinf(d.timescale).all() and torch.isnan(d.ff_saturation).all()
    data = json.loads(d.to_json(tmp_path / "d.json").read_text())
    assert data["timescale"] == [[None, None], [None, None]] and data["layer_timescale"] == [None, None]
    assert data["ff_saturation"] == [None, None] and data["ff_drive"] == [None, None]
    assert data["depth"] == 2 and data["heads"] == 2 and data["batch"] == [1, 6]
    hist = data["value_gate_histogram"]
    assert len(hist["edges"]) == len(hist["counts"][0]) + 1 and sum(hist["counts"][0]) == 6 * 8
    assert "attention" not in data and "states" not in data  # raw tensors stay out of JSON


def test_value_gate_fractions():
    d = diagnose(tiny(), torch.randint(0, 256, (2, T)))
    assert torch.allclose(d.sync_fraction + d.repel_fraction, torch.ones(2, 2))
    v = torch.tensor([[[1.0, -1.0, 2.0, 3.0]]])  # one token; heads own coordinates (0, 1) and (2, 3)
    sync, repel = gate_sign_fractions(v, heads=2)
    assert sync.tolist() == [0.5, 1.0] and repel.tolist() == [0.5, 0.0]
    model = tiny()
    for block in model.blocks:
        block.attn.value_gate.weight.data.zero_()
        block.attn.value_gate.bias.data.fill_(-1.0)
    d = diagnose(model, torch.randint(0, 256, (2, T)))
    assert (d.repel_fraction == 1).all() and (d.sync_fraction == 0).all()


def test_saturation_function():
    norm = Bound(4, "norm", radius_init=2.0)
    big, small = norm(torch.full((3, 4), 100.0)), norm(torch.full((3, 4), 1e-3))
    assert saturation(big, norm) == 1.0 and saturation(small, norm) == 0.0
    elem = Bound(2, "elementwise", radius_init=0.5)
    assert saturation(elem(torch.tensor([[100.0, 0.0]])), elem) == 0.5


class Constant(torch.nn.Module):
    """Stands in for the SwiGLU: ``value`` on each of the k output coordinates, whatever it reads."""

    def __init__(self, value: float, dim: int) -> None:
        super().__init__()
        self.value, self.dim = value, dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.new_full((*x.shape[:-1], self.dim), self.value)


@pytest.mark.parametrize("bound,group", [("norm", "torus"), ("elementwise", "torus"), ("norm", "su2"),
                                         ("elementwise", "su2")])
def test_forced_large_increments_saturate(bound, group):
    model = tiny(bound=bound, group=group)
    for block in model.blocks:
        block.attn.value_gate.bias.data.fill_(1e6)  # v ⊙ a huge wherever a ≠ 0
        # the SwiGLU output is +1000 on every coordinate of the increment (n·tangent wide)
        block.ff.mlp = Constant(1e3, model.config.dim * model.geometry.tangent)
    d = diagnose(model, torch.randint(0, 256, (2, T)))
    assert (d.ff_saturation == 1).all() and (d.ff_drive > 50).all()  # far past the knee: the length is r
    # the first token attends only to itself, so its increment (sin 0, Im(conj(q) q)) = 0 can never saturate; on
    # SU(2) with the elementwise bound each of the 3 axes counts on its own, and all are ≠ 0 for a later token
    assert (d.attn_saturation >= 1 - 1 / T - 1e-6).all() and (d.attn_drive > 50).all()


def test_transformer_is_rejected():
    model = TransformerLM(TransformerConfig(dim=8, depth=1, heads=2, ff_hidden=16))
    with pytest.raises(ConfigError, match="diagnostics need a KuramotoLM"):
        diagnose(model, torch.randint(0, 256, (1, 4)))


def test_double_model_is_left_unchanged():
    model = tiny().double().train()
    d = diagnose(model, torch.randint(0, 256, (1, 5)))
    assert d.local_order.dtype == torch.float32
    assert next(model.parameters()).dtype == torch.float64 and model.training


def test_self_weight_is_the_diagonal_mass():
    from kuramoto_attention import KuramotoConfig, KuramotoLM
    from kuramoto_attention.diagnostics.measure import diagnose

    model = KuramotoLM(KuramotoConfig(dim=8, depth=2, heads=2, ff_hidden=8))
    idx = torch.randint(0, 256, (2, 6))
    d = diagnose(model, idx)
    for layer, attn in enumerate(d.attention):
        expected = attn.diagonal(dim1=-2, dim2=-1).mean(dim=(0, 2))
        assert torch.allclose(d.self_weight[layer], expected)
    assert ((d.self_weight > 0) & (d.self_weight <= 1)).all()
    assert "self_weight" in d.to_dict()


def test_knockout_measures_what_each_step_is_worth():
    model = tiny().eval()
    idx = torch.randint(0, 256, (2, T))
    block = model.blocks[1]
    block.attn.value_gate.weight.data.zero_()
    block.attn.value_gate.bias.data.zero_()  # v ≡ 0: layer 1's attention step moves nothing
    with torch.no_grad():
        delta = knockout(model, idx)
        assert delta.shape == (2, 2) and delta[1, 0] == 0
        # the same number written out: drop layer 0's feed-forward by hand
        theta = model.embed(idx[:, :-1])
        theta = model.blocks[1](model.blocks[0].attn(theta))
        nll = torch.nn.functional.cross_entropy(model.readout(theta).flatten(0, 1), idx[:, 1:].flatten())
        full = torch.nn.functional.cross_entropy(model(idx[:, :-1]).flatten(0, 1), idx[:, 1:].flatten())
        assert math.isclose(delta[0, 1].item(), (nll - full).item() / math.log(2), rel_tol=1e-5, abs_tol=1e-6)
    no_ff = knockout(tiny(ff="none").eval(), idx)
    assert no_ff[:, 1].isnan().all() and no_ff[:, 0].isfinite().all()
    assert diagnose(model, idx).knockout_bpc.shape == (2, 2)


def test_su2_diagnostics_are_defined_as_on_the_torus():
    """On SU(2) the order parameters are norms of A-weighted / sequence means of the unit quaternions (in [0, 1]; 1
    for identical states), |Ω_j| is the drift rate, and the JSON names the group."""
    from kuramoto_attention.diagnostics.measure import global_order, local_order
    from kuramoto_attention.layers.groups.su2 import SU2

    model = tiny(group="su2")
    d = diagnose(model, torch.randint(0, 256, (3, T)))
    assert d.group == "su2" and json.loads(json.dumps(d.to_dict()))["group"] == "su2"
    assert d.states[0].shape == (3, T, 8, 4) and d.omega.shape == (2, 2, 4)
    assert torch.allclose(d.omega, torch.linalg.vector_norm(model.blocks[0].attn.omega.detach(), dim=-1).view(2, 4)
                          .expand(2, 2, 4))
    for order in (d.local_order, d.global_order):
        assert ((order >= 0) & (order <= 1 + 1e-6)).all()
    same = diagnose(tiny(group="su2", omega="zero"), torch.full((2, T), 65))
    assert torch.allclose(same.global_order, torch.ones(3, 2), atol=1e-5)
    # the definitions, written out: |Σ_u A_{t,u} q_u| and |mean_t q_t| per oscillator
    q, attn = d.states[1], d.attention[1]
    qh = q.view(3, T, 2, 4, 4).transpose(1, 2)
    want_local = torch.linalg.vector_norm(torch.einsum("bhtu,bhujc->bhtjc", attn, qh), dim=-1).mean(dim=(0, 2, 3))
    assert torch.allclose(local_order(attn, q, SU2()), want_local, atol=1e-6)
    want_global = torch.linalg.vector_norm(qh.mean(dim=2), dim=-1).mean(dim=(0, 2))
    assert torch.allclose(global_order(q, 2, SU2()), want_global, atol=1e-6)
    assert torch.allclose(d.local_order[1], want_local, atol=1e-6)
