"""Which runs the report reads and what it measures on them (lab/select.py), on fabricated results: each choice of runs
and each derived number, apart from the tables that show them."""

import pytest
from conftest import write_results

from kuramoto_attention.diagnostics.flops import model_flops
from kuramoto_attention.models.presets import build_model, get_preset
from lab import groups, select
from lab.protocol import TRAIN_DEFAULTS


def run(group: str, name: str, preset: str, bpc: float, lr: float = 4e-3, seed: int = 0, tokens: int = 10_000_000,
        valid: list[tuple[int, float]] | None = None, train: dict | None = None, **model) -> dict:
    """A finished run's result as runner.py writes it (the keys select.py reads)."""
    return {"group": group, "name": name, "preset": preset, "family": "kuramoto" if preset.startswith("ka") else
            "transformer", "model_overrides": model, "model": {}, "params": 1_000_000, "tokens": tokens,
            "train": {"lr": lr, "seed": seed, "phase_lr_mult": TRAIN_DEFAULTS["phase_lr_mult"], **(train or {})},
            "eval_split": "test", "eval_bpc": bpc, "valid_curve": [list(p) for p in valid or [(0, 8.0), (tokens, bpc)]]}


def test_throughput_reads_the_recorded_rate_else_the_curve():
    r = run("main", "x", "tf-1m", 2.0)
    assert select.throughput({**r, "train_tokens_per_s": 30_000.0}) == 30_000.0
    assert select.throughput({**r, "curve": [{"tokens": 10_000_000, "elapsed_s": 500.0}]}) == 10_000_000 / 500.0
    assert select.throughput({**r, "train_tokens_per_s": float("nan"), "curve": []}) is None
    assert select.mean_rate([{**r, "train_tokens_per_s": 1.0}, {**r, "train_tokens_per_s": 3.0}, r]) == 2.0


def test_the_flop_count_is_the_benchs():
    for p in ("ka-1m", "tf-1m", "ka-1m-tuned"):
        expected = model_flops(build_model(*get_preset(p)), 256)["flops_per_token"]
        assert groups.flops_per_token(p) == expected
        assert select.flops_per_token({"preset": p, "model_overrides": {}, "train": {"context": 256}}) == expected
    # a record of a model the library no longer builds (a retired field): no count, not a crash
    assert select.flops_per_token({"preset": "ka-1m", "model_overrides": {"ff_wrap": True, "ff": "angles"},
                                   "train": {}}) is None
    assert select.training_flops(None) is None


def test_memorisation_is_the_growth_of_valid_minus_train_and_a_rising_valid_bpc():
    passes = select.TRAIN_BYTES
    pts = [{"tokens": t, "train_bpc": tr, "valid_bpc": v}
           for t, tr, v in ((passes // 2, 2.4, 2.5), (passes, 2.2, 2.3), (2 * passes, 1.9, 2.2),
                            (3 * passes, 1.8, 2.25))]
    within, end, rose = select.overfit({"curve": pts})
    assert within == pytest.approx((0.1, 1.0)) and end == pytest.approx((0.45, 3.0))
    assert rose == (pytest.approx(0.05), 2 * passes)  # from its lowest point, at two passes
    assert select.overfit({"curve": pts[:1]}) == (None, (pytest.approx(0.1), 0.5), None)  # valid still falling
    assert select.overfit({}) == (None, None, None)


def test_along_compares_the_validation_estimates_at_the_schedules_quarters():
    lead = run("leads", "x", "ka-1m-tuned", 2.0, tokens=100, valid=[(25, 2.5), (50, 2.2), (76, 2.1), (100, 2.0)])
    ref = run("main-tuned", "y", "ka-1m-tuned", 2.1, tokens=100, valid=[(25, 2.6), (50, 2.3), (100, 2.1)])
    assert select.along(lead, ref) == pytest.approx([-0.1, -0.1, None, -0.1])  # no shared point near 75
    assert select.ALONG == (0.25, 0.5, 0.75, 1.0)


def test_a_lead_at_several_rates_is_read_at_its_best_on_validation(in_tmp):
    b40 = 40_001_536
    write_results(in_tmp, [run("budget40", "ka-1m-tuned-40m", "ka-1m-tuned", 2.0, tokens=b40)])
    rows = [{**run("leads40", name, "ka-1m-tuned", bpc, lr=lr, tokens=b40), "final_valid_estimate": valid}
            for name, lr, bpc, valid in (("ka-1m-tuned-x-40m", 4e-3, 1.97, 1.98),
                                         ("ka-1m-tuned-x-40m-lr-0.002", 2e-3, 1.95, 1.99))]
    rows.append(run("leads40", "ka-1m-tuned-y-40m", "ka-1m-tuned", 1.9, tokens=b40))  # one rate: not listed
    [(stem, chosen, ref)] = select.lead_rates(rows)
    assert stem == "ka-1m-tuned-x-40m" and chosen["train"]["lr"] == 4e-3  # better on validation, worse on test
    assert ref["name"] == "ka-1m-tuned-40m"


def test_a_confirm_run_is_matched_to_the_last_screen_that_ran_its_change(in_tmp):
    write_results(in_tmp, [run(g, n, "ka-1m", b, tokens=3_000_000, phase_lag=True) if n != "ka-default" else
                           run(g, n, "ka-1m", b, tokens=3_000_000)
                           for g, n, b in (("screen4", "ka-default", 2.5), ("screen4", "ka-lag", 2.45),
                                           ("screen5", "ka-default", 2.4), ("screen5", "ka-phase-lag", 2.38))])
    same, base, group = select.screen_match(run("confirm", "ka-phase-lag-seed1", "ka-1m", 2.2, phase_lag=True))
    assert (same["name"], base["eval_bpc"], group) == ("ka-phase-lag", 2.4, "screen5")
    assert select.screen_match(run("confirm", "ka-other", "ka-1m", 2.2, clock=4)) is None


def test_capacity_shapes_are_planned_in_order_and_matched_to_their_results(in_tmp):
    assert [(s, r) for s, _, r in select.capacity_shapes()] == [(s, None) for s in groups.CAPACITY_SHAPES]
    done = run("capacity-shape", "ka-1m-tuned-depth-5-enwik6-20m", "ka-1m-tuned", 1.1, **groups.CAPACITY_SHAPES[
        "depth-5"])
    write_results(in_tmp, [done])
    shapes = {s: (model, r) for s, model, r in select.capacity_shapes()}
    assert shapes["depth-5"] == (groups.CAPACITY_SHAPES["depth-5"], done) and shapes["ff-wide"][1] is None


def test_the_copy_tasks_curves_are_means_over_the_seeds():
    res = {"models": {"tf": {}}, "runs": [{"model": "tf", "curve": [{"step": 0, "accuracy": a}, {"step": 5,
                                                                                               "accuracy": b}]}
                                          for a, b in ((0.1, 0.5), (0.3, 0.9))]}
    assert select.mean_curves(res) == {"tf": [(0, pytest.approx(0.2)), (5, pytest.approx(0.7))]}


def test_head_means_average_the_offset_profile_over_heads():
    profile = [[[0.5, 0.3, 0.2], [0.1, 0.6, 0.3]], [[0.2, 0.3, 0.5], [0.9, 0.1, 0.0]]]  # (layer, head, Δ)
    assert select.head_means(profile, 2) == [pytest.approx([0.3, 0.45]), pytest.approx([0.55, 0.2])]
