"""The transformer family as stock ``LlamaForCausalLM``: the same architecture, renamed.

Ours (models/transformer.py) is Llama's decoder exactly: pre-RMSNorm (eps as our ``RMSNorm`` has it), RoPE on the
half-split pairs (x_i, x_{i+d/2}) at frequencies base^(−i/(d/2)) (Llama's ``rotate_half`` and ``inv_freq``), SwiGLU,
no biases, one key/value head per query head, logits from the tied embedding (or an untied head). The export
splits the fused ``qkv`` projection into q, k and v (rows in that order, each head a contiguous block of rows, as
Llama's ``view(..., heads, head_dim)`` reads them) and renames every other tensor; nothing else changes.
"""

from __future__ import annotations

import re

from torch import Tensor
from transformers import LlamaConfig, LlamaForCausalLM

from kuramoto_attention.errors import ConfigError
from kuramoto_attention.models.lm import VOCAB_SIZE
from kuramoto_attention.models.transformer import TransformerLM

# our name (per block: blocks.{i}.<name>) -> Llama's (per layer: model.layers.{i}.<name>)
BLOCK_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ff_norm.weight": "post_attention_layernorm.weight",
    "attn.out.weight": "self_attn.o_proj.weight",
    "ff.w_gate.weight": "mlp.gate_proj.weight",
    "ff.w_up.weight": "mlp.up_proj.weight",
    "ff.w_out.weight": "mlp.down_proj.weight",
}
QKV = "attn.qkv.weight"
TOP_NAMES = {"tok_embedding.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight",
             "head.weight": "lm_head.weight"}
BLOCK = re.compile(r"blocks\.(\d+)\.(.+)")


def llama_config(model: TransformerLM) -> LlamaConfig:
    cfg = model.config
    return LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=cfg.dim,
        intermediate_size=cfg.ff_hidden,
        num_hidden_layers=cfg.depth,
        num_attention_heads=cfg.heads,
        num_key_value_heads=cfg.heads,
        head_dim=cfg.dim // cfg.heads,
        hidden_act="silu",
        max_position_embeddings=cfg.context,  # the training context (RoPE itself has no maximum)
        rms_norm_eps=model.norm.eps,
        rope_parameters={"rope_type": "default", "rope_theta": float(cfg.rope_base)},
        tie_word_embeddings=cfg.tied,
        attention_bias=False,
        mlp_bias=False,
        initializer_range=cfg.init_std,
        bos_token_id=None,  # bytes only: no special token (Llama's defaults, 1 and 2, are bytes here)
        eos_token_id=None,
        pad_token_id=None,
    )


def llama_state_dict(model: TransformerLM) -> dict[str, Tensor]:
    """Our tensors under Llama's names (q, k, v split out of ``qkv``); a name this map does not know is refused, so
    that a model with a part Llama lacks is never exported without it."""
    out: dict[str, Tensor] = {}
    dim = model.config.dim
    for name, tensor in model.state_dict().items():
        tensor = tensor.detach().cpu()
        block = BLOCK.fullmatch(name)
        if block is None and name in TOP_NAMES:
            out[TOP_NAMES[name]] = tensor
        elif block is not None and block.group(2) == QKV:
            prefix = f"model.layers.{block.group(1)}.self_attn."
            q, k, v = tensor.split(dim, dim=0)
            out.update({prefix + "q_proj.weight": q, prefix + "k_proj.weight": k, prefix + "v_proj.weight": v})
        elif block is not None and block.group(2) in BLOCK_NAMES:
            out[f"model.layers.{block.group(1)}.{BLOCK_NAMES[block.group(2)]}"] = tensor
        else:
            raise ConfigError(f"tensor {name} of the transformer has no counterpart in Llama: this model cannot be "
                              f"exported as LlamaForCausalLM")
    return {k: v.contiguous() for k, v in out.items()}


def to_llama(model: TransformerLM) -> LlamaForCausalLM:
    """A ``LlamaForCausalLM`` computing what ``model`` computes (float32, CPU, evaluation mode)."""
    if model.family != "transformer":
        raise ConfigError(f"a {model.family} model is not a transformer: export it with KuramotoForCausalLM")
    llama = LlamaForCausalLM(llama_config(model))
    state = llama_state_dict(model)
    missing, unexpected = llama.load_state_dict(state, strict=False)
    tied = {"lm_head.weight"} if model.config.tied else set()
    if set(missing) - tied or unexpected:
        raise ConfigError(f"the transformer does not map onto Llama: missing {sorted(set(missing) - tied)}, "
                          f"unexpected {sorted(unexpected)}")
    llama.tie_weights()
    return llama.float().eval()
