"""Issue 46's evaluation probes (lab/studies/probe40.py), on synthetic windows and an untrained tiny model."""

import math

import torch

from kuramoto_attention.models.config import apply_overrides
from kuramoto_attention.models.presets import build_model, get_preset
from lab.studies.probe40 import by_copy_depth, copy_depth, fitted_temperature, step_lengths


def test_copy_depth_is_the_longest_context_whose_copy_predicts_the_byte():
    #            a  b  c  d  a  b  c  x  a  b  c  d
    row = [97, 98, 99, 100, 97, 98, 99, 120, 97, 98, 99, 100]
    depth = copy_depth(torch.tensor([row]), max_order=8)[0].tolist()
    # depth[t] is about predicting row[t + 1]: "b" after "a" (t = 4) is what followed "a" before (order 1, and "da" is
    # new); "c" after "ab" (t = 5) at order 2; "x" (t = 6) is not what followed "c", "bc" or "abc"; at t = 10, "d"
    # is not what followed "c", "bc" or "abc" most recently ("x"): copying the latest occurrence predicts another byte
    assert depth == [0, 0, 0, 0, 1, 2, 0, 0, 1, 2, 0]


def test_bytes_by_copy_depth_sum_to_all_bytes_and_give_the_gap():
    windows = torch.randint(0, 4, (3, 40))
    depth = copy_depth(windows)
    bits = {"tf": torch.rand(3, 39), "ka": torch.rand(3, 39)}
    rows = by_copy_depth(bits, depth)
    assert sum(r["bytes"] for r in rows) == 3 * 39
    for r in rows:
        sel = depth == r["depth"]
        assert math.isclose(r["ka_gap"], (bits["ka"][sel].mean() - bits["tf"][sel].mean()).item(), rel_tol=1e-6)


def test_the_fitted_temperature_undoes_a_scaled_confidence():
    torch.manual_seed(0)
    logits = torch.randn(8, 50, 16) * 2
    targets = torch.distributions.Categorical(logits=logits).sample()
    fit = fitted_temperature(logits * 3.0, targets)  # three times too confident
    assert abs(fit["temperature"] - 3.0) < 0.5
    assert fit["bpc_fitted"] < fit["bpc_at_1"]


def test_step_lengths_report_each_layer_and_both_steps():
    family, cfg = get_preset("ka-tiny")
    for fields in ({}, {"bound": "elementwise"}):
        model = build_model(family, apply_overrides(family, cfg, fields))
        rows = step_lengths(model, torch.randint(0, 256, (2, 12)))
        assert [r["layer"] for r in rows] == [0, 1]
        for r in rows:
            for step in ("attn", "ff"):
                assert len(r[step]["drive"]) == 5 and 0 <= r[step]["past_knee"] <= 1
                assert r[step]["length"] == sorted(r[step]["length"])
