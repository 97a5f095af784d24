"""The loss-gap study after 40M tokens (``python -m lab gap budget40``: results/gap-budget40.{json,md}) in the notebook
and the summary, read against the 10M study (results/gap.json). The recall class that copying predicts is where an
induction head would help; the 10M study may predate that breakdown (no ``by_recall``), and its variant may be
another model than ka-1m-tuned (``variant_name``): both are said, not papered over."""

import json
from pathlib import Path
from typing import Any

from lab import protocol
from lab.groups import BUDGETS
from lab.studies.gap import RECALL_NAMES

GROUP = "budget40"
COPYING = 1  # the recall class "seen, copying predicts the byte" (studies/gap.py ``recall_classes``)


def _path(suffix: str) -> Path:
    return protocol.RESULTS / f"gap-{GROUP}.{suffix}"


def notebook_part() -> str:
    """The study's own Markdown (it writes its heading), or what to run for it."""
    if _path("md").exists():
        return _path("md").read_text()
    return (f"## Where the gap is after {BUDGETS[-1] // 1_000_000}M tokens\n\n_Not measured yet: `python -m lab gap "
            f"{GROUP}` (it needs the trained models of `python -m lab run {GROUP}`)._\n")


def _copying(res: dict[str, Any], key: str) -> float | None:
    """A model's gap on the bytes copying predicts, None where the study has no such breakdown or bytes."""
    row = next((r for r in res.get("by_recall", []) if r["recall"] == COPYING), None)
    return row[f"{key}_gap"] if row and f"{key}_gap" in row else None


NEAR_FROM = 8  # the position bin read as "near the window's start" beside the last bin (the farthest context)


def by_position_text(res: dict[str, Any], col: str) -> str:
    """The gap in the bin starting at NEAR_FROM and in the last bin of the window: does it grow with the context?"""
    rows = res.get("by_position", [])
    near = next((r for r in rows if r["from"] == NEAR_FROM), None)
    if near is None or f"{col}_gap" not in rows[-1]:
        return ""
    far = rows[-1]
    return (f"{near[f'{col}_gap']:+.3f} at positions {near['from']}–{near['to'] - 1} and {far[f'{col}_gap']:+.3f} at "
            f"{far['from']}–{far['to'] - 1}")


def summary_line() -> str | None:
    """RESULTS.md's line on the 40M study: each Kuramoto model's pooled gap and its gap on the bytes copying predicts,
    beside the 10M study's; None where neither study exists (the summary says what to run)."""
    if not _path("json").exists():
        return (f"- After {BUDGETS[-1] // 1_000_000}M tokens: not measured yet (`python -m lab gap {GROUP}`)."
                if (protocol.RESULTS / "gap.json").exists() else None)
    res = json.loads(_path("json").read_text())
    parts = []
    for key in ("tuned", "su2", "ka"):
        if key not in res.get("runs", {}):
            continue
        preset = res["runs"][key].rsplit("-", 1)[0]
        copy = _copying(res, key)
        where = by_position_text(res, key)
        parts.append(f"{preset} pooled gap {res[key] - res['tf']:+.3f}"
                     + (f", {where}" if where else "")
                     + (f', {copy:+.3f} on the class "{RECALL_NAMES[COPYING]}"' if copy is not None else ""))
    tokens = max(res["tokens"].values()) / 1e6
    return (f"- After {tokens:.0f}M tokens (group {GROUP}, seed 0, `python -m lab gap {GROUP}`), bits per byte against "
            "tf-1m, per model:\n" + "\n".join(f"- {part}." for part in parts))
