"""What the states hold about earlier bytes: ridge linear probes of every state (``python -m lab probe``)."""

import json
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from kuramoto_attention.errors import ConfigError
from kuramoto_attention.ops.torus import lift
from lab import protocol
from lab.groups import BEST_VARIANT, best_result
from lab.studies import missing_runs, save

# (group, run): the main pair's seed 0, ka-1m on ψ(θ) itself (main-unprojected: the model the confirm candidates
# change), the best variant's (its attention couples to earlier tokens only) and
# ka-1m and the variant with clock oscillators (a content-free positional score: does the first block gather the
# byte before?), started at 0 and at 4, and with 8 clocks;
# ``probe_runs`` adds the 5M pair at each model's best rate in group scale, when it has run
PROBE_RUNS = (("main", "ka-1m-seed0"), ("main", "tf-1m-seed0"), ("main-unprojected", "ka-1m-seed0"),
              ("confirm", f"ka-{BEST_VARIANT}"),
              ("confirm", "ka-clock-4"), ("confirm", "ka-clock-4-init-4"),
              ("confirm", f"ka-{BEST_VARIANT}-clock-4-init-4"), ("confirm", f"ka-{BEST_VARIANT}-clock-8-init-4"))
OFFSETS = (0, 1, 2, 3)
WINDOWS = 64
RIDGE = 1e-3  # λ relative to the mean diagonal of XᵀX: a small, scale-free regulariser


def states(model: Any, idx: Tensor) -> list[Tensor]:
    """The readout's view of every state along depth (ka: ψ(θ); tf: the final RMSNorm): depth + 1 (B, T, D)."""
    model = model.float().eval()
    with torch.no_grad():
        h = model.embed(idx)
        hs = [h]
        for block in model.blocks:
            h = block(h)
            hs.append(h)
        view = lift if model.family == "kuramoto" else model.norm
        return [view(x).double() for x in hs]


def ridge_accuracy(fit_x: Tensor, fit_y: Tensor, eval_x: Tensor, eval_y: Tensor, classes: int = 256) -> float:
    """Accuracy on the eval half of the least-squares linear classifier fitted on the fit half."""
    mean, std = fit_x.mean(0), fit_x.std(0).clamp_min(1e-8)

    def design(x: Tensor) -> Tensor:
        z = (x - mean) / std
        return torch.cat((z, torch.ones(len(z), 1, dtype=z.dtype)), dim=1)

    a, b = design(fit_x), design(eval_x)
    gram = a.T @ a
    gram += RIDGE * gram.diagonal().mean() * torch.eye(len(gram), dtype=gram.dtype)
    onehot = torch.nn.functional.one_hot(fit_y, classes).to(a.dtype)
    weights = torch.linalg.solve(gram, a.T @ onehot)
    return ((b @ weights).argmax(1) == eval_y).double().mean().item()


def probe_run(model: Any, windows: Tensor, offsets: tuple[int, ...] = OFFSETS) -> list[list[float]]:
    """accuracy[j][l]: the byte j back from state l, fitted on half the windows and scored on the other half."""
    if len(windows) < 2:
        raise ConfigError("probing needs at least 2 windows (one half to fit, one to score)")
    first = max(offsets)
    half = len(windows) // 2
    out = []
    feats = states(model, windows)
    for j in offsets:
        target = windows[:, first - j: windows.shape[1] - j]  # (B, T − first): x_{t−j} for t ≥ first
        row = []
        for f in feats:
            x = f[:, first:]
            row.append(ridge_accuracy(x[:half].flatten(0, 1), target[:half].flatten(),
                                      x[half:].flatten(0, 1), target[half:].flatten()))
        out.append(row)
    return out


def probe_runs() -> list[tuple[str, str]]:
    """``PROBE_RUNS``, then ka-5m and tf-5m at their best test BPC in group scale (read from its results)."""
    best = [best_result(p, "scale") for p in ("ka-5m", "tf-5m")]
    return [*PROBE_RUNS, *(("scale", r["name"]) for r in best if r is not None)]


def _run_dirs(names: list[tuple[str, str]]) -> list[Path]:
    """Each run's directory: its own, or that of the identical run another group made."""
    from lab.groups import with_twins
    from lab.records import run_dir_of

    found = {(g, r["name"]): run_dir_of(r) for g in dict.fromkeys(g for g, _ in names) for r in with_twins(g)}
    return [found.get((g, n), protocol.RUNS / g / n) for g, n in names]


def measure(data_dir: str | None, windows: int = WINDOWS) -> dict[str, Any]:
    from kuramoto_attention.diagnostics.measure import valid_batch
    from kuramoto_attention.training.checkpoint import load_model

    names = probe_runs()
    runs = _run_dirs(names)
    missing_runs(runs, "probe")
    context = json.loads((runs[0] / "run.json").read_text())["train"]["context"]
    batch = valid_batch(runs[0], windows, context, data_dir)  # every run sees the same windows
    rows = []
    for (group, name), run in zip(names, runs, strict=True):
        model = load_model(run)[0]
        rows.append({"group": group, "name": name, "family": model.family, "depth": len(model.blocks),
                     "ff_proj": getattr(model.config, "ff_proj", None),  # ka's feed-forward (tf: None)
                     "accuracy": probe_run(model, batch)})
    return {"windows": windows, "context": context, "offsets": list(OFFSETS), "ridge": RIDGE, "runs": rows}


def write(res: dict[str, Any]) -> Path:
    return save("probe.json", res)
