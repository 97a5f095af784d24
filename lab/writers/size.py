"""Issue 26's size axis: the tuned recipe at 5M (ka-5m-tuned, its rate from its own 3M sweep lr-5m-tuned) against
tf-5m, three seeds each at the protocol (main-5m), and ka-5m-tuned at tf-5m's 10M-token training FLOPs."""

import statistics
from typing import Any

from lab.groups import EQUAL_FLOPS_5M, best_result, flop_matched_tokens, flops_per_token, with_twins
from lab.protocol import PROTOCOL
from lab.writers.common import bpcs, diff, fmt, mean, mean_sd, not_run, seed_runs, table
from lab.writers.compute import fmt_flops, fmt_per_token
from lab.writers.sweeps import sweep_section

KA, TF = "ka-5m-tuned", "tf-5m"
SWEEP_GROUP, MAIN_GROUP = "lr-5m-tuned", "main-5m"


def runs() -> dict[str, list[dict[str, Any]]]:
    """Each preset's seeds at the protocol's budget (not the equal-FLOP run)."""
    return {p: [r for r in seed_runs(MAIN_GROUP, p) if r["name"] != EQUAL_FLOPS_5M] for p in (KA, TF)}


def equal_flops_run() -> dict[str, Any] | None:
    return next((r for r in with_twins(MAIN_GROUP) if r["name"] == EQUAL_FLOPS_5M), None)


def _table(by: dict[str, list[dict[str, Any]]]) -> str:
    body = [[p, f"{rs[0]['params']:,}" if rs else "—", str(len(rs)), ", ".join(fmt(v) for v in bpcs(rs)) or "not run",
             mean_sd(bpcs(rs)), fmt(statistics.median(bpcs(rs))) if rs else "—",
             f"{rs[0]['train']['lr']:g}" if rs else "—", fmt_per_token(flops_per_token(p)),
             fmt_flops(flops_per_token(p) * rs[0]["tokens"]) if rs else "—"] for p, rs in by.items()]
    return table(["model", "params", "seeds", "test BPC per seed", "mean ± sd", "median", "lr", "model FLOPs/token",
                  "training FLOPs"], body)


def section() -> str:
    """The notebook's subsection: the sweep, the seeds, the gaps and the equal-FLOP run."""
    by = runs()
    ka, tf = bpcs(by[KA]), bpcs(by[TF])
    untuned, eq = best_result("ka-5m", "scale"), equal_flops_run()
    seed0 = next((r for r in by[KA] if r["train"]["seed"] == 0), None)
    tokens = flop_matched_tokens(KA, TF, PROTOCOL["tokens"])
    rows = [["gap of the means", diff(mean(ka), mean(tf))],
            ["gap of the medians", diff(statistics.median(ka) if ka else None, statistics.median(tf) if tf else None)],
            ["ka-5m (scale, its best rate, seed 0): lr, test BPC",
             f"{untuned['train']['lr']:g}, {fmt(untuned['eval_bpc'])}" if untuned else "—"],
            [f"{KA} seed 0 − ka-5m", diff(seed0, untuned)],
            [f"{KA}'s model FLOPs per token / {TF}'s", f"{flops_per_token(KA) / flops_per_token(TF):.2f}×"],
            [f"tokens at {TF}'s {PROTOCOL['tokens'] / 1e6:g}M-token training FLOPs", f"{tokens / 1e6:.2f}M"],
            [f"{EQUAL_FLOPS_5M} (seed 0) test BPC", fmt(eq["eval_bpc"]) if eq else
             f"not run yet: `python -m lab run {MAIN_GROUP} --only {EQUAL_FLOPS_5M}`"],
            [f"its gap to {TF}'s mean", diff(eq, mean(tf))]]
    return "\n\n".join([sweep_section(SWEEP_GROUP, KA), _table(by), *([f"_{not_run(MAIN_GROUP)}._"] if not ka and
                                                                    not tf else []), table(["", "value"], rows)])
