"""Runs as a table from a declarative list of columns, each a header and the cell it makes of a run: how the retired
groups and issue 46's probes are reported. Each run is shown beside its reference (``select.reference``)."""

import contextlib
from collections.abc import Callable, Iterable

from kuramoto_attention.errors import ConfigError
from lab import select
from lab.groups import plan, with_twins
from lab.protocol import load_results, run_command
from lab.retired import RETIRED, rerun_command
from lab.select import Run
from lab.writers.common import SLOPE, diff, fmt, label, lr, millions, note, overrides, signed, table

Column = tuple[str, Callable[[Run], str]]  # a header, and the cell of a run (its record, with its "reference")

RUN: Column = ("run", label)
CHANGE: Column = ("change", overrides)
TOKENS: Column = ("tokens", lambda r: millions(r["tokens"]))
LR: Column = ("lr", lr)
DATA: Column = ("data", lambda r: f"{r.get('corpus', '—')}/{r['eval_split']}")
BPC: Column = ("BPC", lambda r: fmt(r["eval_bpc"]))
VALID: Column = ("validation estimate", lambda r: fmt(r.get("final_valid_estimate")))
REFERENCE: Column = ("reference", lambda r: "—" if (x := r["reference"]) is None else f"{x['group']}/{x['name']}")
DELTA: Column = ("Δ vs reference", lambda r: diff(r, r["reference"]))
SLOPE_TO_END: Column = (f"{SLOPE} 10M→end", lambda r: signed(select.valid_slope(r)))  # from the protocol's tokens

# a retired group's runs, each with what it changes and what it is judged against
RETIRED_COLUMNS = (RUN, CHANGE, TOKENS, LR, DATA, BPC, VALID, REFERENCE, DELTA)
# RESULTS.md's: issue 26's leads at 40M (each against the preset at the same budget and rate), and issue 46's probes
LEAD_COLUMNS = (RUN, LR, BPC, VALID, DELTA, SLOPE_TO_END)  # the tokens: in each name (40m, flops-tf-40m)
PROBE_COLUMNS = (RUN, CHANGE, DATA, BPC, DELTA, SLOPE_TO_END)


def runs_table(runs: Iterable[Run], columns: tuple[Column, ...] = RETIRED_COLUMNS,
               pool: list[Run] | None = None) -> str:
    """One row per run, one cell per column; ``pool``: where references are found (``select.reference_pool``)."""
    pool = select.reference_pool() if pool is None else pool
    rows = [{**r, "reference": select.reference(r, pool)} for r in runs]
    return table([header for header, _ in columns], [[cell(r) for _, cell in columns] for r in rows])


def unrun(group: str) -> str:
    """A note naming a kept group's planned runs without a result yet, with the command that runs them."""
    with contextlib.suppress(ConfigError):  # retired, or not plannable yet: nothing to name
        done = {r["name"] for r in with_twins(group)}
        if missing := [s.name for s in plan(group) if s.name not in done]:
            return note(f"Not yet run: {', '.join(missing)} (`{run_command(group)}`)")
    return ""


def group_table(group: str, columns: tuple[Column, ...] = RETIRED_COLUMNS, pool: list[Run] | None = None) -> str:
    """A group's runs (``runs_table``) and its planned runs not yet run, or where its runs come from."""
    if not (rows := load_results(group)):
        return f"_No results of {group} here: `{rerun_command(group) if group in RETIRED else run_command(group)}`._"
    return runs_table(rows, columns, pool) + unrun(group)


def group_tables(groups: Iterable[str], pool: list[Run] | None = None) -> str:
    """Each group's ``group_table`` under its name."""
    pool = select.reference_pool() if pool is None else pool
    return "\n\n".join(f"Group {g}:\n\n{group_table(g, pool=pool)}" for g in groups)
