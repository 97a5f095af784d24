"""The paper's dynamics claims on trained Kuramoto runs (``python -m lab dynamics``): results/dynamics.json."""

import itertools
import json
import math
from pathlib import Path
from typing import Any

import torch

from kuramoto_attention.errors import ConfigError
from lab import protocol
from lab.retired import retired_settings
from lab.studies import missing_runs, save

LOCAL_NEAR_ONE = 0.9


def _spearman(values: list[float]) -> float:
    """Rank correlation of ``values`` with their index (depth); no ties expected for learned ω."""
    n = len(values)
    if n < 2:
        return float("nan")
    ranks = torch.tensor(values).argsort().argsort().double()
    depth = torch.arange(n, dtype=torch.float64)
    return float(torch.corrcoef(torch.stack((ranks, depth)))[0, 1])


def measure(group: str, data_dir: str | None, batch: int = 8) -> list[dict[str, Any]]:
    from kuramoto_attention.diagnostics.measure import diagnose_run
    from lab.groups import with_twins
    from lab.records import run_dir_of

    rows = []
    # main's ka-1m may be another group's identical run; a retired group's runs of a retired model are not loadable
    runs = [r for r in with_twins(group) if r["family"] == "kuramoto" and not retired_settings(r["model"])]
    missing_runs([run_dir_of(r) for r in runs], f"dynamics {group}")
    for r in runs:
        d = diagnose_run(run_dir_of(r), batch=batch, data_dir=data_dir)
        local = d.local_order.mean(dim=1).tolist()  # (L,) mean over heads
        glob = d.global_order.mean(dim=1).tolist()  # (L+1,)
        omega = d.layer_median_abs_omega.tolist()
        rows.append({
            "run": r["name"] if group == "main" else f"{group}/{r['name']}", "group": group,
            "ff_proj": r["model"].get("ff_proj", "none"),  # which feed-forward main's ka-1m had when this ran
            "local_order": local, "global_order": glob,
            "median_abs_omega": omega,
            "timescale_tokens": [x if x != float("inf") else None for x in d.layer_timescale.tolist()],
            # oscillators whose drift turns less than once over the context (2π/|ω| > T): those that compare content
            # at any distance within it (RoPE's start has about half its rates there)
            "slow_fraction": (d.omega.abs() < 2 * math.pi / d.tokens.shape[1]).flatten(1).float().mean(1).tolist(),
            "local_near_one": all(v >= LOCAL_NEAR_ONE for v in local),
            "global_falls": glob[-1] < glob[1],
            "omega_decreasing": all(b < a for a, b in itertools.pairwise(omega)),
            "omega_depth_spearman": _spearman(omega),
            "entropy": d.entropy.mean(dim=1).tolist(), "distance": d.distance.mean(dim=1).tolist(),
            "self_weight": d.self_weight.mean(dim=1).tolist(),
            "offset_profile": d.offset_profile.tolist(), "peak_offset": d.peak_offset.tolist(),
            "sync_fraction": d.sync_fraction.mean(dim=1).tolist(),
            "knockout_attn_bpc": d.knockout_bpc[:, 0].tolist(),
            "knockout_ff_bpc": [x if x == x else None for x in d.knockout_bpc[:, 1].tolist()],  # NaN: no ff
            # the share of increments on the bound (within 5% of r): a saturated step moves every token by r
            "attn_saturation": d.attn_saturation.tolist(),
            "ff_saturation": [x if x == x else None for x in d.ff_saturation.tolist()],
            "attn_drive": d.attn_drive.tolist(),
            "ff_drive": [x if x == x else None for x in d.ff_drive.tolist()],
        })
    if not rows:
        raise ConfigError(f"no Kuramoto runs in {protocol.RESULTS / group}; run `{protocol.run_command(group)}` first")
    return rows


def merged(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` in place of the same groups' rows of the recorded results/dynamics.json, the others kept."""
    path = protocol.RESULTS / "dynamics.json"
    old = json.loads(path.read_text()) if path.exists() else []
    new_groups = dict.fromkeys(r["group"] for r in rows)
    out: list[dict[str, Any]] = []
    for group in dict.fromkeys([*(r["group"] for r in old), *new_groups]):
        out += [r for r in (rows if group in new_groups else old) if r["group"] == group]
    return out


def write(rows: list[dict[str, Any]]) -> Path:
    return save("dynamics.json", rows)
