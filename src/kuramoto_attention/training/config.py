"""The training options (``TrainConfig``): the corpus, the budget, the optimiser's settings, precision, device and
bookkeeping.

Each option is declared once, as a field whose metadata (``option``) holds its help text, its type, its range or
choices and its command-line form; ``kuramoto train`` derives its flags from it (``cli.py``) and ``validate`` checks
every value against it, so a TOML file, a flag and a Python caller meet the same rules before anything is created.
"""

import math
from dataclasses import Field, dataclass, field, fields, replace
from typing import Any

from kuramoto_attention.errors import ConfigError
from kuramoto_attention.models.config import retired_error

# Options deleted from the library, each the day it lost its comparison (docs/notebook.md), at the value every run
# not about it trained with, and the last commit that has it. A saved run holding one at that value loads (it trained
# the same); any other value, and any value given as an option, is refused with the commit to check out.
RETIRED_OPTIONS: dict[str, tuple[Any, str]] = {
    "shared_lr_mult": (1.0, "25e20b6"),  # the shared weights at their own learning rate
    "clip_angles_apart": (False, "25e20b6"),  # the angles' gradient clipped by its own norm
}

BUDGET = "; give at least one of --steps, --tokens, --minutes"
VALID_SPECS = "enwik8, enwik7, enwik6, pycode, stdlib, text:PATH"  # the corpora data.load_corpus reads
# what --resume may change: the budget, and what does not change the computation's meaning (where the data lives,
# which device, how often to evaluate or save, the progress bar); everything else would no longer be the saved run
RESUMABLE = frozenset({"steps", "tokens", "minutes", "data_dir", "device", "compile", "progress", "eval_every",
                       "eval_batches", "ckpt_every"})


@dataclass(frozen=True)
class Option:
    """What a training option accepts and how the command line spells it.

    ``kind``: the value's type (``float`` also takes an int). ``low``/``high``: the range, ``None`` for unbounded;
    ``low_open``/``high_open``: whether that end is excluded. ``choices``: the values allowed, instead of a range.
    ``nullable``: ``None`` is a value (it means "the same as another option"). ``flag``: ``"value"`` for
    ``--name VALUE``, ``"switch"`` for a bare flag that sets the opposite of the default (``--compile``,
    ``--no-progress``), ``None`` for a config-file-only option.
    """

    help: str
    kind: type
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple[Any, ...] | None = None
    nullable: bool = False
    flag: str | None = "value"

    def range_text(self) -> str:
        if self.choices is not None:
            return "one of " + ", ".join(str(c) for c in self.choices)
        if self.low is not None and self.high is not None:
            return f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}{')' if self.high_open else ']'}"
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {self.low:g}"
        if self.high is not None:
            return f"{'<' if self.high_open else '<='} {self.high:g}"
        return ""

    def accepts(self, value: Any) -> bool:
        if self.choices is not None:
            return value in self.choices
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        return not (self.high is not None and (value > self.high or (self.high_open and value == self.high)))


def option(default: Any, help: str, kind: type, **rules: Any) -> Any:
    """A ``TrainConfig`` field with its ``Option`` as metadata."""
    return field(default=default, metadata={"option": Option(help, kind, **rules)})


def option_of(f: Field) -> Option:
    return f.metadata["option"]


@dataclass
class TrainConfig:
    corpus: str = option("stdlib", f"corpus spec, one of: {VALID_SPECS} (default stdlib: offline)", str)
    data_dir: str | None = option(None, "folder holding the corpora (default: $KURAMOTO_DATA)", str, nullable=True)
    batch_size: int = option(32, "sequences per step (per process)", int, low=1)
    # 0: the model config's context (a flag or file value must be >= 1; prepare_run fills in the preset's)
    context: int = option(0, "sequence length, >= 1 (default: the preset's)", int, low=0)
    steps: int = option(0, "budget in optimizer steps (default: none" + BUDGET + ")", int, low=0)
    tokens: int = option(0, "budget in training tokens (default: none" + BUDGET + ")", int, low=0)
    minutes: float = option(0.0, "budget in minutes of training (default: none" + BUDGET + ")", float, low=0)
    lr: float = option(2e-3, "peak learning rate", float, low=0, low_open=True)
    # Phases (embedding, ω) are angles of scale π, not weights of scale 0.02: at the base lr they barely move
    # (docs/choices.md has the screen that chose 20).
    phase_lr_mult: float = option(20.0, "learning-rate multiplier for phase parameters (embedding phases, ω)",
                                  float, low=0)
    omega_lr_mult: float | None = option(None, "learning-rate multiplier for ω alone (default: --phase-lr-mult)",
                                         float, low=0, nullable=True)
    min_lr_ratio: float = option(0.1, "final lr as a fraction of the peak", float, low=0, high=1)
    warmup: int = option(100, "linear warmup steps", int, low=0)
    weight_decay: float = option(0.1, "AdamW weight decay (matrices only)", float, low=0)
    beta1: float = option(0.9, "AdamW's first-moment decay", float, low=0, high=1, high_open=True)
    beta2: float = option(0.95, "AdamW's second-moment decay", float, low=0, high=1, high_open=True)
    grad_clip: float = option(1.0, "gradient-norm clip (0: off)", float, low=0)
    # auto: bf16 where the device runs it natively, fp32 elsewhere (precision.resolve_precision); a run records the
    # precision it resolved to
    precision: str = option("auto", "auto (bf16 where the device runs it natively, else fp32), bf16 (autocast) or "
                                    "fp32", str, choices=("auto", "bf16", "fp32"))
    compile: bool = option(False, "torch.compile the model (default: eager)", bool, flag="switch")
    device: str = option("auto", "auto, cpu or cuda[:N]", str)
    seed: int = option(0, "seed for init and batches", int)
    eval_every: int = option(100, "steps between validation estimates", int, low=1)
    eval_batches: int = option(16, "batches per validation estimate", int, low=1)
    ckpt_every: int = option(100, "steps between checkpoints", int, low=1)
    progress: bool = option(True, "no progress bar (default: a bar on stderr)", bool, flag="switch")

    def validate(self) -> None:
        """Every option's type and range (``Option``), then the rules that tie options together."""
        for f in fields(self):
            check_option(f, getattr(self, f.name))
        if not (self.steps or self.tokens or self.minutes):
            raise ConfigError("give a budget: --steps, --tokens or --minutes")


def check_option(f: Field, value: Any) -> None:
    """``value`` for the training option ``f``, checked against its declaration; one ``ConfigError`` line if not."""
    opt = option_of(f)
    if value is None and opt.nullable:
        return
    if not _has_type(value, opt.kind):  # values from TOML or code arrive untyped: "3e-3" is not a learning rate
        raise ConfigError(f"training option {f.name} must be of type {opt.kind.__name__}, got {value!r}")
    if opt.kind is float and not math.isfinite(value):  # inf passes every >= 0 check
        raise ConfigError(f"training option {f.name} must be a finite number, got {value}")
    if not opt.accepts(value):
        raise ConfigError(f"training option {f.name} must be {opt.range_text()}, got {value!r}")


def _has_type(value: Any, kind: type) -> bool:
    if kind is bool or isinstance(value, bool):  # bool is an int in Python, but not a step count
        return kind is bool and isinstance(value, bool)
    return isinstance(value, kind) or (kind is float and isinstance(value, int))


def without_retired_options(options: dict[str, Any], saved: bool = False) -> dict[str, Any]:
    """``options`` less the retired ones: a saved run's (``saved``) at their old default are dropped (the run trained
    as every run does now); any other, or one asked for, is one ConfigError line naming the commit that has it."""
    for key in set(options) & set(RETIRED_OPTIONS):
        default, commit = RETIRED_OPTIONS[key]
        if not saved or options[key] != default:
            raise retired_error(f"training option {key}", options[key], commit, "run")
    return {k: v for k, v in options.items() if k not in RETIRED_OPTIONS}


def train_config_from(overrides: dict[str, Any], base: TrainConfig | None = None, saved: bool = False) -> TrainConfig:
    """A ``TrainConfig`` from options by name, checked; ``saved``: a run's recorded options (retired ones at their
    old default are dropped)."""
    base = base or TrainConfig()
    overrides = without_retired_options(overrides, saved)
    known = {f.name for f in fields(base)}
    unknown = set(overrides) - known
    if unknown:
        raise ConfigError(f"unknown training option(s) {sorted(unknown)}; options: {', '.join(sorted(known))}")
    cfg = replace(base, **overrides)
    cfg.validate()
    return cfg
