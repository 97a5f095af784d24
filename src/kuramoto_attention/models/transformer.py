"""The matched baseline: a RoPE + SwiGLU pre-norm transformer (as llama2.c's model.py).

    h = E[x];  h ← h + W_o Attn(RoPE(W_q n(h)), RoPE(W_k n(h)), W_v n(h));  h ← h + SwiGLU(n(h))
    logits = W_head n(h)      (n = RMSNorm; W_head tied to E or not; no biases)
"""

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from kuramoto_attention.layers.norm import RMSNorm
from kuramoto_attention.layers.swiglu import SwiGLU
from kuramoto_attention.models.lm import VOCAB_SIZE, ByteLM
from kuramoto_attention.ops.attention import KVCache, apply_rotary, causal_attention, merge_heads, rotary_angles


@dataclass
class TransformerConfig:
    dim: int = 128
    depth: int = 5
    heads: int = 4
    ff_hidden: int = 336
    tied: bool = True  # output head shares the token embedding
    rope_base: float = 10000.0
    init_std: float = 0.02
    context: int = 256

    def __post_init__(self) -> None:
        for name in ("dim", "depth", "heads", "ff_hidden", "context"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.dim % self.heads or (self.dim // self.heads) % 2:
            raise ValueError(f"dim={self.dim} must split into heads={self.heads} heads of even size")
        for name, low in (("rope_base", 1.0), ("init_std", 0.0)):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not low < value < float("inf"):
                raise ValueError(f"{name} must be a finite number > {low:g}, got {value!r}")


class SelfAttention(nn.Module):
    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        if cfg.dim % cfg.heads or (cfg.dim // cfg.heads) % 2:
            raise ValueError(f"dim={cfg.dim} must split into {cfg.heads} heads of even size")
        self.heads, self.head_dim = cfg.heads, cfg.dim // cfg.heads
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim, bias=False)
        self.out = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.register_buffer("freqs", rotary_angles(self.head_dim // 2, cfg.rope_base).float(), persistent=False)

    def forward(self, x: Tensor, cache: KVCache | None = None) -> Tensor:
        b, t, _ = x.shape
        qkv = self.qkv(x).view(b, t, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (3, B, H, T, d)
        offset = cache.length if cache is not None else 0
        pos = torch.arange(offset, offset + t, device=x.device)
        q, k = apply_rotary(qkv[:2], self.freqs, pos).unbind(0)  # queries and keys in one pass: one cos/sin table
        v = qkv[2]
        if cache is not None:
            k, v = cache.update(k, v)
        y = causal_attention(q, k, v, scale=1.0 / math.sqrt(self.head_dim))
        return self.out(merge_heads(y))


class TransformerBlock(nn.Module):
    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.attn_norm, self.ff_norm = RMSNorm(cfg.dim), RMSNorm(cfg.dim)
        self.attn = SelfAttention(cfg)
        self.ff = SwiGLU(cfg.dim, cfg.ff_hidden, cfg.dim)

    def forward(self, h: Tensor, cache: KVCache | None = None) -> Tensor:
        h = h + self.attn(self.attn_norm(h), cache=cache)
        return h + self.ff(self.ff_norm(h))


class TransformerLM(ByteLM):
    family = "transformer"
    config_class = TransformerConfig

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = config
        self.tok_embedding = nn.Embedding(VOCAB_SIZE, config.dim)
        self.blocks = nn.ModuleList(TransformerBlock(config) for _ in range(config.depth))
        self.norm = RMSNorm(config.dim)
        self.head = None if config.tied else nn.Linear(config.dim, VOCAB_SIZE, bias=False)
        self._init_weights()

    def _init_weights(self) -> None:
        std = self.config.init_std
        for name, p in self.named_parameters():
            if p.dim() == 2:
                # residual projections scaled by 1/√(2L) (GPT-2), so depth does not grow the stream
                scaled = name.endswith(("attn.out.weight", "ff.w_out.weight"))
                nn.init.normal_(p, std=std / math.sqrt(2 * self.config.depth) if scaled else std)

    def embed(self, idx: Tensor) -> Tensor:
        return self.tok_embedding(idx)

    def readout(self, h: Tensor) -> Tensor:
        h = self.norm(h)
        return h @ self.tok_embedding.weight.T if self.head is None else self.head(h)
