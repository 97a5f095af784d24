"""The norm bound's learned scale (``bound_scale="learned"``): r·tanh(‖x‖/s)·x/‖x‖, float64."""

import pytest
import torch
from conftest import assert_paths_agree, random_phases

from kuramoto_attention.errors import ConfigError
from kuramoto_attention.layers.bound import Bound
from kuramoto_attention.layers.kuramoto_attention import KuramotoAttention
from kuramoto_attention.models.config import apply_overrides
from kuramoto_attention.models.presets import build_model, get_preset


def test_learned_scale_is_the_formula_and_starts_at_the_radius():
    bound = Bound(6, "norm", radius_init=3.0, scale="learned").double()
    with torch.no_grad():
        bound.log_scale.fill_(0.4)
    x = torch.randn(5, 6, dtype=torch.float64) * 4
    n = x.norm(dim=-1, keepdim=True)
    want = bound.radius * torch.tanh(n / bound.log_scale.exp()) * x / n
    torch.testing.assert_close(bound(x), want, rtol=0, atol=1e-12)
    fresh = Bound(6, "norm", radius_init=3.0, scale="learned")
    assert fresh.log_scale.exp().item() == pytest.approx(3.0)  # s = r at init: gain 1 for small steps
    small = torch.full((1, 6), 1e-4)
    torch.testing.assert_close(fresh(small), small, rtol=1e-6, atol=0)


def test_the_step_length_follows_the_increment_where_s_one_saturates():
    one, learned = Bound(4, "norm", 2.0), Bound(4, "norm", 2.0, "learned")
    x = torch.tensor([[3.0, 0, 0, 0], [6.0, 0, 0, 0]])
    assert one(x).norm(dim=-1).tolist() == pytest.approx([2.0, 2.0], abs=0.02)  # both on the bound
    lengths = learned(x).norm(dim=-1)
    assert lengths[1] > lengths[0] + 0.1


@pytest.mark.parametrize("harmonics", [1, 2])
def test_fused_equals_reference_with_a_learned_scale(harmonics):
    layer = KuramotoAttention(8, 2, bound_scale="learned", harmonics=harmonics).double()
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    assert_paths_agree(layer, random_phases(2, 7, 8))
    out = layer(random_phases(2, 7, 8).requires_grad_())
    (grad,) = torch.autograd.grad(out.sum(), layer.bound.log_scale)
    assert grad.abs().item() > 0


def test_model_gives_both_bounds_a_scale():
    family, cfg = get_preset("ka-tiny")
    model = build_model(family, apply_overrides(family, cfg, {"bound_scale": "learned"}))
    assert all(b.attn.bound.log_scale is not None and b.ff.bound.log_scale is not None for b in model.blocks)
    assert model.num_params() == build_model(family, cfg).num_params() + 2 * cfg.depth
    model(torch.randint(0, 256, (2, 8))).sum().backward()


@pytest.mark.parametrize("fields", [{"bound_scale": "learned", "bound": "elementwise"}, {"bound_scale": "free"}])
def test_bad_scale_raises(fields):
    with pytest.raises(ValueError, match="bound_scale must be 'one', or 'learned'"):
        KuramotoAttention(8, 2, **fields)


@pytest.mark.parametrize("kind,scale", [("norm", "one"), ("norm", "learned"), ("elementwise", "one")])
def test_drive_is_the_tanh_argument(kind, scale):
    """bound(x) written with ``drive``: r·tanh(drive)·x/‖x‖ (norm), r_j·tanh(drive_j)·sign(x_j) (elementwise)."""
    bound = Bound(6, kind, radius_init=3.0, scale=scale).double()
    with torch.no_grad():
        bound.log_radius.add_(torch.randn_like(bound.log_radius) * 0.3)
    x = torch.randn(5, 6, dtype=torch.float64) * 4
    drive = bound.drive(x)
    if kind == "norm":
        assert drive.shape == (5,)
        want = bound.radius * torch.tanh(drive)[:, None] * x / x.norm(dim=-1, keepdim=True)
    else:
        assert drive.shape == (5, 6) and (drive >= 0).all()
        want = bound.radius * torch.tanh(drive) * x.sign()
    torch.testing.assert_close(bound(x), want, rtol=0, atol=1e-12)


# --------------------------------------------------------------------------- the scaled step, retired
def test_the_retired_scaled_step_names_the_commit_that_has_it():
    """bound="scaled" (and its step_init) lost at 40M tokens and left the library: asking for it, or loading a model
    saved with it, is one ConfigError line naming the commit to check out; a saved config's step_init at its old
    default loads (every model saved since it existed records it)."""
    family, cfg = get_preset("ka-tiny")
    for fields in ({"bound": "scaled"}, {"step_init": 0.5}, {"attention.bound": "scaled"}):
        with pytest.raises(ConfigError, match=r"^.* was retired after commit 25e20b6; to load or rerun this model, "
                                              r"`git checkout 25e20b6`"):
            apply_overrides(family, cfg, fields)
    assert apply_overrides(family, cfg, {"step_init": 0.25}) == cfg
    with pytest.raises(ValueError, match="bound must be 'norm' or 'elementwise'"):
        Bound(6, "scaled")
