"""Kuramoto attention: self-attention as one adaptive Kuramoto synchronisation step on a compact group."""

from kuramoto_attention.layers.gates import PhaseGates
from kuramoto_attention.layers.kuramoto_attention import AttentionConfig, KuramotoAttention
from kuramoto_attention.models.kuramoto import KuramotoConfig, KuramotoLM
from kuramoto_attention.models.presets import PRESETS, build_model, get_preset, upgrade_state_dict
from kuramoto_attention.models.transformer import TransformerConfig, TransformerLM

__all__ = [
    "PRESETS",
    "AttentionConfig",
    "KuramotoAttention",
    "KuramotoConfig",
    "KuramotoLM",
    "PhaseGates",
    "TransformerConfig",
    "TransformerLM",
    "build_model",
    "get_preset",
    "upgrade_state_dict",
]
__version__ = "0.1.0"
