"""How the lab's groups plan from recorded results (lab/groups.py), on fabricated results."""

import pytest
from conftest import write_results

from kuramoto_attention.errors import ConfigError
from lab import groups


def score(group: str, name: str, bpc: float) -> dict:
    """The fields of a capacity record that planning reads."""
    return {"group": group, "name": name, "preset": "ka-1m-tuned", "eval_bpc": bpc}


def test_a_capacity_shape_joins_the_fixes_only_past_the_margin(in_tmp):
    assert groups.fixes() == groups.FIXES  # nothing recorded: the declared fixes alone
    base = 1.14
    gains = {"ff-wide": groups.CAPACITY_MARGIN + 0.005, "bank-wide": groups.CAPACITY_MARGIN - 0.005, "depth-5": -0.01}
    write_results(in_tmp, [score("capacity", "ka-1m-tuned-enwik6-20m", base)]
                  + [score("capacity-shape", groups.shape_run(s), base - g) for s, g in gains.items()])
    extra = {k: v for k, v in groups.fixes().items() if k not in groups.FIXES}
    assert extra == {"shape-ff-wide": groups.Fix(model=groups.CAPACITY_SHAPES["ff-wide"])}
    # a shape already trained at 40M stays planned (and reported) whatever its screen says later
    write_results(in_tmp, [score("fixes40", "shape-depth-5-40m", 2.0)])
    assert set(groups.fixes()) - set(groups.FIXES) == {"shape-ff-wide", "shape-depth-5"}


def run40(group: str, name: str, valid: float, preset: str = "ka-1m-tuned") -> dict:
    """A 40M-token record as the fix groups read it."""
    return {"group": group, "name": name, "preset": preset, "tokens": groups.FIX_BUDGET, "eval_bpc": valid,
            "final_valid_estimate": valid, "eval_split": "test", "family": "kuramoto", "model": {},
            "train": {"lr": 0.002, "seed": 0}}


def test_fixes40_seeds_pairs_the_preset_with_the_best_fix_that_beat_it(in_tmp, monkeypatch):
    monkeypatch.setattr(groups, "swept_rate", lambda preset: 0.004)  # the 10M sweep, which the schedule starts from
    write_results(in_tmp, [run40("budget40", "ka-1m-tuned-40m", 2.02), run40("fixes40", "successor-2-40m", 2.015),
                           run40("fixes40", "fsn-40m", 2.01), run40("fixes40", "bound-elementwise-40m", 2.05)])
    assert groups.fixes_beating_preset() == {"fsn": 2.01, "successor-2": 2.015}
    plan = groups.GROUPS["fixes40-seeds"]()
    assert [(s.name, s.train["seed"]) for s in plan] == [
        (f"{name}-40m-seed{seed}", seed) for seed in groups.FIX_SEEDS for name in ("ka-1m-tuned", "fsn")]
    assert all(s.model == (groups.FIXES["fsn"].model if "fsn" in s.name else {}) for s in plan)


def test_fixes40_seeds_without_a_winning_fix_says_what_to_run(in_tmp):
    write_results(in_tmp, [run40("budget40", "ka-1m-tuned-40m", 2.02), run40("fixes40", "fsn-40m", 2.03)])
    with pytest.raises(ConfigError, match="python -m lab run fixes40"):
        groups.GROUPS["fixes40-seeds"]()


def test_fixes40_seeds_table_gives_each_seed_and_the_means(in_tmp, monkeypatch):
    from lab.writers import summary

    monkeypatch.setattr(groups, "swept_rate", lambda preset: 0.004)
    write_results(in_tmp, [run40("budget40", "ka-1m-tuned-40m", 2.02), run40("budget40", "tf-1m-40m", 1.85, "tf-1m"),
                           run40("fixes40", "fsn-40m", 2.01)])
    assert "python -m lab run fixes40-seeds" in summary.seeds40_section()  # planned, not run
    write_results(in_tmp, [run40("fixes40-seeds", "ka-1m-tuned-40m-seed1", 2.04),
                           run40("fixes40-seeds", "fsn-40m-seed1", 2.00)])
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in summary.seeds40_section().splitlines() if line.startswith("| ka-") or line.startswith("| fsn")}
    assert rows["ka-1m-tuned"] == ["2.0200 / 2.0400 / —", "2.0300 ± 0.0141", "—", "+0.1800"]
    assert rows["fsn"] == ["2.0100 / 2.0000 / —", "2.0050 ± 0.0071", "-0.0250", "+0.1550"]
