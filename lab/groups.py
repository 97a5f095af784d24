"""The protocol's groups: what each trains and why (``plan``), ``GROUPS`` in run order, ``FROZEN`` kept as they ran."""

import contextlib
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kuramoto_attention.diagnostics.flops import model_flops
from kuramoto_attention.errors import ConfigError
from kuramoto_attention.layers.kuramoto_attention import AttentionConfig
from kuramoto_attention.models.config import flat_fields
from kuramoto_attention.models.presets import TUNED_SCORE, TUNED_SHARING, apply_overrides, build_model, get_preset
from lab import protocol
from lab.protocol import LRS, PROTOCOL, SWEEP, Spec, load_results, run_command
from lab.records import same_run
from lab.retired import RETIRED, rerun_command

# The feed-forward inputs the frozen groups ran with. Raw θ: 3kh weights, h = 336 gives ka-1m 1.01M (ff_proj
# projects the lift only: "none" beside any other input)
RAW: dict[str, Any] = {"ff": "angles", "ff_hidden": 336, "ff_proj": "none"}
# ψ(θ) itself, ka-1m's default before P ψ(θ): a SwiGLU reading 2k inputs has 5kh weights, h = 200 keeps 1.01M
UNPROJECTED: dict[str, Any] = {"ff": "lift", "ff_hidden": 200, "ff_proj": "none"}

# the paper's score: each field of the tuned score (models/presets.py) at the layer's default
PAPER_SCORE: dict[str, Any] = {k: getattr(AttentionConfig(), k) for k in TUNED_SCORE}
# The confirmed ka-1m variants (group confirm, retired) the notebook names, as overrides of ka-1m: the best 1M variant
# at 10M tokens outside the paper's score when the later groups were planned, and the confirm candidate that is the
# preset ka-1m-tuned (a test holds them equal): k = 160 paid for by shared metric gates and by the value and metric
# gates reading the feed-forward's shared P ψ(θ)
BEST_VARIANT = "phase-lag-no-self"
TUNED_CANDIDATE = "phase-lag-no-self-clock-8-init-4-ff-proj-shared-gates-dim-160-gates-proj"
VARIANTS: dict[str, dict[str, Any]] = {
    BEST_VARIANT: {"phase_lag": True, "self_coupling": False},
    TUNED_CANDIDATE: {**TUNED_SCORE, **TUNED_SHARING, "dim": 160, "ff_hidden": 350},
}


def _lr(group: str = "lr", ka_model: dict[str, Any] | None = None, presets: tuple[str, ...] = ("ka-1m", "tf-1m"),
        train: dict[str, Any] | None = None) -> list[Spec]:
    # tf-1m's best was the largest rate: one step further; at 5M both preferred lower rates: two steps lower, one up
    grid = {"ka-1m": LRS, "ka-1m-tuned": LRS, "ka-su2-1m": LRS, "ka-su2-1m-tuned": LRS, "ka-sphere-1m": LRS,
            "tf-1m": (*LRS, 1.6e-2),
            "ka-5m-tuned": (*(lr / 4 for lr in LRS), LRS[0] * 2)}
    return [Spec(group, f"{p}-lr-{lr:g}", p, (ka_model or {}) if p.startswith("ka") else {},
                 {**SWEEP, "lr": lr, **(train or {})}, "valid") for p in presets for lr in grid[p]]


def _main(corpus: str = "enwik7", seeds: tuple[int, ...] = (0, 1, 2), group: str = "main",
          presets: tuple[str, ...] = ("ka-1m", "tf-1m"), model: dict[str, Any] | None = None,
          lr_group: str = "lr", train: dict[str, Any] | None = None) -> list[Spec]:
    return [Spec(group, f"{p}-seed{s}", p, model or {},
                 {**PROTOCOL, "corpus": corpus, "seed": s, "lr": best_lr(p, lr_group), **(train or {})})
            for p in presets for s in seeds]


# ka-1m-tuned was chosen among confirm's candidates by their test BPC on seeds 0-2, so those runs (main-tuned's seeds
# 0-2, their twins) are favoured by the choice: three more seeds, which played no part in it, measure it afresh
TUNED_FRESH_SEEDS = (3, 4, 5)


def _recorded(group: str, name: str) -> bool:
    """Whether a group already has a result of this name (read without noting it: a group may ask about its own)."""
    return (protocol.RESULTS / group / f"{name}.json").exists()


# ka-su2-1m-tuned's studies train as retired screen-su2's best, "tuned-omega-lr-1", did: ω at the base rate (its
# record: results/screen-su2/ka-su2-1m-tuned-omega-lr-1.json)
SU2_TUNED_TRAIN: dict[str, Any] = {"omega_lr_mult": 1.0}


BUDGETS = (40_000_000,)  # issue 26's budget curve, beside main's 10M and retired budget's 20M


@dataclass(frozen=True)
class Home:
    """Where a preset's protocol runs are: its 3M sweep, the group it takes its rate from, its seeds' group."""

    sweep: str
    rate: str
    main: str
    train: dict[str, Any] = field(default_factory=dict)


# the budget curve's and the equal-FLOP runs' presets, in run order: the pair, the tuned preset, and the tuned SU(2)
# preset (issue 25: it led the tuned torus one at 3M and 10M, so the budget decides it too)
HOMES: dict[str, Home] = {
    "tf-1m": Home("lr", "lr", "main"),
    "ka-1m-tuned": Home("lr-tuned", "lr10m-tuned", "main-tuned"),
    "ka-1m": Home("lr", "lr", "main"),
    "ka-su2-1m-tuned": Home("lr-su2-tuned", "lr10m-su2-tuned", "main-su2-tuned", SU2_TUNED_TRAIN),
}
BUDGET_PRESETS = tuple(HOMES)
FLOPS_PRESETS = tuple(p for p in HOMES if p != "tf-1m")  # each trained to tf-1m's training FLOPs


def swept_rate(preset: str) -> float:
    """A curve preset's swept rate: what its longer runs train at, and a run below it is marked against."""
    return best_lr(preset, HOMES[preset].rate)


def _own_training(preset: str, tokens: int) -> dict[str, Any]:
    """A preset's own full schedule to ``tokens`` (warmup, cosine to the budget) at its swept rate, seed 0."""
    home = HOMES[preset]
    return {**PROTOCOL, "tokens": tokens, "seed": 0, "lr": swept_rate(preset), **home.train}


def _budget40() -> list[Spec]:
    """Does the gap close with more training (issue 26)? Each preset of the curve to 40M tokens, seed 0."""
    return [Spec("budget40", f"{p}-{b // 1_000_000}m", p, {}, _own_training(p, b)) for b in BUDGETS for p in HOMES]


STRETCH_BUDGET = 100_000_000  # issue 26's stretch, for the transformer and the tuned preset only
STRETCH_PRESETS = ("tf-1m", "ka-1m-tuned")
LONG_BUDGET = 300_000_000  # issue 46: about 33 passes over enwik7's training split, the paper's many-epoch regime
STRETCHES = {"budget100": STRETCH_BUDGET, "budget300": LONG_BUDGET}  # the stretch groups and their budgets


def _stretch(group: str, tokens: int) -> list[Spec]:
    """The curve's stretch: tf-1m and ka-1m-tuned to ``tokens`` at the rate best at the largest budget."""
    rates = {p: rate_at(p, BUDGETS[-1]) for p in STRETCH_PRESETS}
    return [Spec(group, f"{p}-{tokens // 1_000_000}m", p, {}, {**_own_training(p, tokens), "lr": lr})
            for p, lr in rates.items()]


# Is the widening gap the learning rate's? At 40M the stretch pair is tried below its swept rate (two halvings: the
# first beat the swept rate for both), and the curve's point is each preset's best run on validation
LR40_FACTOR = 0.5  # the step down from the swept rate
LR40_STEPS = {"tf-1m": 2, "ka-1m-tuned": 2}  # how many steps each preset's 40M grid goes down


def valid_estimate(r: dict[str, Any]) -> float:
    """What chooses between a preset's runs at one budget: the final validation estimate, never test BPC."""
    return r.get("final_valid_estimate", r["eval_bpc"])


def budget_best(preset: str, tokens: int, groups: tuple[str, ...] = ("budget40", "lr40")) -> dict[str, Any] | None:
    """A preset's run at a budget (within 10%, no overrides) in ``groups``, the best on validation."""
    with protocol.unrecorded():  # the twin search reads every group; the choice depends on these and the twins'
        pool = [r for g in groups for r in with_twins(g) if r["preset"] == preset and not r.get("model_overrides")
                and 0.9 * tokens <= r["tokens"] <= 1.1 * tokens]
    for g in {*groups, *(r["twin"].split("/")[0] for r in pool if "twin" in r)}:
        protocol.note_read(g)
    return min(pool, key=valid_estimate, default=None)


def rate_at(preset: str, tokens: int) -> float:
    """The learning rate of ``budget_best``'s run (the swept rate until budget40 has the preset there)."""
    best = budget_best(preset, tokens)
    return best["train"]["lr"] if best else swept_rate(preset)


def _lr40() -> list[Spec]:
    return [Spec("lr40", f"{p}-{b // 1_000_000}m-lr-{rate:g}", p, {}, {**_own_training(p, b), "lr": rate})
            for b in BUDGETS for p in STRETCH_PRESETS
            for rate in (swept_rate(p) * LR40_FACTOR ** k for k in range(1, LR40_STEPS[p] + 1))]


def flop_matched_tokens(preset: str, reference: str, reference_tokens: int, model: dict[str, Any] | None = None) -> int:
    """The tokens at which ``preset``'s training FLOPs equal ``reference``'s, in whole protocol steps."""
    step = PROTOCOL["batch_size"] * PROTOCOL["context"]
    return round(reference_tokens * flops_per_token(reference) / flops_per_token(preset, model) / step) * step


def flop_matched(name: str) -> bool:
    """Whether a run (by its name) trained to tf-1m's training FLOPs of a budget, not to the budget."""
    return "-flops-tf-" in name


def flops_per_token(preset: str, model: dict[str, Any] | None = None, context: int = PROTOCOL["context"]) -> int:
    """A preset's model FLOPs per training token with the ``model`` overrides (the bench's count)."""
    return _flops_per_token(preset, json.dumps(model or {}, sort_keys=True), context)


@functools.cache
def _flops_per_token(preset: str, overrides: str, context: int) -> int:
    import torch

    family, cfg = get_preset(preset)
    with torch.device("meta"):  # shapes only: the count reads parameter sizes
        return model_flops(build_model(family, apply_overrides(family, cfg, json.loads(overrides))), context)[
            "flops_per_token"]


def _flops() -> list[Spec]:
    """Equal compute: each Kuramoto preset of the curve for tf-1m's training FLOPs at 10M and 40M tokens."""
    return [Spec("flops", f"{p}-flops-tf-{b // 1_000_000}m", p, {},
                 _own_training(p, flop_matched_tokens(p, "tf-1m", b)))
            for b in (PROTOCOL["tokens"], *BUDGETS) for p in FLOPS_PRESETS]


# Issue 46's scaling fixes, each judged by a 40M-token run at its preset's best rate there: its validation slope,
# test BPC, and gaps to tf-1m at equal tokens and (once it beats its preset) at equal FLOPs
FIX_BUDGET = 40_000_000


@dataclass(frozen=True)
class Fix:
    preset: str = "ka-1m-tuned"
    model: dict[str, Any] = field(default_factory=dict)  # model overrides
    train: dict[str, Any] = field(default_factory=dict)  # training overrides


FIXES: dict[str, Fix] = {
    # a free step length: trained, every increment sits on the norm bound; a radius per coordinate
    "bound-elementwise": Fix(model={"bound": "elementwise"}),
    # successor coupling: half the heads read the state after each attended token (FSN's diagnosis)
    "successor-2": Fix(model={"successor_heads": 2}),
    # FSN's coupling kernel in full: frustration (the preset's phase lag), signed Daido harmonics and the delay
    "fsn": Fix(model={"successor_heads": 2, "harmonics": 2}),
}


def fix_training(fix: Fix, tokens: int = FIX_BUDGET) -> dict[str, Any]:
    """A fix's training: its preset's own full schedule to ``tokens`` at the preset's best rate at 40M."""
    return {**_own_training(fix.preset, tokens), "lr": rate_at(fix.preset, FIX_BUDGET), **fix.train}


def _fixes40() -> list[Spec]:
    return [Spec("fixes40", f"{name}-40m", fix.preset, fix.model, fix_training(fix)) for name, fix in fixes().items()]


def fixes_beating_preset() -> dict[str, float]:
    """The fixes whose 40M run beat their preset's best there on validation: name -> validation estimate, best first."""
    done = {r["name"]: r for r in load_results("fixes40")}  # what the groups reading this wait for
    beat = {}
    for name, fix in fixes().items():
        base, run = budget_best(fix.preset, FIX_BUDGET), done.get(f"{name}-40m")
        if base is not None and run is not None and valid_estimate(run) < valid_estimate(base):
            beat[name] = valid_estimate(run)
    return dict(sorted(beat.items(), key=lambda kv: kv[1]))


def _fixes40_flops() -> list[Spec]:
    """Each fix that beat its preset at 40M on validation (or was recorded), at tf-1m's 40M-token FLOPs."""
    beat = fixes_beating_preset()
    return [Spec("fixes40-flops", f"{name}-flops-tf-40m", fix.preset, fix.model,
                 fix_training(fix, flop_matched_tokens(fix.preset, "tf-1m", FIX_BUDGET, fix.model)))
            for name, fix in fixes().items() if name in beat or _recorded("fixes40-flops", f"{name}-flops-tf-40m")]


FIX_SEEDS = (1, 2)  # beside fixes40's seed 0: repro40 (retired) put two identical 40M runs up to 0.009 apart


def _fixes40_seeds() -> list[Spec]:
    """Its preset, then the best fix on validation that beat it at 40M, on FIX_SEEDS: a seed pair at a time."""
    if not (beat := fixes_beating_preset()):
        raise ConfigError("fixes40-seeds confirms the best fix that beat its preset at 40M, and results/fixes40 has "
                          f"none; run `{run_command('fixes40')}`")
    name = next(iter(beat))
    fix = fixes()[name]
    return [spec for s in FIX_SEEDS for spec in (
        Spec("fixes40-seeds", f"{fix.preset}-40m-seed{s}", fix.preset, {},
             {**fix_training(Fix(fix.preset)), "seed": s}),
        Spec("fixes40-seeds", f"{name}-40m-seed{s}", fix.preset, fix.model, {**fix_training(fix), "seed": s}))]


# Where ka-1m-tuned's stored knowledge lives, at 1M parameters (±3%): fewer oscillators and a wider feed-forward, more
# oscillators and a narrower one, or tf-1m's depth of 5, each on issue 46's capacity probe (retired group capacity:
# enwik6 for 20M tokens, scored on its training split)
CAPACITY_SHAPES: dict[str, dict[str, Any]] = {
    "ff-wide": {"dim": 128, "ff_hidden": 500}, "bank-wide": {"dim": 256, "ff_hidden": 90},
    "depth-5": {"depth": 5, "ff_hidden": 270},
}
CAPACITY_TOKENS = 20_000_000
CAPACITY_MARGIN = 0.02  # training-split BPC a shape must gain on the preset to go on to 40M (a quarter of tf's lead)


def shape_run(shape: str) -> str:
    return f"ka-1m-tuned-{shape}-enwik6-20m"


def fixes() -> dict[str, Fix]:
    """FIXES, and each capacity shape that stored at least CAPACITY_MARGIN more than the preset (or already ran at
    40M): issue 46 judges every candidate by the same 40M run."""
    base = next((r["eval_bpc"] for r in load_results("capacity") if r["preset"] == "ka-1m-tuned"), None)
    done = {r["name"]: r["eval_bpc"] for r in load_results("capacity-shape")}
    passed = {f"shape-{s}": Fix(model=m) for s, m in CAPACITY_SHAPES.items()
              if (base is not None and done.get(shape_run(s), base) < base - CAPACITY_MARGIN)
              or _recorded("fixes40", f"shape-{s}-40m")}
    return {**FIXES, **passed}


def _capacity_shape() -> list[Spec]:
    p = "ka-1m-tuned"
    return [Spec("capacity-shape", shape_run(shape), p, model,
                 {**_own_training(p, CAPACITY_TOKENS), "corpus": "enwik6", "lr": rate_at(p, FIX_BUDGET)}, "train")
            for shape, model in CAPACITY_SHAPES.items()]


def _second_stage(group: str, sweep: str, preset: str, train: dict[str, Any] | None = None) -> list[Spec]:
    """A sweep's second stage: its two best 3M rates at the protocol, seed 0, scored on valid."""
    ranked = sorted((r for r in load_results(sweep) if r["preset"] == preset), key=lambda r: r["eval_bpc"])
    planned = len(_lr(sweep, presets=(preset,), train=train))
    if len(ranked) < planned:
        raise ConfigError(f"the 3M sweep of {preset} has {len(ranked)} of its {planned} rates in results/{sweep}; "
                          f"run `python -m lab run {sweep}`")
    return [Spec(group, f"{preset}-lr-{r['train']['lr']:g}", preset, {},
                 {**PROTOCOL, "seed": 0, "lr": r["train"]["lr"], **(train or {})}, "valid") for r in ranked[:2]]


EQUAL_FLOPS_5M = "ka-5m-tuned-flops-tf-5m-10m"  # main-5m's equal-compute run


def _main_5m() -> list[Spec]:
    """The size axis: ka-5m-tuned against tf-5m over 3 seeds, and ka-5m-tuned at tf-5m's training FLOPs; tf-5m at its
    best rate in retired group scale (read from its results)."""
    rates = {"ka-5m-tuned": best_lr("ka-5m-tuned", "lr-5m-tuned"), "tf-5m": best_lr("tf-5m", "scale")}
    tokens = flop_matched_tokens("ka-5m-tuned", "tf-5m", PROTOCOL["tokens"])
    return [*(Spec("main-5m", f"{p}-seed{s}", p, {}, {**PROTOCOL, "seed": s, "lr": lr})
              for p, lr in rates.items() for s in (0, 1, 2)),
            Spec("main-5m", EQUAL_FLOPS_5M, "ka-5m-tuned", {},
                 {**PROTOCOL, "tokens": tokens, "seed": 0, "lr": rates["ka-5m-tuned"]})]


# In run order: the issue's list (the paper's three first), then the feed-forward's inputs. A P ψ(θ) default
# needs ff_proj="none" beside any other input (ff_proj projects the lift only).
ABLATIONS: dict[str, dict[str, Any]] = {
    "value-projection": {"value": "projection"}, "no-ff": {"ff": "none", "ff_proj": "none"},
    "no-gates": {"gates": False}, "omega-zero": {"omega": "zero"}, "bound-elementwise": {"bound": "elementwise"},
    "bound-norm": {"bound": "norm"}, "shared-gates": {"shared_gates": True},
    "ff-lift": UNPROJECTED, "ff-angles": RAW,
}


# The same for ka-1m-tuned: P stays for its gates where the feed-forward goes or reads θ, its gates are shared, and
# the paper's own score is one more
TUNED_ABLATIONS: dict[str, dict[str, Any]] = {
    "value-projection": ABLATIONS["value-projection"], "no-ff": {"ff": "none"}, "no-gates": ABLATIONS["no-gates"],
    "omega-zero": ABLATIONS["omega-zero"], "ff-angles": {"ff": "angles"},
    "bound-elementwise": ABLATIONS["bound-elementwise"], "per-layer-gates": {"shared_gates": False},
    "spec-score": PAPER_SCORE,
}

def _ablation(group: str = "ablation", model: dict[str, Any] | None = None, lr_group: str = "lr",
              preset: str = "ka-1m", variants: dict[str, dict[str, Any]] = ABLATIONS) -> list[Spec]:
    base = {**flat_fields(get_preset(preset)[1]), **(model or {})}
    lr = best_lr(preset, lr_group)
    # a variant equal to the full model's own setting is the full model itself: skip it
    return [Spec(group, f"ka-{k}", preset, {**(model or {}), **v}, {**PROTOCOL, "lr": lr})
            for k, v in variants.items() if any(base[f] != x for f, x in v.items())]


# The protocol's groups in run order (what `replicate` runs), then frozen groups kept reproducible.
GROUPS: dict[str, Callable[[], list[Spec]]] = {
    "lr": _lr, "main": _main, "ablation": _ablation, "pycode": lambda: _main("pycode", (0,), "pycode"),
    # the protocol again for ka-1m-tuned (presets.py), the best variant as a preset; tf-1m's runs are lr's, main's and
    # pycode's. Its rate is swept in two stages: lr-tuned at 3M tokens, then its two best rates at 10M (lr10m-tuned)
    "lr-tuned": lambda: _lr("lr-tuned", presets=("ka-1m-tuned",)),
    # its 3M sweep left 4e-3 and 8e-3 0.002 apart, and at 10M the 8-clock variant had lost 0.076 at twice its rate
    # (confirm, lr-x2): a 3M sweep cannot be trusted to rank rates that close
    "lr10m-tuned": lambda: _second_stage("lr10m-tuned", "lr-tuned", "ka-1m-tuned"),
    "main-tuned": lambda: _main(seeds=(*range(3), *TUNED_FRESH_SEEDS), group="main-tuned", presets=("ka-1m-tuned",),
                                lr_group="lr10m-tuned"),
    "ablation-tuned": lambda: _ablation("ablation-tuned", lr_group="lr10m-tuned", preset="ka-1m-tuned",
                                        variants=TUNED_ABLATIONS),
    "pycode-tuned": lambda: _main("pycode", (0,), "pycode-tuned", ("ka-1m-tuned",), lr_group="lr10m-tuned"),
    # issue 26: the budget curve to 40M tokens and the equal-FLOP runs
    "budget40": _budget40, "lr40": _lr40, **{g: functools.partial(_stretch, g, b) for g, b in STRETCHES.items()},
    "flops": _flops,
    # issue 26's size axis: the tuned recipe at 5M (presets.py ka-5m-tuned), its rate swept lower, then 3 seeds each
    "lr-5m-tuned": lambda: _lr("lr-5m-tuned", presets=("ka-5m-tuned",)), "main-5m": _main_5m,
    # issue 25: SU(2) (presets.py ka-su2-1m), swept in two stages as ka-1m-tuned was, then 3 seeds
    "lr-su2": lambda: _lr("lr-su2", presets=("ka-su2-1m",)),
    "lr10m-su2": lambda: _second_stage("lr10m-su2", "lr-su2", "ka-su2-1m"),
    "main-su2": lambda: _main(group="main-su2", presets=("ka-su2-1m",), lr_group="lr10m-su2"),
    # the tuned recipe on SU(2) (presets.py ka-su2-1m-tuned, trained with ω at the base rate), the same three stages
    "lr-su2-tuned": lambda: _lr("lr-su2-tuned", presets=("ka-su2-1m-tuned",), train=SU2_TUNED_TRAIN),
    "lr10m-su2-tuned": lambda: _second_stage("lr10m-su2-tuned", "lr-su2-tuned", "ka-su2-1m-tuned", SU2_TUNED_TRAIN),
    "main-su2-tuned": lambda: _main(group="main-su2-tuned", presets=("ka-su2-1m-tuned",), lr_group="lr10m-su2-tuned",
                                    train=SU2_TUNED_TRAIN),
    # issue 25's stretch: the sphere S³ ⊂ R⁴ (presets.py ka-sphere-1m, AKOrN's oscillators), the same three stages
    "lr-sphere": lambda: _lr("lr-sphere", presets=("ka-sphere-1m",)),
    "lr10m-sphere": lambda: _second_stage("lr10m-sphere", "lr-sphere", "ka-sphere-1m"),
    "main-sphere": lambda: _main(group="main-sphere", presets=("ka-sphere-1m",), lr_group="lr10m-sphere"),
    # issue 46: scaling fixes judged at 40M tokens, and ka-1m-tuned's shapes on the capacity probe
    "fixes40": _fixes40, "fixes40-flops": _fixes40_flops, "fixes40-seeds": _fixes40_seeds,
    "capacity-shape": _capacity_shape,
}
# `python -m lab dynamics` without groups: main, ka-1m on ψ(θ) itself, the variants the notebook discusses, 5M
DYNAMICS_GROUPS = ("main", "main-unprojected", "confirm", "screen5", "screen6", "scale", "scale-variant")
FROZEN: dict[str, Callable[[], list[Spec]]] = {
    # the transformer has no feed-forward choice: main's runs serve both. Their rate: ka-1m's first sweep, on wrap(θ)
    # (lr-wrapped, retired: its results are read)
    "main-raw": lambda: _main(group="main-raw", presets=("ka-1m",), model=dict(RAW), lr_group="lr-wrapped"),
    "ablation-raw": lambda: _ablation("ablation-raw", dict(RAW), "lr-wrapped"),
    "lr-unprojected": lambda: _lr("lr-unprojected", dict(UNPROJECTED), ("ka-1m",)),
    "main-unprojected": lambda: _main(group="main-unprojected", presets=("ka-1m",), model=dict(UNPROJECTED),
                                      lr_group="lr-unprojected"),
    "ablation-unprojected": lambda: _ablation("ablation-unprojected", dict(UNPROJECTED), "lr-unprojected"),
    "pycode-unprojected": lambda: _main("pycode", (0,), "pycode-unprojected", ("ka-1m",), dict(UNPROJECTED),
                                        "lr-unprojected"),
}
# ka-1m's runs of the frozen groups read ψ(θ) itself (their overrides say so) or raw θ, and so did those of the retired
# groups: what the notebook strips from their overrides
RAN_UNPROJECTED = frozenset(FROZEN) | frozenset(RETIRED)


def plan(group: str) -> list[Spec]:
    if group in RETIRED:
        raise ConfigError(f"{group} is retired ({RETIRED[group].what}): its results stay in results/{group}/ and are "
                          f"reported; to rerun it: `{RETIRED[group].rerun(group)}`")
    groups = {**GROUPS, **FROZEN}
    if group not in groups:
        raise ConfigError(f"unknown experiment group {group!r}; choose one of: {', '.join(groups)} "
                          f"(retired: {', '.join(RETIRED)})")
    return groups[group]()


def with_twins(group: str) -> list[dict[str, Any]]:
    """A group's results plus its planned runs another group made identically, named ``twin``."""
    rows = load_results(group)
    with contextlib.suppress(ConfigError):  # a group that cannot be planned yet has no twins either
        done, pool = {r["name"] for r in rows}, all_results()
        for spec in plan(group):
            r = same_run(spec, pool) if spec.name not in done else None
            if r is not None:
                twin = f"{r['group']}/{r['name']}"  # the run's own group and name; the row is this group's
                rows.append({**r, "group": group, "name": spec.name, "preset": spec.preset,
                             "model_overrides": spec.model, "twin": twin})
    return rows


def best_result(preset: str, group: str) -> dict[str, Any] | None:
    """The preset's run with the lowest eval BPC in results/GROUP, twins included, or None."""
    rows = [r for r in load_results(group) if r["preset"] == preset]
    with contextlib.suppress(ConfigError):  # a group that cannot be planned has no twins
        if {s.name for s in plan(group) if s.preset == preset} - {r["name"] for r in rows}:
            with protocol.unrecorded():  # the twin search reads every group; planning depends on the twins' only
                rows = [r for r in with_twins(group) if r["preset"] == preset]
            for r in rows:
                if "twin" in r:
                    protocol.note_read(r["twin"].split("/")[0])
    return min(rows, key=lambda r: r["eval_bpc"], default=None)


def best_lr(preset: str, group: str = "lr") -> float:
    """The sweep's best learning rate for a preset, read from results/GROUP (never typed in)."""
    best = best_result(preset, group)
    if best is None:
        how = (f"{group} is retired: copy the repository's results/{group}/ there, or rerun it with "
               f"`{rerun_command(group)}`" if group in RETIRED else f"run `{run_command(group)}` first")
        raise ConfigError(f"no learning-rate sweep for {preset} in {protocol.RESULTS / group}; {how}")
    return best["train"]["lr"]


def all_results() -> list[dict[str, Any]]:
    """Every group's results, the retired groups' too (their runs can be twins of planned ones)."""
    return [r for group in (*GROUPS, *FROZEN, *RETIRED) for r in load_results(group)]


def reads(group: str) -> set[str]:
    """The groups whose results planning ``group`` reads (its rates), planned on the committed results."""
    with protocol.at_root(protocol.COMMITTED), protocol.recording_reads() as seen, \
            contextlib.suppress(ConfigError):
        plan(group)
    return seen - {group}


def order(group: str) -> list[str]:
    """The groups to run, in order, for ``group``'s plan to exist, ``group`` last."""
    out: list[str] = []

    def visit(g: str) -> None:
        for up in sorted(reads(g)) if g not in RETIRED else ():
            if up not in out and up != group:
                visit(up)
        if g not in out:
            out.append(g)

    visit(group)
    return out
