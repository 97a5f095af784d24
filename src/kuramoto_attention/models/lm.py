"""What the two model families share: the byte-level LM interface and generation.

A subclass provides ``embed(idx) -> h``, ``blocks`` (each ``block(h, cache=...)``) and
``readout(h) -> logits``; this base class supplies forward, incremental generation,
parameter counting, the weight-decay split and ``save_pretrained``/``from_pretrained``
(huggingface_hub's ``PyTorchModelHubMixin``, safetensors + config.json, local use).

Loading is strict: ``config.json`` records the family, and a checkpoint of the other family, or one whose
tensors do not match the config (missing, unexpected, another shape), raises a ``ConfigError`` naming what is
wrong instead of returning a model with randomly initialised weights.
"""

import json
import os
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import PyTorchModelHubMixin, constants, hf_hub_download
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import Tensor, nn

from kuramoto_attention.errors import ConfigError
from kuramoto_attention.models.config import config_from_dict as read_config
from kuramoto_attention.ops.attention import KVCache

VOCAB_SIZE = 256  # bytes


def _recompile_limit(n: int) -> Any:
    """dynamo's per-code-object recompile limit set to ``n`` for a ``with`` block (``cache_size_limit`` before
    torch 2.7 named it ``recompile_limit``)."""
    config = torch._dynamo.config
    return config.patch(**{"recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit": n})


class ByteLM(nn.Module, PyTorchModelHubMixin):
    """Base class: idx (B, T) int64 bytes -> logits (B, T, 256)."""

    blocks: nn.ModuleList
    family: str  # the registry name (presets.FAMILIES) a checkpoint's config records
    config_class: type  # the family's config dataclass
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

    def omega_parameter_names(self) -> set[str]:
        """The angles that are drift rates (``omega_lr_mult``, when set, is theirs): a subset of the phase names."""
        return set()

    def forward(self, idx: Tensor, caches: list[KVCache] | None = None) -> Tensor:
        if idx.dtype != torch.long or idx.dim() != 2:
            raise ValueError(f"idx must be an int64 tensor of shape (B, T), got {idx.dtype} {tuple(idx.shape)}")
        # the embedding's own error is an IndexError on the CPU and a device-side assert on CUDA; one check (a
        # sync, as the layer's finiteness check) names the range instead, skipped where compiled graphs trace
        if idx.numel() and not torch.compiler.is_compiling():
            lo, hi = idx.min().item(), idx.max().item()
            if lo < 0 or hi >= VOCAB_SIZE:
                raise ValueError(f"idx holds {lo if lo < 0 else hi}, outside the byte range 0..{VOCAB_SIZE - 1}: "
                                 "a byte model reads text as its UTF-8 bytes, torch.tensor([list(text.encode())])")
        h = self.embed(idx)
        for i, block in enumerate(self.blocks):
            h = block(h, cache=None if caches is None else caches[i])
        return self.readout(h)

    def config_dict(self) -> dict[str, Any]:
        """The config as checkpoints and run.json record it: the family, then every field."""
        return {"family": self.family, **asdict(self.config)}

    # ------------------------------------------------------------------ save_pretrained / from_pretrained
    def _save_pretrained(self, save_directory: Path) -> None:
        super()._save_pretrained(save_directory)
        # config.json with the family (the mixin would write the bare dataclass): from_pretrained refuses a
        # checkpoint of the other family by it (the mixin keeps a config.json written here)
        (Path(save_directory) / constants.CONFIG_NAME).write_text(json.dumps(self.config_dict(), sort_keys=True,
                                                                              indent=2))

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | Path, *args: Any, **kwargs: Any) -> "ByteLM":
        """The mixin's ``from_pretrained``, with a local path checked first: a missing path, a run directory
        instead of its ``checkpoint/`` and a damaged weights file are one ``ConfigError`` line each (not a Hub
        repo-id error)."""
        path = Path(pretrained_model_name_or_path)
        # a Hub repo id is "owner/name": a path is one that exists or is spelt as a path
        local = path.exists() or str(pretrained_model_name_or_path).startswith((".", "/", "~"))
        if local:
            if not path.exists():
                raise ConfigError(f"{path} does not exist: give a directory written by save_pretrained (a run's "
                                  "checkpoint/) or a Hub repo id")
            if path.is_dir() and not (path / constants.CONFIG_NAME).exists():
                hint = (f"; it is a run directory: load {path / 'checkpoint'}" if (path / "checkpoint").is_dir()
                        else "")
                raise ConfigError(f"{path} has no {constants.CONFIG_NAME}: not a save_pretrained directory{hint}")
        try:
            return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        except SafetensorError as exc:
            what = str(exc).splitlines()[0]
            raise ConfigError(f"damaged weights in {pretrained_model_name_or_path}: {what}") from None

    @classmethod
    def _from_pretrained(
        cls,
        *,
        model_id: str,
        revision: str | None,
        cache_dir: str | Path | None,
        force_download: bool,
        local_files_only: bool,
        token: str | bool | None,
        map_location: str = "cpu",
        strict: bool = True,
        **model_kwargs: Any,
    ) -> "ByteLM":
        """The mixin's loader made strict (its default, ``strict=False``, loads whatever names match: none, for
        the other family). ``strict=False`` must be asked for, and still refuses another family's config."""

        def fetch(filename: str) -> str:
            if os.path.isdir(model_id):
                return os.path.join(model_id, filename)
            return hf_hub_download(repo_id=model_id, filename=filename, revision=revision, cache_dir=cache_dir,
                                   force_download=force_download, token=token, local_files_only=local_files_only)

        config = model_kwargs.get("config")
        if config is None:
            raise ConfigError(f"{model_id} has no {constants.CONFIG_NAME}: not a save_pretrained directory")
        with open(fetch(constants.CONFIG_NAME), encoding="utf-8") as fh:
            decoded = cls._check_config(json.load(fh), source=model_id)
        if isinstance(config, dict):  # under postponed annotations the mixin cannot decode it: a dict arrives
            model_kwargs["config"] = decoded
        model = cls(**model_kwargs)
        state = load_file(fetch(constants.SAFETENSORS_SINGLE_FILE), device=str(map_location))
        if strict:
            model.load_checked(state, source=model_id)
        else:
            model.load_state_dict(state, strict=False)
        return model.eval()

    @classmethod
    def _check_config(cls, raw: dict[str, Any], source: str) -> Any:
        """This family's config read from a config.json; another family's is refused: by its recorded family or,
        in a file written before the family was recorded, by fields this family does not have (the mixin would
        drop them and build the defaults). Older layouts of this family are read as ``config_from_dict`` reads
        them."""
        family = raw.get("family", cls.family)
        if family != cls.family:
            raise ConfigError(f"{source} holds a {family} model, not a {cls.family} one: load it with the "
                              f"{family} class (or kuramoto_attention.training.checkpoint.load_model)")
        try:
            return read_config(cls.family, cls.config_class, {k: v for k, v in raw.items() if k != "family"})
        except ConfigError as exc:
            hint = "" if "family" in raw else " (is it a checkpoint of another family?)"
            raise ConfigError(f"{source}: not a {cls.family} config: {exc}{hint}") from None

    @classmethod
    def upgrade_state(cls, state: dict[str, Tensor]) -> dict[str, Tensor]:
        """An older checkpoint layout's tensors under today's names (this family's renames; none by default)."""
        return state

    def load_checked(self, state: dict[str, Tensor], source: str) -> None:
        """Load ``state`` strictly: refused, naming what differs, unless it holds exactly this model's tensors (an
        older layout's names upgraded first)."""
        state = self.upgrade_state(state)
        self._check_state(state, source)
        self.load_state_dict(state, strict=True)

    def _check_state(self, state: dict[str, Tensor], source: str) -> None:
        own = self.state_dict()
        missing = sorted(own.keys() - state.keys())
        unexpected = sorted(state.keys() - own.keys())
        shapes = [f"{k} is {tuple(state[k].shape)}, expected {tuple(own[k].shape)}"
                  for k in sorted(own.keys() & state.keys()) if state[k].shape != own[k].shape]

        def some(names: list[str]) -> str:
            return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")

        problems = [f"{len(missing)} missing tensor(s) ({some(missing)})" if missing else "",
                    f"{len(unexpected)} unexpected tensor(s) ({some(unexpected)})" if unexpected else "",
                    f"{len(shapes)} of another shape ({some(shapes)})" if shapes else ""]
        if any(problems):
            raise ConfigError(f"{source} does not fit this {self.family} model: "
                              f"{'; '.join(p for p in problems if p)}")

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
        with _recompile_limit(64) if compile else nullcontext():
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
