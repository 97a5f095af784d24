"""What the two model families share: the byte-level LM interface and generation.

A subclass provides ``embed(idx) -> h``, ``blocks`` (each ``block(h, cache=...)``) and
``readout(h) -> logits``; this base class supplies forward, incremental generation,
parameter counting, the weight-decay split and ``save_pretrained``/``from_pretrained``
(huggingface_hub's ``PyTorchModelHubMixin``, safetensors + config.json, local use).
"""

from contextlib import nullcontext
from dataclasses import asdict
from typing import Any

import torch
from huggingface_hub import PyTorchModelHubMixin
from torch import Tensor, nn

from kuramoto_attention.ops.attention import KVCache

VOCAB_SIZE = 256  # bytes


class ByteLM(nn.Module, PyTorchModelHubMixin):
    """Base class: idx (B, T) int64 bytes -> logits (B, T, 256)."""

    blocks: nn.ModuleList
    family: str  # the registry name (presets.FAMILIES) a checkpoint's config records
    config: Any  # the family's dataclass config

    def embed(self, idx: Tensor) -> Tensor:
        raise NotImplementedError

    def readout(self, h: Tensor) -> Tensor:
        raise NotImplementedError

    def no_weight_decay(self) -> set[str]:
        """Names of matrix-shaped parameters that must not be decayed (e.g. phases)."""
        return set()

    def phase_parameter_names(self) -> set[str]:
        """Names of parameters that are angles (own learning-rate multiplier, never decayed)."""
        return set()

    def forward(self, idx: Tensor, caches: list[KVCache] | None = None) -> Tensor:
        if idx.dtype != torch.long or idx.dim() != 2:
            raise ValueError(f"idx must be an int64 tensor of shape (B, T), got {idx.dtype} {tuple(idx.shape)}")
        h = self.embed(idx)
        for i, block in enumerate(self.blocks):
            h = block(h, cache=None if caches is None else caches[i])
        return self.readout(h)

    def config_dict(self) -> dict[str, Any]:
        """The config as checkpoints and run.json record it: the family, then every field."""
        return {"family": self.family, **asdict(self.config)}

    def num_params(self) -> int:
        """Every parameter, embeddings included (shared modules counted once)."""
        return sum(p.numel() for p in self.parameters())

    def new_caches(self, capacity: int = 16) -> list[KVCache]:
        """One empty cache per block, each first sized for ``capacity`` tokens (it grows past that)."""
        return [KVCache(capacity) for _ in self.blocks]

    @torch.inference_mode()  # no autograd bookkeeping at all: per-step overhead dominates at batch 1
    def generate(
        self,
        prompt: Tensor,
        max_new_tokens: int,
        *,
        temperature: float = 1.0,
        top_k: int | None = None,
        use_cache: bool = True,
        generator: torch.Generator | None = None,
        compile: bool = False,
    ) -> Tensor:
        """Sample continuations of prompt (B, T0) -> (B, T0 + max_new_tokens).

        With ``use_cache`` each step feeds only the newest token and reuses every earlier
        token's keys/values; without it, each step recomputes the whole sequence.
        ``compile`` runs the forward through ``torch.compile`` with dynamic shapes (one graph for
        every sequence and cache length, after a few steps): a cached step is a few hundred small
        operators, each costing more to launch than to compute at batch 1, and compiling fuses them.
        """
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
        forward = torch.compile(self, dynamic=True) if compile else self
        out = prompt.clone()  # an inference tensor, like every later input (else a graph of its own)
        # the model reads at most T0 + max_new_tokens − 1 tokens: the buffers never grow or fill exactly
        caches = self.new_caches(prompt.shape[1] + max_new_tokens) if use_cache else None
        step_input = out
        # one generation compiles 4 graphs of ``forward`` (first and later steps, with and without a cache), and
        # dynamo's recompile limit (8) counts per code object: every ByteLM in the process shares it
        recompiles = torch._dynamo.config.patch(recompile_limit=64) if compile else nullcontext()
        with recompiles:
            for _ in range(max_new_tokens):
                logits = forward(step_input if use_cache else out, caches=caches)[:, -1].float()
                if temperature == 0:
                    nxt = logits.argmax(dim=-1, keepdim=True)
                else:
                    logits = logits / temperature
                    if top_k is not None:
                        kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[:, -1:]
                        logits = logits.masked_fill(logits < kth, float("-inf"))
                    probs = torch.softmax(logits, dim=-1)
                    nxt = torch.multinomial(probs, 1, generator=generator)
                out = torch.cat((out, nxt), dim=1)
                step_input = nxt
        return out
