"""``python -m lab report``: docs/notebook.md, RESULTS.md and their plots from results/ (the templates' slots)."""

import os
import re
import statistics
from pathlib import Path
from string import Template

from kuramoto_attention.errors import ConfigError
from kuramoto_attention.models.config import flat_fields
from kuramoto_attention.models.presets import get_preset
from lab import protocol
from lab.groups import BEST_VARIANT, TUNED_CANDIDATE, TUNED_FRESH_SEEDS, all_results, best_lr, with_twins
from lab.protocol import PROTOCOL, TRAIN_DEFAULTS, load_results
from lab.retired import RETIRED, retired_options, retired_settings
from lab.writers import common, compute, geometries, leads, scaling, studies, summary
from lab.writers.common import Run, bpcs, diff, fmt, label, lr, mean, millions, overrides, seed_cells, table

TEMPLATE = Path(__file__).parent.parent / "templates" / "notebook.md"
SCREENS = ("screen", "screen2", "screen3", "screen4", "screen5", "screen6")


def screen_section(group: str) -> str:
    rows = with_twins(group)
    if not rows:
        return f"_No screening runs yet (`python -m lab run {group}`)._"
    base = next((r for r in rows if r["name"] == "ka-default"), None)
    return table(["run", "settings", "lr", "tokens", "valid BPC", "Δ vs ka-default",
                  "saturated increments attn / ff (mean over layers)"],
                 [[label(r), common.settings(r), lr(r), millions(r["tokens"]), fmt(r["eval_bpc"]),
                   diff(r, base) if base else "n/a", common.saturation(r)]
                  for r in sorted(rows, key=lambda r: r["eval_bpc"])])


def lr_section() -> str:
    """The 3M sweeps, each preset's best rate in each group marked."""
    rows = [r for g in ("lr", "lr-tuned", "lr-unprojected", "lr-wrapped") for r in load_results(g)]
    return common.sweep_table(rows, {(p, g): best_lr(p, g) for p, g in {(r["preset"], r["group"]) for r in rows}})


def transformer_group(group: str) -> str:
    """The group whose transformer a main-like group is read against (pycode's for pycode groups)."""
    return "pycode" if group.startswith("pycode") else "main"


def _candidates(group: str = "confirm") -> dict[str, list[Run]]:
    """Confirm's runs by candidate: the name less ``-seedN``."""
    by: dict[str, list[Run]] = {}
    for r in load_results(group):
        by.setdefault(r["name"].split("-seed")[0], []).append(r)
    return by


def _confirm_seeds() -> dict[str, list[float]]:
    """Each confirm candidate's test BPC per seed, by its name less ``ka-`` and ``-seedN``."""
    return {k.removeprefix("ka-"): bpcs(runs) for k, runs in _candidates().items()}


def _confirm_ranking(min_seeds: int = 3) -> list[str]:
    """Confirm's candidates with at least ``min_seeds`` seeds, by mean test BPC (best first)."""
    return [k for _, k in sorted((statistics.mean(v), k) for k, v in _confirm_seeds().items() if len(v) >= min_seeds)]


def comparison_section(group: str, unit: str) -> str:
    """A main-like group's models over seeds against its transformer's mean, and along training."""
    rows = with_twins(group)
    if not rows:
        return f"_No runs yet (`python -m lab run {group}`)._"
    ref = transformer_group(group)
    rows += [r for r in with_twins(ref) if r["family"] == "transformer"] if ref != group else []
    rows.sort(key=lambda r: r["train"]["seed"])
    by = {f: [r for r in rows if r["family"] == f] for f in ("kuramoto", "transformer")}
    tf = mean(bpcs(by["transformer"]))
    body = [[rs[0]["preset"] + f" ({rs[0]['group']})", ", ".join(str(r["train"]["seed"]) for r in rs),
             *seed_cells(bpcs(rs)), diff(mean(bpcs(rs)), tf) if f == "kuramoto" else "—", lr(rs[0]),
             millions(rs[0]["tokens"]), *compute.costs(rs[0]),
             common.PAPER_1M["ka-1m" if f == "kuramoto" else "tf-1m"] if ref == "main" else "not reported"]
            for f, rs in by.items() if rs]
    extra = []  # (what, seeds, values): main-tuned's seeds that chose nothing, main's best confirmed variants
    if group == "main-tuned":
        extra.append(("its seeds that played no part in choosing it", ", ".join(map(str, TUNED_FRESH_SEEDS)),
                      [r["eval_bpc"] for r in by["kuramoto"] if r["train"]["seed"] in TUNED_FRESH_SEEDS]))
    if group == "main":
        seeds = _confirm_seeds()
        extra += [(f"confirm: {n} ({common.variant_change(n)})", str(len(seeds[n])), seeds[n])
                  for n in dict.fromkeys([*_confirm_ranking()[:1], BEST_VARIANT]) if len(seeds.get(n, [])) >= 3]
    body += [[what, which, *seed_cells(vals), diff(mean(vals), tf), *[""] * 5] for what, which, vals in extra
             if len(vals) > 1]
    text = table(["model (group)", "seeds", f"test {unit} per seed", "mean ± sd", "median",
                  f"gap to {ref}'s transformer mean", "lr", "tokens", "model FLOPs/token", "training FLOPs",
                  "paper (enwik8, 1M)" if ref == "main" else "paper (1M)"], body)
    if twins := [f"{r['name']} = {r['twin']}" for r in rows if "twin" in r and r["group"] == group]:
        text += f"\n\nRuns another group made identically: {', '.join(twins)}."
    if not (by["transformer"] and by["kuramoto"]):
        return text
    # the gap of the mean validation estimates at a quarter, half and the end of the same runs
    curves = {f: [r["valid_curve"] for r in rs] for f, rs in by.items()}
    c = curves["kuramoto"][0]
    along = [[f"{c[i][0] / 1e6:.1f}M", diff(*(statistics.mean(x[i][1] for x in curves[f])
                                              for f in ("kuramoto", "transformer")), digits=3)]
             for i in sorted({len(c) // 4, len(c) // 2, len(c) - 1} if c else set())
             if all(len(x) > i and x[i][0] == c[i][0] for f in curves for x in curves[f])]
    return text + ("\n\n" + table(["tokens", "gap of the mean validation estimates"], along) if along else "")


def superseded_section() -> str:
    """ka-1m's runs with the earlier feed-forwards (frozen groups), against the matching transformer's mean."""
    body = []
    for group, what in (("main-unprojected", "ψ(θ) itself"), ("pycode-unprojected", "ψ(θ) itself, pycode (BPB)"),
                        ("main-raw", "raw θ"), ("main-wrapped", "wrap(θ)")):
        ka, vals = load_results(group), bpcs(load_results(group))
        tf = [r for r in load_results(transformer_group(group)) if r["family"] == "transformer"]
        body.append([group, what, f"{ka[0]['params']:,}" if ka else "—", *seed_cells(vals),
                     diff(mean(vals), mean(bpcs(tf)))])
    return table(["group", "ka-1m's feed-forward on", "params", "test per seed", "mean ± sd", "median",
                  "gap to the transformer's mean"], body)


def ablation_section(group: str = "ablation", full_group: str = "main") -> str:
    """Each ablation against the full model's seed 0 (its first row), beside the paper's Δ."""
    rows = with_twins(group)
    full = next((r for r in with_twins(full_group) if r["family"] == "kuramoto" and r["train"]["seed"] == 0), None)
    if not rows or not full:
        return f"_No ablations yet (`python -m lab run {group}`, after `{full_group}`)._"
    return table(["ablation", "change", "params", "model FLOPs/token", "training FLOPs", "tokens", "test BPC", "ΔBPC",
                  "paper Δ"],
                 [[label(r) + " (full model)" * (r is full), "—" if r is full else overrides(r), f"{r['params']:,}",
                   *compute.costs(r), millions(r["tokens"]), fmt(r["eval_bpc"]), "—" if r is full else diff(r, full),
                   common.PAPER_DELTAS.get(r["name"].removeprefix("ka-"), "—")] for r in [full, *rows]])


def _screen_delta(run: Run) -> str:
    """A confirm run's Δ against ka-default in the last screening round that ran the same change."""
    keys = (*common.TRAINING_VARIANTS, "beta1", "beta2", "grad_clip", "precision", "warmup")
    name = run["name"].split("-seed")[0]
    for group in reversed(SCREENS):
        rows = {r["name"]: r for r in with_twins(group)}
        same = [r for n, r in rows.items() if n != "ka-default" and (n == name or (
            r["model_overrides"] == run["model_overrides"] and all(
                r["train"].get(k, TRAIN_DEFAULTS[k]) == run["train"].get(k, TRAIN_DEFAULTS[k]) for k in keys)))]
        if same and "ka-default" in rows:
            return f"{diff(same[0], rows['ka-default'])} ({group})"
    return "—"


def confirm_sections(group: str = "confirm") -> tuple[str, str]:
    """Confirm's candidates against the ka-1m they change: over seeds (best first), and run by run."""
    main = common.reference_main()
    ka = {r["train"]["seed"]: r["eval_bpc"] for r in main if r["family"] == "kuramoto"}
    tf = mean([r["eval_bpc"] for r in main if r["family"] == "transformer"])
    rows, main_lr = load_results(group), next((m["train"]["lr"] for m in load_results("main-unprojected")), None)
    if not rows or not ka or tf is None:
        return (f"_No runs yet (`python -m lab run {group}`, after `main`)._",) * 2

    def change(r: Run) -> str:  # its model overrides, and its rate where it is not its base ka-1m's
        return overrides(r) if main_lr is None or r["train"]["lr"] == main_lr else f"{overrides(r)}, lr={lr(r)}"

    ranked = sorted(([name, change(runs[0]), ", ".join(map(str, seeds)), common.mean_sd(bpcs(runs)), fmt(same),
                      diff(mean(bpcs(runs)), same), diff(mean(bpcs(runs)), tf)]
                     for name, runs in _candidates(group).items()
                     for seeds in [sorted(r["train"]["seed"] for r in runs)]
                     if set(seeds) <= set(ka) for same in [statistics.mean(ka[s] for s in seeds)]),
                    key=lambda row: float(row[5]))
    by_run = [[r["name"], change(r), str(r["train"]["seed"]), _screen_delta(r), fmt(r["eval_bpc"]),
               diff(r["eval_bpc"], ka.get(r["train"]["seed"])), diff(r["eval_bpc"], tf)] for r in rows]
    return (table(["candidate", "change", "seeds", "mean ± sd test BPC", "ka-1m on ψ(θ), same seeds",
                   "Δ vs ka-1m on ψ(θ)", "gap to tf-1m mean"], ranked),
            table(["run", "change", "seed", "screen Δ (3M, valid)", "test BPC", "Δ vs ka-1m on ψ(θ), same seed",
                   "gap to tf-1m mean"], by_run))


def tuned_table() -> str:
    """What ka-1m-tuned is: confirm's candidate, its rank there, its changes to ka-1m (from the presets)."""
    base, ranked = flat_fields(get_preset("ka-1m")[1]), _confirm_ranking()
    rank = f"{ranked.index(TUNED_CANDIDATE) + 1} of {len(ranked)}" if TUNED_CANDIDATE in ranked else "—"
    tuned = {k: v for k, v in flat_fields(get_preset("ka-1m-tuned")[1]).items() if base.get(k) != v}
    return table(["confirm candidate", "rank by mean test BPC (3+ seeds)", "its change to ka-1m"],
                 [[TUNED_CANDIDATE, rank, common.changes(tuned)]])


def retired_section() -> str:
    """The retired groups: what each measured, its runs, the retired settings they used, the commit and command."""
    return table(["group", "what it measured", "runs", "retired settings its runs used", "commit", "rerun"],
                 [[group, ret.what, str(len(rows := load_results(group))),
                   ", ".join(sorted({s for r in rows for s in retired_settings(r["model"]) + retired_options(
                       r["train"])})) or "—", f"`{ret.commit}`", f"`{ret.rerun(group)}`"]
                  for group, ret in RETIRED.items()])


def notebook_text(notebook: Path, plots: dict[str, Path | None]) -> str:
    """The full lab notebook (``notebook``: where it goes, for its links to the plots)."""
    def link(path: Path) -> str:
        return Path(os.path.relpath(path, notebook.parent)).as_posix()

    def image(key: str, alt: str) -> str:
        return f"![{alt}]({link(plots[key])})" if plots.get(key) else ""

    moved_gap, confirm = confirm_sections()
    slots = {
        "results_link": link(notebook.parent.parent / "RESULTS.md"),
        "protocol": ", ".join(f"{k}={v}" for k, v in PROTOCOL.items() if k != "progress"),
        "moved_gap": moved_gap, "confirm": confirm, "tuned": tuned_table(),
        "lr10m_tuned": common.second_stage_section("lr10m-tuned", "lr-tuned", "ka-1m-tuned"),
        **{f"comparison_{g.replace('-', '_')}": comparison_section(g, "BPB" if "pycode" in g else "BPC")
           for g in ("main", "main-tuned", "pycode", "pycode-tuned")},
        **{f"ablation{g.removeprefix('ablation').replace('-', '_')}": ablation_section(g, full) for g, full in (
            ("ablation", "main"), ("ablation-tuned", "main-tuned"), ("ablation-unprojected", "main-unprojected"),
            ("ablation-raw", "main-raw"), ("ablation-wrapped", "main-wrapped"))},
        "planned_ablation": common.planned("ablation"), "planned_ablation_tuned": common.planned("ablation-tuned"),
        **{f"geometry_{i}": geometries.section(s) for i, s in enumerate(geometries.STUDIES)},
        "superseded": superseded_section(), "budget_curve": scaling.budget_section(),
        "compute_budget": compute.budget_section(), "budget_plot": image("budget", "test BPC against budget"),
        "fit_table": compute.fit_table(), "rate_table": compute.rate_table(),
        "clip_table": compute.clip_table(all_results()),
        "fit_plot": image("fit", "the gap along the largest budget's runs"), "flops": compute.flops_section(),
        "compute_plot": image("compute", "validation BPC against training FLOPs and seconds"),
        "bench": compute.bench_table(), "leads_why": studies.why_table(), "leads": leads.section(),
        "probe40": summary.probe40_section(full=True),
        "scale": scaling.scale_section(), "size_tuned": scaling.size_section(),
        **{g: scaling.tuning10m_section(g, option) for g, option in (("lr10m", "lr"), ("warmup10m", "warmup"))},
        "lr": lr_section(), "retired": retired_section(), **{f"screen_{g}": screen_section(g) for g in SCREENS},
        "curves": image("curves", "validation curves"),
    }
    parts = [Template(TEMPLATE.read_text()).substitute(slots), *studies.notebook_parts()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(parts))


def write_report(root: Path = Path(".")) -> list[Path]:
    """RESULTS.md and docs/notebook.md under ``root``, and their plots under results/, from results/*/*.json only."""
    if not any(protocol.RESULTS.glob("*/*.json")):
        raise ConfigError(f"no results in {protocol.RESULTS}/: nothing to report (run `python -m lab run GROUP` first, "
                          "or report from the repository root, or pass --out DIR where `run --out DIR` wrote them)")
    plots = compute.plots()
    notebook = root / "docs" / "notebook.md"
    notebook.parent.mkdir(parents=True, exist_ok=True)
    notebook.write_text(notebook_text(notebook, plots))
    (root / "RESULTS.md").write_text(summary.summary_text(root / "RESULTS.md", notebook, plots))
    return [root / "RESULTS.md", notebook]
