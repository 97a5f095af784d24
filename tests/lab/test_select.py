"""Which runs the report reads and what it measures on them (lab/select.py), on fabricated results: each choice of runs
and each derived number, apart from the tables that show them."""

import pytest

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


def test_the_copy_tasks_curves_are_means_over_the_seeds():
    res = {"models": {"tf": {}}, "runs": [{"model": "tf", "curve": [{"step": 0, "accuracy": a}, {"step": 5,
                                                                                               "accuracy": b}]}
                                          for a, b in ((0.1, 0.5), (0.3, 0.9))]}
    assert select.mean_curves(res) == {"tf": [(0, pytest.approx(0.2)), (5, pytest.approx(0.7))]}


def test_head_means_average_the_offset_profile_over_heads():
    profile = [[[0.5, 0.3, 0.2], [0.1, 0.6, 0.3]], [[0.2, 0.3, 0.5], [0.9, 0.1, 0.0]]]  # (layer, head, Δ)
    assert select.head_means(profile, 2) == [pytest.approx([0.3, 0.45]), pytest.approx([0.55, 0.2])]


def test_a_runs_changes_leave_out_what_its_group_pinned_and_the_defaults():
    """What a run changes (``own_changes``): its overrides, less ψ(θ) itself where its group ran ka-1m on it, and its
    training variants away from their defaults."""
    lag = {"phase_lag": True, "self_coupling": False}
    assert select.own_changes(run("budget", "ka-1m-x-20m", "ka-1m", 2.1, **groups.UNPROJECTED, **lag)) == lag
    assert select.own_changes(run("main-unprojected", "ka-1m-seed0", "ka-1m", 2.3, **groups.UNPROJECTED)) == {}
    assert select.own_changes(run("main", "ka-1m-y", "ka-1m", 2.3, **groups.UNPROJECTED)) == groups.UNPROJECTED
    lead = run("leads", "ka-1m-tuned-z", "ka-1m-tuned", 2.1, train={"omega_lr_mult": 1.0}, omega="log")
    assert select.own_changes(lead) == {"omega": "log", "omega_lr_mult": 1.0}


def test_runs_share_a_budget_by_their_tokens_or_by_the_flops_they_match():
    at_flops = run("leads40", "ka-1m-tuned-x-flops-tf-40m", "ka-1m-tuned", 2.0, tokens=23_000_000)
    preset = run("flops", "ka-1m-tuned-flops-tf-40m", "ka-1m-tuned", 2.0, tokens=24_330_240)
    assert select.same_budget(at_flops, preset)  # tf-1m's 40M-token FLOPs, each at its own tokens
    assert not select.same_budget(at_flops, run("flops", "ka-1m-tuned-flops-tf-10m", "ka-1m-tuned", 2.0,
                                                tokens=23_000_000))
    assert not select.same_budget(run("main", "x", "ka-1m-tuned", 2.0, tokens=23_000_000), preset)
    assert select.same_budget(run("lr40", "y", "tf-1m", 2.0, tokens=40_001_536), run("budget40", "z", "tf-1m", 2.0,
                                                                                 tokens=40_000_000))
