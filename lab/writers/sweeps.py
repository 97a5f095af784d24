"""The learning-rate sweeps' tables, shared by every preset's section: a 3M-token sweep (valid BPC per rate), and a
sweep's second stage (its two best rates again at the protocol's 10M tokens, beside their 3M figures). A preset's
rate is always read from these results (``groups.best_lr``), never typed."""

from typing import Any

from lab.groups import best_lr
from lab.protocol import PROTOCOL, SWEEP, load_results, run_command
from lab.writers.common import fmt, not_run, overrides, table


def _millions(tokens: int) -> str:
    return f"{tokens / 1e6:g}M"


def sweep_table(rows: list[dict[str, Any]]) -> str:
    """Every run of one or more sweeps, by preset, group and rate: its model's overrides, rate, tokens, valid BPC."""
    body = [[r["preset"], r["group"], overrides(r, strip_pinned=False) if r["family"] == "kuramoto" else "—",
             f"{r['train']['lr']:g}", f"{r['tokens'] / 1e6:.1f}M", fmt(r["eval_bpc"])]
            for r in sorted(rows, key=lambda r: (r["preset"], r["group"], r["train"]["lr"]))]
    return table(["preset", "group", "model", "lr", "tokens", "valid BPC"], body)


def sweep_section(group: str, preset: str) -> str:
    """One preset's 3M sweep (``group``): the table and its best rate, or the command that runs it."""
    rows = [r for r in load_results(group) if r["preset"] == preset]
    if not rows:
        return f"_{not_run(group)}._"
    return (sweep_table(rows) + f"\n\nBest rate at {_millions(SWEEP['tokens'])} tokens: "
            f"{best_lr(preset, group):g} ({len(rows)} rates).")


def second_stage_section(second: str, sweep: str, preset: str, users: str) -> str:
    """A sweep's two stages side by side: each rate of ``second`` (the 3M sweep's two best at the protocol, seed 0)
    with its valid BPC at 3M (``sweep``) and at 10M; ``users``: the groups that train at the winner."""
    rows = sorted((r for r in load_results(second) if r["preset"] == preset), key=lambda r: r["train"]["lr"])
    if not rows:
        return f"_{not_run(second)}._"
    at_sweep = {r["train"]["lr"]: r["eval_bpc"] for r in load_results(sweep) if r["preset"] == preset}
    body = [[f"{r['train']['lr']:g}", fmt(at_sweep[r["train"]["lr"]]) if r["train"]["lr"] in at_sweep else "—",
             fmt(r["eval_bpc"])] for r in rows]
    short, full = _millions(SWEEP["tokens"]), _millions(PROTOCOL["tokens"])
    ranked = len([r for r in load_results(sweep) if r["preset"] == preset])
    text = table(["lr", f"valid BPC at {short} ({sweep})", f"valid BPC at {full} ({second}, seed 0)"], body)
    if len(rows) < min(2, ranked):  # the stage trains the sweep's two best rates: until both are in, no choice
        return (text + f"\n\n{len(rows)} of its 2 rates so far: {users} trains at the better of the two once both "
                f"are in (`{run_command(second)}`).")
    return (text + f"\n\n{users} train at {best_lr(preset, second):g}, the best at {full} (chosen on the validation "
            "split; the test split scores only the runs that use it).")
