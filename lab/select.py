"""Which runs the report reads and what it measures on them: run selection and derived numbers, never text.

The writers (lab/writers/) lay these out as tables and plots; a function here returns runs and numbers only, so that
a choice of runs (the 40M point, a lead's reference, a study's seeds) is made once and tested apart from its table."""

import contextlib
import json
import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from kuramoto_attention.errors import ConfigError
from kuramoto_attention.training.data import CHECKSUMS
from lab import groups, protocol
from lab.groups import BUDGETS, HOMES, STRETCHES, flop_matched, with_twins
from lab.protocol import PROTOCOL, TRAIN_DEFAULTS, load_results
from lab.retired import RETIRED, retired_settings, without_retired

Run = dict[str, Any]
REFERENCE = "tf-1m"  # the transformer every gap is measured to
BENCH_MODE = ("compile" if PROTOCOL["compile"] else "eager", PROTOCOL["precision"])  # the protocol's, as the bench's
TRAIN_BYTES = int(CHECKSUMS["enwik7"][0] * 0.9)  # enwik7's training split (data.py), for a budget's passes over it
LARGEST = f"{BUDGETS[-1] // 1_000_000}M"
SCREENS = ("screen", "screen2", "screen3", "screen4", "screen5", "screen6")
SIZE_PAIR, SIZE_GROUP, SIZE_SWEEP = ("ka-5m-tuned", "tf-5m"), "main-5m", "lr-5m-tuned"  # the tuned recipe at 5M
NEAR_FROM = 8  # the gap study's position bin read as "near the window's start" beside the last (the farthest context)
COPYING = 1  # its recall class "seen, copying predicts the byte" (studies/gap.py ``recall_classes``)
# the training settings a variant (a lead, an ablation) changes
TRAINING_VARIANTS = ("phase_lr_mult", "omega_lr_mult", "shared_lr_mult", "weight_decay", "clip_angles_apart")


# numbers over runs

def bpcs(runs: list[Run]) -> list[float]:
    return [r["eval_bpc"] for r in runs]


def mean(vals: list[float]) -> float | None:
    return statistics.mean(vals) if vals else None


def median(vals: list[float]) -> float | None:
    return statistics.median(vals) if vals else None


def throughput(r: Run) -> float | None:
    """A run's training tokens per second: ``train_tokens_per_s``, else its curve's last tokens over elapsed seconds."""
    rate = r.get("train_tokens_per_s")
    if isinstance(rate, int | float) and math.isfinite(rate) and rate > 0:
        return float(rate)
    last = (r.get("curve") or [{}])[-1]
    return last["tokens"] / last["elapsed_s"] if last.get("elapsed_s") else None


def mean_rate(runs: list[Run]) -> float | None:
    """The mean recorded training tokens per second of ``runs`` (those that recorded one)."""
    return mean([x for x in map(throughput, runs) if x is not None])


# runs by group

def by_name(*names: str) -> dict[str, Run]:
    """The groups' runs, twins included, by name."""
    return {r["name"]: r for g in names for r in with_twins(g)}


def seed_runs(group: str, preset: str) -> list[Run]:
    """A preset's runs in a group, another group's identical runs included (``groups.with_twins``), by seed."""
    return sorted((r for r in with_twins(group) if r["preset"] == preset), key=lambda r: r["train"]["seed"])


def transformer_group(group: str) -> str:
    """The group whose transformer a main-like group is read against (pycode's for pycode groups)."""
    return "pycode" if group.startswith("pycode") else "main"


def unrun_before(group: str) -> list[str]:
    """The groups ``group``'s plan reads, and theirs, that have no results yet, in run order."""
    missing, todo = set(), [group]
    while todo:  # the groups read, and theirs, down to those with results
        for up in groups.reads(todo.pop()) - missing:
            if not load_results(up):
                missing.add(up)
                todo.append(up)
    return [g for g in groups.order(group)[:-1] if g in missing]


def saturation(r: Run | None) -> tuple[float | None, float | None]:
    """The share of a run's attention and feed-forward increments on the norm bound, mean over layers (None: not
    recorded)."""
    d = (r or {}).get("diagnostics") or {}
    return mean(d.get("attn_saturation") or []), mean([x for x in d.get("ff_saturation") or [] if x is not None])


def variant_model(name: str) -> dict[str, Any] | None:
    """A confirmed variant's change to ka-1m: ``groups.VARIANTS``'s, else its confirm run's overrides (less ψ(θ)
    itself, which every confirm run had); None where neither is recorded."""
    if name in groups.VARIANTS:
        return groups.VARIANTS[name]
    run = next((r for r in load_results("confirm") if r["name"].split("-seed")[0] == f"ka-{name}"), None)
    return None if run is None else {k: v for k, v in run["model_overrides"].items()
                                     if groups.UNPROJECTED.get(k, object()) != v}


def by_family(group: str) -> dict[str, list[Run]]:
    """A main-like group's runs by family in seed order, the transformer's from ``transformer_group``'s group."""
    rows, ref = with_twins(group), transformer_group(group)
    rows += [r for r in with_twins(ref) if r["family"] == "transformer"] if ref != group else []
    rows.sort(key=lambda r: r["train"]["seed"])
    return {f: [r for r in rows if r["family"] == f] for f in ("kuramoto", "transformer")}


def gaps_along(by: dict[str, list[Run]]) -> list[tuple[int, float]]:
    """(tokens, the Kuramoto runs' mean validation estimate minus the transformer's) at a quarter, half and the end of
    the same runs (``by_family``'s), where every run evaluated there."""
    curves = {f: [r["valid_curve"] for r in rs] for f, rs in by.items()}
    c = curves["kuramoto"][0] if curves["kuramoto"] and curves["transformer"] else []
    return [(c[i][0], statistics.mean(x[i][1] for x in curves["kuramoto"])
             - statistics.mean(x[i][1] for x in curves["transformer"]))
            for i in sorted({len(c) // 4, len(c) // 2, len(c) - 1} if c else set())
            if all(len(x) > i and x[i][0] == c[i][0] for f in curves for x in curves[f])]


def candidates(group: str = "confirm") -> dict[str, list[Run]]:
    """Confirm's runs by candidate: the name less ``-seedN``."""
    by: dict[str, list[Run]] = {}
    for r in load_results(group):
        by.setdefault(r["name"].split("-seed")[0], []).append(r)
    return by


def confirm_ranking(min_seeds: int = 3) -> list[str]:
    """Confirm's candidates with at least ``min_seeds`` seeds, by mean test BPC (best first), named less ``ka-``."""
    return [k.removeprefix("ka-") for _, k in sorted((statistics.mean(bpcs(rs)), k) for k, rs in candidates().items()
                                                     if len(rs) >= min_seeds)]


def confirm_against_main(group: str = "confirm") -> tuple[dict[int, float], float | None, list[tuple[str, list[Run],
                                                                                                   float]]]:
    """Confirm's candidates against the ka-1m they change (main-unprojected's, ψ(θ) itself): its test BPC by seed,
    the transformer's mean, and each candidate run on seeds it has (its runs, ka-1m's mean on the same seeds)."""
    main = [r for r in load_results("main") if r["family"] == "transformer"] + load_results("main-unprojected")
    ka = {r["train"]["seed"]: r["eval_bpc"] for r in main if r["family"] == "kuramoto"}
    tf = mean([r["eval_bpc"] for r in main if r["family"] == "transformer"])
    return ka, tf, [(name, runs, statistics.mean(ka[s] for s in seeds)) for name, runs in candidates(group).items()
                    if (seeds := {r["train"]["seed"] for r in runs}) <= set(ka)]


def screen_deltas(sweep: str, screen: str, preset: str) -> list[tuple[str, Run, float]]:
    """Each screened variant: (name, its record, its valid BPC minus the sweep's run at the same rate)."""
    base = {r["train"]["lr"]: r["eval_bpc"] for r in load_results(sweep) if r["preset"] == preset}
    return [(r["name"].removeprefix(f"{preset}-"), r, r["eval_bpc"] - base[r["train"]["lr"]])
            for r in load_results(screen) if r["train"]["lr"] in base]


# costs

def flops_per_token(r: Run) -> int | None:
    """A result's model FLOPs per training token (the bench's count), None for a model the library no longer builds."""
    with contextlib.suppress(Exception):
        if not retired_settings(changed := r.get("model_overrides", {})):
            return groups.flops_per_token(r["preset"], without_retired(changed),
                                          r["train"].get("context", PROTOCOL["context"]))
    return None


def training_flops(r: Run | None) -> int | None:
    per = flops_per_token(r) if r else None
    return per * r["tokens"] if per is not None else None


def bench_rates(pair: tuple[str, str]) -> dict[str, float] | None:
    """The pair's training tokens/s side by side in `python -m benchmarks` (protocol's mode), or None."""
    path = protocol.RESULTS / "bench.json"
    for row in json.loads(path.read_text()).get("training", []) if path.exists() else []:
        if "ka" in row and "tf" in row and (row["ka"]["preset"], row["tf"]["preset"]) == pair \
                and (row["mode"], row["precision"]) == BENCH_MODE:
            return {row["ka"]["preset"]: row["ka"]["median"], row["tf"]["preset"]: row["tf"]["median"]}
    return None


# the budget curve (issue 26)

def changed(r: Run) -> dict[str, Any]:
    """A run's model overrides the library still has: a curve run with any is not its preset's own model."""
    return without_retired(r.get("model_overrides", {}))


def off_rate(r: Run) -> bool:
    """Whether a curve run trained at a rate other than its preset's swept one (lr40's; the stretch runs')."""
    if r.get("group") in STRETCHES:
        with contextlib.suppress(ConfigError):  # no sweep here: not marked
            return r["train"]["lr"] != groups.swept_rate(r["preset"])
        return False
    return r.get("group") == "lr40" or str(r.get("twin", "")).startswith("lr40/")


def overfit(r: Run) -> tuple[tuple[float, float] | None, tuple[float, float] | None, tuple[float, int] | None]:
    """Memorisation: (valid − train BPC, passes) within one pass and at the end; (valid's rise, where it was lowest)."""
    curve = [p for p in r.get("curve", []) if p.get("train_bpc") is not None]
    if not curve:
        return None, None, None
    first, last = [p for p in curve if p["tokens"] <= TRAIN_BYTES], curve[-1]
    low = min(curve, key=lambda p: p["valid_bpc"])
    rose = last["valid_bpc"] - low["valid_bpc"]
    within, end = ((p["valid_bpc"] - p["train_bpc"], p["tokens"] / TRAIN_BYTES) if p else None
                   for p in (first[-1] if first and first[-1] is not last else None, last))
    return within, end, (rose, low["tokens"]) if rose > 0.005 else None


def budget_runs() -> dict[str, dict[str, Run]]:
    """Per budget label, each preset's run there (seed 0, its own schedule; 3M: its sweep's best, on valid)."""
    rows = {"3M": {p: min((r for r in load_results(home.sweep) if r["preset"] == p), key=lambda r: r["eval_bpc"],
                          default=None) for p, home in HOMES.items()},
            "10M": {p: next((r for r in with_twins(home.main) if r["preset"] == p and r["train"].get("seed", 0) == 0),
                            None) for p, home in HOMES.items()},
            "20M": {r["preset"]: r for r in load_results("budget") if r["name"] in ("ka-1m-20m", "tf-1m-20m")}}
    for b, among in [*((b, ("budget40", "lr40")) for b in BUDGETS), *((b, (g,)) for g, b in STRETCHES.items())]:
        rows[f"{b // 1_000_000}M"] = {p: groups.budget_best(p, b, among) for p in HOMES}
    return {k: kept for k, by in rows.items() if (kept := {p: r for p, r in by.items() if r is not None})}


def valid_points(r: Run) -> list[tuple[int, float]]:
    """(tokens, validation estimate) along a run: its curve, else its older records' valid_curve."""
    pts = r.get("curve") or [{"tokens": t, "valid_bpc": b} for t, b in r.get("valid_curve", [])]
    return [(q["tokens"], q["valid_bpc"]) for q in pts]


def valid_slope(r: Run | None, start: int = PROTOCOL["tokens"]) -> float | None:
    """A run's validation slope per doubling of its tokens from ``start`` to its end (None: no such points)."""
    pts = valid_points(r) if r else []
    near = min(pts, key=lambda q: abs(q[0] - start), default=None)
    if near is None or abs(near[0] - start) > 0.05 * start or pts[-1][0] <= 1.5 * near[0]:
        return None
    return (pts[-1][1] - near[1]) / math.log2(pts[-1][0] / near[0])


def fit_gaps(r: Run, tf: Run) -> list[tuple[int, float, float]]:
    """(tokens, training-BPC gap, validation-BPC gap) of ``r`` to ``tf`` at every evaluation both made."""
    own, ref = ({q["tokens"]: q for q in x.get("curve", []) if q.get("train_bpc") is not None} for x in (r, tf))
    return [(t, q["train_bpc"] - ref[t]["train_bpc"], q["valid_bpc"] - ref[t]["valid_bpc"])
            for t, q in sorted(own.items()) if t in ref]


def per_doubling(runs: dict[str, dict[str, Run]], preset: str, lo: str = "10M", hi: str = LARGEST) -> float | None:
    """Test BPC gained per doubling of the token budget between two budgets of the curve (seed 0, own schedules)."""
    a, b = runs.get(lo, {}).get(preset), runs.get(hi, {}).get(preset)
    if a is None or b is None or changed(a) or changed(b):
        return None
    return (b["eval_bpc"] - a["eval_bpc"]) / math.log2(b["tokens"] / a["tokens"])


def anneal_cost(runs: dict[str, dict[str, Run]], preset: str) -> float | None:
    """The largest-budget run's validation estimate at the protocol's tokens minus the protocol run's at its end."""
    short = runs.get(f"{PROTOCOL['tokens'] // 1_000_000}M", {}).get(preset)
    long = next((r for r in with_twins("budget40") if r["preset"] == preset and not changed(r)
                 and abs(r["tokens"] - BUDGETS[-1]) <= 0.1 * BUDGETS[-1]), None)  # at the swept rate, as the 10M run
    if short is None or long is None or changed(short) or not (pts := valid_points(short)):
        return None
    end = pts[-1]
    near = min(valid_points(long), key=lambda q: abs(q[0] - end[0]), default=None)
    return near[1] - end[1] if near and abs(near[0] - end[0]) <= 0.05 * end[0] else None


def fit_runs(budget: int = BUDGETS[-1], runs: dict[str, dict[str, Run]] | None = None) -> list[tuple[str, Run]]:
    """Every Kuramoto run of the budget curve at ``budget`` (at the largest, leads40's too), by name."""
    at = (budget_runs() if runs is None else runs).get(f"{budget // 1_000_000}M", {})
    leads = ([(r["name"], r) for r in load_results("leads40") if not flop_matched(r["name"])]
             if budget == BUDGETS[-1] else [])
    return [(p, r) for p, r in at.items() if p != REFERENCE] + leads


def fits(budget: int, runs: dict[str, dict[str, Run]]) -> list[tuple[str, list[tuple[int, float, float]]]]:
    """Each run of ``fit_runs`` with its gaps to tf-1m along training (runs with no shared evaluation left out)."""
    tf = runs.get(f"{budget // 1_000_000}M", {}).get(REFERENCE)
    return [(name, g) for name, r in fit_runs(budget, runs) if tf is not None and (g := fit_gaps(r, tf))]


def swept_and_lower() -> tuple[dict[str, Run], list[Run]]:
    """budget40's run of each preset at its swept rate, and lr40's runs below it (by preset, then rate falling)."""
    swept = {r["preset"]: r for r in with_twins("budget40") if not changed(r)}
    lower = sorted((r for r in with_twins("lr40") if r["preset"] in swept),
                   key=lambda r: (r["preset"], -r["train"]["lr"]))
    return swept, lower


def curves(p: str) -> list[tuple[Run, list[tuple[int, float]]]]:
    """Every seed-0 run of preset ``p`` on its own model, with its validation points."""
    pool = [r for g in (HOMES[p].main, "budget40", "flops") for r in with_twins(g)]
    return [(r, [q for q in valid_points(r) if q[0] > 0]) for r in pool
            if r["preset"] == p and r["train"].get("seed", 0) == 0 and not changed(r)]


# runs against their references (the retired groups' tables, lab/writers/run_table.py)

def pinned(r: Run) -> dict[str, Any]:
    """The feed-forward a run's group pinned it to: ψ(θ) itself for ka-1m in a frozen or retired group, else none."""
    return groups.UNPROJECTED if r["group"] in groups.RAN_UNPROJECTED and r["preset"] == "ka-1m" else {}


def own_changes(r: Run) -> dict[str, Any]:
    """A run's changes to its preset: its model overrides, less the retired fields at their defaults and what its
    group pinned; and its training variants away from their defaults."""
    model = {k: v for k, v in changed(r).items() if pinned(r).get(k, object()) != v}
    train = {k: v for k in TRAINING_VARIANTS if (v := r["train"].get(k, TRAIN_DEFAULTS[k])) != TRAIN_DEFAULTS[k]}
    return {**model, **train}


def same_budget(x: Run, r: Run) -> bool:
    """Whether two runs trained to the same budget: tf-1m's FLOPs of the same tokens, else tokens within 10%."""
    if flop_matched(x["name"]) or flop_matched(r["name"]):
        return x["name"].split("-flops-tf-")[-1] == r["name"].split("-flops-tf-")[-1]
    return abs(x["tokens"] - r["tokens"]) <= 0.1 * r["tokens"]


def reference_pool() -> list[Run]:
    """What ``reference`` searches, in order: the kept groups' runs, twins included, the seeds' groups (main…) first;
    then the retired groups'."""
    kept = sorted((*groups.GROUPS, *groups.FROZEN), key=lambda g: not g.startswith("main"))
    return [r for g in kept for r in with_twins(g)] + [r for g in RETIRED for r in load_results(g)]


def reference(r: Run, pool: list[Run]) -> Run | None:
    """The run ``r`` is judged against, at the same seed, corpus, split and budget: its preset's own model (``r``'s
    recorded model config but for ``r``'s changes; for a run of the preset's own model, another run of it) at the same
    rate; else, for a Kuramoto run, its own group's transformer, the best on validation; else its preset's own model at
    another rate (the first in ``pool``'s order, those pinned as ``r`` was first); None where there is none."""
    me, mine, model = f"{r['group']}/{r['name']}", own_changes(r), r.get("model", {})

    def alike(x: Run) -> bool:
        return (me not in (f"{x['group']}/{x['name']}", x.get("twin"), x.get("trained_in")) and x.get("corpus") ==
                r.get("corpus") and x["eval_split"] == r["eval_split"] and same_budget(x, r)
                and x["train"].get("seed", 0) == r["train"].get("seed", 0))

    own = [x for x in pool if alike(x) and x["preset"] == r["preset"] and not own_changes(x)
           and all(v == model[k] for k, v in x.get("model", {}).items() if k in model and k not in mine)]
    own.sort(key=lambda x: pinned(x) != pinned(r))  # first the runs pinned as r was (ka-1m on ψ(θ) itself, or not)
    tf = [x for x in pool if alike(x) and x["group"] == r["group"] and x["family"] == "transformer" != r["family"]]
    return (next((x for x in own if x["train"]["lr"] == r["train"]["lr"]), None)
            or min(tf, key=groups.valid_estimate, default=None) or next(iter(own), None))


# the tuned recipe at 5M

def size_runs() -> dict[str, list[Run]]:
    """The tuned recipe's and tf-5m's seeds at the protocol's budget (main-5m, not its equal-FLOP run)."""
    return {p: [r for r in seed_runs(SIZE_GROUP, p) if r["name"] != groups.EQUAL_FLOPS_5M] for p in SIZE_PAIR}



# the non-torus states (issue 25)

TORUS = (("ka-1m", "main"), ("ka-1m-tuned", "main-tuned"))  # the torus presets every study is read against
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

    @property
    def compared(self) -> tuple[tuple[str, str], ...]:
        """Its own row, the rows beside it, the torus presets and the transformer, each (preset, group)."""
        return ((self.preset, self.main), *self.beside, *TORUS, (REFERENCE, "main"))

    def screened(self) -> list[tuple[str, dict[str, Any], float]]:
        """Its screen's variants, best first, each with its Δ to the sweep's run at the same rate."""
        return sorted(screen_deltas(self.sweep, self.screen, self.preset), key=lambda x: x[2]) \
            if self.screen else []


# the non-abelian state; its screen (retired) put ka-1m-tuned's ingredients on it
SU2 = Study("SU(2)", "issue 25", "ka-su2-1m", "lr-su2", "lr10m-su2", "main-su2", screen="screen-su2")
SU2_TUNED = Study("SU(2) with the tuned recipe", "issue 25", "ka-su2-1m-tuned", "lr-su2-tuned", "lr10m-su2-tuned",
                  "main-su2-tuned", beside=((SU2.preset, SU2.main),), train=groups.SU2_TUNED_TRAIN)
SPHERE = Study("The sphere S³ ⊂ R⁴", "issue 25's stretch", "ka-sphere-1m", "lr-sphere", "lr10m-sphere",
               "main-sphere", beside=((SU2.preset, SU2.main),))  # AKOrN's oscillators
STUDIES = (SU2, SU2_TUNED, SPHERE)  # the notebook's order


def study_runs(study: Study) -> dict[str, list[Run]]:
    """Each compared preset's runs at the protocol (seed order; twins included), empty where none exist."""
    return {p: seed_runs(g, p) for p, g in study.compared}


def sync_rows(study: Study) -> list[dict[str, Any]]:
    """The study's `python -m lab dynamics` rows (a run scored again, not trained again: once, under its seed), then
    the torus models' (``SYNC_REFERENCE``); none while the study's own are not measured."""
    rows = study_file("dynamics.json") or []
    again = {r["trained_in"] for r in load_results(study.main) if "trained_in" in r}
    own = [r for r in rows if r["group"] in (study.second, study.main) and r["run"] not in again]
    return [*own, *(r for r in rows if r["group"] in SYNC_REFERENCE)] if own else []


# the ablations, the fixes and their references (issues 4, 46)

def ablations() -> tuple[dict[str, Run | None], dict[str, dict[str, Run]]]:
    """ablation's and ablation-tuned's full models (seed 0 of main's ka-1m, main-tuned's ka-1m-tuned) and runs by
    name, by group."""
    full = {g: next((r for r in with_twins(src) if r["preset"] == p and r["train"]["seed"] == 0), None)
            for g, src, p in (("ablation", "main", "ka-1m"), ("ablation-tuned", "main-tuned", "ka-1m-tuned"))}
    return full, {g: by_name(g) for g in full}


def copy_share(probe: dict[str, Any], key: str) -> float:
    """probe40's share of ``key`` (bytes, or a model's gap in bits) on the bytes with an earlier match (depths ≥ 1)."""
    every = probe["by_copy_depth"]
    return sum(r[key] for r in every if r["depth"] > 0) / sum(r[key] for r in every)


# the studies' files (``python -m lab dynamics | gap | probe | probe40 | induction``)

def study_file(name: str) -> Any:
    """results/NAME parsed, None when it is missing."""
    path = protocol.RESULTS / name
    return json.loads(path.read_text()) if path.exists() else None


def judged() -> tuple[str, list[dict[str, Any]]]:
    """The group the paper's dynamics claims are judged on (dynamics.json's first: the model as specified), and its
    rows ("—" and none before `python -m lab dynamics`)."""
    rows = study_file("dynamics.json") or []
    return (rows[0]["group"], [r for r in rows if r["group"] == rows[0]["group"]]) if rows else ("—", [])


def gap_points(res: dict[str, Any]) -> tuple[dict[str, Any] | None, ...]:
    """A gap study's rows that RESULTS.md reads: the position bin from ``NEAR_FROM`` (near the window's start), the
    last bin (the farthest context) and the recall class copying predicts (``COPYING``); None where missing."""
    pos, recall = res.get("by_position", []), res.get("by_recall", [])
    return (next((r for r in pos if r["from"] == NEAR_FROM), None), pos[-1] if pos else None,
            next((r for r in recall if r["recall"] == COPYING), None))


def head_means(profile: list[list[list[float]]], offsets: int = 4) -> list[list[float]]:
    """A dynamics row's offset profile (layer, head, Δ) averaged over heads, for Δ = 0 .. ``offsets`` − 1."""
    import torch

    return torch.tensor(profile).mean(dim=1)[:, :offsets].tolist()


def slow_at_start(preset: str, context: int) -> float:
    """The share of a preset's oscillators slower than once per context at initialisation (RoPE's rates)."""
    import torch

    from kuramoto_attention.models.presets import build_model, get_preset

    omega = torch.cat([b.attn.omega.detach().abs() for b in build_model(*get_preset(preset)).blocks])
    return omega.lt(2 * math.pi / context).float().mean().item()


def mean_curves(res: dict[str, Any]) -> dict[str, list[tuple[int, float]]]:
    """The copy task's (step, copy accuracy averaged over the seeds) at each evaluation, per model."""
    out = {}
    for name in res["models"]:
        runs = [r for r in res["runs"] if r["model"] == name]
        out[name] = [(p["step"], statistics.mean(r["curve"][i]["accuracy"] for r in runs))
                     for i, p in enumerate(runs[0]["curve"])]
    return out
