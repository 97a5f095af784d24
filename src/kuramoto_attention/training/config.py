"""The training options (``TrainConfig``): the corpus, the budget, the optimiser's settings, precision, device and
bookkeeping. ``kuramoto train`` has a flag for each field but Adam's betas (a ``--config`` file sets every field)."""

import math
from dataclasses import dataclass, fields, replace
from typing import Any, Literal

from kuramoto_attention.errors import ConfigError


@dataclass
class TrainConfig:
    corpus: str = "stdlib"
    data_dir: str | None = None
    batch_size: int = 32
    context: int = 0  # 0: the model config's context
    steps: int = 0  # budget; at least one of steps, tokens, minutes must be > 0
    tokens: int = 0
    minutes: float = 0.0
    lr: float = 2e-3
    # Phases (embedding, ω) are angles of scale π, not weights of scale 0.02: at the base lr they barely move.
    # Round 1 of the screen: ×20 and ×50 both far better than ×1 (50 by 0.011, one seed); 20 keeps phase
    # steps ≤ 0.16 rad at the highest swept lr.
    phase_lr_mult: float = 20.0
    omega_lr_mult: float | None = None  # ω's own multiplier; None: the same as phase_lr_mult
    # the weights several layers share (KuramotoLM's shared gates and P): Adam moves each weight by about lr whatever
    # its gradient, and a shared weight's step moves every layer that reads it at once
    shared_lr_mult: float = 1.0
    min_lr_ratio: float = 0.1
    warmup: int = 100
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    # clip the angles' gradient (phases, ω) by its own norm, not inside one norm with the weights': a large angle
    # gradient then cannot shrink the weights' step (the lab's lead clip-angles-apart)
    clip_angles_apart: bool = False
    precision: Literal["bf16", "fp32"] = "bf16"
    compile: bool = False
    device: str = "auto"
    seed: int = 0
    eval_every: int = 100
    eval_batches: int = 16
    ckpt_every: int = 100
    progress: bool = True

    def validate(self) -> None:
        for f in fields(self):  # values from TOML or code arrive untyped: "3e-3" is not a learning rate
            value, default = getattr(self, f.name), getattr(TrainConfig, f.name)
            kind = type(default) if default is not None else (float if f.name == "omega_lr_mult" else str)
            if not (value is None and default is None) and not _has_type(value, kind):
                raise ConfigError(f"training option {f.name} must be of type {kind.__name__}, got {value!r}")
            if kind is float and value is not None and not math.isfinite(value):  # inf passes every >= 0 check
                raise ConfigError(f"training option {f.name} must be a finite number, got {value}")
        checks = [
            (self.batch_size > 0, "batch_size must be > 0"),
            (self.context >= 0, "context must be >= 0"),
            (self.steps >= 0 and self.tokens >= 0 and self.minutes >= 0, "steps/tokens/minutes must be >= 0"),
            (self.steps or self.tokens or self.minutes, "give a budget: --steps, --tokens or --minutes"),
            (self.lr > 0 and math.isfinite(self.lr), f"lr must be a positive number, got {self.lr}"),
            (self.warmup >= 0, "warmup must be >= 0"),
            (0 <= self.min_lr_ratio <= 1, "min_lr_ratio must be in [0, 1]"),
            (self.grad_clip >= 0, "grad_clip must be >= 0 (0 disables clipping)"),
            (self.phase_lr_mult >= 0 and (self.omega_lr_mult is None or self.omega_lr_mult >= 0)
             and self.shared_lr_mult >= 0 and self.weight_decay >= 0,
             "phase_lr_mult, omega_lr_mult, shared_lr_mult and weight_decay must be >= 0"),
            (self.precision in ("bf16", "fp32"), f"precision must be bf16 or fp32, got {self.precision!r}"),
            (self.eval_every > 0 and self.ckpt_every > 0 and self.eval_batches > 0, "eval/ckpt intervals must be > 0"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ConfigError(msg)


def _has_type(value: Any, kind: type) -> bool:
    if kind is bool or isinstance(value, bool):  # bool is an int in Python, but not a step count
        return kind is bool and isinstance(value, bool)
    return isinstance(value, kind) or (kind is float and isinstance(value, int))


def train_config_from(overrides: dict[str, Any], base: TrainConfig | None = None) -> TrainConfig:
    base = base or TrainConfig()
    known = {f.name for f in fields(base)}
    unknown = set(overrides) - known
    if unknown:
        raise ConfigError(f"unknown training option(s) {sorted(unknown)}; options: {', '.join(sorted(known))}")
    cfg = replace(base, **overrides)
    cfg.validate()
    return cfg
