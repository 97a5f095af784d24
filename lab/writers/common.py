"""What the generated pages share: numbers, tables, how a run is named and described, and the rate sweeps' tables
(which runs they show is lab/select.py's)."""

import contextlib
import re
import statistics
from pathlib import Path
from string import Template
from typing import Any

from kuramoto_attention.errors import ConfigError
from lab import groups, select
from lab.groups import best_lr, plan
from lab.protocol import PROTOCOL, SWEEP, TRAIN_DEFAULTS, load_results, run_command
from lab.select import TRAINING_VARIANTS, Run, bpcs, mean, median

PAPER_1M = {"ka-1m": "1.637 ± 0.010", "tf-1m": "1.616 ± 0.004"}  # the paper's enwik8 test BPC at 1M (means)
PAPER_5M = "1.448 / 1.452, −0.004 (medians)"  # the paper's enwik8 test BPC at 5M, ka / tf, and its gap
SLOPE = "valid slope/doubling"  # RESULTS.md's header for select.valid_slope: validation BPC per doubling of tokens
PAPER_DELTAS = {"value-projection": "+0.25", "no-ff": "+0.27", "no-gates": "+0.09"}  # the paper's ablations' ΔBPC


def fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:.4f}"


def signed(x: float | None, digits: int = 3) -> str:
    return "—" if x is None else f"{x:+.{digits}f}"


def diff(a: Run | float | None, b: Run | float | None, digits: int = 4) -> str:
    """a − b (runs: their test BPC), signed, or "—" where either is missing."""
    a, b = (x["eval_bpc"] if isinstance(x, dict) else x for x in (a, b))
    return "—" if a is None or b is None else f"{a - b:+.{digits}f}"


def fmt_flops(x: float | None) -> str:
    return "—" if x is None else f"{x:.2e}"


def fmt_per_token(x: float | None) -> str:
    return "—" if x is None else f"{x / 1e6:.2f}M"


def costs(r: Run | None) -> list[str]:
    """A run's model FLOPs per token and training FLOPs, two cells."""
    return [fmt_per_token(select.flops_per_token(r)) if r else "—", fmt_flops(select.training_flops(r))]


def mean_sd(vals: list[float]) -> str:
    """Mean ± sample sd, or the one value with "(one seed)": an sd of one run is not a spread."""
    if not vals:
        return "—"
    return fmt(statistics.mean(vals)) + (f" ± {statistics.stdev(vals):.4f}" if len(vals) > 1 else " (one seed)")


def seeds_table(rows: list[tuple[str, str, list[Run]]], tf: float | None, reference: str = "tf-1m",
                unit: str = "BPC", paper: tuple[str, dict[str, str]] | None = None) -> str:
    """Models over their seeds, a row per (model, group, runs): how many seeds and which, each one's test score, their
    mean ± sd and median, the mean's gap to ``tf`` (``reference``'s mean), the first run's size, rate, tokens and costs
    (before any run: the preset's cost per token), the seeds' recorded training tokens/s; ``paper``: (its column's
    header, the paper's figure by model)."""
    def cost(model: str, rs: list[Run]) -> list[str]:
        with contextlib.suppress(Exception):  # a row named other than by its preset
            return costs(rs[0]) if rs else [fmt_per_token(groups.flops_per_token(model)), "—"]
        return ["—", "—"]

    body = [[model, group, str(len(rs)), ", ".join(str(r["train"]["seed"]) for r in rs) or "—",
             ", ".join(map(fmt, bpcs(rs))) or "not run", mean_sd(bpcs(rs)), fmt(median(bpcs(rs))),
             "—" if model == reference else diff(mean(bpcs(rs)), tf), count(rs[0] if rs else None),
             lr(rs[0]) if rs else "—", millions(rs[0]["tokens"]) if rs else "—", *cost(model, rs),
             f"{rate:,.0f}" if (rate := select.mean_rate(rs)) else "—", *([paper[1].get(model, "—")] if paper else [])]
            for model, group, rs in rows]
    return table(["model", "group", "seeds", "which", f"test {unit} per seed", "mean ± sd", "median",
                  f"gap to {reference} mean", "params", "lr", "tokens", "model FLOPs/token", "training FLOPs",
                  "training tokens/s (mean over seeds)", *([paper[0]] if paper else [])], body)


def lr(r: Run) -> str:
    return f"{r['train']['lr']:g}"


def millions(tokens: float, digits: int = 1) -> str:
    return f"{tokens / 1e6:.{digits}f}M"


def count(r: Run | None) -> str:
    """A run's parameter count, or "—"."""
    return f"{r['params']:,}" if r else "—"


def note(text: str) -> str:
    """A line in italics below a table."""
    return f"\n\n_{text}._"


def not_run(group: str, lead: str = "Not run yet") -> str:
    """The command that makes a group's results, and the groups its plan reads that have none yet, in run order."""
    before = select.unrun_before(group)
    return f"{lead}: `{run_command(group)}`" + (f" (after {', '.join(f'`{g}`' for g in before)})" if before else "")


def planned(group: str) -> str:
    """The names of a group's planned runs, or why it cannot be planned yet (e.g. no lr sweep yet)."""
    try:
        return ", ".join(s.name for s in plan(group))
    except ConfigError as exc:
        return f"not plannable yet ({exc})"


def render(template: Path, slots: dict[str, Any]) -> str:
    """A page: its template (people's sentences, lab/templates/) with every slot filled, blank runs closed up."""
    return re.sub(r"\n{3,}", "\n\n", Template(template.read_text()).substitute(slots))


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(map(str, r)) + " |" for r in rows])


def changes(fields: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in fields.items())


def overrides(r: Run, strip_pinned: bool = True) -> str:
    """A run's model overrides and changed training settings, less the ψ(θ) feed-forward its group is pinned to."""
    pinned = select.pinned(r) if strip_pinned else {}
    parts = [f"{k}={v}" for k, v in r["model_overrides"].items() if pinned.get(k, object()) != v
             and not (k == "ff" and v == "lift" and "ff_proj" in r["model_overrides"])]
    for name in TRAINING_VARIANTS:
        if (v := r["train"].get(name, TRAIN_DEFAULTS[name])) != TRAIN_DEFAULTS[name]:
            parts.append(name if v is True else f"{name}={v:g}")
    return ", ".join(parts) or "(preset)"


def settings(r: Run) -> str:
    """The open choices a screening run used, read from its recorded config."""
    m, t = r["model"], r["train"]
    if r["family"] != "kuramoto":
        return "transformer preset"
    ff = m["ff"] + ("" if m["ff"] != "angles" else (" wrapped" if m.get("ff_wrap") else " raw"))
    ff += " → tangent" if m.get("ff_output") == "tangent" else ""
    ff += (f" through P ({m['ff_proj']}, width {m.get('ff_proj_dim') or m['dim']})"
           if m.get("ff_proj", "none") != "none" and m["ff"] == "lift" else "")
    extras = [text for on, text in (
        (m.get("shared_gates"), "shared gates"), (m.get("self_coupling") is False, "no self-coupling"),
        (m.get("phase_lag"), "phase lag"), (m.get("content_lag"), "content lag"),
        (m.get("coupling_lag"), "coupling lag"), (m.get("value_lag"), "value lag"),
        (m.get("step_gate"), "per-head step size"),
        (m.get("value_gate_input", "lift") != "lift", "value gate reads P ψ(θ)"),
        (m.get("gates_input", "lift") != "lift", "metric gates read P ψ(θ)"),
        (m.get("readout_gain", "none") != "none",
         f"readout gain {m.get('readout_gain')} (init {m.get('readout_gain_init', 1.0):g})"),
        (m.get("readout_tied"), "readout tied to the embedding"),
    ) if on]
    extras += [f"{k} {t[k]:g}" for k in ("weight_decay", "warmup", "beta2") if t.get(k, TRAIN_DEFAULTS[k]) !=
               TRAIN_DEFAULTS[k]]
    return (f"k {m['dim']}, depth {m['depth']}, heads {m['heads']}, radius {m['attn_radius_init']:g}/"
            f"{m['ff_radius_init']:g} ({m['bound']}), τ₀ {m['tau_init']:g}, ff {ff} (hidden {m['ff_hidden']}), "
            f"v₀ {m['value_init']:g}, phase lr ×{t['phase_lr_mult']:g}" + "".join(f", {e}" for e in extras)
            + f"; {r['params']:,} params")


def label(r: Run) -> str:
    """A run's name, with the run another group made identically (``twin``) or trained it (``trained_in``)."""
    if "twin" in r:
        return f"{r['name']} (= {r['twin']})"
    if "trained_in" in r:
        return f"{r['name']} (= {r['trained_in']}, scored on {r['eval_split']})"
    return r["name"]


def saturation(r: Run | None) -> str:
    """The share of attention / feed-forward increments on the norm bound, mean over layers."""
    attn, ff = select.saturation(r)
    return "—" if attn is None else f"{attn:.0%} / " + ("—" if ff is None else f"{ff:.0%}")


def sweep_table(rows: list[Run], chosen: dict[tuple[str, str], float]) -> str:
    """Every run of one or more 3M sweeps by preset, group and rate; ✓ marks ``chosen[(preset, group)]``."""
    body = [[r["preset"], r["group"], overrides(r, strip_pinned=False) if r["family"] == "kuramoto" else "—", lr(r),
             millions(r["tokens"]), fmt(r["eval_bpc"]),
             "✓" * (chosen.get((r["preset"], r["group"])) == r["train"]["lr"])]
            for r in sorted(rows, key=lambda r: (r["preset"], r["group"], r["train"]["lr"]))]
    return table(["preset", "group", "model", "lr", "tokens", "valid BPC", "best"], body)


def sweep_section(group: str, preset: str) -> str:
    """One preset's 3M sweep, its best rate marked, or the command that runs it."""
    rows = [r for r in load_results(group) if r["preset"] == preset]
    return sweep_table(rows, {(preset, group): best_lr(preset, group)}) if rows else f"_{not_run(group)}._"


def second_stage_section(second: str, sweep: str, preset: str) -> str:
    """The 3M sweep's two best rates at 10M beside their 3M figures, the chosen one marked."""
    rows = sorted((r for r in load_results(second) if r["preset"] == preset), key=lambda r: r["train"]["lr"])
    if not rows:
        return f"_{not_run(second)}._"
    at_sweep = {r["train"]["lr"]: r["eval_bpc"] for r in load_results(sweep) if r["preset"] == preset}
    done = len(rows) >= min(2, len(at_sweep))  # the stage trains the sweep's two best rates: no choice before
    chosen = best_lr(preset, second) if done else None
    text = table(["lr", f"valid BPC at {SWEEP['tokens'] / 1e6:g}M ({sweep})",
                  f"valid BPC at {PROTOCOL['tokens'] / 1e6:g}M ({second}, seed 0)", "chosen"],
                 [[lr(r), fmt(at_sweep.get(r["train"]["lr"])), fmt(r["eval_bpc"]), "✓" * (r["train"]["lr"] == chosen)]
                  for r in rows])
    return text if done else text + f"\n\n_{len(rows)} of its 2 rates so far: `{run_command(second)}`._"
