"""The learning-rate sweeps' tables: a 3M-token sweep (valid BPC per rate), and its second stage (its two best rates
again at the protocol's 10M tokens, beside their 3M figures); ✓ marks the rate chosen (``groups.best_lr``)."""

from typing import Any

from lab.groups import best_lr
from lab.protocol import PROTOCOL, SWEEP, load_results, run_command
from lab.writers.common import fmt, not_run, overrides, table


def sweep_table(rows: list[dict[str, Any]], chosen: dict[tuple[str, str], float] | None = None) -> str:
    """Every run of one or more sweeps by preset, group and rate; ``chosen``: (preset, group) -> its best rate."""
    body = [[r["preset"], r["group"], overrides(r, strip_pinned=False) if r["family"] == "kuramoto" else "—",
             f"{r['train']['lr']:g}", f"{r['tokens'] / 1e6:.1f}M", fmt(r["eval_bpc"]),
             "✓" if (chosen or {}).get((r["preset"], r["group"])) == r["train"]["lr"] else ""]
            for r in sorted(rows, key=lambda r: (r["preset"], r["group"], r["train"]["lr"]))]
    return table(["preset", "group", "model", "lr", "tokens", "valid BPC", "best"], body)


def sweep_section(group: str, preset: str) -> str:
    """One preset's 3M sweep (``group``), its best rate marked, or the command that runs it."""
    rows = [r for r in load_results(group) if r["preset"] == preset]
    return sweep_table(rows, {(preset, group): best_lr(preset, group)}) if rows else f"_{not_run(group)}._"


def second_stage_section(second: str, sweep: str, preset: str) -> str:
    """The 3M sweep's two best rates at 10M beside their 3M figures, the chosen one marked."""
    rows = sorted((r for r in load_results(second) if r["preset"] == preset), key=lambda r: r["train"]["lr"])
    if not rows:
        return f"_{not_run(second)}._"
    at_sweep = {r["train"]["lr"]: r["eval_bpc"] for r in load_results(sweep) if r["preset"] == preset}
    done = len(rows) >= min(2, len(at_sweep))  # the stage trains the sweep's two best rates: no choice before
    best = best_lr(preset, second) if done else None
    body = [[f"{r['train']['lr']:g}", fmt(at_sweep.get(r["train"]["lr"])), fmt(r["eval_bpc"]),
             "✓" if r["train"]["lr"] == best else ""] for r in rows]
    text = table(["lr", f"valid BPC at {SWEEP['tokens'] / 1e6:g}M ({sweep})",
                  f"valid BPC at {PROTOCOL['tokens'] / 1e6:g}M ({second}, seed 0)", "chosen"], body)
    return text if done else text + f"\n\n_{len(rows)} of its 2 rates so far: `{run_command(second)}`._"
