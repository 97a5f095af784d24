"""The paper's dynamics claims on trained Kuramoto runs (``python -m lab dynamics``): results/dynamics.{json,md}."""

import itertools
import json
import math
from pathlib import Path
from typing import Any

import torch

from kuramoto_attention.diagnostics.measure import OFFSETS
from kuramoto_attention.errors import ConfigError
from lab import protocol
from lab.retired import retired_settings
from lab.studies import missing_runs

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


def _fmt(values: list[float | None], spec: str = ".3g", none: str = "∞") -> str:
    return " → ".join(none if v is None else format(v, spec) for v in values)


def _offset_lines(rows: list[dict[str, Any]]) -> list[str]:
    rows = [r for r in rows if "peak_offset" in r]
    if not rows:
        return []
    lines = [
        "### Where the heads look (offset profile)",
        "",
        f"For each head, the offset t − u at which its mean attention A_{{t,t−Δ}} (queries t ≥ {OFFSETS}, "
        f"Δ = 0..{OFFSETS}) is "
        "largest, layer by layer (heads in order); and the mean over heads of A_{t,t−Δ} for Δ = 0, 1, 2, 3. "
        "A transformer's previous-token and skip heads peak at Δ ≥ 1 whatever the content; here the score's "
        "positional part Σ_j w_j cos(ω_j Δ) (w ≥ 0) peaks at Δ = 0 (docs/notebook.md, round 5).",
        "",
        "| run | peak offset of each head, per layer | mean A at Δ = 0, 1, 2, 3, per layer | heads peaking at Δ ≥ 2 |",
        "|---|---|---|---|",
    ]
    for r in rows:
        peaks = " \\| ".join(" ".join(map(str, layer)) for layer in r["peak_offset"])
        prof = torch.tensor(r["offset_profile"]).mean(dim=1)[:, :4]  # (L, 4) mean over heads
        means = " \\| ".join(" ".join(f"{x:.2f}" for x in layer) for layer in prof.tolist())
        far = sum(p >= 2 for layer in r["peak_offset"] for p in layer)
        total = sum(len(layer) for layer in r["peak_offset"])
        lines.append(f"| {r['run']} | {peaks} | {means} | {far} of {total} |")
    return [*lines, ""]


def write(rows: list[dict[str, Any]]) -> Path:
    (protocol.RESULTS / "dynamics.json").write_text(json.dumps(rows, indent=1) + "\n")
    groups = " ".join(dict.fromkeys(r["group"] for r in rows))
    lines = [
        "## Dynamics: does the model synchronise locally without collapsing globally?",
        "",
        f"_Generated by `python -m lab dynamics {groups}` (diagnostics on 8 validation windows per "
        "run); values are means over heads, listed from the first layer to the last._",
        "",
        "| run | local order \\|G\\| per layer | global order (embedding → last) | self weight A_tt per layer | "
        "median \\|ω\\| per layer | timescale 2π/\\|ω\\| (tokens) | ω slower than the context | local ≥ 0.9 | "
        "global falls | ω decreasing | Spearman(ω, depth) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['run']} | {_fmt(r['local_order'])} | {_fmt(r['global_order'])} | "
                     f"{_fmt(r['self_weight'])} | {_fmt(r['median_abs_omega'])} | {_fmt(r['timescale_tokens'])} | "
                     f"{_fmt(r.get('slow_fraction', [None]), '.0%', '—')} | "
                     f"{'yes' if r['local_near_one'] else 'no'} | {'yes' if r['global_falls'] else 'no'} | "
                     f"{'yes' if r['omega_decreasing'] else 'no'} | {r['omega_depth_spearman']:+.2f} |")
    first = rows[0]["group"]  # the claims are judged on the first group's runs (the model as specified)
    judged = [r for r in rows if r["group"] == first]
    n = len(judged)
    local = sum(r["local_near_one"] for r in judged)
    falls = sum(r["global_falls"] for r in judged)
    omega = sum(r["omega_decreasing"] for r in judged)
    lines += [
        "",
        f"Verdicts on the {first} runs only (other groups hold variants of the model).",
        "",
        f"Paper claim 1, local synchronisation without global collapse: local |G| ≥ {LOCAL_NEAR_ONE} at every "
        f"layer in {local} of {n} runs; the global order parameter after the last layer below its value after the "
        f"first in {falls} of {n} runs. Caveat: a token that attends to itself has |G| = 1 by construction, so "
        "where the self weight A_tt is high, local |G| near 1 says little about synchronising with other tokens.",
        "",
        f"Paper claim 2, early layers learn faster ω than late ones: median |ω| strictly decreases with depth in "
        f"{omega} of {n} runs (Spearman column: −1 is a perfect decrease).",
        "",
    ]
    lines += _offset_lines(rows)
    lines += [
        "### What each step is worth (knockout)",
        "",
        "ΔBPC on the same windows when one step of one layer is replaced by the identity (the rest of the "
        "trained model unchanged), listed from the first layer to the last. A step near 0 is a near no-op.",
        "",
        "Saturation: the share of each layer's bounded increments within 5% of the bound's radius r (where the "
        "step's length is r whatever the increment's); drive: the median argument of the bound's tanh (past about 2 "
        "a step's length no longer follows its increment); — where not measured.",
        "",
        "| run | without attention step | without feed-forward step | attention on the bound | feed-forward on the "
        "bound | attention drive | feed-forward drive |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "knockout_attn_bpc" in r:
            lines.append(f"| {r['run']} | {_fmt(r['knockout_attn_bpc'], '+.3f')} | "
                         f"{_fmt(r['knockout_ff_bpc'], '+.3f', '—')} | "
                         f"{_fmt(r.get('attn_saturation', [None]), '.0%', '—')} | "
                         f"{_fmt(r.get('ff_saturation', [None]), '.0%', '—')} | "
                         f"{_fmt(r.get('attn_drive', [None]), '.1f', '—')} | "
                         f"{_fmt(r.get('ff_drive', [None]), '.1f', '—')} |")
    lines.append("")
    path = protocol.RESULTS / "dynamics.md"
    path.write_text("\n".join(lines))
    return path
