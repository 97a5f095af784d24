"""``python -m lab report``: docs/notebook.md, RESULTS.md and their plots from results/ (the templates' slots)."""

import os
from pathlib import Path

from kuramoto_attention.errors import ConfigError
from kuramoto_attention.models.config import flat_fields
from kuramoto_attention.models.presets import get_preset
from lab import groups, protocol, select
from lab.groups import BEST_VARIANT, TUNED_CANDIDATE, TUNED_FRESH_SEEDS, all_results, best_lr, with_twins
from lab.protocol import PROTOCOL, load_results
from lab.retired import RETIRED, retired_options, retired_settings
from lab.select import SCREENS, Run, bpcs, mean
from lab.writers import common, compute, geometries, run_table, studies, summary
from lab.writers.common import costs, diff, fmt, label, lr, millions, overrides, table

TEMPLATE = Path(__file__).parent.parent / "templates" / "notebook.md"
# issue 26's structural leads (retired), in the order they ran: at 10M, those dropped, more seeds, at 40M, widths
LEADS = ("leads", "leads-retired", "leads-retired-optim", "leads-retired-bound-scale", "leads-seeds", "leads40",
         "leads-flops")


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


def comparison_section(group: str, unit: str) -> str:
    """A main-like group's models over seeds against its transformer's mean, and along training."""
    if not with_twins(group):
        return f"_No runs yet (`python -m lab run {group}`)._"
    by, main = select.by_family(group), select.transformer_group(group) == "main"
    rows = [(rs[0]["preset"], rs[0]["group"], rs) for rs in by.values() if rs]
    paper = {p: common.PAPER_1M["ka-1m" if f == "kuramoto" else "tf-1m"] if main else "not reported"
             for f, rs in by.items() for p in {r["preset"] for r in rs}}
    if group == "main-tuned":  # its seeds that chose nothing; main's: the best confirmed variants
        rows.append(("its seeds that played no part in choosing it", group,
                     [r for r in by["kuramoto"] if r["train"]["seed"] in TUNED_FRESH_SEEDS]))
    if group == "main":
        confirmed, names = select.candidates(), dict.fromkeys([*select.confirm_ranking()[:1], BEST_VARIANT])
        change = {n: "not recorded" if (m := select.variant_model(n)) is None else common.changes(m) for n in names}
        rows += [(f"{n} ({change[n]})", "confirm", sorted(rs, key=lambda r: r["train"]["seed"]))
                 for n in names if len(rs := confirmed.get(f"ka-{n}", [])) >= 3]
    text = common.seeds_table([row for row in rows if row[0] in paper or len(row[2]) > 1],
                              mean(bpcs(by["transformer"])), unit=unit,
                              paper=("paper (enwik8, 1M)" if main else "paper (1M)", paper))
    if twins := [f"{r['name']} = {r['twin']}" for rs in by.values() for r in rs if "twin" in r and r["group"] == group]:
        text += f"\n\nRuns another group made identically: {', '.join(twins)}."
    along = [[f"{t / 1e6:.1f}M", f"{gap:+.3f}"] for t, gap in select.gaps_along(by)]
    return text + ("\n\n" + table(["tokens", "gap of the mean validation estimates"], along) if along else "")


def superseded_section() -> str:
    """ka-1m's runs with the earlier feed-forwards (frozen groups), against the matching transformer's mean: enwik7's,
    then pycode's."""
    return "\n\n".join(common.seeds_table(
        [(f"ka-1m on {what}", group, load_results(group)) for group, what in rows],
        mean(bpcs([r for r in load_results(select.transformer_group(rows[0][0])) if r["family"] == "transformer"])),
        unit=unit) for rows, unit in (((("main-unprojected", "ψ(θ) itself"), ("main-raw", "raw θ"),
                                        ("main-wrapped", "wrap(θ)")), "BPC"),
                                      ((("pycode-unprojected", "ψ(θ) itself"),), "BPB")))


def ablation_section(group: str = "ablation", full_group: str = "main") -> str:
    """Each ablation against the full model's seed 0 (its first row), beside the paper's Δ."""
    rows = with_twins(group)
    full = next((r for r in with_twins(full_group) if r["family"] == "kuramoto" and r["train"]["seed"] == 0), None)
    if not rows or not full:
        return f"_No ablations yet (`python -m lab run {group}`, after `{full_group}`)._"
    return table(["ablation", "change", "params", "model FLOPs/token", "training FLOPs", "tokens", "test BPC", "ΔBPC",
                  "paper Δ"],
                 [[label(r) + " (full model)" * (r is full), "—" if r is full else overrides(r), f"{r['params']:,}",
                   *costs(r), millions(r["tokens"]), fmt(r["eval_bpc"]), "—" if r is full else diff(r, full),
                   common.PAPER_DELTAS.get(r["name"].removeprefix("ka-"), "—")] for r in [full, *rows]])


def confirm_sections(group: str = "confirm", pool: list[Run] | None = None) -> tuple[str, str]:
    """Confirm's candidates against the ka-1m they change: over seeds (best first), and run by run (each against its
    reference: ka-1m on ψ(θ) itself on the same seed)."""
    ka, tf, ranked = select.confirm_against_main(group)
    rows, main_lr = load_results(group), next((m["train"]["lr"] for m in load_results("main-unprojected")), None)
    if not rows or not ka or tf is None:
        return (f"_No runs yet (`python -m lab run {group}`, after `main`)._",) * 2

    def change(r: Run) -> str:  # its model overrides, and its rate where it is not its base ka-1m's
        return overrides(r) if main_lr is None or r["train"]["lr"] == main_lr else f"{overrides(r)}, lr={lr(r)}"

    ranked = sorted(([name, change(runs[0]), ", ".join(str(s) for s in sorted(r["train"]["seed"] for r in runs)),
                      common.mean_sd(bpcs(runs)), fmt(same), diff(mean(bpcs(runs)), same), diff(mean(bpcs(runs)), tf)]
                     for name, runs, same in ranked), key=lambda row: float(row[5]))
    return (table(["candidate", "change", "seeds", "mean ± sd test BPC", "ka-1m on ψ(θ), same seeds",
                   "Δ vs ka-1m on ψ(θ)", "gap to tf-1m mean"], ranked), run_table.runs_table(rows, pool=pool))


def tuned_table() -> str:
    """What ka-1m-tuned is: confirm's candidate, its rank there, its changes to ka-1m (from the presets)."""
    base, ranked = flat_fields(get_preset("ka-1m")[1]), select.confirm_ranking()
    rank = f"{ranked.index(TUNED_CANDIDATE) + 1} of {len(ranked)}" if TUNED_CANDIDATE in ranked else "—"
    tuned = {k: v for k, v in flat_fields(get_preset("ka-1m-tuned")[1]).items() if base.get(k) != v}
    return table(["confirm candidate", "rank by mean test BPC (3+ seeds)", "its change to ka-1m"],
                 [[TUNED_CANDIDATE, rank, common.changes(tuned)]])


def size_section() -> str:
    """The tuned recipe at 5M: its sweep, then the seeds and the run at tf-5m's training FLOPs, against tf-5m's mean."""
    (ka, tf), by = select.SIZE_PAIR, select.size_runs()
    eq = select.by_name(select.SIZE_GROUP).get(groups.EQUAL_FLOPS_5M)  # at tf-5m's training FLOPs, not a seed
    rows = [*((p, select.SIZE_GROUP, rs) for p, rs in by.items()),
            (groups.EQUAL_FLOPS_5M, select.SIZE_GROUP, [eq] if eq else [])]
    unrun = [f"_{common.not_run(select.SIZE_GROUP)}._"] if not any(by.values()) else []
    return "\n\n".join([common.sweep_section(select.SIZE_SWEEP, ka), common.seeds_table(rows, mean(bpcs(by[tf])), tf),
                        *unrun])


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

    pool = select.reference_pool()  # where the retired groups' runs find their references
    moved_gap, confirm = confirm_sections(pool=pool)
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
        "superseded": superseded_section(), "budget_curve": run_table.group_tables(("budget",), pool),
        "compute_budget": compute.budget_section(), "budget_plot": image("budget", "test BPC against budget"),
        "fit_table": compute.fit_table(), "rate_table": compute.rate_table(),
        "clip_table": compute.clip_table(all_results()),
        "fit_plot": image("fit", "the gap along the largest budget's runs"), "flops": compute.flops_section(pool),
        "compute_plot": image("compute", "validation BPC against training FLOPs and seconds"),
        "bench": compute.bench_table(), "leads": run_table.group_tables(LEADS, pool),
        "probe40": summary.probe40_section(full=True), "repro40": run_table.group_tables(("repro40",), pool),
        "scale": run_table.group_tables(("scale", "scale-variant"), pool), "size_tuned": size_section(),
        **{g: run_table.group_tables((g,), pool) for g in ("lr10m", "warmup10m")},
        "lr": lr_section(), "retired": retired_section(), **{f"screen_{g}": screen_section(g) for g in SCREENS},
        "curves": image("curves", "validation curves"), **studies.notebook_slots(),
    }
    return common.render(TEMPLATE, slots)


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
