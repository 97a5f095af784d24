"""The paper's dynamics claims (lab/studies/dynamics.py): the rows it saves, and the tables and verdicts the report
renders from them (lab/writers/studies.py)."""

import json

import pytest
from rendered import cells

from lab.studies import dynamics
from lab.writers import studies


def _row(run: str, group: str = "main", **changed) -> dict:
    """A row as ``dynamics.measure`` records it, two layers (four heads)."""
    return {"run": run, "group": group, "ff_proj": "shared", "local_order": [0.95, 0.93],
            "global_order": [0.3, 0.6, 0.4], "self_weight": [0.5, 0.2], "median_abs_omega": [0.5, 0.1],
            "timescale_tokens": [12.6, None], "slow_fraction": [0.25, 0.5], "local_near_one": True,
            "global_falls": True, "omega_decreasing": True, "omega_depth_spearman": dynamics._spearman([0.5, 0.1]),
            "knockout_attn_bpc": [0.01, 0.5], "knockout_ff_bpc": [0.2, None], "peak_offset": [[0, 1], [2, 0]],
            "offset_profile": [[[0.5, 0.3, 0.2], [0.1, 0.6, 0.3]], [[0.2, 0.3, 0.5], [0.9, 0.1, 0.0]]], **changed}


def test_the_rows_are_saved_and_the_verdicts_follow_the_numbers(in_tmp):
    (in_tmp / "results").mkdir(exist_ok=True)
    agree, disagree = _row("a"), _row("b", local_near_one=False, omega_decreasing=False)
    variant = _row("confirm/c", "confirm", global_falls=False, ff_proj="none")  # listed, not judged
    path = dynamics.write([agree, disagree, variant])
    assert path.name == "dynamics.json" and json.loads(path.read_text()) == [agree, disagree, variant]
    tables = studies.dynamics_tables()
    assert cells(tables["dynamics"], "a")[1:] == [
        "0.95 → 0.93", "0.3 → 0.6 → 0.4", "0.5 → 0.2", "0.5 → 0.1", "12.6 → ∞", "25% → 50%", "yes", "yes", "yes",
        "-1.00"]
    assert cells(tables["dynamics"], "confirm/c*")[7:10] == ["yes", "no", "yes"]  # ψ(θ) itself: marked
    # per layer: each head's peak offset, the mean over heads of A at Δ = 0, 1, 2, the heads peaking at Δ ≥ 2
    assert cells(tables["dynamics_offsets"], "a")[1:] == ["0 1 | 2 0", "0.30 0.45 0.25 | 0.55 0.20 0.25", "1 of 4"]
    assert cells(tables["dynamics_knockout"], "a")[1:] == ["+0.010 → +0.500", "+0.200 → —", "—", "—", "—", "—"]
    slots = studies.notebook_slots()
    assert slots["dynamics_groups"] == "main confirm" and slots["dynamics_judged"] == "main"
    assert [slots[k] for k in ("dynamics_runs", "dynamics_local_near_one", "dynamics_global_falls",
                               "dynamics_omega_decreasing")] == [2, 1, 2, 1]
    claims = studies.dynamics_section()
    assert [cells(claims, claim.replace("\\|", "|"))[1] for claim in studies.CLAIMS.values()] == [
        "1 of 2", "2 of 2", "1 of 2"]


def test_without_the_study_every_table_says_what_to_run(in_tmp):
    assert set(studies.dynamics_tables().values()) == {studies.not_measured("dynamics")}
    slots = studies.notebook_slots()
    assert slots["dynamics_runs"] == slots["dynamics_local_near_one"] == "—"


def test_spearman_is_the_rank_correlation_with_depth():
    assert dynamics._spearman([0.5, 0.1]) == pytest.approx(-1.0)
    assert dynamics._spearman([0.1, 0.2, 0.3]) == pytest.approx(1.0)


def test_named_groups_replace_their_own_rows_and_keep_the_others(in_tmp):
    (in_tmp / "results").mkdir(exist_ok=True)
    dynamics.write([_row("a"), _row("b"), _row("confirm/c", "confirm")])
    rows = dynamics.merged([_row("budget40/e", "budget40"), _row("confirm/d", "confirm")])
    assert [r["run"] for r in rows] == ["a", "b", "confirm/d", "budget40/e"]  # new groups last
