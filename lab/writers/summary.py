"""RESULTS.md: the one-page summary's tables (issue 23, point 7), from results/*/*.json only; its sentences are the
template's (lab/templates/RESULTS.md) and everything else is in the lab notebook it links to."""

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
    STRETCH_BUDGET,
    TUNED_ABLATIONS,
    TUNED_FRESH_SEEDS,
    with_twins,
)
from lab.protocol import PROTOCOL, load_results
from lab.retired import RETIRED_FIXES
from lab.studies import induction
from lab.writers import compute, fit, gap_budget, geometries, leads, size
from lab.writers.common import bpcs, diff, fmt, mean, mean_sd, not_run, overrides, seed_runs, table
from lab.writers.compute import costs, fmt_slope
from lab.writers.scaling import PAPER_BY_SIZE

TEMPLATE = Path(__file__).parent.parent / "templates" / "RESULTS.md"
PAPER_1M = {"ka-1m": "1.637 ± 0.010", "tf-1m": "1.616 ± 0.004"}  # the paper's enwik8 test BPC at 1M (means)
PAPER_DELTAS = {"value-projection": "+0.25", "no-ff": "+0.27", "no-gates": "+0.09"}
MAIN = (("tf-1m", "main"), ("ka-1m", "main"), ("ka-1m-tuned", "main-tuned"))
CODE = (("tf-1m", "pycode"), ("ka-1m", "pycode"), ("ka-1m-tuned", "pycode-tuned"))


def main_section() -> str:
    """The 1M models over seeds against tf-1m's mean, on enwik7 and on Python code."""
    body = []
    for corpus, pairs in (("enwik7", MAIN), ("pycode (BPB)", CODE)):
        runs = {p: seed_runs(g, p) for p, g in pairs}
        fresh = [r for r in runs["ka-1m-tuned"] if r["train"]["seed"] in TUNED_FRESH_SEEDS]
        tf = mean(bpcs(runs["tf-1m"]))
        body += [[p + f" (seeds {', '.join(map(str, TUNED_FRESH_SEEDS))})" * (rs is fresh), corpus,
                  str(len(rs)), mean_sd(bpcs(rs)) if rs else "not run",
                  "—" if p == "tf-1m" else diff(mean(bpcs(rs)), tf),
                  PAPER_1M.get(p, "—") if corpus == "enwik7" else "—", costs(rs[0] if rs else None)[0]]
                 for p, rs in [*runs.items(), *([("ka-1m-tuned", fresh)] if len(fresh) > 1 else [])]]
    return table(["model", "corpus", "seeds", "test BPC, mean ± sd", "gap to tf-1m", "paper (enwik8)",
                  "model FLOPs/token"], body)


def main_gaps() -> dict[str, str]:
    """The template's numbers on the main comparison: each Kuramoto preset's gap of the means to tf-1m."""
    runs = {p: bpcs(seed_runs(g, p)) for p, g in MAIN}
    return {f"gap_{p.replace('-', '_')}": diff(mean(v), mean(runs["tf-1m"])) if v else "not yet run"
            for p, v in runs.items() if p != "tf-1m"}


def ablation_section() -> str:
    """Each ablation's ΔBPC (test, 10M tokens, seed 0) against its full model (the first row), beside the paper's."""
    full = {g: next((r for r in with_twins(src) if r["preset"] == p and r["train"]["seed"] == 0), None)
            for g, src, p in (("ablation", "main", "ka-1m"), ("ablation-tuned", "main-tuned", "ka-1m-tuned"))}
    done = {g: {r["name"]: r for r in with_twins(g)} for g in full}
    if not any(done.values()):
        return "_No ablations yet (`python -m lab run ablation`, `python -m lab run ablation-tuned`)._"
    body = [["(full model: test BPC)", *(fmt(r and r["eval_bpc"]) for r in full.values()), "—",
             " / ".join(costs(r)[0] for r in full.values())]]
    for name in dict.fromkeys([*ABLATIONS, *TUNED_ABLATIONS]):
        runs = [done[g].get(f"ka-{name}") for g in full]
        if any(runs):
            body.append([name, *(diff(r, ref) for r, ref in zip(runs, full.values(), strict=True)),
                         PAPER_DELTAS.get(name, "—"), " / ".join(costs(r)[0] for r in runs)])
    return table(["ablation", "Δ on ka-1m", "Δ on ka-1m-tuned", "paper Δ", "FLOPs/token ka-1m / tuned"], body)


def budget_section(plots: dict[str, Path | None], link: Any) -> str:
    """Test BPC per budget, then each preset's gaps, slopes and anneal cost."""
    runs = compute.budget_runs()
    if not runs:
        return "_No runs yet (`python -m lab run budget40`)._"
    body = [[label + " (valid)" * (label == "3M"), *(
        "—" if (r := by.get(p)) is None else fmt(r["eval_bpc"]) + "*" * bool(compute.model_note(r))
        + (f"† (lr {r['train']['lr']:g})" if compute.off_rate(r) else "")
        + ("" if p == "tf-1m" else f" ({diff(r, by.get('tf-1m'), 3)})") for p in BUDGET_PRESETS)]
        for label, by in runs.items()]
    text = table(["tokens", *(p + (" (gap)" if p != "tf-1m" else "") for p in BUDGET_PRESETS)], body)
    eq = {(label, p): (tf, same, at) for label, p, tf, same, at, _ in compute.flops_rows()}
    b, s = f"{BUDGETS[-1] // 1_000_000}M", f"{STRETCH_BUDGET // 1_000_000}M"
    gaps = []
    for p in BUDGET_PRESETS:
        tf10, same10, at10 = eq.get(("10M", p), (None, None, None))
        tf40, same40, at40 = eq.get((b, p), (None, None, None))
        gaps.append([p, compute.fmt_per_token(groups.flops_per_token(p)), diff(same10, tf10), diff(at10, tf10),
                     diff(same40, tf40), diff(at40, tf40) + (f" (lr {at40['train']['lr']:g})" if at40 and same40 and
                                                             at40["train"]["lr"] != same40["train"]["lr"] else ""),
                     fmt_slope(runs.get(b, {}).get(p)), *("—" if x is None else f"{x:+.3f}" for x in (
                         fit.per_doubling(runs, p, "10M", b), fit.per_doubling(runs, p, b, s),
                         fit.anneal_cost(runs, p)))])
    text += "\n\n" + table(["model", "FLOPs/token", "gap at 10M", "at tf-1m's 10M FLOPs", f"at {b}",
                            f"at tf-1m's {b} FLOPs", f"valid slope/doubling 10M→{b}", f"test/doubling 10M→{b}",
                            f"{b}→{s}", "anneal cost"], gaps)
    missing = [g for g, done in (("budget40", b in runs), ("flops", any(r[4] for r in compute.flops_rows())))
               if not done]
    imgs = [f"![{k}]({link(plots[k])})" for k in ("budget", "compute", "fit") if plots.get(k)]
    return (text + "".join(f"\n\n_Not run yet: `python -m lab run {g}`._" for g in missing)
            + ("\n\n" + " ".join(imgs) if imgs else ""))


def fixes_section() -> str:
    """Issue 46's fixes at 40M tokens against their preset's best and tf-1m's, with their slopes."""
    done = {r["name"]: r for g in ("fixes40", "fixes40-flops") for r in with_twins(g)}
    tf = groups.budget_best("tf-1m", groups.FIX_BUDGET)
    rows = [[name, ", ".join(f"{k}={v}" for k, v in {**fix.model, **fix.train}.items()),
             fmt(r["eval_bpc"]) if (r := done.get(f"{name}-40m")) else "not yet run",
             diff(r, groups.budget_best(fix.preset, groups.FIX_BUDGET)), diff(r, tf),
             diff(done.get(f"{name}-flops-tf-40m"), tf), fmt_slope(r)] for name, fix in groups.FIXES.items()]
    rows += [[f"{r['name'].removesuffix('-40m')} (retired)", overrides(r), fmt(r["eval_bpc"]),  # marked, as run
              diff(r, groups.budget_best(r["preset"], groups.FIX_BUDGET)), diff(r, tf), "—", fmt_slope(r)]
             for g in RETIRED_FIXES for r in load_results(g)]
    rows += [[f"{p} (its best at 40M)", "—", fmt(b["eval_bpc"]) if (b := groups.budget_best(p, groups.FIX_BUDGET))
              else "not yet run", "—", diff(b, tf) if p != "tf-1m" else "—", "—", fmt_slope(b)]
             for p in dict.fromkeys([*(f.preset for f in groups.FIXES.values()), "tf-1m"])]
    return table(["fix", "change", "test BPC at 40M", "Δ vs its preset at 40M", "gap to tf-1m",
                  "gap at tf-1m's 40M FLOPs", "validation slope per doubling 10M→40M"], rows)


def probes46_section() -> str:
    """Issue 46's probes of the pair: capacity and pycode40."""
    if not any(with_twins(g) for g in ("capacity", "pycode40")):
        return "Not yet run: `python -m lab run capacity`, `python -m lab run pycode40`."
    rows = []
    for group in ("capacity", "pycode40"):
        by = {r["preset"]: r for r in with_twins(group)}
        rows += [[group, p, fmt(r["eval_bpc"]) if (r := by.get(p)) else "not yet run",
                  diff(r, by.get("tf-1m")) if p != "tf-1m" else "—", fmt_slope(r)] for p in groups.PROBE_PAIR]
    return table(["group", "model", "score", "gap to tf-1m", "validation slope per doubling 10M→end"], rows)


def size_section() -> str:
    """The pair at 1M and 5M (scale, main-5m, scale-variant), beside the paper's."""
    scale = load_results("scale")
    best = {p: min((r for r in scale if r["preset"] == p), key=lambda r: r["eval_bpc"], default=None)
            for p in ("ka-5m", "tf-5m")}
    one, five = {p: seed_runs("main", p) for p in ("ka-1m", "tf-1m")}, size.runs()
    variant = min(load_results("scale-variant"), key=lambda r: r["eval_bpc"], default=None)
    paper = {s: f"{a} / {b}, {g}" for s, (a, b, g) in PAPER_BY_SIZE.items()}

    def row(what: str, ka: list[float], tf: list[float], p: str = "") -> list[str]:
        return [what, mean_sd(ka) if len(ka) > 1 else fmt(mean(ka)), mean_sd(tf) if len(tf) > 1 else fmt(mean(tf)),
                diff(mean(ka), mean(tf)), p]

    rows = [row("1M (main)", bpcs(one["ka-1m"]), bpcs(one["tf-1m"]), paper["1m"])] \
        if all(one.values()) else []
    rows += [row("5M (scale, the best rate tried)", [best["ka-5m"]["eval_bpc"]], [best["tf-5m"]["eval_bpc"]],
                 paper["5m"])] if all(best.values()) else []
    ka5, tf5 = bpcs(five[size.KA]), bpcs(five[size.TF])
    if ka5 and tf5:
        med = [fmt(statistics.median(ka5)), fmt(statistics.median(tf5)), diff(statistics.median(ka5),
                                                                             statistics.median(tf5))]
        rows += [row(f"5M tuned ({size.MAIN_GROUP}: {size.KA})", ka5, tf5),
                 ["5M tuned, medians", *med, paper["5m"]]]
        if eq := size.equal_flops_run():
            rows.append(row(f"5M tuned at {size.TF}'s 10M-token FLOPs", [eq["eval_bpc"]], tf5))
    if variant and best["tf-5m"]:
        rows.append(row(f"5M, the best 1M variant ({variant['name']})", [variant["eval_bpc"]],
                        [best["tf-5m"]["eval_bpc"]]))
    return (table(["size", "ka test BPC", "tf test BPC", "gap", "paper (enwik8) ka / tf, gap"], rows) if rows
            else "_No runs yet._") + (
        "" if ka5 and tf5 else f"\n\n_5M tuned: {not_run(size.MAIN_GROUP, 'not run yet')}._")


def induction_table() -> str:
    """The copy task's final accuracies and the step each model first reached 0.5 (``python -m lab induction``)."""
    source = protocol.RESULTS / "induction.json"
    if not source.exists():
        return "_Copying (a synthetic induction task): not measured yet, `python -m lab induction`._"
    res = json.loads(source.read_text())
    task = res["task"]
    return table([f"copy task model ({len(task['seeds'])} seeds, chance {1 / task['alphabet']:.3f})",
                  f"accuracy after {task['steps']:,} steps", "first step at 0.5"],
                 [[m, f"{curve[-1][1]:.3f}", next((f"{step:,}" for step, acc in curve if acc >= 0.5), "—")]
                  for m, curve in induction.mean_curves(res).items()])


def dynamics_section() -> str:
    """The paper's dynamics claims on the first group measured (runs satisfying each, of all), then the loss gaps."""
    path = protocol.RESULTS / "dynamics.json"
    text = ""
    if path.exists():
        rows = json.loads(path.read_text())
        judged = [r for r in rows if r["group"] == rows[0]["group"]]
        n, group = len(judged), rows[0]["group"] + (" (ψ(θ) itself)" if any(r.get("ff_proj") is None for r in judged)
                                                   else "")
        text = table(["paper claim", "measured on", "runs where it holds"], [
            ["1: local \\|G\\| ≥ 0.9 at every layer", group, f"{sum(r['local_near_one'] for r in judged)} of {n}"],
            ["1: global order falls from the first layer to the last", group,
             f"{sum(r['global_falls'] for r in judged)} of {n}"],
            ["2: median \\|ω\\| strictly decreasing with depth", group,
             f"{sum(r['omega_decreasing'] for r in judged)} of {n}"]]) + "\n\n"
    return text + gap_budget.gap_table()


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
             "geometries": geometries.summary_table(), "induction": induction_table(), "dynamics": dynamics_section(),
             **main_gaps()}
    return re.sub(r"\n{3,}", "\n\n", Template(TEMPLATE.read_text()).substitute(slots))
