"""Issue 46's probes of the 40M pair and the fixes (``python -m lab probe40``): copy depth, temperature, steps."""

import json
import math
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from kuramoto_attention.errors import ConfigError
from lab import protocol
from lab.groups import FIX_BUDGET, budget_best
from lab.protocol import load_results
from lab.records import run_dir_of
from lab.studies import missing_runs, save
from lab.studies.gap import bits_per_byte

MAX_ORDER = 8
WINDOWS = 64
QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)
PAIR = ("tf-1m", "ka-1m-tuned")


def copy_depth(windows: Tensor, max_order: int = MAX_ORDER) -> Tensor:
    """(B, T − 1): the largest k ≤ ``max_order`` whose k bytes of context copy-predict the byte; 0 if none."""
    out = torch.zeros(windows.shape[0], windows.shape[1] - 1, dtype=torch.long)
    for b, row in enumerate(windows.tolist()):
        latest: list[dict[tuple[int, ...], int]] = [{} for _ in range(max_order + 1)]  # k -> k-gram -> follower
        for t in range(len(row) - 1):
            for k in range(1, min(max_order, t + 1) + 1):
                key = tuple(row[t - k + 1:t + 1])
                if latest[k].get(key) == row[t + 1]:
                    out[b, t] = k
                latest[k][key] = row[t + 1]
    return out


def by_copy_depth(bits: dict[str, Tensor], depth: Tensor) -> list[dict[str, Any]]:
    """Bytes, each model's mean bits and the gap to "tf" per copy depth (depths with no bytes left out)."""
    rows = []
    for k in range(int(depth.max()) + 1):
        sel = depth == k
        if sel.any():
            means = {name: b[sel].mean().item() for name, b in bits.items()}
            rows.append({"depth": k, "bytes": int(sel.sum()), **means,
                         **{f"{n}_gap": v - means["tf"] for n, v in means.items() if n != "tf"},
                         **{f"{n}_gap_bits": (v - means["tf"]) * int(sel.sum()) for n, v in means.items()
                            if n != "tf"}})
    return rows


def logits_of(model: Any, windows: Tensor) -> Tensor:
    model = model.float().eval()
    with torch.no_grad():
        return model(windows[:, :-1]).float()


def fitted_temperature(logits: Tensor, targets: Tensor) -> dict[str, float]:
    """The temperature minimising the loss on half the windows, and the other half's bits at 1 and at it."""
    half = logits.shape[0] // 2

    def bits(rows: slice, temp: float) -> float:
        flat = (logits[rows] / temp).flatten(0, 1)
        return torch.nn.functional.cross_entropy(flat, targets[rows].flatten()).item() / math.log(2)

    lo, hi = -2.0, 2.0
    ratio = (math.sqrt(5) - 1) / 2
    for _ in range(40):
        a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
        if bits(slice(0, half), math.exp(a)) < bits(slice(0, half), math.exp(b)):
            hi = b
        else:
            lo = a
    temp = math.exp((lo + hi) / 2)
    held = slice(half, None)
    return {"temperature": temp, "bpc_at_1": bits(held, 1.0), "bpc_fitted": bits(held, temp)}


def _quantiles(x: Tensor) -> list[float]:
    return torch.quantile(x.double().flatten(), torch.tensor(QUANTILES, dtype=torch.float64)).tolist()


def step_lengths(model: Any, windows: Tensor) -> list[dict[str, Any]]:
    """Per layer: quantiles of the bound's drive and of the step's length, and the share past the knee."""
    model = model.float().eval()
    geo, rows = model.geometry, []
    with torch.no_grad():
        x = model.embed(windows)
        for i, block in enumerate(model.blocks):
            layer = block.attn
            increment, _ = layer.coupling(x)
            raw = geo.tangent_gate(layer.value(geo.lift(x))) * increment.flatten(2)
            row: dict[str, Any] = {"layer": i}
            for name, bound, update in (("attn", layer.bound, raw),
                                        ("ff", None if block.ff is None else block.ff.bound, None)):
                if bound is None:
                    continue
                if update is None:
                    update = block.ff.update(layer(x, check=False))
                drive = bound.drive(update)
                drive = drive if drive.dim() == 2 else drive.abs().amax(-1)  # elementwise: the largest coordinate
                length = bound(update).norm(dim=-1)
                row[name] = {"drive": _quantiles(drive), "length": _quantiles(length),
                             "past_knee": (drive > 2).float().mean().item()}
            rows.append(row)
            x = block(x)
    return rows


def _pair_runs() -> dict[str, dict[str, Any]]:
    runs = {}
    for preset in PAIR:
        best = budget_best(preset, FIX_BUDGET)
        if best is None:
            raise ConfigError(f"probe40 needs {preset}'s 40M-token runs in results/budget40 or results/lr40; run "
                              f"`{protocol.run_command('lr40')}`")
        runs[preset] = best
    return runs


def measure(data_dir: str | None, windows: int = WINDOWS) -> dict[str, Any]:
    from kuramoto_attention.diagnostics.measure import valid_batch
    from kuramoto_attention.training.checkpoint import load_model

    pair = _pair_runs()
    fixes = {r["name"]: r for r in load_results("fixes40") if r["family"] == "kuramoto"
             and (run_dir_of(r) / "run.json").exists()}  # the fixes whose models are here
    dirs = {**{p: run_dir_of(r) for p, r in pair.items()}, **{n: run_dir_of(r) for n, r in fixes.items()}}
    missing_runs(list(dirs.values()), "probe40")
    context = json.loads((dirs["tf-1m"] / "run.json").read_text())["train"]["context"]
    batch = valid_batch(dirs["tf-1m"], windows, context + 1, data_dir)
    depth = copy_depth(batch)
    bits, temps, steps = {}, {}, {}
    for name, run in dirs.items():
        model = load_model(run)[0]
        key = "tf" if name == "tf-1m" else name
        bits[key] = bits_per_byte(model, batch)
        temps[name] = fitted_temperature(logits_of(model, batch), batch[:, 1:])
        if model.family == "kuramoto":
            steps[name] = step_lengths(model, batch[:, :-1])
    return {"runs": {n: f"{r['group']}/{r['name']}" for n, r in {**pair, **fixes}.items()},
            "windows": windows, "context": context, "bits": {n: b.mean().item() for n, b in bits.items()},
            "by_copy_depth": by_copy_depth(bits, depth), "temperature": temps, "steps": steps,
            "quantiles": list(QUANTILES)}


def write(res: dict[str, Any]) -> Path:
    return save("probe40.json", res)
