"""Why the gap grows with the budget (issue 26), from the budget curve's own logs: each Kuramoto run's gap to tf-1m
in training BPC beside its gap in validation BPC along the largest budget (``fit_gaps``, results/fit.png), the test
BPC each model gains per doubling of the budget, what the protocol's tokens lose to a rate not yet decayed
(``anneal_cost``), the largest budget's runs at half the swept rate (group lr40, ``rate_note``), and how many of
each run's steps the gradient clip cut (``clip_note``) and which parts of the model those steps' gradient was in
(``spike_note``)."""

from pathlib import Path
from typing import Any

from lab import protocol
from lab.groups import BUDGET_PRESETS, BUDGETS, STRETCH_BUDGET, all_results, flop_matched, valid_estimate, with_twins
from lab.protocol import PROTOCOL, load_results
from lab.writers.common import fmt, table
from lab.writers.compute import COLOURS, REFERENCE, budget_runs, model_note, pyplot, valid_points


def _train_points(r: dict[str, Any]) -> dict[int, float]:
    """tokens -> the mean training BPC since the previous evaluation, along a run's curve."""
    return {q["tokens"]: q["train_bpc"] for q in r.get("curve", []) if q.get("train_bpc") is not None}


def fit_gaps(r: dict[str, Any], tf: dict[str, Any]) -> list[tuple[int, float, float]]:
    """(tokens, training-BPC gap, validation-BPC gap) of run ``r`` to ``tf`` at every evaluation both made at the
    same token count: whether the gap is in fitting the training bytes or in generalising from them."""
    train, train_tf = _train_points(r), _train_points(tf)
    valid = {q["tokens"]: q["valid_bpc"] for q in r.get("curve", [])}
    valid_tf = {q["tokens"]: q["valid_bpc"] for q in tf.get("curve", [])}
    return [(t, train[t] - train_tf[t], valid[t] - valid_tf[t]) for t in sorted(train) if t in train_tf
            and t in valid and t in valid_tf]


def per_doubling(runs: dict[str, dict[str, dict[str, Any]]], preset: str, lo: str = "10M",
                 hi: str = f"{BUDGETS[-1] // 1_000_000}M") -> float | None:
    """Test BPC gained per doubling of the token budget between two budgets of the curve (seed 0, own schedules)."""
    import math

    a, b = runs.get(lo, {}).get(preset), runs.get(hi, {}).get(preset)
    if a is None or b is None or model_note(a) or model_note(b):
        return None
    return (b["eval_bpc"] - a["eval_bpc"]) / math.log2(b["tokens"] / a["tokens"])


def anneal_cost(runs: dict[str, dict[str, dict[str, Any]]], preset: str) -> float | None:
    """The validation estimate of ``preset``'s largest-budget run at the protocol's token count (its rate still near
    the peak) minus the protocol run's at its end (the rate decayed): what the same tokens lose to an undecayed rate."""
    short = runs.get(f"{PROTOCOL['tokens'] // 1_000_000}M", {}).get(preset)
    long = next((r for r in with_twins("budget40") if r["preset"] == preset and not model_note(r)
                 and abs(r["tokens"] - BUDGETS[-1]) <= 0.1 * BUDGETS[-1]), None)  # at the swept rate, as the 10M run
    if short is None or long is None or model_note(short):
        return None
    a, b = valid_points(short), valid_points(long)
    if not a or not b:
        return None
    end = a[-1]
    near = min(b, key=lambda q: abs(q[0] - end[0]))
    return near[1] - end[1] if abs(near[0] - end[0]) <= 0.05 * end[0] else None


def fit_runs(budget: int = BUDGETS[-1], runs: dict[str, dict[str, dict[str, Any]]] | None = None
             ) -> list[tuple[str, dict[str, Any]]]:
    """Every Kuramoto run of the budget curve at ``budget`` (and at the largest of BUDGETS, leads40's leads), by
    name. ``runs``: ``budget_runs()``, when the caller has it."""
    at = (budget_runs() if runs is None else runs).get(f"{budget // 1_000_000}M", {})
    leads = ([(r["name"], r) for r in load_results("leads40") if not flop_matched(r["name"])]
             if budget == BUDGETS[-1] else [])
    return [(p, r) for p, r in at.items() if p != REFERENCE] + leads


def _fits(budget: int, runs: dict[str, dict[str, dict[str, Any]]]) -> list[tuple[str, list[tuple[int, float, float]]]]:
    tf = runs.get(f"{budget // 1_000_000}M", {}).get(REFERENCE)
    return [(name, g) for name, r in fit_runs(budget, runs) if tf is not None and (g := fit_gaps(r, tf))]


def _ahead_until(gaps: list[tuple[int, float, float]]) -> str:
    """The last evaluation at which the run fit its training bytes better than tf-1m ("never": behind throughout)."""
    ahead = [g for g in gaps if g[1] < 0]
    return f"{ahead[-1][0] / 1e6:.1f}M" if ahead else "never"


def fit_table() -> str:
    """Each Kuramoto run of the largest budgets against tf-1m at its end: the gap in training BPC beside the gap in
    validation BPC (equal: it fits its training bytes worse, it does not generalise worse), and until when it was
    ahead in training BPC."""
    runs = budget_runs()
    rows = [[name, f"{budget // 1_000_000}M", f"{gaps[-1][1]:+.3f}", f"{gaps[-1][2]:+.3f}", f"{gaps[-1][0] / 1e6:.0f}M",
             _ahead_until(gaps)]
            for budget in (BUDGETS[-1], STRETCH_BUDGET) for name, gaps in _fits(budget, runs)]
    if not rows:
        return ""
    return table(["run", "budget", "training-BPC gap to tf-1m", "validation-BPC gap to tf-1m", "at", "ahead in "
                  "training BPC until"], rows)


def slope_table() -> str:
    """Per preset of the curve: test BPC per doubling of the budget (10M→40M, 40M→100M, seed 0, own schedules) and the
    anneal cost (``anneal_cost``: the 40M run's validation estimate at 10M tokens minus the 10M run's at its end)."""
    runs = budget_runs()
    label, stretch = f"{BUDGETS[-1] // 1_000_000}M", f"{STRETCH_BUDGET // 1_000_000}M"

    def cell(x: float | None) -> str:
        return "—" if x is None else f"{x:+.3f}"

    rows = [[q, cell(per_doubling(runs, q, "10M", label)), cell(per_doubling(runs, q, label, stretch)),
             cell(anneal_cost(runs, q))] for q in BUDGET_PRESETS]
    if all(c == "—" for r in rows for c in r[1:]):
        return ""
    return table(["model", f"test BPC per doubling 10M→{label}", f"per doubling {label}→{stretch}",
                  f"anneal cost at {PROTOCOL['tokens'] // 1_000_000}M (validation)"], rows)


def rate_table() -> str:
    """lr40's runs against budget40's at the swept rate (test BPC, and the validation estimate that chooses), and each
    Kuramoto preset's gap to tf-1m with both at their best rate on validation, beside the gap at the swept rates."""
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
        return (f"{best[q]['eval_bpc'] - best[REFERENCE]['eval_bpc']:+.4f}",
                f"{swept[q]['eval_bpc'] - swept[REFERENCE]['eval_bpc']:+.4f}")

    rows = [[r["preset"], f"{r['train']['lr']:g}", fmt(r["eval_bpc"]), f"{w['train']['lr']:g}", fmt(w["eval_bpc"]),
             f"{r['eval_bpc'] - w['eval_bpc']:+.4f}", f"{valid_estimate(r) - valid_estimate(w):+.4f}",
             *gaps(r["preset"])]
            for r in lower if (w := swept[r["preset"]])]
    return table(["model", "lower lr", f"test BPC at {label}", "swept lr", "test BPC at the swept lr", "Δ",
                  "Δ validation", "gap to tf-1m at best rates", "gap at swept rates"], rows)


def _omega_rate(r: dict[str, Any]) -> float:
    """ω's learning-rate multiplier in a run (its own, or the phases' when it has none: ``make_optimizer``'s rule)."""
    t = r["train"]
    return t["omega_lr_mult"] if t.get("omega_lr_mult") is not None else t["phase_lr_mult"]


def _top(shares: dict[str, float], top: int = 3) -> str:
    return ", ".join(f"{k} {v:.0%}" for k, v in sorted(shares.items(), key=lambda kv: -kv[1])[:top])


def clip_table(results: list[dict[str, Any]], least: int = 10) -> str:
    """How rough each run's training was after its warmup (runner.clipping: runs whose log was on the machine that
    recorded them): ω's rate, the share of steps whose gradient norm exceeded the clip (left out for a run that clips
    the angles apart: its clip is not one norm), and where the gradient sits (each part's median share of the squared
    norm over all steps, and at the clipped steps for a run with at least ``least``; angles: the phases and ω)."""
    rows = []
    for r in sorted((r for r in results if r.get("clipping")),
                    key=lambda r: (-r["clipping"]["clipped_steps"] / r["clipping"]["steps"], r["name"])):
        c, parts = r["clipping"], r["clipping"].get("parts")
        share = "—" if r["train"].get("clip_angles_apart") else f"{c['clipped_steps'] / c['steps']:.2%}"
        rows.append([r["name"], r["group"], f"×{_omega_rate(r):g}" if r["family"] == "kuramoto" else "—", share,
                     f"{c['clipped_steps']} of {c['steps']:,}", _top(parts["all"]) if parts else "—",
                     _top(parts["clipped"]) if parts and c["clipped_steps"] >= least else "—"])
    if not rows:
        return ""
    return table(["run", "group", "ω lr", "steps above the clip", "count", "gradient share, all steps",
                  "gradient share, clipped steps"], rows)


def fit_note() -> str:
    """The notebook's tables on why the gap grows: the fit, the slopes and anneal costs, the lower rates, the clip."""
    parts = [(f"The gap at the end of the largest budgets ({BUDGETS[-1] // 1_000_000}M; "
              f"{STRETCH_BUDGET // 1_000_000}M: budget100, each at the rate best at {BUDGETS[-1] // 1_000_000}M), "
              "in training BPC (mean since the previous evaluation) and in validation BPC:", fit_table()),
             ("Test BPC per doubling of the budget (seed 0, own schedules), and the anneal cost (validation, the "
              "largest budget's run at the protocol's tokens minus the protocol run's end):", slope_table()),
             ("Below the swept rate (group lr40), test BPC:", rate_table()),
             ("The gradient clip after the warmup, and where the gradient sits:", clip_table(all_results()))]
    return "\n\n".join(f"{caption}\n\n{body}" for caption, body in parts if body)


def fit_plot(out: Path) -> Path | None:
    """The gap to tf-1m along each largest-budget Kuramoto run, in training BPC and in validation BPC."""
    label = f"{BUDGETS[-1] // 1_000_000}M"
    series = _fits(BUDGETS[-1], budget_runs())
    if not series:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4), dpi=120)
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (name, gaps) in enumerate(series):
        colour = COLOURS.get(name, cycle[i % len(cycle)])
        xs = [t / 1e6 for t, _, _ in gaps]
        ax.plot(xs, [g for _, g, _ in gaps], "-", color=colour, label=f"{name}: training")
        ax.plot(xs, [g for _, _, g in gaps], ":", color=colour, label=f"{name}: validation")
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xlabel("training tokens (M)")
    ax.set_ylabel("BPC minus tf-1m's at the same tokens")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(f"the gap along the {label}-token runs (seed 0)")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out


def plots() -> dict[str, Path | None]:
    return {"fit": fit_plot(protocol.RESULTS / "fit.png")}
