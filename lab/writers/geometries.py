"""The notebook's and the summary's sections on the non-torus states (issue 25 and its stretch): ka-su2-1m, whose
state is unit quaternions (SU(2), a non-abelian group), and ka-sphere-1m, whose state is unit vectors of R⁴ (the
sphere S³, AKOrN's oscillators), each instead of phases on the torus. Each is one ``Study``: swept in two stages
(its lr group at 3M tokens, then its two best rates at 10M) and run over three seeds at the protocol (its main
group), beside the torus presets and the transformer (the sphere beside SU(2) too). ``section`` and ``summary_line``
write either.

The issue asks whether such a state helps: every comparison here is computed from the results (the sign and size of
each difference, beside the seeds' spread), none is written in advance."""

import json
import re
import statistics
from dataclasses import dataclass, field
from typing import Any

from kuramoto_attention.errors import ConfigError
from kuramoto_attention.models.config import flat_fields
from kuramoto_attention.models.presets import get_preset
from lab import protocol
from lab.groups import HOMES, SU2_TUNED_TRAIN, SU2_VARIANTS, Lead, flops_per_token, plan
from lab.protocol import load_results
from lab.writers.common import fmt, label, mean_sd, not_run, planned, seed_runs, table, throughput
from lab.writers.compute import BENCH_MODE, bench_rates, fmt_per_token
from lab.writers.sweeps import second_stage_section, sweep_section

REFERENCE = "tf-1m"
# the torus presets every study is read against, each with the group of its runs, then the transformer's
TORUS = (("ka-1m", "main"), ("ka-1m-tuned", "main-tuned"))
BASE = "ka-1m"  # the preset each study's preset is described against (its changed fields)


@dataclass(frozen=True)
class Study:
    """One non-torus preset and its three groups: the 3M sweep, its two best rates at 10M, the seeds at the
    protocol. ``title``: the notebook's heading, "label: what (issue)"; ``state``: what a token's state is (one
    sentence, after "each token's state is"); ``files``: where it lives; ``beside``: other studies' (preset, main
    group) read beside it, before the torus presets."""
    title: str
    preset: str
    sweep: str
    second: str
    main: str
    state: str
    files: str
    beside: tuple[tuple[str, str], ...] = ()
    screen: str = ""  # a group of variants of the preset at the 3M sweep's settings and best rate, if any
    train: dict[str, Any] = field(default_factory=dict)  # training overrides of all three stages (groups.py)
    variants: dict[str, Lead] = field(default_factory=dict)  # the screen's variants by name (groups.py), if any

    @property
    def label(self) -> str:
        """The title's name before its colon: RESULTS.md's bold lead."""
        return self.title.split(":")[0]

    @property
    def issue(self) -> str:
        """The title's closing parenthesis: the issue the study answers."""
        match = re.search(r"\(([^()]*)\)$", self.title)
        return match.group(1) if match else ""

    @property
    def compared(self) -> tuple[tuple[str, str], ...]:
        """Its own row, the rows beside it, the torus presets and the transformer, each (preset, group)."""
        return ((self.preset, self.main), *self.beside, *TORUS, (REFERENCE, "main"))


SU2 = Study(title="SU(2): the non-abelian state (issue 25)", preset="ka-su2-1m", sweep="lr-su2",
            second="lr10m-su2", main="main-su2", screen="screen-su2", variants=SU2_VARIANTS,
            state="`dim` unit quaternions (SU(2), the 3-sphere) instead of phases on the torus, so its rotations do "
                  "not commute",
            files="layers/su2.py, docs/su2.md")
SU2_TUNED = Study(title="SU(2) with the tuned recipe: ka-1m-tuned's ingredients on SU(2) (issue 25)",
                  preset="ka-su2-1m-tuned", sweep="lr-su2-tuned", second="lr10m-su2-tuned", main="main-su2-tuned",
                  state="`dim` unit quaternions, as ka-su2-1m's, with what of ka-1m-tuned's recipe applies off the "
                        "torus (screen-su2's variant \"tuned-omega-lr-1\", the best there at 3M tokens)",
                  files="layers/su2.py, docs/su2.md", beside=((SU2.preset, SU2.main),), train=SU2_TUNED_TRAIN)
SPHERE = Study(title="The sphere S³ ⊂ R⁴: AKOrN's oscillators (issue 25's stretch)", preset="ka-sphere-1m",
               sweep="lr-sphere", second="lr10m-sphere", main="main-sphere",
               state="`dim` unit vectors of R⁴ (AKOrN's oscillators on the sphere S³) instead of phases on the "
                     "torus: SU(2)'s manifold without its product, each step a geodesic move along an increment in "
                     "ambient coordinates, the drift a rotation of fixed coordinate planes",
               files="layers/sphere.py, docs/sphere.md", beside=((SU2.preset, SU2.main),))
STUDIES = (SU2, SU2_TUNED, SPHERE)  # the notebook's order


def _vals(runs: list[dict[str, Any]]) -> list[float]:
    return [r["eval_bpc"] for r in runs]


def _sd(vals: list[float]) -> float | None:
    return statistics.stdev(vals) if len(vals) > 1 else None


def _others(study: Study) -> list[str]:
    return [p for p, _ in study.compared if p != study.preset]


def comparison(study: Study) -> dict[str, list[dict[str, Any]]]:
    """Each compared preset's runs at the protocol (seed order; twins included), empty where none exist."""
    return {p: seed_runs(g, p) for p, g in study.compared}


def _fmt_rate(runs: list[dict[str, Any]]) -> str:
    rates = [x for x in map(throughput, runs) if x is not None]
    return f"{statistics.mean(rates):,.0f}" if rates else "—"


def comparison_table(study: Study, runs: dict[str, list[dict[str, Any]]]) -> str:
    tf = _vals(runs[REFERENCE])
    body = []
    for p, group in study.compared:
        rs, vals = runs[p], _vals(runs[p])
        if not vals:  # its cost per token is known before it is trained: shown beside the planned row
            body.append([p, group, "—", "0", "not run", "—", "—", "—", fmt_per_token(flops_per_token(p)), "—"])
            continue
        gap = f"{statistics.mean(vals) - statistics.mean(tf):+.4f}" if tf and p != REFERENCE else "—"
        body.append([p, group, f"{rs[0]['params']:,}", str(len(vals)), ", ".join(fmt(v) for v in vals),
                     mean_sd(vals), fmt(statistics.median(vals)), gap, fmt_per_token(flops_per_token(p)),
                     _fmt_rate(rs)])
    return table(["model", "group", "params", "seeds", "test BPC per seed", "mean ± sd", "median",
                  f"gap to {REFERENCE} mean", "model FLOPs/token", "training tokens/s (mean over seeds)"], body)


def versus(name: str, vals: list[float], other: str, other_vals: list[float]) -> str:
    """``name`` against ``other`` by their means, with the larger seed sd of the two: whether the difference is
    beyond twice it is what the reader needs to weigh it."""
    d = statistics.mean(vals) - statistics.mean(other_vals)
    verb = "trails" if d > 0 else "beats" if d < 0 else "ties"
    text = f"{name} {verb} {other} by {abs(d):.4f} test BPC (Δ {d:+.4f}, means over {len(vals)} and " \
           f"{len(other_vals)} seeds"
    sds = [s for s in (_sd(vals), _sd(other_vals)) if s is not None]
    if sds:
        spread = max(sds)
        text += (f"; the larger seed sd is {spread:.4f}, so the difference is "
                 f"{'more' if abs(d) > 2 * spread else 'less'} than twice it")
    return text + ")"


def _cost(study: Study, runs: dict[str, list[dict[str, Any]]]) -> str:
    """The study's model FLOPs per token and measured throughput, as ratios to each other preset's."""
    mine = flops_per_token(study.preset)
    flops = ", ".join(f"{mine / flops_per_token(p):.2f}× {p}'s" for p in _others(study))
    text = f"Per token {study.preset} costs {flops} model FLOPs"
    rates = {p: [x for x in map(throughput, rs) if x is not None] for p, rs in runs.items()}
    if rates[study.preset]:
        mean = statistics.mean(rates[study.preset])
        text += ("; its runs trained at " + ", ".join(f"{mean / statistics.mean(v):.2f}× {p}'s" for p, v in
                                                      rates.items() if v and p != study.preset)
                 + " tokens per second (as recorded, under each session's load)")
    bench = bench_rates((study.preset, REFERENCE))
    if bench:  # one side-by-side measurement on one machine: the fair ratio
        text += (f"; side by side in `python -m benchmarks` ({' '.join(BENCH_MODE)}): {bench[study.preset]:,.0f} "
                 f"against {REFERENCE}'s {bench[REFERENCE]:,.0f} tokens/s "
                 f"({bench[study.preset] / bench[REFERENCE]:.2f}×)")
    return text + "."


def verdict(study: Study, runs: dict[str, list[dict[str, Any]]]) -> str:
    """Does the state help: the study's preset against each other compared preset, from the numbers."""
    mine = _vals(runs[study.preset])
    lines = [versus(study.preset, mine, p, _vals(runs[p])) for p in _others(study) if runs[p]]
    if len(mine) > 1:
        medians = [f"{p} {statistics.median(mine) - statistics.median(_vals(runs[p])):+.4f}"
                   for p in _others(study) if runs[p]]
        lines.append(f"by medians, {study.preset} minus " + ", ".join(medians))
    return "Measured: " + "; ".join(lines) + ". " + _cost(study, runs)


def _against(study: Study) -> str:
    names = [f"{p} ({g})" for p, g in study.compared[1:]]
    return ", ".join(names[:-1]) + " and " + names[-1]


def intro(study: Study) -> str:
    base, mine = flat_fields(get_preset(BASE)[1]), flat_fields(get_preset(study.preset)[1])
    changed = ", ".join(f"{k}={v}" for k, v in mine.items() if base.get(k) != v)
    trained = (" Every stage trains with " + ", ".join(f"{k}={v:g}" for k, v in study.train.items())
               + "; the presets it is read against train at the protocol's settings." if study.train else "")
    return (f"`{study.preset}` is {BASE} with {changed} (presets.py): each token's state is {study.state} "
            f"({study.files}).{trained} Its rate is swept in two stages as ka-1m-tuned's was ({study.sweep} at 3M "
            f"tokens, then its two best rates at 10M, {study.second}, on the validation split), then over seeds at the "
            f"protocol ({study.main}, test split), read against {_against(study)}, each on all its seeds. "
            "Throughput: each run's recorded `train_tokens_per_s` (the median of the trainer's logged rates, the "
            "first, which includes compilation, left out; a record without it: its curve's last tokens over elapsed "
            "seconds), on whichever machine made the run, so the ratio is only as fair as the runs' hardware was "
            "alike; model FLOPs per token are the bench's analytic count (`groups.flops_per_token`).")


SYNC_REFERENCE = ("main", "budget40")  # the torus models whose dynamics rows the studies' are read beside


def _pct(values: list[float | None] | None) -> str:
    return " → ".join("—" if v is None else f"{v:.0%}" for v in values) if values else "—"


def _arrow(values: list[float | None] | None) -> str:
    return " → ".join("—" if v is None else f"{v:.2f}" for v in values) if values else "—"


def _dynamics_rows() -> list[dict[str, Any]]:
    path = protocol.RESULTS / "dynamics.json"
    return json.loads(path.read_text()) if path.exists() else []


def sync_table(study: Study) -> str:
    """The study's synchronisation diagnostics (``python -m lab dynamics``'s rows of its groups) beside the torus
    models' rows, layer by layer: local and global order, ω slower than the context, increments on the bound."""
    rows = _dynamics_rows()
    # a seed evaluated from the second stage's run is that run: shown once, under the seed's name
    again = {r["trained_in"] for r in load_results(study.main) if "trained_in" in r}
    own = [r for r in rows if r["group"] in (study.second, study.main) and r["run"] not in again]
    if not own:
        return (f"_Synchronisation diagnostics not measured yet: `python -m lab dynamics {study.second}` (then "
                f"`{study.main}`) once trained; its rows join the recorded ones._")
    ref = [r for r in rows if r["group"] in SYNC_REFERENCE]
    body = [[r["run"], _arrow(r["local_order"]), _arrow(r["global_order"]), _arrow(r.get("timescale_tokens")),
             _pct(r.get("slow_fraction")), _pct(r.get("attn_saturation"))] for r in [*own, *ref]]
    return ("Synchronisation, from `python -m lab dynamics` (8 validation windows per run; each value from the first "
            "layer to the last, means over heads; the torus rows are main's ka-1m, whose feed-forward read ψ(θ) "
            "itself then, and budget40's ka-1m-tuned after 40M tokens):\n\n"
            + table(["run", "local order \\|G\\|", "global order (embedding → last)", "timescale 2π/\\|ω\\| (tokens)",
                     "ω slower than the context", "attention on the bound"], body))


def screen_rows(study: Study) -> list[tuple[str, dict[str, Any], float]]:
    """Each screened variant: (name, its record, its valid BPC minus the sweep's run at the same rate)."""
    base = {r["train"]["lr"]: r["eval_bpc"] for r in load_results(study.sweep) if r["preset"] == study.preset}
    return [(r["name"].removeprefix(f"{study.preset}-"), r, r["eval_bpc"] - base[r["train"]["lr"]])
            for r in load_results(study.screen) if r["train"]["lr"] in base]


def screen_section(study: Study) -> str:
    """The screen's table: each variant's change, size, valid BPC at 3M and its difference from the plain preset."""
    rows = screen_rows(study)
    if not rows:
        return f"_{not_run(study.screen)}; its runs: {planned(study.screen)}._"
    body = [[name, study.variants[name].change(), f"{r['params']:,}", f"{r['train']['lr']:g}", fmt(r["eval_bpc"]),
             f"{d:+.4f}"] for name, r, d in sorted(rows, key=lambda x: x[2])]
    return ("Each at the 3M sweep's settings and its best rate when it ran, seed 0, against the sweep's own run at "
            "that rate:\n\n" + table(["variant", "change", "params", "lr", "valid BPC at 3M",
                                        f"Δ against {study.preset}"], body))


def section(study: Study) -> str:
    """The notebook's section on one study (its heading is the caller's: ``study.title``): what the preset is, its
    two sweep stages, the comparison and what it says."""
    runs = comparison(study)
    against = "".join(f"{p}, " for p, _ in study.beside) + "the torus presets and the transformer"
    parts = [intro(study), "", f"### Its learning rate: the 3M sweep ({study.sweep})", "",
             sweep_section(study.sweep, study.preset), "",
             f"### The 3M sweep's two best rates at 10M tokens ({study.second})", "",
             second_stage_section(study.second, study.sweep, study.preset, study.main), "",
             *([f"### Variants of {study.preset} at 3M tokens ({study.screen})", "", screen_section(study), ""]
               if study.screen else []),
             f"### {study.preset} against {against} (test BPC, 10M tokens)", "",
             comparison_table(study, runs), ""]
    if runs[study.preset]:
        parts.append(verdict(study, runs))
        reused = [label(r) for r in runs[study.preset] if "trained_in" in r]
        if reused:  # the second stage's run at the chosen rate is seed 0's training: scored again, on test
            parts.append("Not trained again: " + "; ".join(reused) + ".")
    else:
        parts.append(f"_{not_run(study.main)}; its runs: {planned(study.main)}._")
    parts += ["", sync_table(study)]
    return "\n".join(parts)


def _best_variant(study: Study) -> str:
    screened = screen_rows(study) if study.screen else []
    if not screened:
        return ""
    name, r, d = min(screened, key=lambda x: x[2])
    return f"; its best variant at 3M ({study.screen}), {name}: valid {fmt(r['eval_bpc'])} (Δ {d:+.4f})"


def _early(study: Study) -> str:
    """Before the seeds: the 3M sweep's best so far beside the torus presets' 3M bests, and the synchronisation of
    its first trained 10M run beside budget40's torus model's (from dynamics.json)."""
    text = ""
    sweep = load_results(study.sweep)
    if sweep:
        best = min(sweep, key=lambda r: r["eval_bpc"])
        pools = ([r for r in load_results(HOMES[p].sweep) if r["preset"] == p] for p in ("ka-1m", "ka-1m-tuned"))
        torus = [min(rs, key=lambda r: r["eval_bpc"]) for rs in pools if rs]
        others = ", ".join(f"{r['preset']}'s {fmt(r['eval_bpc'])}" for r in torus)
        text += (f"; its 3M sweep ({len(sweep)} rates so far) is best at lr {best['train']['lr']:g}: valid "
                 f"{fmt(best['eval_bpc'])}, against {others}")
    return text + _best_variant(study)


def summary_line(study: Study) -> str:
    """RESULTS.md's one line on a study: the measured comparison once its main group has results, else the plan."""
    runs = comparison(study)
    mine, tf = _vals(runs[study.preset]), _vals(runs[REFERENCE])
    lead = f"- **{study.label}** ({study.issue}, `{study.preset}`"
    if not mine:
        return f"{lead}): planned, {not_run(study.main, 'not run yet')}" + _early(study) + "."
    gap = f", gap to {REFERENCE} {statistics.mean(mine) - statistics.mean(tf):+.4f}" if tf else ""
    deltas = [f"{statistics.mean(mine) - statistics.mean(_vals(runs[p])):+.4f} against {p}"
              for p in _others(study) if p != REFERENCE and runs[p]]
    try:
        planned_seeds = len(plan(study.main))
    except ConfigError:  # its rate's stage not in results here: the seeds in are what there is
        planned_seeds = len(mine)
    so_far = f"{len(mine)} of its {planned_seeds} seeds so far" if len(mine) < planned_seeds else ""
    if len(mine) == 1:
        value = f"{fmt(mine[0])} (one seed" + (f"; {so_far})" if so_far else ")")
    else:
        value = f"{mean_sd(mine)} over {len(mine)} seeds" + (f" ({so_far})" if so_far else "")
    return (f"{lead}, group {study.main}): test BPC {value}{gap}"
            + (f"; {', '.join(deltas)} (means)" if deltas else "")
            + f"; {flops_per_token(study.preset) / flops_per_token(REFERENCE):.2f}× {REFERENCE}'s model FLOPs per "
              "token" + _best_variant(study) + ".")
