"""Reading model configs: overrides by field name, configs saved as JSON (today's and older layouts), flat views.

The Kuramoto config nests the attention layer's ``AttentionConfig`` under ``attention``; a field is addressed by its
own name (``clock=8``) or its dotted path (``attention.clock=8``): every name is unique across the nesting.
"""

from __future__ import annotations

import math
from dataclasses import fields, is_dataclass
from typing import Any

from kuramoto_attention.errors import ConfigError

# Fields deleted from the library: most when it was reorganised, then each variant the day it lost its comparison.
# What they did and how they scored is in docs/notebook.md; the runs that used them can be repeated at the commit
# named (RETIRED_AT, or the field's own in RETIRED_SINCE). A saved config
# holding one at its old default loads (the model is the same); any other value is refused with the commit to check
# out. (The retired training options are training/config.py's RETIRED_OPTIONS.)
RETIRED_AT = "7d67ce1"
RETIRED: dict[str, Any] = {
    "phase_lag_spread": 0.0, "content_lag": False, "coupling_lag": False, "value_lag": False,
    "clock_log_weight": False, "step_gate": False, "fp32_attention": False, "ff_wrap": False,
    "ff_output": "increment", "ff_proj_dim": 0, "readout_gain": "none", "readout_gain_init": 1.0,
    "readout_harmonics": 1, "readout_tied": False, "embed_spread": 1.0,
    "lag_from_state": False, "step_init": 0.25, "bound_scale": "one",
}
# a field's (or a retired value's, as "field=value") own last commit, where it is not RETIRED_AT
RETIRED_SINCE: dict[str, str] = {
    "lag_from_state": "4c98f00",  # a phase lag read from the state
    "bound='scaled'": "25e20b6", "step_init": "25e20b6",  # a learned step size per oscillator, clipped far away
    "bound_scale": "34fef35",  # the norm bound's learned scale s in r·tanh(‖x‖/s)
}
RETIRED_VALUES: dict[str, tuple[Any, ...]] = {"bound": ("norm-soft", "none", "scaled"), "ff_proj": ("layer",)}
RENAMED = {"attn_radius_init": "radius_init"}  # the flat layout's name -> today's


def flat_fields(cfg: Any) -> dict[str, Any]:
    """Every leaf field by its own name (the nested attention config inlined)."""
    out: dict[str, Any] = {}
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        out.update(flat_fields(value) if is_dataclass(value) else {f.name: value})
    return out


def _paths(cfg: Any, prefix: str = "") -> dict[str, str]:
    """Leaf name and dotted path -> dotted path."""
    out: dict[str, str] = {}
    for f in fields(cfg):
        value, path = getattr(cfg, f.name), prefix + f.name
        if is_dataclass(value):
            out.update(_paths(value, path + "."))
        else:
            out[f.name] = out[path] = path
    return out


def _get(cfg: Any, path: str) -> Any:
    for part in path.split("."):
        cfg = getattr(cfg, part)
    return cfg


def _rebuild(cfg: Any, values: dict[str, Any]) -> Any:
    """A config like ``cfg`` with the dotted paths in ``values`` replaced, built (and so checked) once."""
    kwargs: dict[str, Any] = {}
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        if is_dataclass(value):
            prefix = f.name + "."
            kwargs[f.name] = _rebuild(value, {k[len(prefix):]: v for k, v in values.items() if k.startswith(prefix)})
        else:
            kwargs[f.name] = values.get(f.name, value)
    return type(cfg)(**kwargs)


def check_retired(key: str, value: Any) -> bool:
    """True when ``key`` is a retired field at its old default (drop it); raises for a retired value in use."""
    if key in RETIRED:
        if value != RETIRED[key]:
            raise _retired(key, value)
        return True
    if value in RETIRED_VALUES.get(key, ()):
        raise _retired(key, value)
    return False


def _retired(key: str, value: Any) -> ConfigError:
    commit = RETIRED_SINCE.get(f"{key}={value!r}", RETIRED_SINCE.get(key, RETIRED_AT))
    return retired_error(key, value, commit)


def retired_error(what: str, value: Any, commit: str, thing: str = "model") -> ConfigError:
    """The one line a retired field, value or training option gets: the commit that still has it."""
    return ConfigError(f"{what}={value!r} was retired after commit {commit}; to load or rerun this {thing}, "
                       f"`git checkout {commit}` (RESULTS.md's notebook has its results)")


def apply_overrides(family: str, cfg: Any, overrides: dict[str, Any]) -> Any:
    """cfg with fields replaced by name (or dotted path), strings converted to the field's type; the result is
    checked by the config itself (a bad value is a ConfigError naming the field)."""
    paths, values = _paths(cfg), {}
    for key, value in overrides.items():
        key = RENAMED.get(key, key)
        if key not in paths:
            if check_retired(key.rsplit(".", 1)[-1], value):  # a retired field, by its own name or dotted path
                continue
            names = sorted(k for k in paths if "." not in k)
            raise ConfigError(f"{family} model has no field {key!r}; fields: {', '.join(names)}")
        check_retired(paths[key].rsplit(".", 1)[-1], value)  # by its own name, however addressed
        values[paths[key]] = _coerce(key, value, _get(cfg, paths[key]))
    try:
        return _rebuild(cfg, values)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{family} model: {exc}") from None


def _coerce(key: str, value: Any, like: Any) -> Any:
    if not isinstance(value, str) or isinstance(like, str):
        return value
    try:
        if isinstance(like, bool):
            if value.lower() not in ("true", "false", "1", "0"):
                raise ValueError
            return value.lower() in ("true", "1")
        out = type(like)(value)
    except ValueError:
        kind = type(like).__name__
        article = "an" if kind[0] in "aeiou" else "a"
        raise ConfigError(f"field {key!r} expects {article} {kind}, got {value!r}") from None
    if isinstance(out, float) and not math.isfinite(out):
        raise ConfigError(f"field {key!r} must be finite, got {value!r}")
    return out


def config_from_dict(family: str, cls: type, data: dict[str, Any]) -> Any:
    """A config from its JSON form: today's nested layout, or the older flat one (renamed and retired fields
    upgraded). Unknown fields are errors."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            flat.update(value)
        else:
            flat[key] = value
    return apply_overrides(family, cls(), flat)


def flat_record(record: dict[str, Any]) -> dict[str, Any]:
    """A saved config (nested, or the older flat layout) as ``flat_fields`` gives it: nested tables inlined, renamed
    fields under today's names (retired ones kept as recorded)."""
    out: dict[str, Any] = {}
    for key, value in record.items():
        if isinstance(value, dict):
            out.update(value)
        else:
            out[RENAMED.get(key, key)] = value
    return out
