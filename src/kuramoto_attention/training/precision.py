"""The training precision: bf16 autocast (matmuls in bfloat16, the states and the optimizer in float32) or fp32,
and ``auto``, which picks bf16 only where the device runs it natively.

A CPU without bf16 instructions emulates bfloat16 matmuls several times slower than float32 ones, so ``auto``
reads the CPU's flags (AMX-BF16 or AVX512-BF16) rather than assuming bf16 is a speed-up everywhere.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterable

import torch

PRECISIONS = ("auto", "bf16", "fp32")
NATIVE_BF16_CPU_FLAGS = frozenset({"amx_bf16", "avx512_bf16"})


@functools.lru_cache(maxsize=4)
def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset[str] | None:
    """The CPU's feature flags as the kernel lists them (Linux), or None where they cannot be read."""
    try:
        with open(cpuinfo) as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return frozenset(value.split())
    except OSError:
        return None
    return None


def native_bf16(device: torch.device, flags: Iterable[str] | None = None) -> bool:
    """Whether ``device`` runs bfloat16 matmuls natively. ``flags``: the CPU's feature flags (read from
    /proc/cpuinfo when None; injectable so that both kinds of machine can be checked anywhere)."""
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if device.type != "cpu":
        return False
    if flags is None:
        flags = cpu_flags()
    return bool(flags is not None and NATIVE_BF16_CPU_FLAGS & set(flags))


def resolve_precision(precision: str, device: torch.device, flags: Iterable[str] | None = None) -> str:
    """``bf16`` or ``fp32``: ``auto`` becomes bf16 where ``native_bf16`` holds, fp32 elsewhere; the others stay."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision != "auto":
        return precision
    return "bf16" if native_bf16(device, flags) else "fp32"


def precision_note(requested: str, device: torch.device, flags: Iterable[str] | None = None) -> str | None:
    """The one line a command prints about its precision: the choice ``auto`` made, or that an explicit bf16 runs
    emulated (and slower) on a CPU without bf16 instructions; None for an explicit choice with nothing to add."""
    resolved = resolve_precision(requested, device, flags)
    where = "this GPU" if device.type == "cuda" else f"this {device.type.upper()}"
    if requested == "auto":
        why = "runs bf16 natively" if resolved == "bf16" else "has no native bf16"
        return f"precision: {resolved} (auto: {where} {why}; --precision chooses)"
    if resolved == "bf16" and not native_bf16(device, flags):
        return (f"precision: bf16 on {where} without native bf16: emulated, several times slower than "
                "--precision fp32")
    return None


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """bf16 autocast for ``bf16`` (``auto`` resolved for ``device`` first), nothing for ``fp32``."""
    if resolve_precision(precision, device) == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()
