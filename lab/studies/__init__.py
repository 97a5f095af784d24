"""The lab's studies of trained runs (gap, probe, dynamics): they read the models under the run directories and write
their measurements to results/*.json, which `python -m lab report` renders (lab/writers/studies.py)."""

import json
from pathlib import Path
from typing import Any

from kuramoto_attention.errors import ConfigError
from lab import protocol
from lab.retired import RETIRED, rerun_command


def missing_runs(runs: list[Path], action: str) -> None:
    """Refuse, in one line, a study whose trained runs are not here, naming them and the commands that train them."""
    missing = list(dict.fromkeys(run for run in runs if not (run / "run.json").exists()))
    if not missing:
        return
    groups = list(dict.fromkeys(run.relative_to(protocol.RUNS).parts[0] if run.is_relative_to(protocol.RUNS)
                                else run.parent.name for run in missing))
    how = "; ".join(f"`{rerun_command(g)}` ({g} is retired)" if g in RETIRED else f"`{protocol.run_command(g)}`"
                    for g in groups)
    shown = ", ".join(map(str, missing[:3])) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
    raise ConfigError(f"{action} needs trained models and {len(missing)} of its {len(set(runs))} run directories are "
                      f"missing ({shown}): results/ holds each run's summary, not its model; train them with {how}, "
                      "or pass --out DIR where they were trained")


def save(name: str, data: Any) -> Path:
    """results/NAME: a study's measurements, as JSON."""
    path = protocol.RESULTS / name
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path
