"""The layer never names a group: a fourth group is a module of its own plus one registration line, and each group
declares the options it defines."""

import pytest
import torch
import torch.nn.functional as F
from conftest import random_phases

from kuramoto_attention.layers.groups import GEOMETRIES, build_geometry
from kuramoto_attention.layers.groups.base import Geometry
from kuramoto_attention.layers.kuramoto_attention import AttentionConfig, KuramotoAttention
from kuramoto_attention.models.config import apply_overrides
from kuramoto_attention.models.kuramoto import KuramotoConfig, KuramotoLM


class Line(Geometry):
    """A toy group: the real line R acting on itself, states x ∈ R embedded as (x, 1) (so the lift is not periodic),
    drift x + ωt, kernel ⟨(x_t + ωt, 1), (x_u + ωu, 1)⟩ = (x_t + ωt)(x_u + ωu) + 1, increment Σ_u A_{t,u}(x_u − x_t)
    (a consensus step), move x + step. Nothing in the library knows it."""

    name = "line"
    components = 2
    tangent = 1

    def state_shape(self, oscillators: int) -> tuple[int, ...]:
        return (oscillators,)

    def init_embedding(self, vocab: int, oscillators: int) -> torch.Tensor:
        return torch.randn(vocab, oscillators)

    def embed(self, table: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return F.embedding(idx, table)

    def lift(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat((x, torch.ones_like(x)), dim=-1)

    def init_drift(self, oscillators: int, heads: int, base: float) -> torch.Tensor:
        return torch.full((oscillators,), 0.1)

    def drifted(self, x, pos, drift, heads, extras=None):
        b, t, n = x.shape
        moved = x + drift.to(x.dtype) * pos[:, None]
        feat = torch.stack((moved, torch.ones_like(moved)), dim=2).view(b, t, 2, heads, n // heads).transpose(2, 3)
        return feat, feat

    def values(self, x, lifted, heads, extras=None):
        b, t, n = x.shape
        return torch.stack((x, torch.ones_like(x)), dim=2).view(b, t, 2, heads, n // heads).permute(
            0, 3, 1, 2, 4).flatten(-2).to(lifted.dtype)

    def increment(self, x, lifted, mean, extras=None):
        b, t, n = x.shape
        avg = mean.unflatten(-1, (2, -1))[..., 0, :]  # Σ_u A_{t,u} x_u: (B, H, T, d)
        return avg.transpose(1, 2).reshape(b, t, n).to(x.dtype) - x

    def move(self, x, step):
        return x + step.to(x.dtype)


@pytest.fixture
def line_registered(monkeypatch):
    monkeypatch.setitem(GEOMETRIES, "line", Line)  # the one registration line


def test_a_fourth_group_needs_only_its_module_and_one_registration_line(line_registered):
    layer = KuramotoAttention(4, 2, group="line", gates=False, tau="fixed", bound="elementwise",
                              radius_init=1e6).double()
    with torch.no_grad():
        layer.value_gate.weight.zero_()
        layer.value_gate.bias.fill_(1.0)
    x = torch.randn(2, 5, 4, dtype=torch.float64)
    _, attn = layer.coupling(x)
    # its step written out: x_t + Σ_u A_{t,u} (x_u − x_t) per head, with A the softmax of the line's kernel
    want = torch.empty_like(x)
    for h in range(2):
        xs = x[..., 2 * h:2 * h + 2]
        want[..., 2 * h:2 * h + 2] = xs + attn[:, h] @ xs - xs
    torch.testing.assert_close(layer(x), want, rtol=0, atol=1e-9)
    torch.testing.assert_close(layer(x, path="reference"), want, rtol=0, atol=1e-9)
    model = KuramotoLM(apply_overrides("kuramoto", KuramotoConfig(dim=4, depth=1, heads=2, ff_hidden=8),
                                       {"group": "line"}))
    model(torch.randint(0, 256, (1, 6))).sum().backward()


def test_each_group_declares_its_options_and_refuses_the_others():
    assert {"phase_lag", "harmonics", "omega=log"} <= GEOMETRIES["torus"].options
    for group in ("su2", "sphere"):
        for option in ({"phase_lag": True}, {"cross_score": True}, {"harmonics": 3}, {"omega": "log"}):
            with pytest.raises(ValueError, match=f"not defined on the {group} group"):
                AttentionConfig(group=group, **option)
    AttentionConfig(group="su2", omega="zero", successor_heads=1, self_coupling=False)  # common options
    with pytest.raises(ValueError, match="group must be one of"):
        build_geometry("so3")


def test_the_geometry_handed_in_must_be_the_configs():
    with pytest.raises(ValueError, match="the geometry given is the su2 group's"):
        KuramotoAttention(4, 2, geometry=build_geometry("su2"))
    model = KuramotoLM(KuramotoConfig(dim=8, depth=3, heads=2, ff_hidden=8))
    assert all(b.attn.geometry is model.geometry for b in model.blocks)  # one geometry for every layer


# --------------------------------------------------------------------------- what a user may hand the layer
def _states(group: str, B: int, T: int, n: int = 8) -> torch.Tensor:
    """Valid float32 states of ``group``: phases on the torus, unit 4-vectors on SU(2) and the sphere."""
    if group == "torus":
        return random_phases(B, T, n, dtype=torch.float32)
    return F.normalize(torch.randn(B, T, n, 4), dim=-1)


GROUPS = ["torus", "su2", "sphere"]


@pytest.mark.parametrize("group", GROUPS)
def test_non_finite_states_are_refused_with_a_clear_error(group):
    """A NaN or ±inf at one position would reach every later one (0 × NaN in the masked average) and, on the fused
    path, earlier ones too: refused where the state enters, on every path."""
    layer = KuramotoAttention(8, 2, group=group)
    for bad in (float("nan"), float("inf"), float("-inf")):
        x = _states(group, 2, 5)
        x[1, 3, 2] = bad
        for call in (layer, lambda x: layer(x, path="reference"), layer.coupling):
            with pytest.raises(ValueError, match="NaN or inf"):
                call(x)


@pytest.mark.parametrize("group", GROUPS)
def test_a_state_of_another_dtype_is_refused_not_cast_deep_inside(group):
    layer = KuramotoAttention(8, 2, group=group)
    with pytest.raises(ValueError, match=r"torch.float16.*torch.float32"):
        layer(_states(group, 1, 4).half())
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast runs a float32 layer on float32 states
        assert layer(_states(group, 1, 4)).dtype == torch.float32


@pytest.mark.parametrize("group", GROUPS)
@pytest.mark.parametrize("B,T", [(2, 0), (0, 5)])
def test_an_empty_batch_or_sequence_gives_an_empty_output(group, B, T):
    layer = KuramotoAttention(8, 2, group=group)
    x = _states(group, B, T)
    for path in ("fused", "reference"):
        assert layer(x, path=path).shape == x.shape
    new, attn = layer(x, return_attention=True)
    assert new.shape == x.shape and attn.shape == (B, 2, T, T)


@pytest.mark.parametrize("preset", ["ka-tiny", "ka-su2-1m", "ka-sphere-1m", "tf-tiny"])
def test_a_model_given_an_empty_batch_or_sequence_gives_empty_logits(preset):
    from kuramoto_attention.models.presets import build_model, get_preset

    model = build_model(*get_preset(preset))
    for shape in ((2, 0), (0, 5)):
        assert model(torch.zeros(*shape, dtype=torch.long)).shape == (*shape, 256)
