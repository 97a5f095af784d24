"""The bound's tanh argument (float64), and the bounds that lost and were retired: a learned scale, the scaled step."""

import json

import pytest
import torch

from kuramoto_attention import KuramotoLM
from kuramoto_attention.errors import ConfigError
from kuramoto_attention.layers.bound import Bound
from kuramoto_attention.models.config import apply_overrides
from kuramoto_attention.models.presets import build_model, get_preset


@pytest.mark.parametrize("kind", ["norm", "elementwise"])
def test_drive_is_the_tanh_argument(kind):
    """bound(x) written with ``drive``: r·tanh(drive)·x/‖x‖ (norm), r_j·tanh(drive_j)·sign(x_j) (elementwise)."""
    bound = Bound(6, kind, radius_init=3.0).double()
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


# --------------------------------------------------------------------------- the learned scale, retired
def test_the_retired_learned_scale_names_the_commit_that_has_it(tmp_path):
    """bound_scale="learned" (s learned in r·tanh(‖x‖/s)) lost at 10M and at 40M tokens and left the library: asking
    for it, by name or dotted path, or loading a model saved with it, is one ConfigError line naming the commit to
    check out; a saved config holding bound_scale at its old default "one" (every model saved while it existed)
    loads as the same model."""
    family, cfg = get_preset("ka-tiny")
    line = (r"bound_scale='learned' was retired after commit 34fef35; to load or rerun this model, "
            r"`git checkout 34fef35` \(RESULTS.md's notebook has its results\)$")
    for fields in ({"bound_scale": "learned"}, {"attention.bound_scale": "learned"}):
        with pytest.raises(ConfigError, match="^" + line):
            apply_overrides(family, cfg, fields)
    assert apply_overrides(family, cfg, {"bound_scale": "one"}) == cfg
    model = build_model(family, cfg)
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    for value in ("one", "learned"):
        (tmp_path / "config.json").write_text(json.dumps({**saved, "attention": {**saved["attention"],
                                                                                  "bound_scale": value}}))
        if value == "one":
            assert KuramotoLM.from_pretrained(tmp_path).config == model.config
        else:
            with pytest.raises(ConfigError, match=r": not a kuramoto config: " + line):  # after the folder's path
                KuramotoLM.from_pretrained(tmp_path)
