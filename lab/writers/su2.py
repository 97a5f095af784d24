"""The notebook's and the summary's SU(2) section (issue 25): ka-su2-1m, whose state is unit quaternions (S³, a
non-abelian group) instead of phases on the torus, swept in two stages (lr-su2 at 3M tokens, lr10m-su2: its two best
rates at 10M) and run over three seeds at the protocol (main-su2), beside the torus presets and the transformer.

The issue asks whether the non-abelian state helps: every comparison here is computed from the results (the sign
and size of each difference, beside the seeds' spread), none is written in advance."""

import statistics
from typing import Any

from kuramoto_attention.models.config import flat_fields
from kuramoto_attention.models.presets import get_preset
from lab.groups import flops_per_token
from lab.writers.common import fmt, mean_sd, not_run, planned, seed_runs, table, throughput
from lab.writers.compute import fmt_per_token
from lab.writers.sweeps import second_stage_section, sweep_section

PRESET, SWEEP_GROUP, SECOND_GROUP, MAIN_GROUP = "ka-su2-1m", "lr-su2", "lr10m-su2", "main-su2"
REFERENCE = "tf-1m"
# the SU(2) preset beside the torus presets it is read against and the transformer, each with the group of its runs
COMPARED = ((PRESET, MAIN_GROUP), ("ka-1m", "main"), ("ka-1m-tuned", "main-tuned"), (REFERENCE, "main"))


def _vals(runs: list[dict[str, Any]]) -> list[float]:
    return [r["eval_bpc"] for r in runs]


def _sd(vals: list[float]) -> float | None:
    return statistics.stdev(vals) if len(vals) > 1 else None


def comparison() -> dict[str, list[dict[str, Any]]]:
    """Each compared preset's runs at the protocol (seed order; twins included), empty where none exist."""
    return {p: seed_runs(g, p) for p, g in COMPARED}


def _fmt_rate(runs: list[dict[str, Any]]) -> str:
    rates = [x for x in map(throughput, runs) if x is not None]
    return f"{statistics.mean(rates):,.0f}" if rates else "—"


def comparison_table(runs: dict[str, list[dict[str, Any]]]) -> str:
    tf = _vals(runs[REFERENCE])
    body = []
    for p, group in COMPARED:
        rs, vals = runs[p], _vals(runs[p])
        if not vals:  # its cost per token is known before it is trained: shown beside the planned row
            body.append([p, group, "—", "0", "not run", "—", "—", "—", fmt_per_token(flops_per_token(p)), "—"])
            continue
        gap = f"{statistics.mean(vals) - statistics.mean(tf):+.4f}" if tf and p != REFERENCE else "—"
        body.append([p, group, f"{rs[0]['params']:,}", str(len(vals)), ", ".join(fmt(v) for v in vals),
                     mean_sd(vals), fmt(statistics.median(vals)), gap, fmt_per_token(flops_per_token(p)),
                     _fmt_rate(rs)])
    return table(["model", "group", "params", "seeds", "test BPC per seed", "mean ± sd", "median",
                  f"gap to {REFERENCE} mean", "model FLOPs/token", "training tokens/s (mean over seeds)"], body)


def versus(name: str, vals: list[float], other: str, other_vals: list[float]) -> str:
    """``name`` against ``other`` by their means, with the larger seed sd of the two: whether the difference is
    beyond twice it is what the reader needs to weigh it."""
    d = statistics.mean(vals) - statistics.mean(other_vals)
    verb = "trails" if d > 0 else "beats" if d < 0 else "ties"
    text = f"{name} {verb} {other} by {abs(d):.4f} test BPC (Δ {d:+.4f}, means over {len(vals)} and " \
           f"{len(other_vals)} seeds"
    sds = [s for s in (_sd(vals), _sd(other_vals)) if s is not None]
    if sds:
        spread = max(sds)
        text += (f"; the larger seed sd is {spread:.4f}, so the difference is "
                 f"{'more' if abs(d) > 2 * spread else 'less'} than twice it")
    return text + ")"


def _cost(runs: dict[str, list[dict[str, Any]]]) -> str:
    """ka-su2-1m's model FLOPs per token and measured throughput, as ratios to each other preset's."""
    mine = flops_per_token(PRESET)
    flops = ", ".join(f"{mine / flops_per_token(p):.2f}× {p}'s" for p, _ in COMPARED if p != PRESET)
    text = f"Per token ka-su2-1m costs {flops} model FLOPs"
    rates = {p: [x for x in map(throughput, rs) if x is not None] for p, rs in runs.items()}
    if rates[PRESET]:
        mean = statistics.mean(rates[PRESET])
        text += ("; it trained at " + ", ".join(f"{mean / statistics.mean(v):.2f}× {p}'s" for p, v in rates.items()
                                                 if v and p != PRESET) + " tokens per second")
    return text + "."


def verdict(runs: dict[str, list[dict[str, Any]]]) -> str:
    """Does the non-abelian state help: ka-su2-1m against each torus preset and the transformer, from the numbers."""
    mine = _vals(runs[PRESET])
    lines = [versus(PRESET, mine, p, _vals(runs[p])) for p, _ in COMPARED if p != PRESET and runs[p]]
    if len(mine) > 1:
        medians = [f"{p} {statistics.median(mine) - statistics.median(_vals(runs[p])):+.4f}"
                   for p, _ in COMPARED if p != PRESET and runs[p]]
        lines.append("by medians, ka-su2-1m minus " + ", ".join(medians))
    return "Measured: " + "; ".join(lines) + ". " + _cost(runs)


def intro() -> str:
    base, mine = flat_fields(get_preset("ka-1m")[1]), flat_fields(get_preset(PRESET)[1])
    changed = ", ".join(f"{k}={v}" for k, v in mine.items() if base.get(k) != v)
    return (f"`{PRESET}` is ka-1m with {changed} (presets.py): each token's state is `dim` unit quaternions (SU(2), "
            "the 3-sphere) instead of phases on the torus, so its rotations do not commute (layers/su2.py, "
            "docs/su2.md). Its rate is swept in two stages as ka-1m-tuned's was (lr-su2 at 3M tokens, then its two "
            "best rates at 10M, lr10m-su2, on the validation split), then over seeds at the protocol (main-su2, test "
            "split), read against ka-1m (main), ka-1m-tuned (main-tuned) and tf-1m (main), each on all its seeds. "
            "Throughput: each run's recorded `train_tokens_per_s` (the median of the trainer's logged rates, the "
            "first, which includes compilation, left out; a record without it: its curve's last tokens over elapsed "
            "seconds), on whichever machine made the run, so the ratio is only as fair as the runs' hardware was "
            "alike; model FLOPs per token are the bench's analytic count (`groups.flops_per_token`).")


def section() -> str:
    """The notebook's SU(2) section: what the preset is, its two sweep stages, the comparison and what it says."""
    runs = comparison()
    parts = [intro(), "", "### Its learning rate: the 3M sweep (lr-su2)", "", sweep_section(SWEEP_GROUP, PRESET), "",
             "### The 3M sweep's two best rates at 10M tokens (lr10m-su2)", "",
             second_stage_section(SECOND_GROUP, SWEEP_GROUP, PRESET, MAIN_GROUP), "",
             "### ka-su2-1m against the torus presets and the transformer (test BPC, 10M tokens)", "",
             comparison_table(runs), ""]
    if runs[PRESET]:
        parts.append(verdict(runs))
    else:
        parts.append(f"_{not_run(MAIN_GROUP)}; its runs: {planned(MAIN_GROUP)}._")
    return "\n".join(parts)


def summary_line() -> str:
    """RESULTS.md's one line on SU(2): the measured comparison once main-su2 has results, else the plan."""
    runs = comparison()
    mine, tf = _vals(runs[PRESET]), _vals(runs[REFERENCE])
    if not mine:
        return f"- **SU(2)** (issue 25, `{PRESET}`): planned, {not_run(MAIN_GROUP, 'not run yet')}."
    gap = f", gap to {REFERENCE} {statistics.mean(mine) - statistics.mean(tf):+.4f}" if tf else ""
    deltas = [f"{statistics.mean(mine) - statistics.mean(_vals(runs[p])):+.4f} against {p}"
              for p in ("ka-1m", "ka-1m-tuned") if runs[p]]
    return (f"- **SU(2)** (issue 25, `{PRESET}`, group {MAIN_GROUP}): test BPC {mean_sd(mine)} over {len(mine)} "
            f"seed{'s' * (len(mine) > 1)}{gap}" + (f"; {', '.join(deltas)} (means)" if deltas else "")
            + f"; {flops_per_token(PRESET) / flops_per_token(REFERENCE):.2f}× {REFERENCE}'s model FLOPs per token.")
