"""The transformers config of a Kuramoto language model: our ``KuramotoConfig`` (every field, nested as a run's
``model_config.json`` nests it) under the key ``kuramoto``, plus the standard names transformers' tools read
(``vocab_size``, ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``) derived from it, never stored apart
from it, so that the two cannot disagree."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from typing import Any

from transformers import PretrainedConfig

from kuramoto_attention.errors import ConfigError
from kuramoto_attention.models.kuramoto import KuramotoConfig
from kuramoto_attention.models.lm import VOCAB_SIZE
from kuramoto_attention.models.presets import config_from_dict

FAMILY = "kuramoto"
# names transformers' tools read, each derived from our fields (a saved config.json that holds one is ignored for it)
DERIVED = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "max_position_embeddings",
           "tie_word_embeddings")


class KuramotoLMConfig(PretrainedConfig):
    """``kuramoto``: the model's fields as a dict (``dataclasses.asdict`` of a ``KuramotoConfig``; older layouts are
    read as ``kuramoto_attention.models.presets.config_from_dict`` reads them). Omitted: the default model."""

    model_type = "kuramoto"

    def __init__(self, kuramoto: dict[str, Any] | None = None, use_cache: bool = True, **kwargs: Any) -> None:
        for key in DERIVED:
            kwargs.pop(key, None)
        model = kuramoto if kuramoto is not None else asdict(KuramotoConfig())
        parsed = config_from_dict({"family": FAMILY, **{k: v for k, v in model.items() if k != "family"}})[1]
        self.kuramoto = asdict(parsed)  # canonical: today's layout, every field
        self.use_cache = use_cache  # generate's incremental decoding (transformers' own key)
        super().__init__(**kwargs)

    # ------------------------------------------------------------------ derived standard names
    def model_config(self) -> KuramotoConfig:
        """Our dataclass config (what ``build_model("kuramoto", ...)`` takes)."""
        return config_from_dict({"family": FAMILY, **self.kuramoto})[1]

    @property
    def vocab_size(self) -> int:
        return VOCAB_SIZE  # bytes

    @property
    def hidden_size(self) -> int:
        return self.kuramoto["dim"]  # oscillators per token

    @property
    def num_hidden_layers(self) -> int:
        return self.kuramoto["depth"]

    @property
    def num_attention_heads(self) -> int:
        return self.kuramoto["heads"]

    @property
    def max_position_embeddings(self) -> int:
        return self.kuramoto["context"]  # the training context: the model itself has no maximum length

    @property
    def tie_word_embeddings(self) -> bool:
        return False  # the readout (prototypes) is its own matrix

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike, **kwargs: Any) -> KuramotoLMConfig:
        """As transformers' loader, but a directory of another model type is refused in one line (transformers
        would only warn and build the default Kuramoto model)."""
        config_dict, _ = cls.get_config_dict(pretrained_model_name_or_path, **dict(kwargs))
        found = config_dict.get("model_type")
        if found is not None and found != cls.model_type:
            hint = (" (a transformer run's export: load it with transformers' AutoModelForCausalLM, no import of "
                    "ours needed)" if found == "llama" else "")
            raise ConfigError(f"{pretrained_model_name_or_path} holds a {found} model, not a {cls.model_type} "
                              f"one{hint}")
        return super().from_pretrained(pretrained_model_name_or_path, **kwargs)

    def __repr__(self) -> str:
        return f"{type(self).__name__} {json.dumps(self.to_dict(), sort_keys=True)}"
