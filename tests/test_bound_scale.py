"""The norm bound's learned scale (``bound_scale="learned"``): r·tanh(‖x‖/s)·x/‖x‖, float64."""

import pytest
import torch
from conftest import assert_paths_agree, random_phases

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


# --------------------------------------------------------------------------- the scaled step (bound="scaled")
def test_scaled_step_is_a_learned_step_size_times_the_increment_clipped_far_away():
    """bound(x) = R·tanh(‖α ⊙ x‖/R)·(α ⊙ x)/‖α ⊙ x‖, α per oscillator (shared by its tangent coordinates) from
    step_init, R = 3 r fixed (a buffer, not trained): linear in x well inside R, so the step's length is the
    increment's."""
    bound = Bound(6, "scaled", radius_init=2.0, step_init=0.25, tangent=3).double()
    assert bound.log_step.shape == (2,) and torch.allclose(bound.log_step.exp(), torch.full((2,), 0.25).double())
    assert "log_radius" not in dict(bound.named_parameters()) and "log_radius" in bound.state_dict()
    with torch.no_grad():
        bound.log_step.copy_(torch.tensor([0.1, -0.4], dtype=torch.float64))
    x = torch.randn(5, 6, dtype=torch.float64) * 7
    alpha = bound.log_step.exp().repeat_interleave(3)
    y = alpha * x
    n = y.norm(dim=-1, keepdim=True)
    clip = 3 * bound.radius  # R = 3 r: 6
    torch.testing.assert_close(bound(x), clip * torch.tanh(n / clip) * y / n, rtol=0, atol=1e-12)
    small = torch.full((1, 6), 0.1, dtype=torch.float64)
    torch.testing.assert_close(bound(small), alpha * small, rtol=1e-3, atol=0)
    lengths = bound(torch.tensor([[0.5, 0, 0, 0, 0, 0], [1.0, 0, 0, 0, 0, 0]], dtype=torch.float64)).norm(dim=-1)
    assert (lengths[1] / lengths[0]).item() == pytest.approx(2.0, rel=0.02)  # no saturation: the length follows x


@pytest.mark.parametrize("group", ["torus", "su2"])
def test_layer_with_the_scaled_step_fused_equals_reference(group):
    layer = KuramotoAttention(8, 2, group=group, bound="scaled").double()
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    x = random_phases(2, 7, 8) if group == "torus" else torch.nn.functional.normalize(
        torch.randn(2, 7, 8, 4, dtype=torch.float64), dim=-1)
    assert_paths_agree(layer, x)
    out = layer(x.requires_grad_())
    (grad,) = torch.autograd.grad(out.sum(), layer.bound.log_step)
    assert grad.abs().sum() > 0


def test_model_gives_both_steps_a_size_and_trains():
    family, cfg = get_preset("ka-tiny")
    model = build_model(family, apply_overrides(family, cfg, {"bound": "scaled", "step_init": 0.5}))
    assert all(b.attn.bound.log_step is not None and b.ff.bound.log_step is not None for b in model.blocks)
    assert model.num_params() == build_model(family, cfg).num_params() + 2 * cfg.depth * (cfg.dim - 1)
    model(torch.randint(0, 256, (2, 8))).sum().backward()
    with pytest.raises(ValueError, match="step_init must be a finite number > 0"):
        KuramotoAttention(8, 2, bound="scaled", step_init=0.0)
