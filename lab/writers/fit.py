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
from lab.writers.common import fmt
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


RATE_CLOSES = 0.01  # how much narrower the gap at the best rates must be to count as the rate's


def rate_note() -> str:
    """lr40's runs against budget40's at the swept rate (test BPC, and the validation estimate that chooses), and
    the gap to tf-1m with each at its best rate on validation: whether the largest budget's gap is a rate chosen at
    smaller ones."""
    label = f"{BUDGETS[-1] // 1_000_000}M"
    swept = {r["preset"]: r for r in with_twins("budget40") if not model_note(r)}
    lower = sorted((r for r in with_twins("lr40") if r["preset"] in swept),
                   key=lambda r: (r["preset"], -r["train"]["lr"]))
    if not lower:
        return ""
    parts = [f"{r['preset']} {fmt(r['eval_bpc'])} at {r['train']['lr']:g} against {fmt(w['eval_bpc'])} at "
             f"{w['train']['lr']:g} (Δ {r['eval_bpc'] - w['eval_bpc']:+.4f}; validation "
             f"{valid_estimate(r) - valid_estimate(w):+.4f})" for r in lower if (w := swept[r["preset"]])]
    text = f"Below the swept rate ({label}, group lr40), test BPC: " + "; ".join(parts) + "."
    best = budget_runs().get(label, {})
    tried = {r["preset"] for r in lower}
    if REFERENCE in tried and REFERENCE in best and REFERENCE in swept:
        gaps = [f"{q} {best[q]['eval_bpc'] - best[REFERENCE]['eval_bpc']:+.4f} (at the swept rates "
                f"{swept[q]['eval_bpc'] - swept[REFERENCE]['eval_bpc']:+.4f})"
                for q in BUDGET_PRESETS if q in tried and q != REFERENCE and q in best]
        if gaps:
            text += " The gap to tf-1m with each at its best rate on validation: " + "; ".join(gaps) + "."
        closed = [q for q in BUDGET_PRESETS if q in tried and q != REFERENCE and q in best
                  and best[q]["eval_bpc"] - best[REFERENCE]["eval_bpc"]
                  < swept[q]["eval_bpc"] - swept[REFERENCE]["eval_bpc"] - RATE_CLOSES]
        if gaps and not closed:
            text += (" A lower rate helps the transformer as much or more: the gap at this budget is not a rate "
                     "chosen at smaller ones.")
    return text


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


def _fit_part(name: str, gaps: list[tuple[int, float, float]]) -> str:
    t, train, valid = gaps[-1]
    ahead = [g for g in gaps if g[1] < 0]  # the evaluations at which it fit its training bytes better
    since = (f"ahead of tf-1m's until {ahead[-1][0] / 1e6:.1f}M tokens, behind from then on" if ahead
             else "behind tf-1m's throughout")
    return (f"{name} {train:+.3f} in training BPC against {valid:+.3f} in validation BPC at {t / 1e6:.0f}M (its "
            f"training BPC {since})")


def _omega_rate(r: dict[str, Any]) -> float:
    """ω's learning-rate multiplier in a run (its own, or the phases' when it has none: ``make_optimizer``'s rule)."""
    t = r["train"]
    return t["omega_lr_mult"] if t.get("omega_lr_mult") is not None else t["phase_lr_mult"]


def clip_note(results: list[dict[str, Any]]) -> str:
    """How rough each run's training was after its warmup (runner.clipping: runs whose log was on the machine that
    recorded them): the share of its steps whose gradient norm exceeded the clip, the Kuramoto runs by ω's rate beside
    the transformer's, and whether those rates separate the runs (budgets and rates differ among them: an observation,
    not a controlled comparison). A run that clips the angles apart is left out: its clip is not one norm."""
    rows = sorted(((r, c["clipped_steps"] / c["steps"]) for r in results
                   if (c := r.get("clipping")) and not r["train"].get("clip_angles_apart")), key=lambda x: -x[1])
    if not rows:
        return ""
    by_rate: dict[float, list[tuple[str, float]]] = {}
    for r, share in rows:
        if r["family"] == "kuramoto":
            by_rate.setdefault(_omega_rate(r), []).append((r["name"], share))
    parts = [f"with ω at ×{rate:g}, " + ", ".join(f"{name} {share:.2%}" for name, share in named)
             for rate, named in sorted(by_rate.items(), key=lambda kv: -kv[0])]
    parts += [f"{r['name']} {share:.2%}" for r, share in rows if r["family"] != "kuramoto"]
    text = ("Steps whose gradient norm exceeded the clip after the warmup, as a share of each run's steps: "
            + "; ".join(parts) + ".")
    if len(by_rate) == 2:
        slow, fast = by_rate[min(by_rate)], by_rate[max(by_rate)]
        if max(x for _, x in slow) < min(x for _, x in fast):
            text += (f" Every run with ω at ×{min(by_rate):g} clipped fewer of its steps than every run with ω at "
                     f"×{max(by_rate):g}.")
    return text


def spike_note(results: list[dict[str, Any]], least: int = 10, top: int = 3) -> str:
    """Which parts of the model the gradient is in, for every run whose log kept each part's norm (runner.clipping):
    the ``top`` parts by median share of the squared norm over all steps after the warmup, and, for a run with at
    least ``least`` steps above the clip, at those steps (a part whose share jumps there is where the spikes are)."""
    parts, ranked_any = [], False
    for r in sorted(results, key=lambda x: (x["group"], x["name"])):
        c = r.get("clipping")
        if not c or "parts" not in c:
            continue
        shares = c["parts"]
        overall = ", ".join(f"{k} {v:.0%}" for k, v in sorted(shares["all"].items(), key=lambda kv: -kv[1])[:top])
        above = f"{c['clipped_steps']} of {c['steps']:,} steps above the clip" if c["clipped_steps"] else \
            "no step above the clip"
        text = f"{r['name']} ({above}): {overall}"
        if c["clipped_steps"] >= least:
            ranked_any = True
            text += "; at the clipped steps " + ", ".join(
                f"{k} {v:.0%}" for k, v in sorted(shares["clipped"].items(), key=lambda kv: -kv[1])[:top])
        parts.append(text)
    if not parts:
        return ""
    names = {k for r in results if (c := r.get("clipping")) and "parts" in c for k in c["parts"]["all"]}
    gloss = "; shared_ff_proj: the shared P" if "shared_ff_proj" in names else ""
    return ("Where the gradient sits after the warmup (each part's median share of the squared norm over all steps"
            + (f", and at the steps above the clip for a run with at least {least}" if ranked_any else "")
            + f"; angles: the phases and ω together{gloss}): " + "; ".join(parts) + ".")


def fit_note() -> str:
    """Why the gap grows with the budget, in the runs' own numbers: each Kuramoto model's gap to tf-1m in training
    BPC beside its gap in validation BPC at the end of the largest budgets (equal: the model fits its training bytes
    worse, it does not generalise worse) and where along the run it falls behind, the test BPC each model gains per
    doubling of the budget, and what the same tokens lose to a rate not yet decayed (``anneal_cost``)."""
    runs = budget_runs()
    label = f"{BUDGETS[-1] // 1_000_000}M"
    fits, stretch = _fits(BUDGETS[-1], runs), _fits(STRETCH_BUDGET, runs)
    if not fits and not stretch:
        return ""
    sentences = []
    if fits:
        sentences.append(f"Why the gap grows, from the {label} runs' curves (the mean training BPC since the previous "
                         "evaluation, and the validation estimate, each against tf-1m's at the same token count): "
                         + "; ".join(_fit_part(name, gaps) for name, gaps in fits) + ".")
    if stretch:
        sentences.append(f"At {STRETCH_BUDGET // 1_000_000}M (group budget100, each at the rate best at {label}; "
                         "training and validation BPC against tf-1m's as above): "
                         + "; ".join(_fit_part(name, gaps) for name, gaps in stretch) + ".")
    text = " ".join(sentences)
    if all(0 < 0.8 * valid <= train <= 1.25 * valid for _, gaps in fits + stretch for _, train, valid in gaps[-1:]):
        text += (" Each fits the bytes it trains on worse by about as much as it predicts unseen ones worse: the "
                 "widening gap is slower learning, not memorisation, and not worse generalisation.")
    for lo, hi in (("10M", label), (label, f"{STRETCH_BUDGET // 1_000_000}M")):
        slopes = {q: x for q in BUDGET_PRESETS if (x := per_doubling(runs, q, lo, hi)) is not None}
        if slopes:
            text += (f" Test BPC per doubling of the budget from {lo} to {hi}: "
                     + ", ".join(f"{q} {x:+.3f}" for q, x in slopes.items()) + ".")
    costs = {q: c for q in BUDGET_PRESETS if (c := anneal_cost(runs, q)) is not None}
    if REFERENCE in costs and len(costs) > 1:
        ten = f"{PROTOCOL['tokens'] / 1e6:.0f}M"
        text += (f" Where the rate stands: {ten} tokens into its {label} schedule at its swept rate (the rate still "
                 f"near its peak) each model's validation estimate is above its {ten} schedule's end (the rate "
                 "decayed) by " + ", ".join(f"{q} {c:+.3f}" for q, c in costs.items()) + ".")
        if all(c > costs[REFERENCE] for q, c in costs.items() if q != REFERENCE):
            text += (" The Kuramoto models lose more to a high rate and gain more from its decay (lr40 asks "
                     f"whether lower rates at {label} close the gap).")
    if lower := rate_note():
        text += " " + lower
    results = all_results()
    for note in (clip_note(results), spike_note(results)):
        if note:
            text += " " + note
    return text


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
