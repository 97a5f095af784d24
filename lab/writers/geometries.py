"""The non-torus states (issue 25): SU(2), SU(2) tuned and the sphere S³, each a ``Study`` beside the torus presets."""

import json
import statistics
from dataclasses import dataclass, field
from typing import Any

from kuramoto_attention.errors import ConfigError
from kuramoto_attention.models.config import flat_fields
from kuramoto_attention.models.presets import get_preset
from lab import protocol
from lab.groups import SU2_TUNED_TRAIN, SU2_VARIANTS, Lead, flops_per_token, plan
from lab.protocol import load_results
from lab.writers import common
from lab.writers.common import bpcs, count, diff, fmt, lr, mean, median, not_run, planned, table
from lab.writers.compute import BENCH_MODE, bench_rates, fmt_per_token

REFERENCE = "tf-1m"
TORUS = (("ka-1m", "main"), ("ka-1m-tuned", "main-tuned"))  # the torus presets every study is read against
BASE = "ka-1m"  # the preset each study's preset is described against (its changed fields)
SYNC_REFERENCE = ("main", "budget40")  # the torus models whose dynamics rows the studies' are read beside


@dataclass(frozen=True)
class Study:
    """One non-torus preset and its groups: the 3M sweep, its two best rates at 10M, the seeds at the protocol."""
    label: str
    issue: str
    preset: str
    sweep: str
    second: str
    main: str
    beside: tuple[tuple[str, str], ...] = ()
    screen: str = ""
    train: dict[str, Any] = field(default_factory=dict)  # training overrides of all three stages (groups.py)
    variants: dict[str, Lead] = field(default_factory=dict)  # the screen's variants by name (groups.py), if any

    @property
    def compared(self) -> tuple[tuple[str, str], ...]:
        """Its own row, the rows beside it, the torus presets and the transformer, each (preset, group)."""
        return ((self.preset, self.main), *self.beside, *TORUS, (REFERENCE, "main"))


SU2 = Study("SU(2)", "issue 25", "ka-su2-1m", "lr-su2", "lr10m-su2", "main-su2", screen="screen-su2",
            variants=SU2_VARIANTS)  # the non-abelian state
SU2_TUNED = Study("SU(2) with the tuned recipe", "issue 25", "ka-su2-1m-tuned", "lr-su2-tuned", "lr10m-su2-tuned",
                  "main-su2-tuned", beside=((SU2.preset, SU2.main),), train=SU2_TUNED_TRAIN)
SPHERE = Study("The sphere S³ ⊂ R⁴", "issue 25's stretch", "ka-sphere-1m", "lr-sphere", "lr10m-sphere",
               "main-sphere", beside=((SU2.preset, SU2.main),))  # AKOrN's oscillators
STUDIES = (SU2, SU2_TUNED, SPHERE)  # the notebook's order


def comparison(study: Study) -> dict[str, list[dict[str, Any]]]:
    """Each compared preset's runs at the protocol (seed order; twins included), empty where none exist."""
    return {p: common.seed_runs(g, p) for p, g in study.compared}


def _rate(runs: list[dict[str, Any]]) -> float | None:
    return mean([x for x in map(common.throughput, runs) if x is not None])


def comparison_tables(study: Study, runs: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Every compared model over its seeds, then the study's preset against each (Δs, larger seed sd, cost ratios)."""
    tf, mine, rate = mean(bpcs(runs[REFERENCE])), bpcs(runs[study.preset]), _rate(runs[study.preset])
    seeds = table(["model", "group", "params", "seeds", "test BPC per seed", "mean ± sd", "median",
                   f"gap to {REFERENCE} mean", "model FLOPs/token", "training tokens/s (mean over seeds)"],
                  [[p, group, count(rs[0] if rs else None), str(len(rs)), *common.seed_cells(bpcs(rs)),
                    diff(mean(bpcs(rs)), tf) if p != REFERENCE else "—", fmt_per_token(flops_per_token(p)),
                    f"{_rate(rs):,.0f}" if _rate(rs) else "—"] for p, group in study.compared for rs in [runs[p]]])
    if not mine:
        return [seeds, f"_{not_run(study.main)}; its runs: {planned(study.main)}._"]
    bench, body = bench_rates((study.preset, REFERENCE)), []
    for p, _ in study.compared[1:]:
        other = bpcs(runs[p])
        sds = [statistics.stdev(v) for v in (mine, other) if len(v) > 1]
        body.append([f"vs {p}", f"{len(mine)} / {len(other)}", diff(mean(mine), mean(other)),
                     f"{max(sds):.4f}" if sds and other else "—",
                     diff(median(mine), median(other)) if other else "—",
                     f"{flops_per_token(study.preset) / flops_per_token(p):.2f}×",
                     f"{rate / _rate(runs[p]):.2f}×" if rate and _rate(runs[p]) else "—",
                     f"{bench[study.preset]:,.0f} / {bench[REFERENCE]:,.0f} "
                     f"({bench[study.preset] / bench[REFERENCE]:.2f}×)" if bench and p == REFERENCE else "—"])
    return [seeds, table([study.preset, "seeds", "Δ of means", "larger seed sd", "Δ of medians",
                          "model FLOPs/token ratio", "recorded tokens/s ratio",
                          f"bench tokens/s side by side ({' '.join(BENCH_MODE)})"], body)]


def _arrow(values: list[float | None] | None, spec: str = ".2f") -> str:
    return " → ".join("—" if v is None else format(v, spec) for v in values) if values else "—"


def sync_table(study: Study) -> str:
    """The study's `python -m lab dynamics` rows beside the torus models', layer by layer."""
    path = protocol.RESULTS / "dynamics.json"
    rows = json.loads(path.read_text()) if path.exists() else []
    again = {r["trained_in"] for r in load_results(study.main) if "trained_in" in r}  # shown once, under the seed
    own = [r for r in rows if r["group"] in (study.second, study.main) and r["run"] not in again]
    if not own:
        return (f"_Synchronisation not measured yet: `python -m lab dynamics {study.second}` (then "
                f"`{study.main}`) once trained._")
    body = [[r["run"], _arrow(r["local_order"]), _arrow(r["global_order"]), _arrow(r.get("timescale_tokens")),
             _arrow(r.get("slow_fraction"), ".0%"), _arrow(r.get("attn_saturation"), ".0%")]
            for r in [*own, *(r for r in rows if r["group"] in SYNC_REFERENCE)]]
    return table(["run", "local order \\|G\\|", "global order (embedding → last)", "timescale 2π/\\|ω\\| (tokens)",
                  "ω slower than the context", "attention on the bound"], body)


def screen_rows(study: Study) -> list[tuple[str, dict[str, Any], float]]:
    """Each screened variant: (name, its record, its valid BPC minus the sweep's run at the same rate)."""
    base = {r["train"]["lr"]: r["eval_bpc"] for r in load_results(study.sweep) if r["preset"] == study.preset}
    return [(r["name"].removeprefix(f"{study.preset}-"), r, r["eval_bpc"] - base[r["train"]["lr"]])
            for r in load_results(study.screen) if r["train"]["lr"] in base]


def section(study: Study) -> str:
    """The notebook's section on one study (its words are the template's)."""
    base, mine = flat_fields(get_preset(BASE)[1]), flat_fields(get_preset(study.preset)[1])
    runs, screened = comparison(study), sorted(screen_rows(study), key=lambda x: x[2]) if study.screen else []
    reused = [common.label(r) for r in runs[study.preset] if "trained_in" in r]
    what = table(["preset", f"its change to {BASE}", "training overrides (every stage)", "groups"],
                 [[f"`{study.preset}`", common.changes({k: v for k, v in mine.items() if base.get(k) != v}),
                   ", ".join(f"{k}={v:g}" for k, v in study.train.items()) or "—",
                   ", ".join((study.sweep, study.second, *([study.screen] if study.screen else []), study.main))]])
    screen = table(["variant", "change", "params", "lr", "valid BPC at 3M", f"Δ against {study.preset} at that rate"],
                   [[name, study.variants[name].change(), count(r), lr(r), fmt(r["eval_bpc"]), f"{d:+.4f}"]
                    for name, r, d in screened]) if screened else \
        f"_{not_run(study.screen)}; its runs: {planned(study.screen)}._"
    parts = [what, f"### Its learning rate: the 3M sweep ({study.sweep})",
             common.sweep_section(study.sweep, study.preset),
             f"### The 3M sweep's two best rates at 10M tokens ({study.second})",
             common.second_stage_section(study.second, study.sweep, study.preset),
             *([f"### Variants of {study.preset} at 3M tokens ({study.screen})", screen] if study.screen else []),
             f"### {study.preset} against {', '.join(p for p, _ in study.compared[1:])} (test BPC, 10M tokens)",
             *comparison_tables(study, runs),
             *([f"Scored again, not trained again: {'; '.join(reused)}."] if reused else []), sync_table(study)]
    return "\n\n".join(parts)


def summary_table() -> str:
    """RESULTS.md's table of the studies, or what to run."""
    body = []
    for study in STUDIES:
        runs = comparison(study)
        mine, tf = bpcs(runs[study.preset]), bpcs(runs[REFERENCE])
        try:
            seeds = f"{len(mine)} of {len(plan(study.main))}"
        except ConfigError:  # its rate's stage not in results here
            seeds = str(len(mine))
        sweep = min(load_results(study.sweep), key=lambda r: r["eval_bpc"], default=None)
        screened = min(screen_rows(study), key=lambda x: x[2], default=None) if study.screen else None
        body.append([f"{study.label} ({study.issue})", f"`{study.preset}`", seeds,
                     common.mean_sd(mine) if mine else not_run(study.main, "not run yet"), diff(mean(mine), mean(tf)),
                     ", ".join(f"{diff(mean(mine), mean(bpcs(runs[p])))} vs {p}" for p, _ in study.compared[1:-1]
                               if mine and runs[p]) or "—",
                     f"{lr(sweep)}: {fmt(sweep['eval_bpc'])}" if sweep else "—",
                     f"{screened[0]}: {fmt(screened[1]['eval_bpc'])} ({screened[2]:+.4f})" if screened else "—"])
    return table(["study", "preset", "seeds", "test BPC", "gap to tf-1m", "Δ of means vs the others",
                  "3M sweep: best lr: valid BPC", "best 3M variant (Δ)"], body)
