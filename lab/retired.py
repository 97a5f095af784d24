"""Retired groups: dead ends whose fields left the library, and finished questions no open work plans from; their
results stay and are reported, with the commit that reruns them."""

from dataclasses import dataclass
from typing import Any

from kuramoto_attention.models.config import RETIRED as RETIRED_AT_DEFAULTS
from kuramoto_attention.models.config import RETIRED_AT
from kuramoto_attention.models.config import RETIRED_VALUES as LIBRARY_RETIRED_VALUES
from kuramoto_attention.training.config import RETIRED_OPTIONS

# The model fields removed from the library at the default every other run trained with, and the values removed
# from fields it keeps: the library's own record of them (``models/config.py``)
RETIRED_FIELDS: dict[str, Any] = RETIRED_AT_DEFAULTS
RETIRED_VALUES: dict[str, tuple[Any, ...]] = LIBRARY_RETIRED_VALUES
# the training options removed, at the value every run not about them trained with
RETIRED_TRAIN: dict[str, Any] = {k: default for k, (default, _) in RETIRED_OPTIONS.items()}


@dataclass(frozen=True)
class Retired:
    what: str  # what the group measured
    commit: str = RETIRED_AT  # the last commit whose library and lab plan and run it
    command: str = "kuramoto experiment run {group}"  # the lab's command at that commit

    def rerun(self, group: str) -> str:
        return f"git checkout {self.commit} && {self.command.format(group=group)}"


# the last commit whose lab plans and runs the groups retired by issue 47 (finished questions), and its command
LAB = ("aa4b739", "python -m lab run {group}")

RETIRED: dict[str, Retired] = {
    "screen": Retired("screening round 1 (1.6M tokens): ka-1m variants against the first reading of the paper, "
                      "with the feed-forward on wrap(θ) (ff_wrap)"),
    "screen2": Retired("screening round 2: ka-1m variants against round 1's winner, feed-forward on wrap(θ)"),
    "screen3": Retired("screening round 3 (3M tokens): bounds (norm-soft), depth/width splits, shared gates"),
    "screen4": Retired("screening round 4: group rates, clipping, shared gates, self-coupling, embed_spread, "
                       "fp32_attention"),
    "screen5": Retired("screening round 5: positional selection (phase lag, phase_lag_spread, content_lag, "
                       "ff_output=tangent)"),
    "screen6": Retired("screening round 6: readout_gain, bound=none, a fifth layer, the optimiser"),
    "confirm": Retired("the screens' candidates at the main protocol (10M tokens, test BPC), among them the lags, "
                       "readout gains, harmonics and ties, step gates and per-layer P that were dropped; its runs "
                       "of the kept variants are twins of later groups' planned runs"),
    "lr-wrapped": Retired("ka-1m's first learning-rate sweep, feed-forward on wrap(θ) (ff_wrap=True); its best rate "
                          "is still read by main-raw and ablation-raw"),
    "main-wrapped": Retired("the main protocol for ka-1m with the feed-forward on wrap(θ) (ff_wrap=True)"),
    "ablation-wrapped": Retired("the ablations of ka-1m with the feed-forward on wrap(θ) (ff_wrap=True)"),
    # issue 26's leads that their screen dropped, their fields gone: the notebook reports their runs with the leads'
    "leads-retired": Retired("issue 26's structural leads worse than ka-1m-tuned at the protocol: lag_from_state "
                             "(the phase lag also read from the token's state, β_t = β + W_β u_t)", "4c98f00",
                             "python -m lab run leads --only ka-1m-tuned-lag-from-state"),
    # clip-angles-apart: the spikes above the clip were the weights', not the angles'; shared-lr-0.25: slower late
    "leads-retired-optim": Retired("issue 26's leads on the optimiser worse than ka-1m-tuned at the protocol: "
                                   "clip_angles_apart (the angles' gradient clipped by its own norm, apart from the "
                                   "weights') and shared_lr_mult=0.25 (the weights several layers share, the shared "
                                   "gates and P, at a quarter of the rate)", "25e20b6",
                                   "python -m lab run leads --only ka-1m-tuned-clip-angles-apart "
                                   "--only ka-1m-tuned-shared-lr-0.25"),
    # issue 46's fixes that lost at 40M tokens: each run stays in the fixes table, marked
    "fixes40-retired": Retired("issue 46's fixes worse than ka-1m-tuned's best at 40M tokens: the scaled step "
                               "(bound='scaled': a learned step size per oscillator times the increment, clipped "
                               "only far away)", "25e20b6", "python -m lab run fixes40 --only scaled-step-40m"),
    # the norm bound's scale s learned, so that a step's length follows its increment's: it lost at 10M and at 40M
    "leads-retired-bound-scale": Retired("issue 26's lead bound_scale='learned' (the norm bound's scale s in "
                                         "r·tanh(‖x‖/s) learned, from s = r), worse than ka-1m-tuned at the protocol",
                                         "34fef35", "python -m lab run leads --only ka-1m-tuned-bound-scale-learned"),
    "fixes40-retired-bound-scale": Retired("issue 46's fix bound_scale='learned' with omega_lr_mult=1 (the norm "
                                           "bound's scale learned, ω at the base rate), worse than ka-1m-tuned's best "
                                           "at 40M tokens", "34fef35",
                                           "python -m lab run fixes40 --only bound-scale-learned-omega-lr-1-40m"),
    # finished questions no open work plans from (issue 47): the library keeps their fields, LAB their planners
    "budget": Retired("the gap with more training: the pair (ka-1m on ψ(θ) itself) and a confirmed variant to 20M "
                      "tokens, seed 0", *LAB),
    "lr10m": Retired("each 1M model (ka-1m on ψ(θ) itself) one sweep step below its swept rate at 10M tokens", *LAB),
    "warmup10m": Retired("screen round 6's 30-step warmup for each 1M model (ka-1m on ψ(θ) itself) at 10M tokens",
                         *LAB),
    "scale": Retired("the gap with size: ka-5m and tf-5m at several rates, seed 0 (main-5m reads tf-5m's best)", *LAB),
    "scale-variant": Retired("the best 1M variants of their time on ka-5m at its best rate in scale, seed 0", *LAB),
    "screen-su2": Retired("ka-1m-tuned's ingredients on SU(2) at 3M tokens; the best is the preset ka-su2-1m-tuned",
                          *LAB),
    "leads": Retired("issue 26's structural leads on ka-1m-tuned at the protocol (10M tokens, seed 0)", *LAB),
    "leads-seeds": Retired("the leads that beat main-tuned's mean, on two more seeds", *LAB),
    "leads40": Retired("issue 26's chosen leads at 40M tokens and at tf-1m's 40M-token FLOPs", *LAB),
    "leads-flops": Retired("ka-1m-tuned in cheaper widths (fewer FLOPs per token) at tf-1m's 10M-token FLOPs", *LAB),
    "repro40": Retired("lr40's best run of each preset trained again from scratch, same seed: identical runs' spread",
                       *LAB),
    "capacity": Retired("issue 46's capacity probe: tf-1m and ka-1m-tuned on enwik6 for 20M tokens, scored on its "
                        "training split", *LAB),
    "pycode40": Retired("issue 46's repetition probe: tf-1m and ka-1m-tuned on pycode (fresh data) to 40M tokens",
                        *LAB),
}
# the retired groups whose runs a kept table still lists, marked (writers/summary.py)
RETIRED_FIXES = ("fixes40-retired", "fixes40-retired-bound-scale")


def rerun_command(group: str) -> str:
    return RETIRED[group].rerun(group)


def retired_settings(model: dict[str, Any]) -> list[str]:
    """The retired fields and values a recorded model config (or a run's overrides) uses, as "field=value"."""
    return ([f"{k}={v!r}" for k, v in model.items() if k in RETIRED_FIELDS and v != RETIRED_FIELDS[k]]
            + [f"{k}={v!r}" for k, v in model.items() if v in RETIRED_VALUES.get(k, ())])


def retired_options(train: dict[str, Any]) -> list[str]:
    """The retired training options a recorded training config uses away from their old default, as "option=value"."""
    return [f"{k}={v!r}" for k, v in train.items() if k in RETIRED_TRAIN and v != RETIRED_TRAIN[k]]


def without_retired(model: dict[str, Any]) -> dict[str, Any]:
    """A recorded model config (or overrides) less the retired fields at their defaults, which every model has now."""
    return {k: v for k, v in model.items() if not (k in RETIRED_FIELDS and v == RETIRED_FIELDS[k])}
