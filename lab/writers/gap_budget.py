"""The loss-gap studies as one table: `python -m lab gap` (results/gap.json, ka-1m at 10M) and `python -m lab gap
budget40` (results/gap-budget40.json, each Kuramoto model after 40M tokens), in bits per byte against tf-1m."""

import json
from pathlib import Path
from typing import Any

from lab import protocol
from lab.groups import BUDGETS
from lab.writers.common import table

GROUP = "budget40"
COPYING = 1  # the recall class "seen, copying predicts the byte" (studies/gap.py ``recall_classes``)
NEAR_FROM = 8  # the position bin read as "near the window's start" beside the last bin (the farthest context)


def _path(suffix: str) -> Path:
    return protocol.RESULTS / f"gap-{GROUP}.{suffix}"


def notebook_part() -> str:
    """The study's own Markdown (it writes its heading), or what to run for it."""
    if _path("md").exists():
        return _path("md").read_text()
    return (f"## Where the gap is after {BUDGETS[-1] // 1_000_000}M tokens\n\n_Not measured yet: `python -m lab gap "
            f"{GROUP}` (it needs the trained models of `python -m lab run {GROUP}`)._\n")


def _cell(x: float | None) -> str:
    return "—" if x is None else f"{x:+.3f}"


def cells(res: dict[str, Any], key: str) -> list[str]:
    """A model's pooled gap, its gap near the window's start and at its end, and on the bytes copying predicts."""
    pos, recall = res.get("by_position", []), res.get("by_recall", [])
    near = next((r for r in pos if r["from"] == NEAR_FROM), {})
    copy = next((r for r in recall if r["recall"] == COPYING), {})
    far = pos[-1] if pos else {}
    return [_cell(res[key] - res["tf"]), *(_cell(x.get(f"{key}_gap")) for x in (near, far, copy))]


def bins(res: dict[str, Any]) -> tuple[str, str]:
    pos = res.get("by_position", [])
    near = next((r for r in pos if r["from"] == NEAR_FROM), None)
    return tuple(f"{b['from']}–{b['to'] - 1}" if b else "—" for b in (near, pos[-1] if pos else None))


def gap_table() -> str:
    """One row per model of each study: pooled, by position, copying, easiest and hardest quarters."""
    rows, near, far = [], "—", "—"
    ten = protocol.RESULTS / "gap.json"
    if ten.exists():
        g = json.loads(ten.read_text())
        q = {r["quartile"]: r for r in g["by_difficulty"]}
        rows.append([f"{g['group']} (seeds {', '.join(map(str, g['seeds']))})", "ka-1m" + (
            " (ψ(θ) itself)" if g.get("ka_ff_proj") in (None, "none") else ""), *cells(g, "ka"),
            _cell(q[0]["ka_gap"]), _cell(q[3]["ka_gap"])])
    if _path("json").exists():
        res = json.loads(_path("json").read_text())
        near, far = bins(res)
        rows += [[f"{GROUP} ({max(res['tokens'].values()) / 1e6:.0f}M tokens)",
                  res["runs"][key].rsplit("-", 1)[0], *cells(res, key), "—", "—"]
                 for key in ("tuned", "su2", "ka") if key in res.get("runs", {})]
    if not rows:
        return "_Not measured yet (`python -m lab gap`, `python -m lab gap budget40`: they need trained runs)._"
    return table(["study", "model", "pooled gap", f"positions {near}", f"positions {far}", "copying predicts the byte",
                  "easiest quarter", "hardest quarter"], rows)
