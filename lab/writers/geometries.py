"""The non-torus states (issue 25): SU(2), SU(2) tuned and the sphere S³, each a ``Study`` beside the torus presets."""

from typing import Any

from kuramoto_attention.errors import ConfigError
from kuramoto_attention.models.config import flat_fields
from kuramoto_attention.models.presets import get_preset
from lab import select
from lab.groups import plan
from lab.protocol import load_results
from lab.select import REFERENCE, STUDIES, Study, bpcs, mean
from lab.writers import common, studies
from lab.writers.common import count, diff, fmt, lr, not_run, planned, table

BASE = "ka-1m"  # the preset each study's preset is described against (its changed fields)


def comparison_tables(study: Study, runs: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Every compared model over its seeds (its bench rate is the notebook's bench table's), or what to run."""
    seeds = common.seeds_table([(p, group, runs[p]) for p, group in study.compared], mean(bpcs(runs[REFERENCE])))
    return [seeds] if runs[study.preset] else [seeds, f"_{not_run(study.main)}; its runs: {planned(study.main)}._"]


def sync_table(study: Study) -> str:
    """The study's `python -m lab dynamics` rows beside the torus models', layer by layer."""
    if not (rows := select.sync_rows(study)):
        return (f"_Synchronisation not measured yet: `python -m lab dynamics {study.second}` (then "
                f"`{study.main}`) once trained._")
    return studies.sync_table(rows)


def section(study: Study) -> str:
    """The notebook's section on one study (its words are the template's)."""
    base, mine = flat_fields(get_preset(BASE)[1]), flat_fields(get_preset(study.preset)[1])
    runs, screened = select.study_runs(study), study.screened()
    reused = [common.label(r) for r in runs[study.preset] if "trained_in" in r]
    what = table(["preset", f"its change to {BASE}", "training overrides (every stage)", "groups"],
                 [[f"`{study.preset}`", common.changes({k: v for k, v in mine.items() if base.get(k) != v}),
                   ", ".join(f"{k}={v:g}" for k, v in study.train.items()) or "—",
                   ", ".join((study.sweep, study.second, *([study.screen] if study.screen else []), study.main))]])
    screen = table(["variant", "change", "params", "lr", "valid BPC at 3M", f"Δ against {study.preset} at that rate"],
                   [[name, common.overrides(r), count(r), lr(r), fmt(r["eval_bpc"]), f"{d:+.4f}"]
                    for name, r, d in screened])  # a retired screen: shown where its results are
    parts = [what, f"### Its learning rate: the 3M sweep ({study.sweep})",
             common.sweep_section(study.sweep, study.preset),
             f"### The 3M sweep's two best rates at 10M tokens ({study.second})",
             common.second_stage_section(study.second, study.sweep, study.preset),
             *([f"### Variants of {study.preset} at 3M tokens ({study.screen})", screen] if screened else []),
             f"### {study.preset} against {', '.join(p for p, _ in study.compared[1:])} (test BPC, 10M tokens)",
             *comparison_tables(study, runs),
             *([f"Scored again, not trained again: {'; '.join(reused)}."] if reused else []), sync_table(study)]
    return "\n\n".join(parts)


def summary_table() -> str:
    """RESULTS.md's table of the studies, or what to run."""
    body = []
    for study in STUDIES:
        runs = select.study_runs(study)
        mine, tf = bpcs(runs[study.preset]), bpcs(runs[REFERENCE])
        try:
            seeds = f"{len(mine)} of {len(plan(study.main))}"
        except ConfigError:  # its rate's stage not in results here
            seeds = str(len(mine))
        sweep = min(load_results(study.sweep), key=lambda r: r["eval_bpc"], default=None)
        screened = next(iter(study.screened()), None)
        body.append([f"{study.label} ({study.issue})", f"`{study.preset}`", seeds,
                     common.mean_sd(mine) if mine else not_run(study.main, "not run yet"), diff(mean(mine), mean(tf)),
                     f"{lr(sweep)}: {fmt(sweep['eval_bpc'])}" if sweep else "—",
                     f"{screened[0]}: {fmt(screened[1]['eval_bpc'])} ({screened[2]:+.4f})" if screened else "—"])
    return table(["study", "preset", "seeds", "test BPC", "gap to tf-1m", "3M sweep: best lr: valid BPC",
                  "best 3M variant (Δ)"], body)
