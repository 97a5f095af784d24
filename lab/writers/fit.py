"""Why the gap grows with the budget (issue 26), from the budget curve's own logs: the gap in training BPC beside the
gap in validation BPC along the largest budget (``fit_table``, results/fit.png), test BPC per doubling of the budget
and the anneal cost (``slope_table``), the largest budget's runs below the swept rate (``rate_table``), and the
gradient clip (``clip_table``)."""

import math
from pathlib import Path
from typing import Any

from lab import protocol
from lab.groups import BUDGETS, STRETCH_BUDGET, flop_matched, valid_estimate, with_twins
from lab.protocol import PROTOCOL, load_results
from lab.writers.common import diff, fmt, table
from lab.writers.compute import COLOURS, REFERENCE, _save, budget_runs, model_note, pyplot, valid_points


def _train_points(r: dict[str, Any]) -> dict[int, float]:
    return {q["tokens"]: q["train_bpc"] for q in r.get("curve", []) if q.get("train_bpc") is not None}


def fit_gaps(r: dict[str, Any], tf: dict[str, Any]) -> list[tuple[int, float, float]]:
    """(tokens, training-BPC gap, validation-BPC gap) of ``r`` to ``tf`` at every evaluation both made."""
    train, train_tf = _train_points(r), _train_points(tf)
    valid = {q["tokens"]: q["valid_bpc"] for q in r.get("curve", [])}
    valid_tf = {q["tokens"]: q["valid_bpc"] for q in tf.get("curve", [])}
    return [(t, train[t] - train_tf[t], valid[t] - valid_tf[t]) for t in sorted(train) if t in train_tf
            and t in valid and t in valid_tf]


def per_doubling(runs: dict[str, dict[str, dict[str, Any]]], preset: str, lo: str = "10M",
                 hi: str = f"{BUDGETS[-1] // 1_000_000}M") -> float | None:
    """Test BPC gained per doubling of the token budget between two budgets of the curve (seed 0, own schedules)."""
    a, b = runs.get(lo, {}).get(preset), runs.get(hi, {}).get(preset)
    if a is None or b is None or model_note(a) or model_note(b):
        return None
    return (b["eval_bpc"] - a["eval_bpc"]) / math.log2(b["tokens"] / a["tokens"])


def anneal_cost(runs: dict[str, dict[str, dict[str, Any]]], preset: str) -> float | None:
    """The largest-budget run's validation estimate at the protocol's tokens minus the protocol run's at its end."""
    short = runs.get(f"{PROTOCOL['tokens'] // 1_000_000}M", {}).get(preset)
    long = next((r for r in with_twins("budget40") if r["preset"] == preset and not model_note(r)
                 and abs(r["tokens"] - BUDGETS[-1]) <= 0.1 * BUDGETS[-1]), None)  # at the swept rate, as the 10M run
    if short is None or long is None or model_note(short):
        return None
    end = (valid_points(short) or [None])[-1]
    near = min(valid_points(long), key=lambda q: abs(q[0] - end[0]), default=None) if end else None
    return near[1] - end[1] if near and abs(near[0] - end[0]) <= 0.05 * end[0] else None


def fit_runs(budget: int = BUDGETS[-1], runs: dict[str, dict[str, dict[str, Any]]] | None = None
             ) -> list[tuple[str, dict[str, Any]]]:
    """Every Kuramoto run of the budget curve at ``budget`` (at the largest, leads40's too), by name."""
    at = (budget_runs() if runs is None else runs).get(f"{budget // 1_000_000}M", {})
    leads = ([(r["name"], r) for r in load_results("leads40") if not flop_matched(r["name"])]
             if budget == BUDGETS[-1] else [])
    return [(p, r) for p, r in at.items() if p != REFERENCE] + leads


def _fits(budget: int, runs: dict[str, dict[str, dict[str, Any]]]) -> list[tuple[str, list[tuple[int, float, float]]]]:
    tf = runs.get(f"{budget // 1_000_000}M", {}).get(REFERENCE)
    return [(name, g) for name, r in fit_runs(budget, runs) if tf is not None and (g := fit_gaps(r, tf))]


def _ahead_until(gaps: list[tuple[int, float, float]]) -> str:
    ahead = [g for g in gaps if g[1] < 0]
    return f"{ahead[-1][0] / 1e6:.1f}M" if ahead else "never"


def fit_table() -> str:
    """Each Kuramoto run of the largest budgets against tf-1m: the training-BPC and validation-BPC gaps at its end."""
    runs = budget_runs()
    rows = [[name, f"{budget // 1_000_000}M", f"{gaps[-1][1]:+.3f}", f"{gaps[-1][2]:+.3f}", f"{gaps[-1][0] / 1e6:.0f}M",
             _ahead_until(gaps)]
            for budget in (BUDGETS[-1], STRETCH_BUDGET) for name, gaps in _fits(budget, runs)]
    return table(["run", "budget", "training-BPC gap to tf-1m", "validation-BPC gap to tf-1m", "at", "ahead in "
                  "training BPC until"], rows) if rows else ""


def rate_table() -> str:
    """lr40's runs against budget40's at the swept rate, and the gaps to tf-1m at the best and the swept rates."""
    label = f"{BUDGETS[-1] // 1_000_000}M"
    swept = {r["preset"]: r for r in with_twins("budget40") if not model_note(r)}
    lower = sorted((r for r in with_twins("lr40") if r["preset"] in swept),
                   key=lambda r: (r["preset"], -r["train"]["lr"]))
    if not lower:
        return ""
    best = budget_runs().get(label, {})
    tried = {r["preset"] for r in lower}

    def gaps(q: str) -> tuple[str, str]:
        if q == REFERENCE or REFERENCE not in tried or not {q, REFERENCE} <= best.keys() or REFERENCE not in swept:
            return "—", "—"
        return diff(best[q], best[REFERENCE]), diff(swept[q], swept[REFERENCE])

    rows = [[r["preset"], f"{r['train']['lr']:g}", fmt(r["eval_bpc"]), f"{w['train']['lr']:g}", fmt(w["eval_bpc"]),
             diff(r, w), diff(valid_estimate(r), valid_estimate(w)),
             *gaps(r["preset"])]
            for r in lower if (w := swept[r["preset"]])]
    return table(["model", "lower lr", f"test BPC at {label}", "swept lr", "test BPC at the swept lr", "Δ",
                  "Δ validation", "gap to tf-1m at best rates", "gap at swept rates"], rows)


def _omega_rate(r: dict[str, Any]) -> float:
    t = r["train"]  # ω's own multiplier, else the phases' (``make_optimizer``'s rule)
    return t["omega_lr_mult"] if t.get("omega_lr_mult") is not None else t["phase_lr_mult"]


def _top(shares: dict[str, float], top: int = 3) -> str:
    return ", ".join(f"{k} {v:.0%}" for k, v in sorted(shares.items(), key=lambda kv: -kv[1])[:top])


def clip_table(results: list[dict[str, Any]], least: int = 10) -> str:
    """Each run's clipped steps after its warmup (runner.clipping) and where its gradient sits (all, clipped)."""
    rows = []
    for r in sorted((r for r in results if r.get("clipping")),
                    key=lambda r: (-r["clipping"]["clipped_steps"] / r["clipping"]["steps"], r["name"])):
        c, parts = r["clipping"], r["clipping"].get("parts")
        share = "—" if r["train"].get("clip_angles_apart") else f"{c['clipped_steps'] / c['steps']:.2%}"
        rows.append([r["name"], r["group"], f"×{_omega_rate(r):g}" if r["family"] == "kuramoto" else "—", share,
                     f"{c['clipped_steps']} of {c['steps']:,}", _top(parts["all"]) if parts else "—",
                     _top(parts["clipped"]) if parts and c["clipped_steps"] >= least else "—"])
    return table(["run", "group", "ω lr", "steps above the clip", "count", "gradient share, all steps",
                  "gradient share, clipped steps"], rows) if rows else ""


def fit_plot(out: Path) -> Path | None:
    """The gap to tf-1m along each largest-budget Kuramoto run, in training BPC and in validation BPC."""
    label = f"{BUDGETS[-1] // 1_000_000}M"
    series = _fits(BUDGETS[-1], budget_runs())
    if not series:
        return None
    fig, ax = pyplot().subplots(figsize=(6.4, 4), dpi=120)
    cycle = pyplot().rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (name, gaps) in enumerate(series):
        colour = COLOURS.get(name, cycle[i % len(cycle)])
        xs = [t / 1e6 for t, _, _ in gaps]
        ax.plot(xs, [g for _, g, _ in gaps], "-", color=colour, label=f"{name}: training")
        ax.plot(xs, [g for _, _, g in gaps], ":", color=colour, label=f"{name}: validation")
    ax.axhline(0, color="grey", lw=0.8)
    ax.set(xlabel="training tokens (M)", ylabel="BPC minus tf-1m's at the same tokens",
           title=f"the gap along the {label}-token runs (seed 0)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _save(fig, out)


def plots() -> dict[str, Path | None]:
    return {"fit": fit_plot(protocol.RESULTS / "fit.png")}
