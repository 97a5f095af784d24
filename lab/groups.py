"""The replication protocol's groups (issue 4, 26): which runs each group makes, and why. ``plan(GROUP)`` is what
``python -m lab run GROUP`` trains (runner.py); the notebook and RESULTS.md read their summaries.

Groups, in the order they are meant to run (``order`` says which groups a group reads its rates from):
  lr        learning-rate sweep of ka-1m and tf-1m at 3M tokens
  main      ka-1m and tf-1m, 3 seeds, 10M tokens, each at its best lr from ``lr``
  ablation  ka-1m variants of the paper / issue 4, 1 seed, 10M tokens
  pycode    the main comparison on pycode (bits per byte), 1 seed
  budget    the main pair and the best variant at 20M tokens;  scale  the pair at 5M parameters
  scale-variant  the best 1M variants at 5M parameters (after scale: they take ka-5m's best rate there)
  lr10m     each 1M model one sweep step below its swept rate, at the main protocol
  warmup10m each 1M model with a 30-step warmup, at the main protocol
  lr-tuned, lr10m-tuned, main-tuned, ablation-tuned, pycode-tuned   the protocol again for ka-1m-tuned
  budget40, flops   issue 26: the budget curve to 40M tokens, and the Kuramoto presets at tf-1m's training FLOPs
                    (``HOMES``: tf-1m, ka-1m-tuned, ka-1m and, after its stages, ka-su2-1m-tuned)
  budget100         issue 26's stretch: tf-1m and ka-1m-tuned to 100M tokens, at the rate best at 40M (after lr40)
  lr-su2, lr10m-su2, main-su2; lr-sphere, lr10m-sphere, main-sphere   issue 25: the SU(2) and sphere presets
  screen-su2  issue 25: ka-1m-tuned's ingredients (and ω at the base rate) on SU(2), at 3M tokens
  lr-su2-tuned, lr10m-su2-tuned, main-su2-tuned   issue 25: the screen's best variant (ka-su2-1m-tuned, ω at the
                                   base rate), through the same stages
  lr40              issue 26: tf-1m and ka-1m-tuned at 40M tokens, one and two halvings below their swept rate
  lr-5m-tuned, main-5m   issue 26's size axis: ka-5m-tuned's 3M sweep, then it against tf-5m over 3 seeds and at
                         tf-5m's training FLOPs
  leads, leads40    issue 26: structural leads on ka-1m-tuned at the protocol, then those that beat it (and those
                    whose reason is the budget) at 40M tokens (at the preset's best rate there: its swept one, or
                    lr40's lower one), and those that beat it there at tf-1m's 40M-token training FLOPs
  leads-seeds       issue 26: the leads that beat ka-1m-tuned, on seeds 1 and 2 at the protocol
  leads-flops       issue 26: cheaper widths of ka-1m-tuned (same parameters, fewer FLOPs per token) at tf-1m's
                    10M-token training FLOPs
  frozen groups, kept reproducible after the defaults moved on (the feed-forward's input):
  main-raw, ablation-raw           on raw θ, the default until ablation-raw measured ψ(θ) better
  main-unprojected, ablation-unprojected, pycode-unprojected, lr-unprojected
                                   on ψ(θ) itself, the default until confirm measured P ψ(θ) better (ka-1m only)
The screening rounds (screen, screen2 ... screen6), confirm, the wrap(θ) groups, leads-retired, leads-retired-optim,
leads-retired-bound-scale, fixes40-retired and fixes40-retired-bound-scale are retired (retired.py): their fields left
the library, their results stay and are reported, and the commit that runs them is named there.
Every group run before main-unprojected's successor (budget, lr10m, warmup10m and the frozen ones) ran ka-1m on the
unprojected feed-forward at lr-unprojected's rate: ``plan`` pins its ka-1m runs to it (``UNPROJECTED``).
"""

import contextlib
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
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

# The feed-forward's input moved three times: wrap(θ) ∈ [-π, π) until screen2 measured the raw angle θ (the paper's
# reading) far better, then raw θ until the 10M-token ablation measured ψ(θ) better still (at the same parameter
# count), then ψ(θ) itself until confirm measured P ψ(θ) better (ka-1m only). Groups run before each move are frozen
# with the settings they ran with (those on wrap(θ) are retired).
# 3kh weights: h = 336 gives ka-1m 1.01M (ff_proj projects the lift only: "none" beside any other input)
RAW: dict[str, Any] = {"ff": "angles", "ff_hidden": 336, "ff_proj": "none"}
# ka-1m's default until its feed-forward read P ψ(θ) (presets.py): every group run before is pinned to it. A SwiGLU
# reading ψ(θ) (2k inputs) has 5kh parameters instead of 3kh: h = 200 keeps ka-1m at 1.01M
UNPROJECTED: dict[str, Any] = {"ff": "lift", "ff_hidden": 200, "ff_proj": "none"}


def _pinned_lr(preset: str) -> float:
    """A pinned group's rate: ka-1m's from the sweep it ran with (lr-unprojected), the transformer's from lr."""
    return best_lr(preset, "lr-unprojected" if preset == "ka-1m" else "lr")


# The confirmed ka-1m variants (group confirm, retired) that kept groups build on, as overrides of ka-1m
_CLOCK: dict[str, Any] = TUNED_SCORE  # the tuned score, declared once (models/presets.py)
# the paper's score: each field of the tuned score at the layer's default
PAPER_SCORE: dict[str, Any] = {k: getattr(AttentionConfig(), k) for k in TUNED_SCORE}
# the best 1M variant at 10M tokens outside the paper's score when the later groups were planned
BEST_VARIANT = "phase-lag-no-self"
BUDGET_VARIANT = "phase-lag-no-self"  # the variant also trained to 20M (the best confirmed when it ran)
# the confirm candidate that is the preset ka-1m-tuned (a test holds them equal): k = 160 paid for by shared metric
# gates and by the value and metric gates reading the feed-forward's shared P ψ(θ)
TUNED_CANDIDATE = "phase-lag-no-self-clock-8-init-4-ff-proj-shared-gates-dim-160-gates-proj"
VARIANTS: dict[str, dict[str, Any]] = {
    BEST_VARIANT: {"phase_lag": True, "self_coupling": False},
    "phase-lag-no-self-clock-8-init-4": _CLOCK,
    "phase-lag-no-self-clock-8-init-4-ff-proj-shared": {**_CLOCK, "ff_proj": "shared", "ff_hidden": 312},
    TUNED_CANDIDATE: {**_CLOCK, **TUNED_SHARING, "dim": 160, "ff_hidden": 350},
}


def _lr(group: str = "lr", ka_model: dict[str, Any] | None = None, presets: tuple[str, ...] = ("ka-1m", "tf-1m"),
        train: dict[str, Any] | None = None) -> list[Spec]:
    # the transformer's best of LRS was its largest, 8e-3: the sweep goes one step further for it
    # at 5M both families preferred rates below their 1M best (scale): the 5M sweep starts two steps lower, and its
    # best of those three was the largest, 2e-3, so it goes one step further
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


def _budget() -> list[Spec]:
    """Does the gap close with more training? The main pair (seed 0, each model's swept lr) at 20M tokens
    (2.2 passes over enwik7's 9M training bytes), beside the 3M sweep and the 10M main runs."""
    train = {**PROTOCOL, "tokens": 20_000_000, "seed": 0}
    return ([Spec("budget", f"{p}-20m", p, {}, {**train, "lr": _pinned_lr(p)}) for p in ("ka-1m", "tf-1m")]
            # a confirmed variant: does its gap widen with training too?
            + [Spec("budget", f"ka-1m-{BUDGET_VARIANT}-20m", "ka-1m", VARIANTS[BUDGET_VARIANT],
                    {**train, "lr": _pinned_lr("ka-1m")})])


def _scale() -> list[Spec]:
    """Does the gap close with size? The paper has Kuramoto attention level with the transformer at 5M. The
    5M pair (seed 0) at the main protocol; no full 5M sweep: each model at its 1M sweep's best lr, and the
    transformer also at ka's 4e-3 (at its 1M rate, 8e-3, tf-5m ended worse than tf-1m), and ka at half its
    rate (the transformer gained from halving, so ka gets the same second try)."""
    train = {**PROTOCOL, "seed": 0}
    return ([Spec("scale", p, p, {}, {**train, "lr": _pinned_lr(p.replace("-5m", "-1m"))}) for p in ("ka-5m", "tf-5m")]
            + [Spec("scale", "tf-5m-lr-0.004", "tf-5m", {}, {**train, "lr": 4e-3}),
               Spec("scale", "ka-5m-lr-0.002", "ka-5m", {}, {**train, "lr": 2e-3}),
               # ka gained 0.072 from halving again: the transformer gets the same third rate
               Spec("scale", "tf-5m-lr-0.002", "tf-5m", {}, {**train, "lr": 2e-3}),
               # both were best at 2e-3, the lowest tried: each one step further
               Spec("scale", "ka-5m-lr-0.001", "ka-5m", {}, {**train, "lr": 1e-3}),
               Spec("scale", "tf-5m-lr-0.001", "tf-5m", {}, {**train, "lr": 1e-3}),
               # ka-5m was still best at the lowest rate (flat against 2e-3) and had one rate fewer: one step further
               Spec("scale", "ka-5m-lr-0.0005", "ka-5m", {}, {**train, "lr": 5e-4})])


# the 1M variants tried at 5M: the base of the later groups, then the best at 1M (8 clocks; 16 were no better)
SCALE_VARIANTS = (BEST_VARIANT, "phase-lag-no-self-clock-8-init-4", "phase-lag-no-self-clock-8-init-4-ff-proj-shared")
# a 1M candidate's feed-forward width re-matched to ka-5m's parameter count (4,999,154 with 8 clocks; 702: −2,048)
SCALE_WIDTHS: dict[str, dict[str, Any]] = {"phase-lag-no-self-clock-8-init-4-ff-proj-shared": {"ff_hidden": 702}}


def _scale_variant() -> list[Spec]:
    """Do the 1M variants' gains carry to 5M? Each of ``SCALE_VARIANTS`` on ka-5m at ka-5m's best rate in ``scale``
    (read from its results, so run after it), seed 0, against that ka-5m run and the best tf-5m."""
    return [Spec("scale-variant", f"ka-5m-{v}", "ka-5m", {**VARIANTS[v], **SCALE_WIDTHS.get(v, {})},
                 {**PROTOCOL, "seed": 0, "lr": best_lr("ka-5m", "scale")}) for v in SCALE_VARIANTS]


def _lr10m() -> list[Spec]:
    """Is the 3M sweep's rate still each model's best at the 10M protocol? At 5M both models gained from
    rates below their 1M sweep's best; here each 1M model one sweep step below its best, seed 0, against
    main's seed 0 (the pair at the swept rates)."""
    train = {**PROTOCOL, "seed": 0}
    return [Spec("lr10m", f"{p}-lr-{_pinned_lr(p) / 2:g}", p, {}, {**train, "lr": _pinned_lr(p) / 2})
            for p in ("ka-1m", "tf-1m")]


def _warmup10m() -> list[Spec]:
    """Round 6's shorter warmup (30 steps: −0.044 at 3M, where 100 steps are 27% of the run) at the protocol's
    10M tokens, for both models (a training option), each at its swept rate, seed 0, against main's seed 0."""
    train = {**PROTOCOL, "seed": 0, "warmup": 30}
    return [Spec("warmup10m", f"{p}-warmup-30", p, {}, {**train, "lr": _pinned_lr(p)}) for p in ("ka-1m", "tf-1m")]


# ka-1m-tuned was chosen among confirm's candidates by their test BPC on seeds 0-2, so those runs (main-tuned's seeds
# 0-2, their twins) are favoured by the choice: three more seeds, which played no part in it, measure it afresh
TUNED_FRESH_SEEDS = (3, 4, 5)


# Issue 26's structural leads on ka-1m-tuned, each a field of the same code path or a training setting: screened at the
# protocol (seed 0, against main-tuned's seed 0, the same run without the change), the best then trained to 40M tokens
# (leads40)
@dataclass(frozen=True)
class Lead:
    model: dict[str, Any] = field(default_factory=dict)  # model overrides
    train: dict[str, Any] = field(default_factory=dict)  # training overrides
    # a lead whose reason is the budget itself goes to 40M (leads40) whatever it scores at the protocol: the protocol
    # favours what helps early, and the gap is what grows late
    at_budget: bool = False
    # also at the preset's swept rate in leads40 where lr40 found a lower one better for the preset: a change that
    # smooths training may want a higher rate than the preset does
    at_swept_rate: bool = False

    def change(self) -> str:
        return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                         for k, v in {**self.model, **self.train}.items())


LEADS: dict[str, Lead] = {
    # the coupling's second harmonic (Daido), signed weights learned from 0 (layers/harmonics.py)
    "harmonics-2": Lead({"harmonics": 2}),
    # (A step whose length follows the increment's, the norm bound's scale s learned, lost its screen and again as a
    # fix at 40M: group leads-retired-bound-scale.)
    # ω at the base rate, or frozen at RoPE's: at phase_lr_mult 20 (0.08 per step) Adam's first steps move every ω by
    # more than RoPE's slow rates (down to 1e-4); trained, almost no oscillator drifts slower than once per context
    # (more than half do at init; `python -m lab dynamics budget40`), yet slow oscillators are what compare content
    # far apart, and at 40M tokens the gap grows with the distance (`python -m lab gap budget40`)
    "omega-lr-1": Lead(train={"omega_lr_mult": 1.0}), "omega-frozen": Lead(train={"omega_lr_mult": 0.0}),
    # the same diagnosis, answered in the parametrisation: ω learned as log ω (layers/log_rate.py), so each step moves
    # a rate by a factor (about e^{±lr·mult} at most) instead of by an amount: at the phase group's rate, and at the
    # base rate
    "omega-log": Lead({"omega": "log"}), "omega-log-lr-1": Lead({"omega": "log"}, {"omega_lr_mult": 1.0}),
    # every angle slower, not ω alone: the embedding's phases, the lags and the clocks step at ×20 too, a rate chosen
    # at 3M tokens (×1 far worse there), where the Kuramoto models lead tf-1m; they fall behind later, gain more from
    # the rate's decay than it does, and ω at ×1 gained 0.008 at 10M but 0.039 at 40M. ×5 here, ω at ×1
    "angles-lr-5": Lead(train={"phase_lr_mult": 5.0, "omega_lr_mult": 1.0}, at_budget=True),
    # past the bound's knee a step's length is r whatever its increment x (`kuramoto report`'s drive, ‖x‖ per token,
    # says how far past it each layer is), so the matrices that make x act through their direction alone. AdamW lets
    # their norms grow, and a step of fixed size then turns them less and less: the model would slow down as it
    # trains, whatever the schedule. A larger decay holds those norms down
    "decay-0.3": Lead(train={"weight_decay": 0.3}, at_budget=True),
    # at 40M the gap is largest on bytes that copying an earlier context predicts, and it grows with distance (`python
    # -m lab gap budget40`). Answered in the layer's structure: the paper's layer couples oscillator j of one token to
    # j of another only, so a token has no direct way to hold its predecessor's byte in oscillators its own byte does
    # not set, nor a query to compare its byte with a key's predecessor (what finds the byte after an earlier copy of
    # the current one). A complex mix of a head's oscillators in the step (K: j synchronises to l), in the score (C:
    # the query's), or both (layers/cross_coupling.py). On a synthetic copy task (`python -m lab induction`) the
    # diagonal layer learns the copy without them, and ends more accurate than with them. Each mix's 51,200 weights
    # are paid for by feed-forward units (27 per layer each). (Another answer, the lag read from the token's state,
    # was dropped: group leads-retired.)
    "cross-coupling": Lead({"cross_coupling": True, "ff_hidden": 323}),
    "cross-score": Lead({"cross_score": True, "ff_hidden": 323}),
    # Both mixes go to 40M whatever their screen: slower than the preset early, they were catching up when the
    # protocol ended (the notebook's validation Δ along the schedule: +0.026 / +0.024 / -0.001 / -0.005 at its
    # quarters), as a model with more routes to learn should
    "cross-both": Lead({"cross_score": True, "cross_coupling": True, "ff_hidden": 297}, at_budget=True),
    # the two changes that gained at 40M, together (cross-both at the preset's best rate there, omega-lr-1 at its
    # own): do their gains add? Also at the swept rate: with ω at ×1 training has almost no spikes (the fit note's
    # clipping), and omega-lr-1 alone was better there than at the preset's best
    "cross-both-omega-lr-1": Lead({"cross_score": True, "cross_coupling": True, "ff_hidden": 297},
                                  {"omega_lr_mult": 1.0}, at_budget=True, at_swept_rate=True),
    # (Two leads on the optimiser lost their screens and were dropped, group leads-retired-optim: the angles' gradient
    # clipped by its own norm, and the shared weights at a quarter of the rate.)
    # Is it the Kuramoto step itself that scales worse? The ablation value-projection (the increment A · W_v φ(x), a
    # transformer's value read on the torus, instead of the coupling Σ_u A_{t,u} sin(θ_u − θ_t)) with its 205k weights
    # paid for by feed-forward units (350 -> 243 per layer), everything else ka-1m-tuned's. At 10M tokens the
    # ablation lost 0.019 with those weights unpaid; the question is whether it loses less, or wins, at 40M. It lost
    # more: +0.044 at 10M, +0.060 at 40M against the preset's best there. The coupling is not what scales worse
    "linear-value": Lead({"value": "projection", "ff_hidden": 243}, at_budget=True),
}


def _leads() -> list[Spec]:
    lr = swept_rate("ka-1m-tuned")
    return [Spec("leads", f"ka-1m-tuned-{k}", "ka-1m-tuned", lead.model,
                 {**PROTOCOL, "seed": 0, "lr": lr, **lead.train}) for k, lead in LEADS.items()]


def _leads_beating_tuned(group: str, over_seeds: bool = False) -> list[tuple[str, Lead]]:
    """Every lead whose seed-0 run beat ka-1m-tuned's mean over main-tuned's own runs at the protocol (not their
    twins, confirm's runs, which chose the preset), best first: what ``group`` confirms. ``over_seeds``: a lead run on
    every seed of leads-seeds is judged by its mean over them with seed 0 instead (one that beat it on seed 0 alone
    by noise drops out). Raises, with the numbers, when leads has no results yet or none beat it."""
    base = [r["eval_bpc"] for r in load_results("main-tuned")]
    done = load_results("leads")
    if over_seeds:
        seeds = {r["name"]: r["eval_bpc"] for r in load_results("leads-seeds")}
        for i, r in enumerate(done):
            vals = [seeds.get(f"{r['name']}-seed{s}") for s in LEAD_SEEDS]
            if None not in vals:
                done[i] = {**r, "eval_bpc": (r["eval_bpc"] + sum(vals)) / (1 + len(vals))}
    if not base:
        raise ConfigError(f"{group} trains the leads that beat ka-1m-tuned's mean over main-tuned's runs, and "
                          "results/main-tuned has none; run `python -m lab run main-tuned`")
    if not done:
        raise ConfigError(f"{group} trains the leads that beat ka-1m-tuned: none of the {len(LEADS)} leads is in "
                          "results/leads; run `python -m lab run leads`")
    mean = sum(base) / len(base)
    better = sorted((r for r in done if r["eval_bpc"] < mean), key=lambda r: r["eval_bpc"])
    if not better:
        best = min(done, key=lambda r: r["eval_bpc"])
        raise ConfigError(f"no lead beat ka-1m-tuned at the protocol (best {best['name']}: {best['eval_bpc']:.4f} "
                          f"against main-tuned's mean {mean:.4f}): nothing for {group} to confirm")
    return [(r["name"], LEADS[r["name"].removeprefix("ka-1m-tuned-")]) for r in better]


def _recorded(group: str, name: str) -> bool:
    """Whether a group already has a result of this name (read without noting it: a group may ask about its own)."""
    return (protocol.RESULTS / group / f"{name}.json").exists()


def _leads40() -> list[Spec]:
    """Every lead that beat ka-1m-tuned at the protocol (``_leads_beating_tuned``; over three seeds once it has them),
    then every lead ``at_budget`` (whatever its protocol score, screened or not), trained as budget40's runs: the gap
    grows with the budget, so a lead is judged there. Leads not yet screened join when they beat it. Where lr40 found
    the preset better below its swept rate at a budget (``rate_at``), each lead trains at that rate instead (the
    target is judged at each model's best rate; a lead's run made before at another rate stays in the group). A lead
    trains at tf-1m's FLOPs of a budget once a run of it at that budget beat the preset's best there on validation
    (``_beat_at``; one recorded stays): the equal-FLOP target is the harder half, and a lead that loses at equal tokens
    cannot meet it. Those runs train at the swept rate, as flops' run of the preset they are judged against."""
    at_budget = [(f"ka-1m-tuned-{k}", lead) for k, lead in LEADS.items() if lead.at_budget]
    try:
        chosen = dict(_leads_beating_tuned("leads40", over_seeds=True))
    except ConfigError:  # none screened or none beat it: the budget's own leads still go
        if not at_budget:
            raise
        chosen = {}
    chosen.update(at_budget)
    swept, best = swept_rate("ka-1m-tuned"), {b: rate_at("ka-1m-tuned", b) for b in BUDGETS}
    with protocol.unrecorded():  # the group's own runs, read once (a group may ask about its own)
        own = load_results("leads40")

    def rates(name: str, b: int) -> list[float]:
        """The best rate at the budget, and every other one a recorded run of the lead was trained at (kept)."""
        stem = f"{name}-{b // 1_000_000}m"
        made = {float(p.stem.removeprefix(f"{stem}-lr-"))
                for p in (protocol.RESULTS / "leads40").glob(f"{stem}-lr-*.json")}
        also = chosen[name].at_swept_rate or _recorded("leads40", stem)
        return sorted({best[b], *made, *([swept] if also else [])}, reverse=True)

    return [Spec("leads40", f"{name}-{b // 1_000_000}m" + ("" if rate == swept else f"-lr-{rate:g}"), "ka-1m-tuned",
                 lead.model, {**_own_training("ka-1m-tuned", b), **lead.train, "lr": rate})
            for b in BUDGETS for name, lead in chosen.items() for rate in rates(name, b)] + [
        # and each at tf-1m's training FLOPs of that budget (its own full schedule): the target's other half
        Spec("leads40", f"{name}-flops-tf-{b // 1_000_000}m", "ka-1m-tuned", lead.model,
             {**_own_training("ka-1m-tuned", flop_matched_tokens("ka-1m-tuned", "tf-1m", b, lead.model)),
              **lead.train})
        for name, lead in chosen.items() for b in BUDGETS
        if _recorded("leads40", f"{name}-flops-tf-{b // 1_000_000}m") or _beat_at(name, b, own)]


def lead_runs_at(name: str, tokens: int, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs of the lead ``name`` among ``runs`` (leads40's) at ``tokens``, at any rate (…-40m, …-40m-lr-X)."""
    stem = f"{name}-{tokens // 1_000_000}m"
    return [r for r in runs if r["name"] == stem or r["name"].startswith(stem + "-lr-")]


def _beat_at(name: str, tokens: int, runs: list[dict[str, Any]]) -> bool:
    """Whether a run of the lead ``name`` among ``runs`` (leads40's) at ``tokens`` (at any rate) ended below
    ka-1m-tuned's best run there (``budget_best``) on validation."""
    base = budget_best("ka-1m-tuned", tokens)
    return base is not None and any(valid_estimate(r) < valid_estimate(base) for r in lead_runs_at(name, tokens, runs))


LEAD_SEEDS = (1, 2)  # beside leads' seed 0: a lead's mean over three seeds against main-tuned's over six


def _leads_seeds() -> list[Spec]:
    """The same leads at the protocol on two more seeds: one seed cannot tell a lead from seed noise (main-tuned's
    sd is about 0.006), and a lead that holds becomes the tuned protocol's setting."""
    return [Spec("leads-seeds", f"{name}-seed{s}", "ka-1m-tuned", lead.model,
                 {**PROTOCOL, "seed": s, "lr": swept_rate("ka-1m-tuned"), **lead.train})
            for name, lead in _leads_beating_tuned("leads-seeds") for s in LEAD_SEEDS]


# Issue 26's "cheaper widths that buy tokens at equal FLOPs": ka-1m-tuned's recipe in shapes that cost fewer model
# FLOPs per token at the same parameters (±3%, the feed-forward's width filling the budget). ka-1m-tuned's k = 160
# was chosen at equal tokens; at equal FLOPs it sees 61% of tf-1m's tokens. Each is trained, with its own full
# schedule at ka-1m-tuned's rate, seed 0, for the tokens at which its training FLOPs equal tf-1m's 10M-token run, and
# judged against flops' ka-1m-tuned-flops-tf-10m (the same FLOPs spent by the preset itself)
WIDTHS: dict[str, Lead] = {
    # ka-1m's k = 128 (heads of 32): narrower T×T matmuls and a smaller shared P, applied 8 times (1.41× tf-1m)
    "k-128": Lead({"dim": 128, "ff_hidden": 502}),
    # three layers of k = 160: one Kuramoto step fewer, a wider feed-forward (1.39× tf-1m)
    "depth-3": Lead({"depth": 3, "ff_hidden": 484}),
    # the other way: five layers of k = 96 (heads of 24), narrow and deep as tf-1m is (1.34× tf-1m)
    "k-96-depth-5": Lead({"dim": 96, "depth": 5, "ff_hidden": 586}),
}


def _leads_flops() -> list[Spec]:
    return [Spec("leads-flops", f"ka-1m-tuned-{k}-flops-tf-10m", "ka-1m-tuned", lead.model,
                 {**_own_training("ka-1m-tuned", flop_matched_tokens("ka-1m-tuned", "tf-1m", PROTOCOL["tokens"],
                                                                     lead.model)), **lead.train})
            for k, lead in WIDTHS.items()]


# Issue 25's "a variant of it": what of ka-1m-tuned's recipe applies off the torus (no self term, 8 clocks per head,
# one pair of metric gates reading the shared P, as the value gate does; the phase lag is the torus's only), k = 80
# paid for as ka-1m-tuned's 160 was; and ω (here the drift's pure quaternions) at the base rate, issue 26's lead.
# Screened at the 3M sweep's settings and its best rate, on valid, against that sweep's run
_SU2_PRESET = flat_fields(get_preset("ka-su2-1m")[1])
SU2_VARIANTS: dict[str, Lead] = {
    "tuned": Lead({**{k: v for k, v in VARIANTS[TUNED_CANDIDATE].items()
                      if k not in ("phase_lag", "dim", "ff_hidden") and _SU2_PRESET[k] != v},
                   "dim": 80, "ff_hidden": 494}),
    "omega-lr-1": Lead(train={"omega_lr_mult": 1.0}),
}
SU2_VARIANTS["tuned-omega-lr-1"] = Lead(SU2_VARIANTS["tuned"].model, SU2_VARIANTS["omega-lr-1"].train)
# ka-su2-1m-tuned's studies train as the screen's best did: ω at the base rate (valid 2.3461 at 3M against "tuned"'s
# 2.3728 at ×20; the plain preset gained 0.10 from it)
SU2_TUNED_TRAIN = SU2_VARIANTS["tuned-omega-lr-1"].train


BUDGETS = (40_000_000,)  # issue 26's budget curve, beside main's 10M and budget's 20M


@dataclass(frozen=True)
class Home:
    """Where a preset's protocol runs are: its 3M sweep, the group whose best rate it trains at, the group of its
    seeds at the protocol (seed 0 is its 10M point), and the training overrides every run of it carries."""

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
    """A curve preset's swept rate (its protocol's): what its longer runs train at, and a run below it is marked
    against."""
    return best_lr(preset, HOMES[preset].rate)


def _own_training(preset: str, tokens: int) -> dict[str, Any]:
    """A preset's own full schedule to ``tokens`` (warmup, cosine to the budget) at its swept rate, seed 0."""
    home = HOMES[preset]
    return {**PROTOCOL, "tokens": tokens, "seed": 0, "lr": swept_rate(preset), **home.train}


def _budget40() -> list[Spec]:
    """Does the gap close with more training (issue 26)? Each preset of the curve to 40M tokens, seed 0: four passes
    over enwik7's 9M training bytes."""
    return [Spec("budget40", f"{p}-{b // 1_000_000}m", p, {}, _own_training(p, b)) for b in BUDGETS for p in HOMES]


STRETCH_BUDGET = 100_000_000  # issue 26's stretch, for the transformer and the tuned preset only
STRETCH_PRESETS = ("tf-1m", "ka-1m-tuned")


def _budget100() -> list[Spec]:
    """The budget curve's stretch: tf-1m and ka-1m-tuned to 100M tokens (11 passes over the training bytes), seed 0,
    each with its own full schedule, as budget40's runs, at the rate best at the largest budget measured (``rate_at``:
    at 40M both presets did better at half their swept rate, and the best rate fell with the budget)."""
    return [Spec("budget100", f"{p}-{STRETCH_BUDGET // 1_000_000}m", p, {},
                 {**_own_training(p, STRETCH_BUDGET), "lr": rate_at(p, BUDGETS[-1])})
            for p in STRETCH_PRESETS]


# Is the widening gap the learning rate's? The rates were swept at 3M and 10M tokens, and ka-1m-tuned's best fell
# with the budget (at 3M 4e-3 and 8e-3 within 0.002; at 10M 8e-3 0.09 worse, where tf-1m's two rates tie): at 40M the
# stretch pair is tried again below its rate, and the curve's 40M point is each preset's best run on validation.
# Both half rates beat the swept ones there (ka-1m-tuned 2.0058 against 2.0318, tf-1m 1.8487 against 1.8817), so
# both grids go one step further
LR40_FACTOR = 0.5  # the step down from the swept rate
LR40_STEPS = {"tf-1m": 2, "ka-1m-tuned": 2}  # how many steps each preset's 40M grid goes down


def valid_estimate(r: dict[str, Any]) -> float:
    """What chooses between a preset's runs at one budget (budget40's at the swept rate, lr40's below it): the
    validation estimate at the end, never the test BPC it reports."""
    return r.get("final_valid_estimate", r["eval_bpc"])


def budget_best(preset: str, tokens: int, groups: tuple[str, ...] = ("budget40", "lr40")) -> dict[str, Any] | None:
    """A preset's run at a budget (within 10% of ``tokens``; its own full schedule, no model overrides), the best on
    validation of its runs in ``groups``: the budget curve's point, and the rate its leads train at there."""
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
    """The token budget at which ``preset``'s training FLOPs (with the ``model`` overrides) equal ``reference``'s at
    ``reference_tokens`` (the bench's analytic count per token), rounded to whole protocol steps."""
    step = PROTOCOL["batch_size"] * PROTOCOL["context"]
    return round(reference_tokens * flops_per_token(reference) / flops_per_token(preset, model) / step) * step


def flop_matched(name: str) -> bool:
    """Whether a run (by its name) trained to the tokens at which it spends tf-1m's training FLOPs of a budget (the
    ``-flops-tf-`` runs of flops, leads40 and leads-flops), not to the budget itself."""
    return "-flops-tf-" in name


def flops_per_token(preset: str, model: dict[str, Any] | None = None, context: int = PROTOCOL["context"]) -> int:
    """A preset's model FLOPs per training token at ``context``, with the ``model`` overrides
    (``diagnostics.flops.model_flops``, the bench's)."""
    return _flops_per_token(preset, json.dumps(model or {}, sort_keys=True), context)


@functools.cache
def _flops_per_token(preset: str, overrides: str, context: int) -> int:
    import torch

    family, cfg = get_preset(preset)
    with torch.device("meta"):  # shapes only: the count reads parameter sizes
        return model_flops(build_model(family, apply_overrides(family, cfg, json.loads(overrides))), context)[
            "flops_per_token"]


def _flops() -> list[Spec]:
    """Equal compute (issue 26): each Kuramoto preset of the curve trained, with its own full schedule, for the budget
    at which its training FLOPs equal tf-1m's 10M-token (main) and 40M-token (budget40) runs, seed 0."""
    return [Spec("flops", f"{p}-flops-tf-{b // 1_000_000}m", p, {},
                 _own_training(p, flop_matched_tokens(p, "tf-1m", b)))
            for b in (PROTOCOL["tokens"], *BUDGETS) for p in FLOPS_PRESETS]


# Issue 46's protocol for scaling fixes. The Kuramoto presets match the transformer at 10M tokens and fall behind as
# training grows, so a change meant to fix that is judged by a 40M-token run at its preset's best rate there
# (``rate_at``): its validation slope per doubling from 10M to 40M within the run, its 40M test BPC, and its gaps to
# tf-1m's 40M run at equal tokens and (for a fix that beats its preset there) at equal training FLOPs.
FIX_BUDGET = 40_000_000


@dataclass(frozen=True)
class Fix:
    preset: str = "ka-1m-tuned"
    model: dict[str, Any] = field(default_factory=dict)  # model overrides
    train: dict[str, Any] = field(default_factory=dict)  # training overrides


FIXES: dict[str, Fix] = {
    # A free step length: trained, every increment of ka-1m-tuned sits on the norm bound, so every token moves by r
    # per sub-layer whatever its coupling says, and no gradient reaches a step's length. The learned s of the norm
    # bound (ω at the base rate, which is smooth); a radius per coordinate. Each predicts a steeper slope and bound
    # saturation well below 100%. Two lost at 40M: the scaled step (group fixes40-retired) and the learned s (group
    # fixes40-retired-bound-scale)
    "bound-elementwise": Fix(model={"bound": "elementwise"}),
    # Successor coupling: consensus with a retrieved context records where it is, not what followed it (FSN's
    # diagnosis); half the heads read the state after each attended token. Predicts a steeper slope, most of it on
    # bytes that copying an earlier context predicts
    "successor-2": Fix(model={"successor_heads": 2}),
    # FSN's coupling kernel in full: frustration (the preset's phase lag), signed Daido harmonics and the delay
    "fsn": Fix(model={"successor_heads": 2, "harmonics": 2}),
}


def fix_training(fix: Fix, tokens: int = FIX_BUDGET) -> dict[str, Any]:
    """A fix's training: its preset's own full schedule to ``tokens`` at the preset's best rate at 40M."""
    return {**_own_training(fix.preset, tokens), "lr": rate_at(fix.preset, FIX_BUDGET), **fix.train}


def _fixes40() -> list[Spec]:
    return [Spec("fixes40", f"{name}-40m", fix.preset, fix.model, fix_training(fix)) for name, fix in FIXES.items()]


def _fixes40_flops() -> list[Spec]:
    """Each fix whose 40M run beat its preset's best there on validation, trained with its own full schedule for the
    tokens at which its training FLOPs equal tf-1m's 40M-token run (the equal-compute half of the target; a fix
    that loses at equal tokens cannot meet it). A run recorded stays planned."""
    done = {r["name"]: r for r in load_results("fixes40")}  # what this group waits for
    out = []
    for name, fix in FIXES.items():
        base, run = budget_best(fix.preset, FIX_BUDGET), done.get(f"{name}-40m")
        beat = base is not None and run is not None and valid_estimate(run) < valid_estimate(base)
        if beat or _recorded("fixes40-flops", f"{name}-flops-tf-40m"):
            tokens = flop_matched_tokens(fix.preset, "tf-1m", FIX_BUDGET, fix.model)
            out.append(Spec("fixes40-flops", f"{name}-flops-tf-40m", fix.preset, fix.model, fix_training(fix, tokens)))
    return out


# Issue 46's discriminating probes on the pair tf-1m / ka-1m-tuned, each at its best rate at 40M on enwik7.
# Capacity: enwik6's 0.9M training bytes for 20M tokens (22 passes), scored on the training split itself: can ka
# store what tf stores? Repetition: pycode to 40M tokens (0.4 passes of fresh data): is the slope enwik7's passes'?
PROBE_PAIR = ("tf-1m", "ka-1m-tuned")
CAPACITY_TOKENS = 20_000_000


def _capacity() -> list[Spec]:
    return [Spec("capacity", f"{p}-enwik6-20m", p, {},
                 {**_own_training(p, CAPACITY_TOKENS), "corpus": "enwik6", "lr": rate_at(p, FIX_BUDGET)}, "train")
            for p in PROBE_PAIR]


def _pycode40() -> list[Spec]:
    return [Spec("pycode40", f"{p}-40m", p, {},
                 {**_own_training(p, FIX_BUDGET), "corpus": "pycode", "lr": rate_at(p, FIX_BUDGET)})
            for p in PROBE_PAIR]


def _screen_su2() -> list[Spec]:
    lr = best_lr("ka-su2-1m", "lr-su2")
    return [Spec("screen-su2", f"ka-su2-1m-{k}", "ka-su2-1m", v.model, {**SWEEP, "lr": lr, **v.train}, "valid")
            for k, v in SU2_VARIANTS.items()]


def _second_stage(group: str, sweep: str, preset: str, train: dict[str, Any] | None = None) -> list[Spec]:
    """A sweep's second stage: its two best 3M rates at the main protocol, seed 0, scored on valid (``train``: the
    sweep's training overrides, kept)."""
    ranked = sorted((r for r in load_results(sweep) if r["preset"] == preset), key=lambda r: r["eval_bpc"])
    planned = len(_lr(sweep, presets=(preset,), train=train))
    if len(ranked) < planned:
        raise ConfigError(f"the 3M sweep of {preset} has {len(ranked)} of its {planned} rates in results/{sweep}; "
                          f"run `python -m lab run {sweep}`")
    return [Spec(group, f"{preset}-lr-{r['train']['lr']:g}", preset, {},
                 {**PROTOCOL, "seed": 0, "lr": r["train"]["lr"], **(train or {})}, "valid") for r in ranked[:2]]


EQUAL_FLOPS_5M = "ka-5m-tuned-flops-tf-5m-10m"  # main-5m's equal-compute run


def _main_5m() -> list[Spec]:
    """Issue 26's size axis: ka-5m-tuned (its rate from lr-5m-tuned) against tf-5m (its best rate in scale), 3 seeds
    each at the main protocol; and ka-5m-tuned, with its own full schedule, for the budget at which its training FLOPs
    equal tf-5m's 10M-token runs, seed 0."""
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


# The same list for ka-1m-tuned, whose gates read the feed-forward's shared P: P stays for them where the
# feed-forward goes or reads θ, its gates are shared (so per-layer gates are the ablation), and the paper's own score
# (self term, no lag, no clocks) is one more
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
    "budget": _budget, "scale": _scale, "lr10m": _lr10m, "warmup10m": _warmup10m, "scale-variant": _scale_variant,
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
    "budget40": _budget40, "lr40": _lr40, "budget100": _budget100, "flops": _flops,
    "leads": _leads, "leads40": _leads40, "leads-seeds": _leads_seeds, "leads-flops": _leads_flops,
    # issue 26's size axis: the tuned recipe at 5M (presets.py ka-5m-tuned), its rate swept lower, then 3 seeds each
    "lr-5m-tuned": lambda: _lr("lr-5m-tuned", presets=("ka-5m-tuned",)), "main-5m": _main_5m,
    # issue 25: SU(2) (presets.py ka-su2-1m), swept in two stages as ka-1m-tuned was, then 3 seeds
    "lr-su2": lambda: _lr("lr-su2", presets=("ka-su2-1m",)),
    "lr10m-su2": lambda: _second_stage("lr10m-su2", "lr-su2", "ka-su2-1m"),
    "main-su2": lambda: _main(group="main-su2", presets=("ka-su2-1m",), lr_group="lr10m-su2"),
    "screen-su2": _screen_su2,  # the tuned recipe's ingredients on SU(2), at 3M tokens
    # the screen's best, "tuned-omega-lr-1" (presets.py ka-su2-1m-tuned, trained with ω at the base rate), the same
    # three stages
    "lr-su2-tuned": lambda: _lr("lr-su2-tuned", presets=("ka-su2-1m-tuned",), train=SU2_TUNED_TRAIN),
    "lr10m-su2-tuned": lambda: _second_stage("lr10m-su2-tuned", "lr-su2-tuned", "ka-su2-1m-tuned", SU2_TUNED_TRAIN),
    "main-su2-tuned": lambda: _main(group="main-su2-tuned", presets=("ka-su2-1m-tuned",), lr_group="lr10m-su2-tuned",
                                    train=SU2_TUNED_TRAIN),
    # issue 25's stretch: the sphere S³ ⊂ R⁴ (presets.py ka-sphere-1m, AKOrN's oscillators), the same three stages
    "lr-sphere": lambda: _lr("lr-sphere", presets=("ka-sphere-1m",)),
    "lr10m-sphere": lambda: _second_stage("lr10m-sphere", "lr-sphere", "ka-sphere-1m"),
    "main-sphere": lambda: _main(group="main-sphere", presets=("ka-sphere-1m",), lr_group="lr10m-sphere"),
    # issue 46: scaling fixes judged at 40M tokens, and the probes of why the gap grows
    "fixes40": _fixes40, "fixes40-flops": _fixes40_flops, "capacity": _capacity, "pycode40": _pycode40,
}
# `python -m lab dynamics` without groups: main (the claims' verdicts) and ka-1m on ψ(θ) itself, then the variants
# whose offset profiles the notebook discusses (confirm's, round 5's and 6's: their runs on kept fields), and the 5M
# models (the paper's claims are made at its scales)
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
# The groups run while ka-1m's feed-forward read ψ(θ) itself: their ka-1m runs keep that feed-forward
# (``UNPROJECTED`` under their own overrides, which win), whatever the preset's default is now. Every retired group
# ran so too (``RAN_UNPROJECTED``: what the notebook strips from their overrides)
PINNED_UNPROJECTED = frozenset({"budget", "lr10m", "warmup10m", *FROZEN})
RAN_UNPROJECTED = PINNED_UNPROJECTED | frozenset(RETIRED)


def plan(group: str) -> list[Spec]:
    if group in RETIRED:
        raise ConfigError(f"{group} is retired ({RETIRED[group].what}): its fields left the library; its results stay "
                          f"in results/{group}/ and are reported; to rerun it: `{RETIRED[group].rerun(group)}`")
    groups = {**GROUPS, **FROZEN}
    if group not in groups:
        raise ConfigError(f"unknown experiment group {group!r}; choose one of: {', '.join(groups)} "
                          f"(retired: {', '.join(RETIRED)})")
    specs = groups[group]()
    if group in PINNED_UNPROJECTED:
        specs = [replace(sp, model={**UNPROJECTED, **sp.model}) if sp.preset == "ka-1m" else sp for sp in specs]
    return specs


def with_twins(group: str) -> list[dict[str, Any]]:
    """A group's results plus, for each planned run not made because another group already made it
    identically (``records.same_run``), that run under the planned name, with ``twin`` naming it ("GROUP/NAME")."""
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
    """The preset's run with the lowest eval BPC in results/GROUP, or None when it has none. A planned run that
    another group already made identically (a twin: the runner does not make it again) counts as the group's."""
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
    """The groups whose results planning ``group`` reads (its learning rates), found by planning it on the
    repository's committed results (a group that cannot be planned there yet: as far as it got)."""
    with protocol.at_root(protocol.COMMITTED), protocol.recording_reads() as seen, \
            contextlib.suppress(ConfigError):
        plan(group)
    return seen - {group}


def order(group: str) -> list[str]:
    """The groups to run, in order, for ``group``'s plan to exist: each sweep before the groups that read its best
    rate, ``group`` last."""
    out: list[str] = []

    def visit(g: str) -> None:
        for up in sorted(reads(g)) if g not in RETIRED else ():
            if up not in out and up != group:
                visit(up)
        if g not in out:
            out.append(g)

    visit(group)
    return out
