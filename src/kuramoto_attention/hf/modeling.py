"""The Kuramoto language model as a transformers causal LM: ``from_pretrained``, ``generate`` (incremental, on
transformers' cache), ``Trainer``, ``push_to_hub``.

``KuramotoForCausalLM`` holds our ``KuramotoLM`` as ``model`` (its tensors keep their names under ``model.``) and
calls nothing of it but ``forward(idx, caches=...)``: the numbers are the library's own.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import torch
from torch import Tensor, nn
from transformers import DynamicCache, GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from kuramoto_attention.errors import ConfigError
from kuramoto_attention.hf.cache import layer_caches
from kuramoto_attention.hf.configuration import FAMILY, KuramotoLMConfig
from kuramoto_attention.models.kuramoto import KuramotoLM
from kuramoto_attention.models.presets import build_model

# transformers 5.x renamed ``past_key_values`` to ``cache`` (inputs and outputs); both spellings are served
_OUTPUT_FIELDS = {f.name for f in dataclasses.fields(CausalLMOutputWithPast)}
CACHE_FIELD = "cache" if "cache" in _OUTPUT_FIELDS else "past_key_values"


class KuramotoForCausalLM(PreTrainedModel, GenerationMixin):
    """Bytes in, next-byte logits out (vocabulary 256); ``model`` is our ``KuramotoLM``."""

    config_class = KuramotoLMConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    _no_split_modules: ClassVar[list[str]] = ["KuramotoBlock"]  # a device map keeps each block whole

    def __init__(self, config: KuramotoLMConfig) -> None:
        super().__init__(config)
        self.model: KuramotoLM = build_model(FAMILY, config.model_config())  # type: ignore[assignment]
        # transformers builds the model on the meta device before loading: what loading then leaves unset (the
        # non-persistent buffers, any tensor a checkpoint lacks) is filled from a model built for real (_init_weights)
        self._built_on_meta = any(t.is_meta for t in self.model.state_dict().values())
        self._reference: dict[str, dict] | None = None
        self.post_init()

    @classmethod
    def from_byte_lm(cls, model: KuramotoLM) -> KuramotoForCausalLM:
        """The transformers model of one of ours (a copy of its tensors, on the CPU)."""
        if model.family != FAMILY:
            raise ConfigError(f"a {model.family} model is not a Kuramoto one: export it with kuramoto_attention.hf."
                              f"llama.to_llama")
        fields = {k: v for k, v in model.config_dict().items() if k != "family"}
        hf = cls(KuramotoLMConfig(kuramoto=fields))
        hf.model.load_state_dict({k: v.detach().cpu() for k, v in model.state_dict().items()}, strict=True)
        return hf.eval()

    # ------------------------------------------------------------------ initialisation after a load
    def initialize_weights(self) -> None:
        """transformers' pass over every module (``_init_weights``); the reference model it may build lives only for
        the pass."""
        try:
            super().initialize_weights()
        finally:
            self._reference = None

    def _init_weights(self, module: nn.Module) -> None:
        """Only after a load onto the meta device: copy, into each tensor of ``module`` that the load did not set,
        its value in a model of this config built for real (the non-persistent buffers are functions of the config;
        a missing weight gets our own initialisation). A model built directly keeps its own initialisation."""
        if not self._built_on_meta:
            return
        reference = self._reference_tensors()
        prefix = reference["modules"].get(id(module))
        if prefix is None:
            return
        with torch.no_grad():
            for name, tensor in [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]:
                if not getattr(tensor, "_is_hf_initialized", False) and prefix + name in reference["tensors"]:
                    tensor.copy_(reference["tensors"][prefix + name])

    def _reference_tensors(self) -> dict[str, dict]:
        """The tensors of a model of this config built on the CPU (by name), and this model's modules' name
        prefixes (by id)."""
        if self._reference is None:
            with torch.device("cpu"):  # out of the loader's meta-device context
                built = build_model(FAMILY, self.config.model_config())
            tensors = {"model." + k: v.detach() for k, v in [*built.named_parameters(), *built.named_buffers()]}
            modules = {id(m): name + "." if name else "" for name, m in self.named_modules()}
            self._reference = {"tensors": tensors, "modules": modules}
        return self._reference

    # ------------------------------------------------------------------ forward
    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        cache: Any = None,
        labels: Tensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | Tensor = 0,
        inputs_embeds: Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> CausalLMOutputWithPast | tuple:
        """Logits (B, T, 256) of the bytes ``input_ids`` (B, T); with ``labels`` (B, T, -100 = ignored) the mean
        next-byte cross-entropy as ``loss`` (labels are shifted here, as in every transformers causal LM).

        ``cache`` (or its older name ``past_key_values``): a transformers ``Cache`` holding the earlier tokens,
        extended in place; with ``use_cache`` and none given, a new ``DynamicCache`` (returned as ``cache``).
        By default the cache is kept in evaluation mode and not in training mode.
        """
        if cache is None:
            cache = kwargs.pop("past_key_values", None)
        kwargs.pop("position_ids", None)  # positions are the cache's length onward (no padding: see below)
        if inputs_embeds is not None:
            raise ValueError("KuramotoForCausalLM reads bytes: pass input_ids, not inputs_embeds")
        if input_ids is None:
            raise ValueError("input_ids (B, T) bytes are required")
        if output_attentions or output_hidden_states:
            raise ValueError("KuramotoForCausalLM returns logits only (for attention maps and states, see "
                             "kuramoto_attention.diagnostics)")
        if attention_mask is not None and not bool(attention_mask.all()):
            raise ValueError("KuramotoForCausalLM has no padding: every position of attention_mask must be 1 (batch "
                             "sequences of equal length, or generate one sequence at a time)")
        if use_cache is None:
            use_cache = bool(self.config.use_cache) and not self.training
        if use_cache and cache is None:
            cache = DynamicCache(config=self.config)
        caches = layer_caches(cache, self.config.num_hidden_layers) if cache is not None else None
        logits = self.model(input_ids, caches=caches)
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
        if isinstance(logits_to_keep, int):
            logits = logits[:, -logits_to_keep:] if logits_to_keep > 0 else logits
        else:
            logits = logits[:, logits_to_keep]
        out = CausalLMOutputWithPast(loss=loss, logits=logits, **{CACHE_FIELD: cache if use_cache else None})
        return out.to_tuple() if return_dict is False else out
