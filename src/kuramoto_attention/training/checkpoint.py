"""Atomic checkpoints: model weights (safetensors, via save_pretrained), config JSON and the
trainer state (optimizer, step, tokens, RNG), so that ``--resume`` continues exactly.

A checkpoint is a directory written as ``checkpoint.tmp`` and then renamed into place; the
previous one is kept as ``checkpoint.old`` until the swap is complete, so a crash at any
moment leaves one complete checkpoint on disk.
"""

import errno
import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from kuramoto_attention.errors import ConfigError
from kuramoto_attention.models.lm import ByteLM
from kuramoto_attention.models.presets import build_model, config_from_dict

CKPT, TMP, OLD = "checkpoint", "checkpoint.tmp", "checkpoint.old"
STATE_FILE = "trainer_state.pt"


class CheckpointError(ValueError):
    """A missing, corrupt or mismatched checkpoint (reported as one line by the CLI)."""


class CheckpointSpaceError(OSError):
    """No space left on the device while writing a checkpoint; the partial one is removed, the previous one kept."""


# torch.save reports a full disk as a RuntimeError from its zip writer ("unexpected pos", "file write failed")
_FULL_DISK_WORDS = ("no space left", "unexpected pos", "file write failed", "enospc", "disk quota")


def _disk_full(exc: BaseException) -> bool:
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if any(w in str(exc).lower() for w in _FULL_DISK_WORDS):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w") as fh:
        fh.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
        fh.flush()
        os.fsync(fh.fileno())  # the rename must not publish a file whose bytes are still only in the page cache
    os.replace(tmp, path)


def check_directory(path: str | Path, what: str) -> Path:
    """``path`` as a Path, refused with one line when it, or a folder above it, is a file.

    Without this, such a path fails deep inside ``mkdir`` or ``open`` with a traceback (exit status 1).
    """
    path = Path(path)
    for p in (path, *path.parents):
        if p.exists() and not p.is_dir():
            what_is = "is a file, not a directory" if p == path else f"cannot be a directory: {p} is a file"
            raise ConfigError(f"{what} {path} {what_is}; give a folder")
    return path


def save_checkpoint(run_dir: Path, model: ByteLM, model_config: dict, state: dict[str, Any]) -> Path:
    run_dir = Path(run_dir)
    tmp, final, old = run_dir / TMP, run_dir / CKPT, run_dir / OLD
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        model.save_pretrained(tmp)
        # safetensors writes through a private temporary file (mode 0600); the others are 0644 under the usual umask
        (tmp / "model.safetensors").chmod(0o666 & ~_umask())
        write_json_atomic(tmp / "model_config.json", model_config)
        torch.save(state, tmp / STATE_FILE)
        _fsync_dir(tmp)
    except (OSError, RuntimeError, SafetensorError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)  # a partial checkpoint only holds the space the next one needs
        if _disk_full(exc):
            raise CheckpointSpaceError(errno.ENOSPC, f"no space left on device writing {tmp}") from exc
        raise
    if final.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)
    return final


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_dir(path: Path) -> None:
    for f in path.iterdir():
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())


def find_checkpoint(run_dir: Path) -> Path:
    run_dir = Path(run_dir)
    for name in (CKPT, OLD):  # .old is complete if a crash hit between the two renames
        if (run_dir / name / STATE_FILE).exists():
            return run_dir / name
    raise CheckpointError(f"no checkpoint in {run_dir}: expected {run_dir / CKPT}/ (train with `kuramoto train` first)")


def load_model(path: Path, map_location: str | torch.device = "cpu") -> tuple[ByteLM, dict]:
    """Load a model from a checkpoint or run directory; returns (model, model_config dict)."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path} does not exist: pass a run directory written by `kuramoto train`")
    check_directory(path, "run directory")
    if not (path / "model_config.json").exists():
        path = find_checkpoint(path)
    try:
        model_config = json.loads((path / "model_config.json").read_text())
        family, cfg = config_from_dict(model_config)
        model = build_model(family, cfg)
        weights = load_file(path / "model.safetensors", device=str(map_location))
    except (OSError, json.JSONDecodeError, ConfigError, RuntimeError, ValueError, SafetensorError) as exc:
        raise CheckpointError(f"corrupt checkpoint in {path}: {str(exc).splitlines()[0]}") from None
    try:  # the same strict check as from_pretrained: every tensor present, none extra, every shape right
        model.load_checked(weights, source=f"checkpoint {path}")
    except ValueError as exc:
        raise CheckpointError(f"{exc} (it was written by a different model than its config describes)") from None
    return model.to(map_location), model_config


def load_state(path: Path) -> dict[str, Any]:
    try:
        return torch.load(Path(path) / STATE_FILE, map_location="cpu", weights_only=True)
    except Exception as exc:  # any unpickling failure means the file is damaged
        raise CheckpointError(f"corrupt trainer state {Path(path) / STATE_FILE}: {str(exc).splitlines()[0]}") from None
