"""Issue 26's size axis in the notebook and the summary: the tuned recipe at 5M (ka-5m-tuned, its rate from its own 3M
sweep lr-5m-tuned) against tf-5m, three seeds each at the protocol (main-5m), beside the paper's 5M enwik8 numbers
(``scaling.PAPER_BY_SIZE``), and ka-5m-tuned at tf-5m's 10M-token training FLOPs (main-5m's equal-FLOP run)."""

import statistics
from typing import Any

from lab.groups import EQUAL_FLOPS_5M, best_result, flop_matched_tokens, flops_per_token, with_twins
from lab.protocol import PROTOCOL
from lab.writers.common import fmt, mean_sd, not_run, seed_runs, table
from lab.writers.compute import fmt_flops, fmt_per_token, training_flops
from lab.writers.scaling import PAPER_BY_SIZE
from lab.writers.sweeps import sweep_section

KA, TF = "ka-5m-tuned", "tf-5m"
SWEEP_GROUP, MAIN_GROUP = "lr-5m-tuned", "main-5m"
PAPER_5M = PAPER_BY_SIZE["5m"]  # the paper's 5M enwik8 medians (ka, tf, gap): the one copy is scaling.py's


def _runs() -> dict[str, list[dict[str, Any]]]:
    """Each preset's seeds at the protocol's budget (not the equal-FLOP run)."""
    return {p: [r for r in seed_runs(MAIN_GROUP, p) if r["name"] != EQUAL_FLOPS_5M] for p in (KA, TF)}


def _equal_flops_run() -> dict[str, Any] | None:
    return next((r for r in with_twins(MAIN_GROUP) if r["name"] == EQUAL_FLOPS_5M), None)


def _gap(run: dict[str, Any] | None, tf_vals: list[float]) -> float | None:
    """The equal-FLOP run against tf-5m's mean at 10M tokens, None until both exist."""
    return run["eval_bpc"] - statistics.mean(tf_vals) if run and tf_vals else None


def _vals(rs: list[dict[str, Any]]) -> list[float]:
    return [r["eval_bpc"] for r in rs]


def _table(runs: dict[str, list[dict[str, Any]]]) -> str:
    body = []
    for p, rs in runs.items():
        vals = _vals(rs)
        if not vals:
            body.append([p, "—", "0", "not run", "—", "—", "—", fmt_per_token(flops_per_token(p)), "—"])
            continue
        body.append([p, f"{rs[0]['params']:,}", str(len(vals)), ", ".join(fmt(v) for v in vals), mean_sd(vals),
                     fmt(statistics.median(vals)), f"{rs[0]['train']['lr']:g}", fmt_per_token(flops_per_token(p)),
                     fmt_flops(flops_per_token(p) * rs[0]["tokens"])])
    return table(["model", "params", "seeds", "test BPC per seed", "mean ± sd", "median", "lr", "model FLOPs/token",
                  "training FLOPs"], body)


def _equal_flops(tf_vals: list[float]) -> str:
    """ka-5m-tuned's cost per token over tf-5m's, the budget at which its training FLOPs equal tf-5m's 10M-token
    runs, and the gap there (main-5m's equal-FLOP run), or how to run it."""
    ratio = flops_per_token(KA) / flops_per_token(TF)
    tokens = flop_matched_tokens(KA, TF, PROTOCOL["tokens"])
    text = (f"At equal FLOPs: {KA} costs {ratio:.2f}× {TF}'s model FLOPs per token, so its training FLOPs equal "
            f"{TF}'s {PROTOCOL['tokens'] / 1e6:g}M-token runs at {tokens / 1e6:.2f}M tokens (`groups."
            "flop_matched_tokens`)")
    run = _equal_flops_run()
    gap = _gap(run, tf_vals)
    if run is None:
        return text + f"; not run yet: `python -m lab run {MAIN_GROUP} --only {EQUAL_FLOPS_5M}`."
    against = f", a gap of **{gap:+.4f}** to {TF}'s mean at 10M tokens" if gap is not None else ""
    return text + f"; {EQUAL_FLOPS_5M} (seed 0, its own full schedule): test BPC {fmt(run['eval_bpc'])}{against}."


def section() -> str:
    """The notebook's subsection: the sweep, the seeds' table, the gap by means and medians beside the paper's, the
    recipe against the untuned ka-5m, and the equal-FLOP statement."""
    runs = _runs()
    ka, tf = _vals(runs[KA]), _vals(runs[TF])
    parts = [f"The tuned recipe at 5M (presets.py `{KA}`), its rate swept at 3M tokens ({SWEEP_GROUP}), then {KA} "
             f"and {TF} over seeds at the protocol ({MAIN_GROUP}; {TF} at its best rate in scale). The paper at 5M on "
             f"enwik8: {PAPER_5M[0]} Kuramoto against {PAPER_5M[1]} transformer, a gap of {PAPER_5M[2]}.",
             "", sweep_section(SWEEP_GROUP, KA), "", _table(runs), ""]
    if not ka and not tf:
        parts.append(f"_{not_run(MAIN_GROUP)}._")
    elif ka and tf:
        parts.append(f"Gap ({KA} − {TF}): means **{statistics.mean(ka) - statistics.mean(tf):+.4f}**, medians "
                     f"**{statistics.median(ka) - statistics.median(tf):+.4f}** (the paper at 5M: {PAPER_5M[2]}; "
                     "enwik7, so the absolute numbers are not the paper's, the gap is the comparison).")
    else:
        parts.append(f"_Only {KA if ka else TF} has runs in {MAIN_GROUP} so far: no gap yet._")
    untuned = best_result("ka-5m", "scale")
    seed0 = next((r for r in runs[KA] if r["train"]["seed"] == 0), None)
    if untuned and seed0:
        parts.append(f"\nAgainst ka-5m (scale: its best rate, {untuned['train']['lr']:g}, seed 0, "
                     f"{fmt(untuned['eval_bpc'])}) the recipe's seed 0 moved test BPC by "
                     f"{seed0['eval_bpc'] - untuned['eval_bpc']:+.4f}.")
    parts += ["", _equal_flops(tf)]
    return "\n".join(parts)


def summary_row() -> list[str] | None:
    """RESULTS.md's size-table row for main-5m (medians, as the paper's 5M numbers are), None until both have runs."""
    runs = _runs()
    ka, tf = _vals(runs[KA]), _vals(runs[TF])
    if not ka or not tf:
        return None
    return [f"5M tuned ({MAIN_GROUP}: {KA}, medians of {len(ka)} / {len(tf)} seeds)", fmt(statistics.median(ka)),
            fmt(statistics.median(tf)), f"{statistics.median(ka) - statistics.median(tf):+.4f}",
            f"{PAPER_5M[0]} / {PAPER_5M[1]}, {PAPER_5M[2]}",
            f"{fmt_per_token(flops_per_token(KA))} / {fmt_per_token(flops_per_token(TF))}",
            " / ".join(fmt_flops(training_flops(runs[p][0])) for p in (KA, TF))]


def summary_note() -> str:
    """What the summary says of main-5m beside its table: its means, or how to run it."""
    runs = _runs()
    ka, tf = _vals(runs[KA]), _vals(runs[TF])
    if ka and tf:
        gap = _gap(_equal_flops_run(), tf)
        return (f" In {MAIN_GROUP}, {KA} over its seeds: {mean_sd(ka)}; {TF}: {mean_sd(tf)}; gap of the means "
                f"{statistics.mean(ka) - statistics.mean(tf):+.4f}; at {TF}'s 10M-token training FLOPs "
                + ("not run yet" if gap is None else f"**{gap:+.4f}**") + ".")
    return f" The tuned recipe at 5M over seeds ({KA} against {TF}): {not_run(MAIN_GROUP, 'not run yet')}."
