"""``kuramoto export RUN OUT``: a training run as a directory transformers loads.

A transformer run becomes stock ``LlamaForCausalLM`` (no code of ours needed to load it); a Kuramoto run becomes
``KuramotoForCausalLM``, which ``import kuramoto_attention.hf`` registers, or which the Auto classes load by
themselves with ``trust_remote_code=True``: the directory carries a two-line module that re-exports the installed
package's classes, and its configs name them in ``auto_map`` (transformers' own mechanism for architectures it does not
ship). Both directories carry the byte tokenizer and a model card. The directory is written beside OUT and renamed
into place, so OUT is either complete or absent.
"""

from __future__ import annotations

import json
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

# The module an exported Kuramoto directory carries for ``trust_remote_code=True``: it holds no model code, only the
# installed package's classes (a Python without the package gets transformers' line naming the package to install)
REMOTE_MODULE = "kuramoto_remote"
REMOTE_CODE = '''"""Lets transformers' Auto classes load this directory with trust_remote_code=True: the classes
are those of the installed kuramoto-attention package (pip install 'kuramoto-attention[hf]'); no model code is here."""

from kuramoto_attention.hf import KuramotoByteTokenizer, KuramotoForCausalLM, KuramotoLMConfig

__all__ = ["KuramotoByteTokenizer", "KuramotoForCausalLM", "KuramotoLMConfig"]
'''
AUTO_MAP = {
    "config.json": {"AutoConfig": f"{REMOTE_MODULE}.KuramotoLMConfig",
                    "AutoModelForCausalLM": f"{REMOTE_MODULE}.KuramotoForCausalLM"},
    "tokenizer_config.json": {"AutoTokenizer": [f"{REMOTE_MODULE}.KuramotoByteTokenizer", None]},
}


def _add_remote_code(directory: Path) -> None:
    """The shim module and the ``auto_map`` entries that name its classes."""
    (directory / f"{REMOTE_MODULE}.py").write_text(REMOTE_CODE, encoding="utf-8")
    for name, auto_map in AUTO_MAP.items():
        path = directory / name
        config = json.loads(path.read_text(encoding="utf-8"))
        path.write_text(json.dumps({**config, "auto_map": auto_map}, indent=2) + "\n", encoding="utf-8")


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
        if model.family == "kuramoto":
            _add_remote_code(tmp)
        (tmp / "README.md").write_text(model_card(model, type(hf).__name__), encoding="utf-8")
        _readable(tmp)
        os.replace(tmp, out)  # onto an empty directory too
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if bars:
            hf_logging.enable_progress_bar()
    return Export(model.family, type(hf).__name__, out, model.num_params())
