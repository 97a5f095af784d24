"""RESULTS.md's tables (its sentences are lab/templates/RESULTS.md's) and README.md's, from results/*/*.json only."""

import os
import re
from pathlib import Path
from typing import Any

from kuramoto_attention.errors import ConfigError
from kuramoto_attention.models.presets import preset_table
from lab import groups, select
from lab.groups import ABLATIONS, BUDGET_PRESETS, BUDGETS, FIX_BUDGET, STRETCH_BUDGET, TUNED_ABLATIONS, with_twins
from lab.protocol import PROTOCOL, load_results, run_command
from lab.retired import RETIRED_FIXES
from lab.select import Run, best, bpcs, mean, median, seed_runs
from lab.writers import common, geometries, leads, scaling, studies
from lab.writers.common import PAPER_1M, SLOPE, costs, diff, fmt, fmt_per_token, fmt_slope, lr, mean_sd, signed, table

TEMPLATE = Path(__file__).parent.parent / "templates" / "RESULTS.md"
MAIN = (("tf-1m", "main"), ("ka-1m", "main"), ("ka-1m-tuned", "main-tuned"))
CODE = (("tf-1m", "pycode"), ("ka-1m", "pycode"), ("ka-1m-tuned", "pycode-tuned"))
START, END = "<!-- headline: written by `python -m lab report` -->", "<!-- /headline -->"
PRESETS_START, PRESETS_END = "<!-- presets: written by `python -m lab report` -->", "<!-- /presets -->"
HEADLINE = (("tf-1m", "main", "RoPE + SwiGLU transformer"), ("ka-1m", "main", "Kuramoto attention, the paper's layer"),
            ("ka-1m-tuned", "main-tuned", "Kuramoto attention, our best 1M configuration on the torus"))
# shown once their groups have runs: the same layer on SU(2), the paper's non-abelian case, and on the sphere
MEASURED = (("ka-su2-1m", "main-su2", "the same layer on SU(2) (unit quaternions)"),
            ("ka-su2-1m-tuned", "main-su2-tuned", "on SU(2) with the tuned recipe"),
            ("ka-sphere-1m", "main-sphere", "the same layer on the sphere S³ (unit vectors of R⁴)"))


def main_section() -> str:
    """The 1M models over seeds against tf-1m's mean, on enwik7 and on Python code."""
    body = []
    for corpus, pairs in (("enwik7", MAIN), ("pycode (BPB)", CODE)):
        runs = {p: seed_runs(g, p) for p, g in pairs}
        fresh = [r for r in runs["ka-1m-tuned"] if r["train"]["seed"] in groups.TUNED_FRESH_SEEDS]
        tf = mean(bpcs(runs["tf-1m"]))
        body += [[p + f" (seeds {', '.join(map(str, groups.TUNED_FRESH_SEEDS))})" * (rs is fresh), corpus,
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
    full, done = select.ablations()
    if not any(done.values()):
        return "_No ablations yet (`python -m lab run ablation`, `python -m lab run ablation-tuned`)._"
    body = [["(full model: test BPC)", *(fmt(r and r["eval_bpc"]) for r in full.values()), "—",
             " / ".join(costs(r)[0] for r in full.values())]]
    for name in dict.fromkeys([*ABLATIONS, *TUNED_ABLATIONS]):
        if any(runs := [done[g].get(f"ka-{name}") for g in full]):
            body.append([name, *(diff(r, ref) for r, ref in zip(runs, full.values(), strict=True)),
                         common.PAPER_DELTAS.get(name, "—"), " / ".join(costs(r)[0] for r in runs)])
    return table(["ablation", "Δ on ka-1m", "Δ on ka-1m-tuned", "paper Δ", "FLOPs/token ka-1m / tuned"], body)


def budget_section(plots: dict[str, Path | None], link: Any) -> str:
    """Test BPC per budget, then each preset's gaps, slopes and anneal cost."""
    runs = select.budget_runs()
    if not runs:
        return "_No runs yet (`python -m lab run budget40`)._"
    body = [[label + " (valid)" * (label == "3M"), *(
        "—" if (r := by.get(p)) is None else fmt(r["eval_bpc"]) + "*" * bool(select.changed(r))
        + (f"† (lr {lr(r)})" if select.off_rate(r) else "")
        + ("" if p == "tf-1m" else f" ({diff(r, by.get('tf-1m'), 3)})")
        for p in BUDGET_PRESETS)] for label, by in runs.items()]
    text = table(["tokens", *(p + (" (gap)" if p != "tf-1m" else "") for p in BUDGET_PRESETS)], body)
    eq = {(label, p): (tf, same, at) for label, p, tf, same, at, _ in select.flops_rows()}
    b, s = f"{BUDGETS[-1] // 1_000_000}M", f"{STRETCH_BUDGET // 1_000_000}M"
    gaps = []
    for p in BUDGET_PRESETS:
        tf10, same10, at10 = eq.get(("10M", p), (None, None, None))
        tf40, same40, at40 = eq.get((b, p), (None, None, None))
        moved = at40 and same40 and at40["train"]["lr"] != same40["train"]["lr"]
        gaps.append([p, fmt_per_token(groups.flops_per_token(p)), diff(same10, tf10), diff(at10, tf10),
                     diff(same40, tf40), diff(at40, tf40) + (f" (lr {lr(at40)})" if moved else ""),
                     fmt_slope(runs.get(b, {}).get(p)), signed(select.per_doubling(runs, p, "10M", b)),
                     signed(select.per_doubling(runs, p, b, s)), signed(select.anneal_cost(runs, p))])
    text += "\n\n" + table(["model", "FLOPs/token", "gap at 10M", "at tf-1m's 10M FLOPs", f"at {b}",
                            f"at tf-1m's {b} FLOPs", f"{SLOPE} 10M→{b}", f"test/doubling 10M→{b}",
                            f"{b}→{s}", "anneal cost"], gaps)
    missing = [g for g, done in (("budget40", b in runs), ("flops", any(r[4] for r in select.flops_rows())))
               if not done]
    imgs = [f"![{k}]({link(plots[k])})" for k in ("budget", "compute", "fit") if plots.get(k)]
    return (text + "".join(f"\n\n_Not run yet: `python -m lab run {g}`._" for g in missing)
            + ("\n\n" + " ".join(imgs) if imgs else ""))


def fixes_section() -> str:
    """Issue 46's fixes at 40M tokens against their preset's best and tf-1m's, with their slopes."""
    done = select.by_name("fixes40", "fixes40-flops")
    tf = groups.budget_best("tf-1m", FIX_BUDGET)
    rows = [[name, common.changes({**fix.model, **fix.train}), fmt(r["eval_bpc"]) if (r := done.get(f"{name}-40m"))
             else "not yet run", diff(r, groups.budget_best(fix.preset, FIX_BUDGET)), diff(r, tf),
             diff(done.get(f"{name}-flops-tf-40m"), tf), fmt_slope(r)] for name, fix in groups.fixes().items()]
    rows += [[f"{r['name'].removesuffix('-40m')} (retired)", common.overrides(r), fmt(r["eval_bpc"]),  # marked, as run
              diff(r, groups.budget_best(r["preset"], FIX_BUDGET)), diff(r, tf), "—", fmt_slope(r)]
             for g in RETIRED_FIXES for r in load_results(g)]
    rows += [[f"{p} (its best at 40M)", "—", fmt(b["eval_bpc"]) if (b := groups.budget_best(p, FIX_BUDGET))
              else "not yet run", "—", diff(b, tf) if p != "tf-1m" else "—", "—", fmt_slope(b)]
             for p in dict.fromkeys([*(f.preset for f in groups.fixes().values()), "tf-1m"])]
    return table(["fix", "change", "test BPC at 40M", "Δ vs its preset at 40M", "gap to tf-1m",
                  "gap at tf-1m's 40M FLOPs", f"{SLOPE} 10M→40M"], rows)


def repro_section() -> str:
    """repro40's reruns beside the lr40 runs they repeat: test BPC, validation estimate, slope and gap to tf-1m."""
    if not (pairs := select.reruns()):
        return f"_Not yet run: `{run_command('repro40')}`._"
    tf = pairs.get("tf-1m", (None, None))

    valid = select.valid_estimate
    rows = [[b["name"].removesuffix("-rerun"), f"{fmt(a and a['eval_bpc'])} / {fmt(b['eval_bpc'])}", diff(b, a),
             f"{fmt(valid(a))} / {fmt(valid(b))}", diff(valid(b), valid(a)), f"{fmt_slope(a)} / {fmt_slope(b)}",
             "—" if p == "tf-1m" else f"{diff(a, tf[0])} / {diff(b, tf[1])}"] for p, (a, b) in pairs.items()]
    return table(["run (seed 0)", "test BPC, lr40 / rerun", "Δ", "validation estimate, lr40 / rerun", "Δ",
                  f"{SLOPE} 10M→40M, lr40 / rerun", "gap to tf-1m, lr40 / rerun"], rows)


def seeds40_section() -> str:
    """fixes40-seeds: the preset and the best fix on validation at 40M on seeds 0 and FIX_SEEDS (seed 0: the preset's
    best 40M run and the fix's fixes40 run): each seed's test BPC, their mean ± sd, the means' Δ and gap to tf-1m."""
    try:
        specs = groups.plan("fixes40-seeds")
    except ConfigError as exc:
        return f"_fixes40-seeds: nothing to train yet: {exc}._"
    preset, fix = specs[0].preset, specs[1].name.removesuffix(f"-40m-seed{groups.FIX_SEEDS[0]}")
    done = select.by_name("fixes40-seeds")
    first = {preset: groups.budget_best(preset, FIX_BUDGET), fix: select.by_name("fixes40").get(f"{fix}-40m")}
    runs = {name: [r0, *(done.get(f"{name}-40m-seed{s}") for s in groups.FIX_SEEDS)] for name, r0 in first.items()}
    means = {name: mean(bpcs([r for r in rs if r])) for name, rs in runs.items()}
    tf = groups.budget_best("tf-1m", FIX_BUDGET)
    rows = [[name, " / ".join(fmt(r and r["eval_bpc"]) for r in rs),
             mean_sd(bpcs([r for r in rs if r])),
             "—" if name == preset else diff(means[name], means[preset]), diff(means[name], tf)]
            for name, rs in runs.items()]
    seeds = " / ".join(map(str, (0, *groups.FIX_SEEDS)))
    text = table(["at 40M", f"test BPC, seeds {seeds}", "mean ± sd", f"Δ vs {preset}", "gap to tf-1m"], rows)
    return text + ("" if done else f"\n\n_Not yet run: `{run_command('fixes40-seeds')}`._")


def probes46_section() -> str:
    """Issue 46's probes of the pair: capacity, ka-1m-tuned's shapes on it (capacity-shape), and pycode40."""
    if not any(with_twins(g) for g in ("capacity", "capacity-shape", "pycode40")):
        return ("Not yet run: `python -m lab run capacity`, `python -m lab run capacity-shape`, "
                "`python -m lab run pycode40`.")
    by = {g: {r["preset"]: r for r in with_twins(g)} for g in ("capacity", "pycode40")}

    def row(group: str, model: str, r: Run | None, tf: Run | None) -> list[str]:
        return [group, model, fmt(r["eval_bpc"]) if r else "not yet run", diff(r, tf) if r is not tf else "—",
                fmt_slope(r)]

    rows = [row("capacity", p, by["capacity"].get(p), by["capacity"].get("tf-1m")) for p in groups.PROBE_PAIR]
    rows += [row("capacity-shape", f"{shape} ({common.changes(model)})", r, by["capacity"].get("tf-1m"))
             for shape, model, r in select.capacity_shapes()]  # ka-1m-tuned in other shapes, against tf-1m's run
    rows += [row("pycode40", p, by["pycode40"].get(p), by["pycode40"].get("tf-1m")) for p in groups.PROBE_PAIR]
    return table(["group", "model", "score", "gap to tf-1m", f"{SLOPE} 10M→end"], rows)


def probe40_section(models: tuple[str, ...] | None = None, full: bool = False) -> str:
    """``python -m lab probe40``: the gap to tf-1m by copy depth; ``full``: also each model's BPC at a fitted
    temperature and its share of steps past the bound's knee. ``models``: the Kuramoto runs shown (all by default)."""
    if (probe := select.study_file("probe40.json")) is None:
        return "_Not yet run: `python -m lab probe40`._"
    models = models or tuple(m for m in probe["runs"] if m != "tf-1m")
    rows = [[str(r["depth"]), f"{r['bytes']:,}", fmt(r["tf"]), *(signed(r[f"{m}_gap"]) for m in models)]
            for r in probe["by_copy_depth"]]

    def fitted(m: str) -> str:
        t = probe["temperature"][m]
        return f"{t['temperature']:.3f}: {fmt(t['bpc_fitted'])} ({signed(t['bpc_fitted'] - t['bpc_at_1'], 4)})"

    share = [f"{select.copy_share(probe, k):.0%}" for k in ("bytes", *(f"{m}_gap_bits" for m in models))]
    rows.append(["1–8: share of bytes / of the gap", share[0], "", *share[1:]])
    if full:
        rows.append(["fitted temperature: BPC (gain)", "", fitted("tf-1m"), *(fitted(m) for m in models)])
        for part, name in (("attn", "attention"), ("ff", "feed-forward")):
            rows.append([f"{name} steps past the bound's knee, per layer", "", "",
                         *(" / ".join(f"{layer[part]['past_knee']:.0%}" for layer in probe["steps"][m])
                           for m in models)])
    return table(["copy depth", "bytes", "tf-1m BPC", *(m.removesuffix("-40m") for m in models)], rows)


def size_section() -> str:
    """The pair at 1M and 5M (scale, main-5m, scale-variant), beside the paper's."""
    scale = load_results("scale")
    top = {p: best(r for r in scale if r["preset"] == p) for p in ("ka-5m", "tf-5m")}
    one, five = {p: seed_runs("main", p) for p in ("ka-1m", "tf-1m")}, select.size_runs()
    variant = best(load_results("scale-variant"))
    paper = {s: f"{a} / {b}, {g}" for s, (a, b, g) in scaling.PAPER_BY_SIZE.items()}

    def row(what: str, ka: list[float], tf: list[float], p: str = "") -> list[str]:
        return [what, mean_sd(ka) if len(ka) > 1 else fmt(mean(ka)), mean_sd(tf) if len(tf) > 1 else fmt(mean(tf)),
                diff(mean(ka), mean(tf)), p]

    rows = [row("1M (main)", bpcs(one["ka-1m"]), bpcs(one["tf-1m"]), paper["1m"])] if all(one.values()) else []
    rows += [row("5M (scale, the best rate tried)", bpcs([top["ka-5m"]]), bpcs([top["tf-5m"]]), paper["5m"])] \
        if all(top.values()) else []
    ka5, tf5 = bpcs(five[scaling.KA]), bpcs(five[scaling.TF])
    if ka5 and tf5:
        rows += [row(f"5M tuned ({scaling.MAIN_GROUP}: {scaling.KA})", ka5, tf5),
                 ["5M tuned, medians", fmt(median(ka5)), fmt(median(tf5)), diff(median(ka5), median(tf5)), paper["5m"]]]
        if eq := select.equal_flops_run():
            rows.append(row(f"5M tuned at {scaling.TF}'s 10M-token FLOPs", [eq["eval_bpc"]], tf5))
    if variant and top["tf-5m"]:
        rows.append(row(f"5M, the best 1M variant ({variant['name']})", [variant["eval_bpc"]], bpcs([top["tf-5m"]])))
    return (table(["size", "ka test BPC", "tf test BPC", "gap", "paper (enwik8) ka / tf, gap"], rows) if rows
            else "_No runs yet._") + ("" if ka5 and tf5 else
                                      f"\n\n_5M tuned: {common.not_run(scaling.MAIN_GROUP, 'not run yet')}._")


def summary_text(path: Path, notebook: Path, plots: dict[str, Path | None]) -> str:
    """RESULTS.md: its template (people's sentences) with every slot filled from results/."""
    def link(p: Path) -> str:
        return Path(os.path.relpath(p, path.parent)).as_posix()

    slots = {"notebook": link(notebook), "tokens": f"{PROTOCOL['tokens'] / 1e6:g}",
             "batch_size": PROTOCOL["batch_size"], "context": PROTOCOL["context"], "warmup": PROTOCOL["warmup"],
             "main": main_section(), "seeds40": seeds40_section(),
             "curves": f"![validation curves]({link(plots['curves'])})" if plots.get("curves") else "",
             "ablation": ablation_section(), "budget": budget_section(plots, link), "leads": leads.summary_section(),
             "fixes": fixes_section(), "probes46": probes46_section(), "capacity_margin": f"{groups.CAPACITY_MARGIN:g}",
             "probe40": probe40_section(("ka-1m-tuned", "fsn-40m", "successor-2-40m")),
             "size": size_section(),
             "geometries": geometries.summary_table(), "induction": studies.induction_table(),
             "dynamics": studies.dynamics_section(), **main_gaps()}
    return common.render(TEMPLATE, slots)


def headline() -> str:
    """README's headline: the 1M presets (SU(2)'s and the sphere's once run) over seeds on enwik7, costs, the paper's"""
    runs = {p: seed_runs(g, p) for p, g, _ in (*HEADLINE, *MEASURED)}
    if not runs["tf-1m"]:
        return "_No main runs yet: `python -m lab run lr`, then `python -m lab run main`._"
    tf, body = mean(bpcs(runs["tf-1m"])), []
    for p, _, what in (*HEADLINE, *((p, g, w) for p, g, w in MEASURED if runs[p])):
        paper, rates = PAPER_1M.get(p, "—"), select.bench_rates((p, "tf-1m"))
        paper_gap = "—" if p != "ka-1m" else f"{float(paper.split()[0]) - float(PAPER_1M['tf-1m'].split()[0]):+.3f}"
        ratios = ["1×", "1×"] if p == "tf-1m" else [
            f"{groups.flops_per_token(p) / groups.flops_per_token('tf-1m'):.2f}×",
            f"{rates[p] / rates['tf-1m']:.2f}×" if rates else "—"]
        body.append([f"`{p}`", what, str(len(runs[p])), mean_sd(bpcs(runs[p])) if runs[p] else "not run",
                     "—" if p == "tf-1m" else diff(mean(bpcs(runs[p])), tf), *ratios, paper, paper_gap])
    return table(["preset", "", "seeds", "enwik7 test BPC", "gap", "FLOPs/token", "tokens/s", "paper (enwik8)",
                  "paper gap"], body)


def presets() -> str:
    """Every preset with its exact parameter count (embeddings included) and what it is."""
    body = [[f"`{r['name']}`", r["family"], f"{r['params']:,}", str(r["depth"]), str(r["width"]), str(r["heads"]),
             str(r["ff_hidden"]), r["what"]] for r in preset_table()]
    return table(["preset", "family", "params", "depth", "width", "heads", "ff hidden", "what"], body)


def update_readme(readme: Path = Path("README.md")) -> Path | None:
    """Rewrite the README's tables between their markers; None (and nothing written) when it has no markers."""
    text = readme.read_text() if readme.exists() else ""
    if START not in text and PRESETS_START not in text:
        return None
    for start, end, body in ((START, END, headline), (PRESETS_START, PRESETS_END, presets)):
        pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
        text = pattern.sub(lambda _, s=start, e=end, b=body: f"{s}\n{b()}\n{e}", text)
    readme.write_text(text)
    return readme
