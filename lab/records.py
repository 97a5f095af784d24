"""What was run: a spec's full configs, whether a record still matches its spec, and twins (identical runs)."""

from dataclasses import asdict
from pathlib import Path
from typing import Any

from kuramoto_attention.models.config import flat_fields, flat_record
from kuramoto_attention.models.presets import FAMILIES, apply_overrides, get_preset
from kuramoto_attention.training.config import train_config_from
from lab import protocol
from lab.protocol import TRAIN_DEFAULTS, Spec
from lab.retired import RETIRED_FIELDS, retired_options, retired_settings, without_retired

# where a run's data came from and how it reported progress: not part of what was trained
_NOT_SETTINGS = ("data_dir", "progress", "device", "family")


def expected_configs(spec: Spec) -> tuple[dict[str, Any], dict[str, Any]]:
    """The full model and training configs a spec trains with (the preset and defaults filled in)."""
    family, preset_cfg = get_preset(spec.preset)
    return flat_fields(apply_overrides(family, preset_cfg, spec.model)), asdict(train_config_from(dict(spec.train)))


# What a record made before a model field existed ran with (the field's first default), so that a later
# change of that default makes such records stale instead of silently matching. A missing training field
# counts at today's TrainConfig default: changing a training default needs an entry of its own here.
# (The retired fields' first defaults were their last: a record without one counts at ``RETIRED_FIELDS``.)
RECORDED_BEFORE: dict[str, Any] = {"self_coupling": True, "phase_lag": False, "clock": 0, "clock_init": 0.0,
                                   "ff_proj": "none", "value_gate_input": "lift", "gates_input": "lift"}


def _config_diffs(spec: Spec, model: dict[str, Any], train_cfg: dict[str, Any]) -> list[str]:
    """How recorded model and training configs differ from the spec's, missing fields at their first defaults."""
    expected = dict(zip(("model", "train"), expected_configs(spec), strict=True))
    expected["model"] = {k: v for k, v in expected["model"].items() if k not in RETIRED_FIELDS}
    model = flat_record(model)
    defaults = {"model": {**flat_fields(FAMILIES[get_preset(spec.preset)[0]][0]()), **RECORDED_BEFORE},
                "train": TRAIN_DEFAULTS}
    return [f"{part} {k}={recorded.get(k, defaults[part][k])!r} (spec {v!r})"
            for part, recorded in (("model", model), ("train", train_cfg))
            for k, v in expected[part].items()
            if k not in _NOT_SETTINGS and recorded.get(k, defaults[part][k]) != v] \
        + [f"model {s} (retired)" for s in retired_settings({k: v for k, v in model.items() if k in RETIRED_FIELDS})] \
        + [f"train {s} (retired)" for s in retired_options(train_cfg)]


def mismatch(spec: Spec, result: dict[str, Any]) -> str | None:
    """Why a results file no longer records what its spec asks for (None: it does): reported, never reused."""
    diffs = _config_diffs(spec, result["model"], result["train"])
    if without_retired(result["model_overrides"]) != spec.model:
        diffs.append(f"model overrides {result['model_overrides']} (spec {spec.model})")
    return ", ".join(diffs) or None


def same_run(spec: Spec, pool: list[dict[str, Any]], any_split: bool = False) -> dict[str, Any] | None:
    """Another group's run with exactly the spec's configs and split (``any_split``: any); None: none, or fresh."""
    if spec.fresh:
        return None
    family = get_preset(spec.preset)[0]
    for r in pool:
        if (r["group"], r["name"]) != (spec.group, spec.name) and (any_split or r["eval_split"] == spec.eval_split) \
                and r["family"] == family and not _config_diffs(spec, r["model"], r["train"]):
            return r
    return None


def same_training(spec: Spec, pool: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A run of another group trained as ``spec`` but scored on another split, with its checkpoint here."""
    r = same_run(spec, pool, any_split=True)
    if r is None or r["eval_split"] == spec.eval_split:
        return None
    return r if (run_dir_of(r) / "checkpoint").exists() else None


def run_dir_of(result: dict[str, Any]) -> Path:
    """Where a result's model was trained (a twin's, or the group that trained it: ``trained_in``)."""
    # a twin's row carries the twin's own trained_in, if it has one
    source = result.get("trained_in") or result.get("twin") or f"{result['group']}/{result['name']}"
    return protocol.RUNS / source
