"""The studies' files as tables (gap, dynamics, induction) and the Markdown they write for the notebook."""

import json
import math
import statistics
from typing import Any

import torch

from kuramoto_attention.models.presets import build_model, get_preset
from lab import protocol
from lab.groups import BUDGETS
from lab.protocol import PROTOCOL
from lab.studies import induction
from lab.writers.common import signed, table

GAP_GROUP = "budget40"  # the 40M-token gap study's group: results/gap-budget40.{json,md}
COPYING = 1  # the recall class "seen, copying predicts the byte" (studies/gap.py ``recall_classes``)
NEAR_FROM = 8  # the position bin read as "near the window's start" beside the last bin (the farthest context)


def _read(name: str) -> Any:
    """results/NAME parsed, None when it is missing."""
    path = protocol.RESULTS / name
    return json.loads(path.read_text()) if path.exists() else None


def notebook_part() -> str:
    """The 40M-token gap study's own Markdown (it writes its heading), or what to run for it."""
    if (path := protocol.RESULTS / f"gap-{GAP_GROUP}.md").exists():
        return path.read_text()
    return (f"## Where the gap is after {BUDGETS[-1] // 1_000_000}M tokens\n\n_Not measured yet: `python -m lab gap "
            f"{GAP_GROUP}` (it needs the trained models of `python -m lab run {GAP_GROUP}`)._\n")


def notebook_parts() -> list[str]:
    """The studies' Markdown in the notebook's order, each measured on ka-1m on ψ(θ) itself marked so."""
    parts = []
    for name in ("gap", "probe", "dynamics", "induction"):
        if (protocol.RESULTS / f"{name}.md").exists():
            rows = _read(f"{name}.json")
            rows = rows if isinstance(rows, list) else (rows or {}).get("runs", [rows] if rows else [])
            old = name != "induction" and any("ff_proj" not in r and "ka_ff_proj" not in r for r in rows)
            parts.append((protocol.RESULTS / f"{name}.md").read_text() + (
                f"\n_Measured on ka-1m on ψ(θ) itself (main-unprojected): `python -m lab {name}` measures today's._\n"
                if old else ""))
        if name == "gap":  # `python -m lab gap budget40`, beside the 10M study
            parts.append(notebook_part())
    return parts


def cells(res: dict[str, Any], key: str) -> list[str]:
    """A model's pooled gap, its gap near the window's start and at its end, and on the bytes copying predicts."""
    pos, recall = res.get("by_position", []), res.get("by_recall", [])
    near = next((r for r in pos if r["from"] == NEAR_FROM), {})
    copy = next((r for r in recall if r["recall"] == COPYING), {})
    return [signed(res[key] - res["tf"]), *(signed(x.get(f"{key}_gap")) for x in (near, pos[-1] if pos else {}, copy))]


def bins(res: dict[str, Any]) -> tuple[str, str]:
    pos = res.get("by_position", [])
    near = next((r for r in pos if r["from"] == NEAR_FROM), None)
    return tuple(f"{b['from']}–{b['to'] - 1}" if b else "—" for b in (near, pos[-1] if pos else None))


def gap_table() -> str:
    """One row per model of each study: pooled, by position, copying, easiest and hardest quarters."""
    rows, near, far = [], "—", "—"
    if g := _read("gap.json"):
        q = {r["quartile"]: r for r in g["by_difficulty"]}
        rows.append([f"{g['group']} (seeds {', '.join(map(str, g['seeds']))})", "ka-1m" + (
            " (ψ(θ) itself)" if g.get("ka_ff_proj") in (None, "none") else ""), *cells(g, "ka"),
            signed(q[0]["ka_gap"]), signed(q[3]["ka_gap"])])
    if res := _read(f"gap-{GAP_GROUP}.json"):
        near, far = bins(res)
        rows += [[f"{GAP_GROUP} ({max(res['tokens'].values()) / 1e6:.0f}M tokens)",
                  res["runs"][key].rsplit("-", 1)[0], *cells(res, key), "—", "—"]
                 for key in ("tuned", "su2", "ka") if key in res.get("runs", {})]
    if not rows:
        return "_Not measured yet (`python -m lab gap`, `python -m lab gap budget40`: they need trained runs)._"
    return table(["study", "model", "pooled gap", f"positions {near}", f"positions {far}", "copying predicts the byte",
                  "easiest quarter", "hardest quarter"], rows)


def why_table(preset: str = "ka-1m-tuned") -> str:
    """What the 40M-token studies measured that the leads answer (empty where their files are missing)."""
    gap, dyn = _read(f"gap-{GAP_GROUP}.json"), _read("dynamics.json")
    rows = [r for r in dyn or [] if r["run"] == f"{GAP_GROUP}/{preset}-40m"]
    if not gap or not rows or "slow_fraction" not in rows[0] or "tuned" not in gap.get("runs", {}):
        return ""
    model, context = build_model(*get_preset(preset)), PROTOCOL["context"]
    start = torch.cat([b.attn.omega.detach().abs() for b in model.blocks]).lt(2 * math.pi / context).float().mean()
    near, far = bins(gap)
    pooled, at_near, at_far, copying = cells(gap, "tuned")
    return table([f"{preset} after 40M tokens", "value"], [
        ["gap to tf-1m, pooled (bits per byte)", pooled], [f"gap at positions {near}", at_near],
        [f"gap at positions {far}", at_far], ["gap on the bytes copying predicts", copying],
        [f"oscillators slower than once per {context}-byte context, trained",
         f"{statistics.mean(rows[0]['slow_fraction']):.0%}"],
        ["the same at RoPE's start (initialisation)", f"{start.item():.0%}"],
        ["attention increments on the bound", f"{statistics.mean(rows[0]['attn_saturation']):.0%}"]])


def induction_table() -> str:
    """The copy task's final accuracies and the step each model first reached 0.5 (``python -m lab induction``)."""
    if not (res := _read("induction.json")):
        return "_Copying (a synthetic induction task): not measured yet, `python -m lab induction`._"
    task = res["task"]
    return table([f"copy task model ({len(task['seeds'])} seeds, chance {1 / task['alphabet']:.3f})",
                  f"accuracy after {task['steps']:,} steps", "first step at 0.5"],
                 [[m, f"{curve[-1][1]:.3f}", next((f"{step:,}" for step, acc in curve if acc >= 0.5), "—")]
                  for m, curve in induction.mean_curves(res).items()])


def dynamics_section() -> str:
    """The paper's dynamics claims on the first group measured (runs satisfying each, of all), then the loss gaps."""
    if not (rows := _read("dynamics.json")):
        return gap_table()
    judged = [r for r in rows if r["group"] == rows[0]["group"]]
    group = rows[0]["group"] + (" (ψ(θ) itself)" if any(r.get("ff_proj") is None for r in judged) else "")
    claims = (("1: local \\|G\\| ≥ 0.9 at every layer", "local_near_one"),
              ("1: global order falls from the first layer to the last", "global_falls"),
              ("2: median \\|ω\\| strictly decreasing with depth", "omega_decreasing"))
    return table(["paper claim", "measured on", "runs where it holds"],
                 [[claim, group, f"{sum(r[key] for r in judged)} of {len(judged)}"] for claim, key in claims]) + \
        "\n\n" + gap_table()
