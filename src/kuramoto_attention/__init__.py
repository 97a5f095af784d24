"""Kuramoto attention: self-attention as one adaptive Kuramoto synchronisation step."""

from .kuramoto_lm import KuramotoConfig, KuramotoLM
from .layer import KuramotoAttention, PhaseGates
from .presets import PRESETS, build_model, get_preset
from .transformer import TransformerConfig, TransformerLM

__all__ = [
    "PRESETS",
    "KuramotoAttention",
    "KuramotoConfig",
    "KuramotoLM",
    "PhaseGates",
    "TransformerConfig",
    "TransformerLM",
    "build_model",
    "get_preset",
]
__version__ = "0.1.0"
