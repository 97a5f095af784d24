"""RESULTS.md's tables (its sentences are lab/templates/RESULTS.md's) and README.md's, from results/*/*.json only."""

import itertools
import os
import re
from pathlib import Path
from typing import Any

from kuramoto_attention.errors import ConfigError
from kuramoto_attention.models.presets import preset_table
from lab import groups, select
from lab.groups import ABLATIONS, BUDGET_PRESETS, BUDGETS, FIX_BUDGET, STRETCHES, TUNED_ABLATIONS
from lab.protocol import PROTOCOL, load_results, run_command
from lab.retired import RETIRED_FIXES
from lab.select import Run, bpcs, mean, median, seed_runs
from lab.writers import common, geometries, run_table, studies
from lab.writers.common import PAPER_1M, SLOPE, costs, diff, fmt, fmt_per_token, lr, mean_sd, signed, table

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


def reading() -> dict[str, str]:
    """The template's numbers: the presets' gaps of the means to tf-1m; the kept fixes' slope lag and gaps at 40M."""
    runs = {p: bpcs(seed_runs(g, p)) for p, g in MAIN}
    gaps = {f"gap_{p.replace('-', '_')}": diff(mean(v), mean(runs["tf-1m"])) if v else "not yet run"
            for p, v in runs.items() if p != "tf-1m"}
    tf, fixes = groups.budget_best("tf-1m", FIX_BUDGET), load_results("fixes40")
    lags = [s - select.valid_slope(tf) for r in fixes if tf and (s := select.valid_slope(r)) is not None]
    over = [r["eval_bpc"] - tf["eval_bpc"] for r in fixes if tf]
    return {**gaps, "fix_slope_lag": f"{min(lags):.3f}–{max(lags):.3f}" if lags else "—",
            "fix_gaps": f"{signed(min(over), 4)} to {signed(max(over), 4)}" if over else "—"}


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
    # the gaps at equal tokens are the first table's; at tf-1m's FLOPs of a budget: group flops' runs
    b, flops = f"{BUDGETS[-1] // 1_000_000}M", select.by_name("flops")
    steps = list(itertools.pairwise([b, *(f"{x // 1_000_000}M" for x in STRETCHES.values())]))  # 40M→100M, 100M→300M
    gaps = []
    for p in BUDGET_PRESETS:
        (at10, at40), (tf10, tf40) = ([flops.get(f"{p}-flops-tf-{x.lower()}") for x in ("10M", b)],
                                      [runs.get(x, {}).get("tf-1m") for x in ("10M", b)])
        moved = at40 and (same40 := runs.get(b, {}).get(p)) and at40["train"]["lr"] != same40["train"]["lr"]
        gaps.append([p, fmt_per_token(groups.flops_per_token(p)), diff(at10, tf10),
                     diff(at40, tf40) + (f" (lr {lr(at40)})" if moved else ""),
                     signed(select.valid_slope(runs.get(b, {}).get(p))),
                     *(signed(select.per_doubling(runs, p, x, y)) for x, y in [("10M", b), *steps]),
                     signed(select.anneal_cost(runs, p))])
    text += "\n\n" + table(["model", "FLOPs/token", "gap at tf-1m's 10M FLOPs",
                            f"at tf-1m's {b} FLOPs", f"{SLOPE} 10M→{b}", f"test/doubling 10M→{b}",
                            *(f"{x}→{y}" for x, y in steps), "anneal cost"], gaps)
    missing = [g for g, done in (("budget40", b in runs), ("flops", bool(flops))) if not done]
    imgs = [f"![{k}]({link(plots[k])})" for k in ("budget", "compute", "fit") if plots.get(k)]
    return (text + "".join(f"\n\n_Not run yet: `python -m lab run {g}`._" for g in missing)
            + ("\n\n" + " ".join(imgs) if imgs else ""))


def fixes_section(pool: list[Run] | None = None) -> str:
    """Issue 46's fixes at 40M (retired ones marked) against their preset at its rate and tf-1m's best; unrun ones."""
    if not (rows := [r for g in ("fixes40", *RETIRED_FIXES) for r in load_results(g)]):
        return f"_Not yet run: `{run_command('fixes40')}`._"
    tf, flops = groups.budget_best("tf-1m", FIX_BUDGET), select.by_name("fixes40-flops")

    def at_flops(r: Run) -> Run | None:  # its run at tf-1m's 40M-token FLOPs (fixes40-flops), if any
        return flops.get(r["name"].replace("-40m", "-flops-tf-40m"))

    columns = (("fix", lambda r: r["name"].removesuffix("-40m") + " (retired)" * (r["group"] in RETIRED_FIXES)),
               run_table.CHANGE, ("test BPC at 40M", run_table.BPC[1]), ("Δ vs its preset at 40M", run_table.DELTA[1]),
               ("gap to tf-1m", lambda r: diff(r, tf)), ("gap at tf-1m's 40M FLOPs", lambda r: diff(at_flops(r), tf)),
               (f"{SLOPE} 10M→40M", run_table.SLOPE_TO_END[1]))
    return run_table.runs_table(rows, columns, pool) + run_table.unrun("fixes40")


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


PROBES = ("capacity", "capacity-shape", "pycode40")  # issue 46's probes (capacity and pycode40 retired)


def probes46_section(pool: list[Run] | None = None) -> str:
    """Issue 46's probes of the pair: capacity, ka-1m-tuned's shapes on it (capacity-shape), and pycode40."""
    rows = [r for g in PROBES for r in load_results(g)]
    text = run_table.runs_table(rows, run_table.PROBE_COLUMNS, pool) if rows else "_Not yet run._"
    return text + run_table.unrun("capacity-shape")


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
    """The tuned recipe at 5M (main-5m) against tf-5m over seeds, beside the paper's 5M medians; and at tf-5m's
    training FLOPs (the untuned pair, scale, is retired: the notebook's)."""
    (ka, tf), five = select.SIZE_PAIR, select.size_runs()
    ka5, tf5 = bpcs(five[ka]), bpcs(five[tf])
    if not (ka5 and tf5):
        return f"_5M tuned: {common.not_run(select.SIZE_GROUP, 'not run yet')}._"

    def row(what: str, kas: list[float], tfs: list[float], p: str = "") -> list[str]:
        return [what, *(mean_sd(v) if len(v) > 1 else fmt(mean(v)) for v in (kas, tfs)), diff(mean(kas), mean(tfs)), p]

    rows = [row(f"5M tuned ({select.SIZE_GROUP}: {ka})", ka5, tf5),
            ["5M tuned, medians", fmt(median(ka5)), fmt(median(tf5)), diff(median(ka5), median(tf5)),
             common.PAPER_5M]]
    if eq := select.by_name(select.SIZE_GROUP).get(groups.EQUAL_FLOPS_5M):
        rows.append(row(f"5M tuned at {tf}'s 10M-token FLOPs", [eq["eval_bpc"]], tf5))
    return table(["size", "ka test BPC", "tf test BPC", "gap", "paper (enwik8) ka / tf, gap"], rows)


def summary_text(path: Path, notebook: Path, plots: dict[str, Path | None]) -> str:
    """RESULTS.md: its template (people's sentences) with every slot filled from results/."""
    def link(p: Path) -> str:
        return Path(os.path.relpath(p, path.parent)).as_posix()

    pool = select.reference_pool()  # where the retired groups' runs find their references
    slots = {"notebook": link(notebook), "tokens": f"{PROTOCOL['tokens'] / 1e6:g}",
             "batch_size": PROTOCOL["batch_size"], "context": PROTOCOL["context"], "warmup": PROTOCOL["warmup"],
             "main": main_section(), "seeds40": seeds40_section(),
             "curves": f"![validation curves]({link(plots['curves'])})" if plots.get("curves") else "",
             "ablation": ablation_section(), "budget": budget_section(plots, link),
             "leads": run_table.group_table("leads40", run_table.LEAD_COLUMNS, pool), "fixes": fixes_section(pool),
             "probes46": probes46_section(pool), "capacity_margin": f"{groups.CAPACITY_MARGIN:g}",
             "probe40": probe40_section(("ka-1m-tuned", "fsn-40m", "successor-2-40m")), "size": size_section(),
             "geometries": geometries.summary_table(), "induction": studies.induction_table(),
             "dynamics": studies.dynamics_section(), **reading()}
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
