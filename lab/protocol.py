"""What every run of the replication protocol (issue 4) shares: the training settings of its budgets,
a run's specification, and the summaries that finished runs leave under ``results/GROUP/``."""

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kuramoto_attention.errors import ConfigError
from kuramoto_attention.training.train import TrainConfig

TRAIN_DEFAULTS = asdict(TrainConfig())

RESULTS = Path("results")
RUNS = Path("runs") / "experiments"

PROTOCOL: dict[str, Any] = dict(corpus="enwik7", batch_size=32, context=256, tokens=10_000_000, warmup=100,
                                min_lr_ratio=0.1, eval_every=100, eval_batches=8, ckpt_every=200, precision="bf16",
                                compile=True, progress=False)
SCREEN: dict[str, Any] = {**PROTOCOL, "tokens": 1_638_400, "warmup": 30, "compile": False, "eval_every": 50}
SWEEP: dict[str, Any] = {**PROTOCOL, "tokens": 3_000_000}
LRS = (2e-3, 4e-3, 8e-3)


@dataclass(frozen=True)
class Spec:
    group: str
    name: str
    preset: str
    model: dict[str, Any] = field(default_factory=dict)
    train: dict[str, Any] = field(default_factory=dict)
    eval_split: str = "test"


def load_results(group: str) -> list[dict[str, Any]]:
    folder = RESULTS / group
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] if folder.exists() else []


def best_result(preset: str, group: str) -> dict[str, Any] | None:
    """The preset's run with the lowest eval BPC in results/GROUP, or None when it has none."""
    return min((r for r in load_results(group) if r["preset"] == preset), key=lambda r: r["eval_bpc"], default=None)


def best_lr(preset: str, group: str = "lr") -> float:
    """The sweep's best learning rate for a preset, read from results/GROUP (never typed in)."""
    best = best_result(preset, group)
    if best is None:
        raise ConfigError(f"no learning-rate sweep for {preset} in {RESULTS / group}; "
                          f"run `python -m lab run {group}`")
    return best["train"]["lr"]
