"""RESULTS.md: the one-page summary of every headline (issue 23, point 7), generated from results/*/*.json only.

The main comparisons beside the paper's numbers, the ablations against the paper's deltas, the gap along the token
budget, at equal FLOPs and with size, and the dynamics verdicts; everything else is in the lab notebook it links to.
"""

import json
import os
import re
import statistics
from pathlib import Path
from string import Template
from typing import Any

from lab import groups, protocol
from lab.groups import (
    ABLATIONS,
    BUDGET_PRESETS,
    BUDGETS,
    FLOPS_PRESETS,
    STRETCH_BUDGET,
    TUNED_ABLATIONS,
    TUNED_FRESH_SEEDS,
    with_twins,
)
from lab.protocol import PROTOCOL, load_results
from lab.retired import RETIRED_FIXES
from lab.studies import induction
from lab.writers import compute, fit, gap_budget, geometries, leads, size
from lab.writers.common import fmt, mean_sd, overrides, seed_runs, table
from lab.writers.scaling import PAPER_BY_SIZE

PAPER_1M = {"ka-1m": "1.637 ± 0.010", "tf-1m": "1.616 ± 0.004"}  # the paper's enwik8 test BPC at 1M (means)
PAPER_GAP_1M = "+0.021"
PAPER_DELTAS = {"value-projection": "+0.25", "no-ff": "+0.27", "no-gates": "+0.09"}
PAPER_5M = PAPER_BY_SIZE["5m"]  # the paper's 5M medians: one copy, scaling.py's
WHAT = {"tf-1m": "the transformer", "ka-1m": "Kuramoto attention, the paper's layer (our reading)",
        "ka-1m-tuned": "Kuramoto attention, the best variant (outside the paper's score)"}


def main_section() -> str:
    runs = {"tf-1m": seed_runs("main", "tf-1m"), "ka-1m": seed_runs("main", "ka-1m"),
            "ka-1m-tuned": seed_runs("main-tuned", "ka-1m-tuned")}
    if not runs["tf-1m"]:
        return "_No main runs yet (`python -m lab run lr`, then `python -m lab run main`)._"
    tf = statistics.mean(r["eval_bpc"] for r in runs["tf-1m"])
    body = []
    for p, rs in runs.items():
        if not rs:
            body.append([f"**{p}**", WHAT[p], "0", "not run", "—", PAPER_1M.get(p, "—"), "—", "—"])
            continue
        vals = [r["eval_bpc"] for r in rs]
        gap = "—" if p == "tf-1m" else f"**{statistics.mean(vals) - tf:+.4f}**"
        body.append([f"**{p}**", WHAT[p], str(len(vals)), mean_sd(vals), gap,
                     PAPER_1M.get(p, "not in the paper"), compute.fmt_per_token(compute.flops_per_token(rs[0])),
                     compute.fmt_flops(compute.training_flops(rs[0]))])
    text = table(["model", "", "seeds", "test BPC, mean ± sd", "gap to tf-1m", "paper (enwik8)", "model FLOPs/token",
                  "training FLOPs"], body)
    fresh = [r["eval_bpc"] for r in runs["ka-1m-tuned"] if r["train"]["seed"] in TUNED_FRESH_SEEDS]
    notes = [f"The paper's gap at 1M is {PAPER_GAP_1M} (enwik8, means); enwik7 is the first 10 MB of enwik8, so the "
             "absolute numbers differ from the paper's, the gap is the comparison."]
    if len(fresh) > 1:
        notes.append(f"ka-1m-tuned was chosen on seeds 0–2; its seeds {', '.join(map(str, TUNED_FRESH_SEEDS))} alone: "
                     f"{mean_sd(fresh)}, gap {statistics.mean(fresh) - tf:+.4f}.")
    code = {p: seed_runs(g, p) for p, g in (("tf-1m", "pycode"), ("ka-1m", "pycode"), ("ka-1m-tuned", "pycode-tuned"))}
    if code["tf-1m"]:
        tf_code = statistics.mean(r["eval_bpc"] for r in code["tf-1m"])
        gaps = [f"{p} {statistics.mean(r['eval_bpc'] for r in rs) - tf_code:+.4f}" for p, rs in code.items()
                if rs and p != "tf-1m"]
        notes.append(f"On Python code (pycode, bits per byte, one seed) tf-1m scores {fmt(tf_code)}; gaps: "
                     f"{', '.join(gaps)} (the paper, on CodeParrot: +0.013 to +0.015).")
    return text + "\n\n" + " ".join(notes)


def ablation_section() -> str:
    full = {g: next((r for r in with_twins(src) if r["preset"] == p and r["train"]["seed"] == 0), None)
            for g, src, p in (("ablation", "main", "ka-1m"), ("ablation-tuned", "main-tuned", "ka-1m-tuned"))}
    done = {g: {r["name"]: r for r in with_twins(g)} for g in full}
    if not any(done.values()):
        return "_No ablations yet (`python -m lab run ablation`, `python -m lab run ablation-tuned`)._"
    body = []
    for name in dict.fromkeys([*ABLATIONS, *TUNED_ABLATIONS]):
        runs = [(done[g].get(f"ka-{name}"), ref) for g, ref in full.items()]
        cells = [f"{r['eval_bpc'] - ref['eval_bpc']:+.4f}" if r and ref else "—" for r, ref in runs]
        if any(c != "—" for c in cells):
            body.append([name, *cells, PAPER_DELTAS.get(name, "—"), *_costs([r for r, _ in runs])])
    refs = ", ".join(f"{r['preset']} {fmt(r['eval_bpc'])} ({_costs([r])[0]} model FLOPs per token)"
                     for r in full.values() if r)
    return (f"ΔBPC (test, 10M tokens, seed 0) of each ablation against its full model ({refs}); a component removed "
            "takes its parameters with it, and its FLOPs.\n\n"
            + table(["ablation", "Δ on ka-1m", "Δ on ka-1m-tuned", "paper Δ", "model FLOPs/token on ka-1m / tuned",
                     "training FLOPs on ka-1m / tuned"], body))


def _costs(runs: list[dict[str, Any] | None]) -> list[str]:
    """Model FLOPs per token and training FLOPs of runs, each pair of cells joined by " / " ("—" for a run not
    made)."""
    per = [compute.fmt_per_token(compute.flops_per_token(r)) if r else "—" for r in runs]
    total = [compute.fmt_flops(compute.training_flops(r)) if r else "—" for r in runs]
    return [" / ".join(per), " / ".join(total)]


def budget_section(plots: dict[str, Path | None], link: Any) -> str:
    runs = compute.budget_runs()
    if not runs:
        return "_No runs yet (`python -m lab run budget40`)._"
    body = []
    for label, by in runs.items():
        tf = by.get("tf-1m")
        cells = []
        for p in BUDGET_PRESETS:
            r = by.get(p)
            if r is None:
                cells.append("—")
            else:
                mark = ("*" if compute.model_note(r) else "") + ("†" if compute.off_rate(r) else "")
                gap = f" ({r['eval_bpc'] - tf['eval_bpc']:+.3f})" if tf and p != "tf-1m" else ""
                cells.append(f"{fmt(r['eval_bpc'])}{mark}{gap}, {compute.fmt_flops(compute.training_flops(r))}")
        body.append([label + (" (valid)" if label == "3M" else ""), *cells])
    text = table(["tokens", *(p + (" (gap)" if p != "tf-1m" else "") + ", training FLOPs" for p in BUDGET_PRESETS)],
                 body)
    per = ", ".join(f"{p} {compute.fmt_per_token(groups.flops_per_token(p))}" for p in BUDGET_PRESETS)
    notes = ["Seed 0, each model with its own full schedule to the budget, test BPC (3M: the sweep's best rate, "
             f"validation BPC). Model FLOPs per token: {per}."]
    if any(compute.model_note(r) for by in runs.values() for r in by.values()):
        notes.append("*: an earlier ka-1m (the feed-forward on ψ(θ) itself; group budget ran before P ψ(θ)).")
    off = {label: [r for r in by.values() if compute.off_rate(r)] for label, by in runs.items()}
    if any(off.values()):
        notes.append("†: below its swept rate (" + "; ".join(
            f"{label}: " + ", ".join(f"{r['preset']} at {r['train']['lr']:g}" for r in rs)
            for label, rs in off.items() if rs) + "), its best on validation at this budget (group lr40); at "
            f"{STRETCH_BUDGET // 1_000_000}M, the rate best at {BUDGETS[-1] // 1_000_000}M.")
    if f"{BUDGETS[-1] // 1_000_000}M" not in runs:
        notes.append("The 40M runs are not in yet (`python -m lab run budget40`).")
    flops = {r["name"]: r for r in with_twins("flops")}
    eq = []
    for b in (PROTOCOL["tokens"], *BUDGETS):
        label = f"{b // 1_000_000}M"
        tf = runs.get(label, {}).get("tf-1m")
        for p in FLOPS_PRESETS:
            r, same = flops.get(f"{p}-flops-tf-{label.lower()}"), runs.get(label, {}).get(p)
            if r and tf:
                eq.append([p, label, f"{r['tokens'] / 1e6:.1f}M", f"**{r['eval_bpc'] - tf['eval_bpc']:+.4f}**",
                           f"{same['eval_bpc'] - tf['eval_bpc']:+.4f}" if same else "—"])
    eq_table = (table(["model", "at tf-1m's training FLOPs of", "its tokens", "gap at equal FLOPs",
                       "gap at equal tokens"], eq) if eq else
                "At equal training FLOPs: not yet run (`python -m lab run flops`).")
    notes.append("Issue 26's target: a Kuramoto preset within +0.02 of tf-1m at 40M tokens, within +0.03 at equal "
                 "FLOPs, its gap not growing from 10M (the table below has each model's three gaps).")
    slopes = fit.slope_table()
    imgs = [f"![{k}]({link(plots[k])})" for k in ("budget", "compute", "fit") if plots.get(k)]
    return (text + "\n\n" + "\n\n".join(notes) + "\n\n" + eq_table + "\n\n" + target_table(runs, flops)
            + (f"\n\n{slopes}" if slopes else "") + ("\n\n" + " ".join(imgs) if imgs else ""))


def target_table(runs: dict[str, dict[str, dict[str, Any]]], flops: dict[str, dict[str, Any]]) -> str:
    """Issue 26's target, as data: every Kuramoto preset trained to 40M tokens (the leads have their own table),
    its gap to tf-1m at equal tokens, at tf-1m's 40M-token FLOPs and at 10M, and its validation slope per
    doubling from 10M to 40M within the run."""
    label = f"{BUDGETS[-1] // 1_000_000}M"
    tf40, tf10 = runs.get(label, {}).get("tf-1m"), runs.get("10M", {}).get("tf-1m")
    if tf40 is None or tf10 is None:
        return "Issue 26's target (40M tokens): not yet run (tf-1m's 10M and 40M runs are needed)."
    models = [(p, r, runs["10M"].get(p), flops.get(f"{p}-flops-tf-{label.lower()}"))
              for p, r in runs[label].items() if p != "tf-1m"]  # the presets; the leads have their own table
    rows = []
    for name, r, ten, eq in sorted(models, key=lambda m: m[1]["eval_bpc"]):
        other_rate = "" if eq is None or eq["train"]["lr"] == r["train"]["lr"] else f" (at lr {eq['train']['lr']:g})"
        rows.append([name, f"{r['eval_bpc'] - tf40['eval_bpc']:+.3f}",
                     "not run" if eq is None else f"{eq['eval_bpc'] - tf40['eval_bpc']:+.3f}{other_rate}",
                     "not run" if ten is None else f"{ten['eval_bpc'] - tf10['eval_bpc']:+.3f}",
                     compute.fmt_slope(r)])
    rows.append(["tf-1m", "—", "—", "—", compute.fmt_slope(tf40)])
    return table(["model", f"gap to tf-1m at {label} tokens", f"at tf-1m's {label} FLOPs", "gap at 10M",
                  f"validation slope per doubling 10M→{label}"], rows)


def fixes_section() -> str:
    """Issue 46's fixes (groups.FIXES): each fix's 40M-token run at its preset's best rate there, against that
    preset's best 40M run and tf-1m's, with its validation slope per doubling from 10M to 40M within the run, and
    its gap at tf-1m's 40M-token FLOPs (fixes40-flops, for a fix that beat its preset on validation)."""
    done = {r["name"]: r for g in ("fixes40", "fixes40-flops") for r in with_twins(g)}
    tf = groups.budget_best("tf-1m", groups.FIX_BUDGET)
    fixes = [(name, fix.preset, ", ".join(f"{k}={v}" for k, v in {**fix.model, **fix.train}.items()),
              done.get(f"{name}-40m"), done.get(f"{name}-flops-tf-40m")) for name, fix in groups.FIXES.items()]
    fixes += [(f"{r['name'].removesuffix('-40m')} (retired)", r["preset"], overrides(r), r, None)  # marked, as run
              for g in RETIRED_FIXES for r in load_results(g)]
    rows = []
    for name, preset, change, r, eq in fixes:
        base = groups.budget_best(preset, groups.FIX_BUDGET)
        rows.append([name, change, fmt(r["eval_bpc"]) if r else "not yet run",
                     f"{r['eval_bpc'] - base['eval_bpc']:+.4f}" if r and base else "—",
                     f"{r['eval_bpc'] - tf['eval_bpc']:+.4f}" if r and tf else "—",
                     f"{eq['eval_bpc'] - tf['eval_bpc']:+.4f}" if eq and tf else "—", compute.fmt_slope(r)])
    for p in dict.fromkeys([*(f.preset for f in groups.FIXES.values()), "tf-1m"]):
        b = groups.budget_best(p, groups.FIX_BUDGET)
        rows.append([f"{p} (its best at 40M)", "—", fmt(b["eval_bpc"]) if b else "not yet run", "—",
                     f"{b['eval_bpc'] - tf['eval_bpc']:+.4f}" if b and tf and p != "tf-1m" else "—", "—",
                     compute.fmt_slope(b)])
    return table(["fix", "change", "test BPC at 40M", "Δ vs its preset at 40M", "gap to tf-1m", "gap at tf-1m's 40M "
                  "FLOPs", "validation slope per doubling 10M→40M"], rows)


def probes46_section() -> str:
    """Issue 46's probes of the pair: capacity (enwik6's training split, scored on it, 20M tokens) and pycode40 (the
    pair on Python code to 40M tokens, fresh data)."""
    if not any(with_twins(g) for g in ("capacity", "pycode40")):
        return "Not yet run: `python -m lab run capacity`, `python -m lab run pycode40`."
    rows = []
    for group, what in (("capacity", "enwik6 training split, 20M tokens (BPC on the training bytes)"),
                        ("pycode40", "pycode to 40M tokens (test BPB)")):
        by = {r["preset"]: r for r in with_twins(group)}
        tf = by.get("tf-1m")
        for p in groups.PROBE_PAIR:
            r = by.get(p)
            rows.append([group, p, what, fmt(r["eval_bpc"]) if r else "not yet run",
                         f"{r['eval_bpc'] - tf['eval_bpc']:+.4f}" if r and tf and p != "tf-1m" else "—",
                         compute.fmt_slope(r)])
    return table(["group", "model", "what", "score", "gap to tf-1m", "validation slope per doubling 10M→end"], rows)


def size_section() -> str:
    scale = load_results("scale")
    best = {p: min((r for r in scale if r["preset"] == p), key=lambda r: r["eval_bpc"], default=None)
            for p in ("ka-5m", "tf-5m")}
    one = {p: seed_runs("main", p) for p in ("ka-1m", "tf-1m")}
    rows = []
    if all(one.values()):
        m = {p: statistics.mean(r["eval_bpc"] for r in rs) for p, rs in one.items()}
        rows.append(["1M (main, mean)", fmt(m["ka-1m"]), fmt(m["tf-1m"]), f"{m['ka-1m'] - m['tf-1m']:+.4f}",
                     f"{PAPER_1M['ka-1m'].split()[0]} / {PAPER_1M['tf-1m'].split()[0]}, {PAPER_GAP_1M} (means)",
                     *_costs([one[p][0] for p in one])])
    if all(best.values()):
        ka, tf = best["ka-5m"], best["tf-5m"]
        rows.append(["5M (scale, seed 0, the best rate tried)", fmt(ka["eval_bpc"]), fmt(tf["eval_bpc"]),
                     f"{ka['eval_bpc'] - tf['eval_bpc']:+.4f}", f"{PAPER_5M[0]} / {PAPER_5M[1]}, {PAPER_5M[2]}",
                     *_costs([ka, tf])])
    tuned = size.summary_row()
    if tuned:
        rows.append(tuned)
    if not rows:
        return "_No runs yet (`python -m lab run scale`)._" + size.summary_note()
    variant = min(load_results("scale-variant"), key=lambda r: r["eval_bpc"], default=None)
    note = (f" The best 1M variant carried to 5M ({variant['name']}, scale-variant): {fmt(variant['eval_bpc'])}, "
            f"gap {variant['eval_bpc'] - best['tf-5m']['eval_bpc']:+.4f}." if variant and best["tf-5m"] else "")
    return (table(["size", "ka test BPC", "tf test BPC", "gap", "paper (enwik8) ka / tf, gap",
                   "model FLOPs/token ka / tf", "training FLOPs ka / tf"], rows)
            + "\n\n10M tokens each. At 5M (scale) neither model has a full sweep (the notebook lists the rates tried)."
            + note + size.summary_note())


def dynamics_section() -> str:
    path = protocol.RESULTS / "dynamics.json"
    lines = []
    if path.exists():
        rows = json.loads(path.read_text())
        first = rows[0]["group"]
        judged = [r for r in rows if r["group"] == first]
        n = len(judged)
        local, falls = sum(r["local_near_one"] for r in judged), sum(r["global_falls"] for r in judged)
        omega = sum(r["omega_decreasing"] for r in judged)
        lines += [f"- Local synchronisation without global collapse (paper claim 1): local |G| ≥ 0.9 at every layer "
                  f"in {local} of {n} {first} runs, global order falling from the first layer to the last in {falls} "
                  f"of {n}: {'holds' if local == n and falls == n else 'does not hold'} on these runs.",
                  f"- Early layers faster (paper claim 2): median |ω| strictly decreasing with depth in {omega} of "
                  f"{n}: {'holds' if omega == n else 'does not hold'}."]
        if any("ff_proj" not in r or r["ff_proj"] is None for r in judged):
            lines[-1] += (" (Measured on ka-1m with the feed-forward on ψ(θ) itself, before P ψ(θ) became its "
                          "default; `python -m lab dynamics` measures the current one from its trained runs.)")
    gap_path = protocol.RESULTS / "gap.json"
    if gap_path.exists():
        g = json.loads(gap_path.read_text())
        q = {r["quartile"]: r for r in g["by_difficulty"]}
        lines.append(f"- Where ka-1m loses (group {g['group']}, seeds {', '.join(map(str, g['seeds']))}): pooled gap "
                     f"{g['ka'] - g['tf']:+.3f} bits per byte, {q[0]['ka_gap']:+.3f} on the bytes the transformer "
                     f"finds easiest and {q[3]['ka_gap']:+.3f} on the hardest quarter"
                     + (" (ka-1m with the feed-forward on ψ(θ) itself, measured before P ψ(θ))."
                        if g.get("ka_ff_proj") in (None, "none") else "."))
    at_budget = gap_budget.summary_line()
    if at_budget:
        lines.append(at_budget)
    if not lines:
        return "_Not measured yet (`python -m lab dynamics`, `python -m lab gap`: they need trained runs)._"
    return "\n".join(lines) + "\n\nMeasured by `python -m lab dynamics` and `python -m lab gap` (details, with the " \
        "offset profiles, knockouts and linear probes, in the notebook)."


def induction_line() -> str:
    """The copy task's final accuracies (``python -m lab induction``), or how to measure them."""
    source = protocol.RESULTS / "induction.json"
    if not source.exists():
        return "- **Copying** (a synthetic induction task): not measured yet, `python -m lab induction`."
    res = json.loads(source.read_text())
    task = res["task"]
    parts = []
    for m, curve in induction.mean_curves(res).items():
        half = next((step for step, acc in curve if acc >= 0.5), None)
        parts.append(f"{m} {curve[-1][1]:.3f}" + (f" (0.5 first at step {half:,})" if half is not None else ""))
    return (f"- **Copying** (a synthetic induction task, `python -m lab induction`: two-layer models, a random "
            f"segment copied from a random start, next-symbol accuracy on the copy after {task['steps']:,} steps, "
            f"mean of {len(task['seeds'])} seeds, chance {1 / task['alphabet']:.3f}): " + ", ".join(parts)
            + ".")


TEMPLATE = Path(__file__).parent.parent / "templates" / "RESULTS.md"


def main_gaps() -> dict[str, str]:
    """The numbers the template's reading of the main comparison names: each Kuramoto preset's gap of the means to
    tf-1m ("not yet run" where a preset has no runs)."""
    runs = {p: [r["eval_bpc"] for r in seed_runs(g, p)] for p, g in (("tf-1m", "main"), ("ka-1m", "main"),
                                                                        ("ka-1m-tuned", "main-tuned"))}
    tf = statistics.mean(runs["tf-1m"]) if runs["tf-1m"] else None
    return {f"gap_{p.replace('-', '_')}": f"{statistics.mean(v) - tf:+.4f}" if v and tf is not None else "not yet run"
            for p, v in runs.items() if p != "tf-1m"}


def summary_text(path: Path, notebook: Path, plots: dict[str, Path | None]) -> str:
    """RESULTS.md: its template (people's sentences) with every slot filled from results/."""
    def link(p: Path) -> str:
        return Path(os.path.relpath(p, path.parent)).as_posix()

    slots = {"notebook": link(notebook), "tokens": f"{PROTOCOL['tokens'] / 1e6:g}",
             "batch_size": PROTOCOL["batch_size"], "context": PROTOCOL["context"], "warmup": PROTOCOL["warmup"],
             "main": main_section(),
             "curves": f"![validation curves]({link(plots['curves'])})" if plots.get("curves") else "",
             "ablation": ablation_section(), "budget": budget_section(plots, link), "leads": leads.summary_section(),
             "fixes": fixes_section(), "probes46": probes46_section(), "size": size_section(),
             "geometries": "\n".join([*map(geometries.summary_line, geometries.STUDIES), induction_line()]),
             "dynamics": dynamics_section(), **main_gaps()}
    text = Template(TEMPLATE.read_text()).substitute(slots)
    return re.sub(r"\n{3,}", "\n\n", text)
