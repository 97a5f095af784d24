"""Named model presets (builders, as torchtune's: a component builder per family, one function per named size) and
the family registry. ``get_preset(name)`` builds a fresh config; ``PRESETS`` holds one of each for listing.
"""

from collections.abc import Callable
from dataclasses import fields as dataclass_fields
from typing import Any

import torch

from kuramoto_attention.errors import ConfigError
from kuramoto_attention.layers.groups import build_geometry
from kuramoto_attention.layers.kuramoto_attention import AttentionConfig
from kuramoto_attention.models.config import apply_overrides as apply_overrides  # re-exported for preset users
from kuramoto_attention.models.config import config_from_dict as read_config
from kuramoto_attention.models.kuramoto import KuramotoConfig, KuramotoLM
from kuramoto_attention.models.lm import ByteLM
from kuramoto_attention.models.transformer import TransformerConfig, TransformerLM

FAMILIES: dict[str, tuple[type, type[ByteLM]]] = {
    "kuramoto": (KuramotoConfig, KuramotoLM),
    "transformer": (TransformerConfig, TransformerLM),
}

# The tuned recipe (ka-1m-tuned's, carried to SU(2) and to 5M): no self term, a phase lag where the group defines one,
# 8 positional clocks per head started at weight 4 (the score); one pair of metric gates for all layers, they and the
# value gate reading the feed-forward's shared P φ(x) (the weights it saves pay for oscillators). docs/choices.md says
# what each ingredient measured
TUNED_SCORE: dict[str, Any] = {"self_coupling": False, "phase_lag": True, "clock": 8, "clock_init": 4.0}
TUNED_SHARING: dict[str, Any] = {"ff_proj": "shared", "shared_gates": True, "value_gate_input": "ff-proj",
                                 "gates_input": "ff-proj"}


def kuramoto_lm(dim: int, depth: int, heads: int, ff_hidden: int, *, group: str = "torus", tuned: bool = False,
                **fields: Any) -> KuramotoConfig:
    """The Kuramoto family's component builder: a model of these widths on ``group``, with the tuned recipe or not,
    ``fields`` (KuramotoConfig's or AttentionConfig's) on top."""
    attention = {"group": group}
    model: dict[str, Any] = {}
    if tuned:
        defined = build_geometry(group).options  # the phase lag only where the group has one
        attention |= {k: v for k, v in TUNED_SCORE.items() if k != "phase_lag" or "phase_lag" in defined}
        model |= TUNED_SHARING
    names = {f.name for f in dataclass_fields(AttentionConfig)}
    attention |= {k: v for k, v in fields.items() if k in names}
    model |= {k: v for k, v in fields.items() if k not in names}
    return KuramotoConfig(dim=dim, depth=depth, heads=heads, ff_hidden=ff_hidden,
                          attention=AttentionConfig(**attention), **model)


# The model builders: one function per named size, fixed numbers. Widths are chosen so that every parameter
# (embeddings included) sums to within ±3% of the nominal size (``kuramoto params``)
def ka_tiny() -> KuramotoConfig:
    return kuramoto_lm(16, 2, 2, 32, context=32)


def tf_tiny() -> TransformerConfig:
    return TransformerConfig(dim=16, depth=2, heads=2, ff_hidden=32, context=32)


def ka_1m() -> KuramotoConfig:
    return kuramoto_lm(128, 4, 4, 312, ff_proj="shared")  # a hidden unit reads P ψ(θ): 3k weights, as tf's 3d


def tf_1m() -> TransformerConfig:
    return TransformerConfig(dim=128, depth=5, heads=4, ff_hidden=336)


def ka_1m_tuned() -> KuramotoConfig:
    return kuramoto_lm(160, 4, 4, 350, tuned=True)


def ka_su2_1m() -> KuramotoConfig:
    return kuramoto_lm(64, 4, 4, 524, group="su2", ff_proj="shared")  # the lift 4·64 wide: ka-1m's 2·128


def ka_su2_1m_tuned() -> KuramotoConfig:
    return kuramoto_lm(80, 4, 4, 494, group="su2", tuned=True)


def ka_sphere_1m() -> KuramotoConfig:
    return kuramoto_lm(64, 4, 4, 437, group="sphere", ff_proj="shared")  # a 4n-wide ambient increment: narrower ff


def ka_5m_tuned() -> KuramotoConfig:
    return kuramoto_lm(320, 5, 8, 800, tuned=True)


def ka_5m() -> KuramotoConfig:
    return kuramoto_lm(256, 5, 8, 442)


def tf_5m() -> TransformerConfig:
    return TransformerConfig(dim=256, depth=6, heads=8, ff_hidden=728)


BUILDERS: dict[str, tuple[str, Callable[[], Any]]] = {
    "ka-tiny": ("kuramoto", ka_tiny), "tf-tiny": ("transformer", tf_tiny),
    "ka-1m": ("kuramoto", ka_1m), "tf-1m": ("transformer", tf_1m), "ka-1m-tuned": ("kuramoto", ka_1m_tuned),
    "ka-su2-1m": ("kuramoto", ka_su2_1m), "ka-su2-1m-tuned": ("kuramoto", ka_su2_1m_tuned),
    "ka-sphere-1m": ("kuramoto", ka_sphere_1m), "ka-5m-tuned": ("kuramoto", ka_5m_tuned), "ka-5m": ("kuramoto", ka_5m),
    "tf-5m": ("transformer", tf_5m),
}
PRESETS: dict[str, tuple[str, Any]] = {name: (family, build()) for name, (family, build) in BUILDERS.items()}

# what each preset is, in a few words (the README's preset table, ``kuramoto params``)
SUMMARY = {
    "ka-tiny": "for tests and smoke runs", "tf-tiny": "for tests and smoke runs",
    "ka-1m": "the paper's layer; the feed-forward reads a shared P ψ(θ)",
    "tf-1m": "RoPE + SwiGLU, pre-RMSNorm, tied embeddings",
    "ka-1m-tuned": "no self term, phase lag, 8 clocks, shared gates reading P ψ(θ)",
    "ka-su2-1m": "ka-1m's layout on SU(2): 64 unit quaternions per token",
    "ka-su2-1m-tuned": "ka-1m-tuned's recipe on SU(2), less the phase lag: 80 quaternions",
    "ka-sphere-1m": "ka-1m's layout on the sphere S³ ⊂ R⁴ (AKOrN's oscillators)",
    "ka-5m-tuned": "ka-1m-tuned's recipe at 5M: k = 320 in 8 heads",
    "ka-5m": "the 5M Kuramoto model", "tf-5m": "the 5M transformer",
}

NOMINAL = {"ka-1m": 1_000_000, "ka-1m-tuned": 1_000_000, "ka-su2-1m": 1_000_000, "ka-su2-1m-tuned": 1_000_000,
           "ka-sphere-1m": 1_000_000,
           "tf-1m": 1_000_000, "ka-5m": 5_000_000, "ka-5m-tuned": 5_000_000, "tf-5m": 5_000_000}


def get_preset(name: str) -> tuple[str, Any]:
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}")
    family, build = BUILDERS[name]
    return family, build()


def build_model(family: str, cfg: Any) -> ByteLM:
    if family not in FAMILIES:
        raise ConfigError(f"unknown model family {family!r}; choose one of: {', '.join(FAMILIES)}")
    try:
        return FAMILIES[family][1](cfg)
    except ValueError as exc:  # invalid field values: report as a config error
        raise ConfigError(str(exc)) from None


def upgrade_state_dict(family: str, state: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's tensors of an older layout under today's names (what ``from_pretrained`` applies)."""
    if family not in FAMILIES:
        raise ConfigError(f"unknown model family {family!r}; choose one of: {', '.join(FAMILIES)}")
    return FAMILIES[family][1].upgrade_state(state)


def config_from_dict(data: dict[str, Any]) -> tuple[str, Any]:
    """(family, config) from a saved config (a checkpoint's or run.json's: the family, then the fields)."""
    data = dict(data)
    family = data.pop("family", None)
    if family not in FAMILIES:
        raise ConfigError(f"config has unknown family {family!r}; expected one of {', '.join(FAMILIES)}")
    return family, read_config(family, FAMILIES[family][0], data)


def preset_table() -> list[dict[str, Any]]:
    """Name, parameter count, depth, width, heads of every preset (built on the meta device)."""
    rows = []
    for name, (family, cfg) in PRESETS.items():
        with torch.device("meta"):
            n = build_model(family, cfg).num_params()
        row = {"name": name, "family": family, "params": n, "depth": cfg.depth, "width": cfg.dim,
               "heads": cfg.heads, "ff_hidden": cfg.ff_hidden, "what": SUMMARY.get(name, "")}
        if name in NOMINAL:
            row["nominal"] = NOMINAL[name]
            row["deviation"] = round(n / NOMINAL[name] - 1, 4)
        rows.append(row)
    return rows
