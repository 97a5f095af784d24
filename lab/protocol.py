"""What every run of the protocol shares: its training settings, a run's ``Spec``, where results and runs live."""

import contextlib
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kuramoto_attention.errors import ConfigError
from kuramoto_attention.training.config import RETIRED_OPTIONS, TrainConfig

# today's training defaults, and the retired options' old ones (what a record that has them ran with, when not varied)
TRAIN_DEFAULTS = {**asdict(TrainConfig()), **{k: default for k, (default, _) in RETIRED_OPTIONS.items()}}

# Where the lab reads and writes: the repository's results/ and runs/experiments/ unless ``use_root`` (``--out DIR``)
# points them at a folder of the user's own. Read them as ``protocol.RESULTS`` (not imported by name), so that one
# assignment moves every reader.
RESULTS = Path("results")
RUNS = Path("runs") / "experiments"
# the repository's committed results, wherever the lab runs from: the run-time estimates and the rate dependencies
COMMITTED = Path(__file__).resolve().parents[1] / "results"

PROTOCOL: dict[str, Any] = dict(corpus="enwik7", batch_size=32, context=256, tokens=10_000_000, warmup=100,
                                min_lr_ratio=0.1, eval_every=100, eval_batches=8, ckpt_every=200, precision="bf16",
                                compile=True, progress=False)
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
    fresh: bool = False  # trained here from scratch: never satisfied by another group's identical run (a twin)


@contextlib.contextmanager
def rooted(out: str | Path | None) -> Iterator[None]:
    """Work under ``out``/results and ``out``/runs for the duration (``--out DIR``); None: where it works now."""
    if out is None:
        yield
        return
    with at_root(Path(out) / "results", Path(out) / "runs"):
        yield


@contextlib.contextmanager
def at_root(results: Path, runs: Path | None = None) -> Iterator[None]:
    """Read (and write) under ``results`` for the duration (the committed results, for estimates)."""
    global RESULTS, RUNS
    saved = RESULTS, RUNS
    RESULTS, RUNS = results, runs if runs is not None else RUNS
    try:
        yield
    finally:
        RESULTS, RUNS = saved


_READS: list[set[str]] = []


@contextlib.contextmanager
def recording_reads() -> Iterator[set[str]]:
    """The groups whose results are read inside the block (what planning a group depends on)."""
    reads: set[str] = set()
    _READS.append(reads)
    try:
        yield reads
    finally:
        _READS.remove(reads)


@contextlib.contextmanager
def unrecorded() -> Iterator[None]:
    """Reads inside the block are not recorded (a search that reads every group, of which planning depends on few)."""
    saved = _READS[:]
    _READS.clear()
    try:
        yield
    finally:
        _READS[:] = saved


def note_read(group: str) -> None:
    """Planning read ``group``'s results (``recording_reads``)."""
    for reads in _READS:
        reads.add(group)


def load_results(group: str) -> list[dict[str, Any]]:
    note_read(group)
    folder = RESULTS / group
    return [_result(p) for p in sorted(folder.glob("*.json"))] if folder.exists() else []


def _result(path: Path) -> dict[str, Any]:
    """One result file, or one line naming it when it is not a result (corrupt JSON, or no group and name)."""
    try:
        result = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path} is not a readable result ({exc}); restore it from git or delete it and rerun "
                          "its group") from None
    if not isinstance(result, dict) or not {"group", "name"} <= set(result):
        raise ConfigError(f"{path} is not a result (no group and name); restore it from git or delete it and rerun "
                          "its group")
    return result


def run_command(group: str) -> str:
    """The command that runs a group under the current root."""
    out = "" if Path("results") == RESULTS else f" --out {RESULTS.parent}"
    return f"python -m lab run {group}{out}"
