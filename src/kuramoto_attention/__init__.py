"""Kuramoto attention: self-attention as one adaptive Kuramoto synchronisation step on a compact group.

The public names are imported on first use (PEP 562), so that ``import kuramoto_attention.cli`` stays light: the
``kuramoto`` command parses its arguments before torch is imported.
"""

import importlib
from typing import Any

_HOMES = {
    "PhaseGates": "kuramoto_attention.layers.gates",
    "AttentionConfig": "kuramoto_attention.layers.kuramoto_attention",
    "KuramotoAttention": "kuramoto_attention.layers.kuramoto_attention",
    "KuramotoConfig": "kuramoto_attention.models.kuramoto",
    "KuramotoLM": "kuramoto_attention.models.kuramoto",
    "PRESETS": "kuramoto_attention.models.presets",
    "build_model": "kuramoto_attention.models.presets",
    "get_preset": "kuramoto_attention.models.presets",
    "upgrade_state_dict": "kuramoto_attention.models.presets",
    "TransformerConfig": "kuramoto_attention.models.transformer",
    "TransformerLM": "kuramoto_attention.models.transformer",
}

__all__ = sorted(_HOMES)
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'kuramoto_attention' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value  # once imported, an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
