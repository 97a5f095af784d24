"""``kuramoto export RUN OUT``: a training run as a directory transformers loads.

A transformer run becomes stock ``LlamaForCausalLM`` (no code of ours needed to load it); a Kuramoto run becomes
``KuramotoForCausalLM`` (``import kuramoto_attention.hf`` registers it). Both directories carry the byte tokenizer and
a model card. The directory is written beside OUT and renamed into place, so OUT is either complete or absent.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from transformers.utils import logging as hf_logging

from kuramoto_attention.errors import ConfigError
from kuramoto_attention.hf.llama import to_llama
from kuramoto_attention.hf.model_card import model_card
from kuramoto_attention.hf.modeling import KuramotoForCausalLM
from kuramoto_attention.hf.tokenizer import KuramotoByteTokenizer
from kuramoto_attention.training.checkpoint import check_directory, load_model


@dataclass
class Export:
    family: str  # ours: "transformer" or "kuramoto"
    architecture: str  # transformers' class: "LlamaForCausalLM" or "KuramotoForCausalLM"
    out: Path
    params: int


def check_target(out: Path) -> None:
    """OUT must be new (or an empty directory): an export never mixes with, or replaces, earlier files."""
    check_directory(out, "export directory")
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"{out} already exists: export into a new directory (or remove this one first)")


def _readable(directory: Path) -> None:
    """Every file as the umask makes a new one (transformers writes the weights through a private temporary file)."""
    umask = os.umask(0)
    os.umask(umask)
    for f in directory.iterdir():
        f.chmod(0o666 & ~umask)


def export_run(run: str | Path, out: str | Path) -> Export:
    """Export the checkpoint of run directory ``run`` (or a checkpoint directory) to the new directory ``out``.

    A missing, incomplete or corrupt run raises ``CheckpointError``; an existing ``out``, ``ConfigError``.
    """
    out = Path(out)
    check_target(out)
    model, _ = load_model(Path(run))
    hf = to_llama(model) if model.family == "transformer" else KuramotoForCausalLM.from_byte_lm(model)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.export-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # one line of output from the command, not a bar per file
    try:
        hf.save_pretrained(tmp)
        KuramotoByteTokenizer().save_pretrained(tmp)
        (tmp / "README.md").write_text(model_card(model, type(hf).__name__), encoding="utf-8")
        _readable(tmp)
        os.replace(tmp, out)  # onto an empty directory too
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if bars:
            hf_logging.enable_progress_bar()
    return Export(model.family, type(hf).__name__, out, model.num_params())
