"""Shared pieces of the generated RESULTS.md: number and table formatting, and how a run is named and
described (its settings, its twin in another group, its bound saturation)."""

import contextlib
import statistics
from typing import Any

from .experiment import same_run
from .groups import BEST_VARIANT, CANDIDATES, all_results, plan
from .presets import ConfigError
from .protocol import TRAIN_DEFAULTS, load_results


def fmt(x: float) -> str:
    return f"{x:.4f}"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def overrides(r: dict[str, Any]) -> str:
    parts = [f"{k}={v}" for k, v in r["model_overrides"].items()]
    default_mult = TRAIN_DEFAULTS["phase_lr_mult"]
    if r["train"].get("phase_lr_mult", default_mult) != default_mult:
        parts.append(f"phase_lr_mult={r['train']['phase_lr_mult']:g}")
    return ", ".join(parts) or "(preset)"


def settings(r: dict[str, Any]) -> str:
    """The open choices a screening run used, read from its recorded config."""
    m, t = r["model"], r["train"]
    if r["family"] != "kuramoto":
        return "transformer preset"
    ff = m["ff"] + ("" if m["ff"] != "angles" else (" wrapped" if m["ff_wrap"] else " raw"))
    ff += " → tangent" if m.get("ff_output") == "tangent" else ""
    ff += (f" through P ({m['ff_proj']}, width {m.get('ff_proj_dim') or m['dim']})"
           if m.get("ff_proj", "none") != "none" else "")
    extras = [text for on, text in (
        (m.get("shared_gates"), "shared gates"), (m.get("self_coupling") is False, "no self-coupling"),
        (m.get("phase_lag"), "phase lag"), (m.get("content_lag"), "content lag"),
        (m.get("coupling_lag"), "coupling lag"), (m.get("value_lag"), "value lag"),
        (m.get("readout_gain", "none") != "none",
         f"readout gain {m.get('readout_gain')} (init {m.get('readout_gain_init', 1.0):g})"),
        (m.get("readout_tied"), "readout tied to the embedding"),
    ) if on]
    extras += [f"{k} {t[k]:g}" for k in ("weight_decay", "warmup", "beta2") if t.get(k, TRAIN_DEFAULTS[k]) !=
               TRAIN_DEFAULTS[k]]
    return (f"k {m['dim']}, depth {m['depth']}, heads {m['heads']}, radius {m['attn_radius_init']:g}/"
            f"{m['ff_radius_init']:g} ({m['bound']}), τ₀ {m['tau_init']:g}, ff {ff} (hidden {m['ff_hidden']}), "
            f"v₀ {m['value_init']:g}, phase lr ×{t['phase_lr_mult']:g}" + "".join(f", {e}" for e in extras)
            + f"; {r['params']:,} params")


def with_twins(group: str) -> list[dict[str, Any]]:
    """A group's results plus, for each planned run not made because another group already made it
    identically (``experiment.same_run``), that run under the planned name, with ``twin`` naming it."""
    rows = load_results(group)
    with contextlib.suppress(ConfigError):  # a group that cannot be planned yet has no twins either
        done, pool = {r["name"] for r in rows}, all_results()
        for spec in plan(group):
            r = same_run(spec, pool) if spec.name not in done else None
            if r is not None:
                twin = f"{r['group']}/{r['name']}"
                rows.append({**r, "name": spec.name, "model_overrides": spec.model, "twin": twin})
    return rows


def label(r: dict[str, Any]) -> str:
    return f"{r['name']} (= {r['twin']}: same config, seed and split)" if "twin" in r else r["name"]


def saturation(r: dict[str, Any]) -> str:
    d = r.get("diagnostics")
    if not d:
        return "—"
    ff = [x for x in d["ff_saturation"] if x is not None]
    ff_text = f"{statistics.mean(ff):.0%}" if ff else "—"
    return f"{statistics.mean(d['attn_saturation']):.0%} / {ff_text}"


def variant_change(name: str = BEST_VARIANT) -> str:
    return ", ".join(f"{k}={v}" for k, v in CANDIDATES[name].items())
