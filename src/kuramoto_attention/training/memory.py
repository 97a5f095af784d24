"""How much memory one training step needs, estimated before training starts, and how much there is.

A step's peak is dominated by what autograd keeps for the backward pass. That is counted, not modelled: one
forward pass (plus the loss) at batch 1 runs under ``saved_tensors_hooks`` and sums the bytes of every distinct
storage autograd saves, parameters excluded. Short contexts are measured directly; a long one is extrapolated
from three short ones by the exact quadratic through them (a fused attention kernel keeps linear memory, one
that materialises T×T scores quadratic; a polynomial of degree ≤ 2 covers both). Batch scales it linearly.
Weights, gradients and AdamW's two moments add four fp32 copies of the parameters.

The estimate is a floor (transient buffers of the backward pass come on top), so a refusal is never a false
alarm: a step estimated above the available memory cannot run.
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from kuramoto_attention.errors import ConfigError
from kuramoto_attention.training.precision import autocast

DIRECT_MAX = 256  # contexts up to this are measured as they are
PROBES = (128, 256, 384)  # else: the quadratic through these three lengths
GIB = 2**30


def saved_bytes(model: nn.Module, context: int, device: torch.device, precision: str) -> int:
    """Bytes autograd saves in one forward pass and loss at batch 1 and ``context`` (parameters excluded)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    params |= {b.untyped_storage().data_ptr() for b in model.buffers()}
    seen: set[int] = set()
    total = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal total
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in params and ptr not in seen:
            seen.add(ptr)
            total += storage.nbytes()
        return t

    # a private generator and a forked RNG: the estimate must not move the run's random stream (exact resume)
    x = torch.randint(0, 256, (1, context + 1), generator=torch.Generator().manual_seed(0)).to(device)
    was_training = model.training
    model.train()
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), autocast(device, precision):
            logits = model(x[:, :-1])
            loss = F.cross_entropy(logits.float().flatten(0, 1), x[0, 1:])
        del loss, logits  # the graph (and what it saved) is freed here, before training allocates its own
    model.train(was_training)
    return total


def activation_bytes(model: nn.Module, context: int, device: torch.device, precision: str) -> tuple[float, float,
                                                                                                        float]:
    """Coefficients (a, b, c) of the bytes saved per sequence at length T: a + b·T + c·T²."""
    if context <= DIRECT_MAX:
        return float(saved_bytes(model, context, device, precision)), 0.0, 0.0
    m1, m2, m3 = (float(saved_bytes(model, t, device, precision)) for t in PROBES)
    h = PROBES[1] - PROBES[0]  # evenly spaced: the second difference is 2·c·h²
    c = max(0.0, (m3 - 2 * m2 + m1) / (2 * h * h))
    b = (m2 - m1) / h - c * (PROBES[0] + PROBES[1])
    a = m1 - b * PROBES[0] - c * PROBES[0] ** 2
    return a, b, c


@dataclass
class StepEstimate:
    per_sequence: float  # bytes of activations for one sequence of the run's context
    fixed: float  # weights, gradients and optimizer state
    batch: int
    context: int
    coefficients: tuple[float, float, float]

    @property
    def total(self) -> float:
        return self.fixed + self.batch * self.per_sequence

    def longest_context(self, available: float) -> int:
        """The longest context at batch 1 whose estimate fits ``available`` (0: none)."""
        a, b, c = self.coefficients
        budget = available - self.fixed - a
        if budget <= 0:
            return 0
        if c > 0:
            return int((-b + math.sqrt(b * b + 4 * c * budget)) / (2 * c))
        return int(budget / b) if b > 0 else self.context


def estimate_step(model: nn.Module, batch: int, context: int, device: torch.device, precision: str) -> StepEstimate:
    a, b, c = activation_bytes(model, context, device, precision)
    per_sequence = a + b * context + c * context * context
    fixed = 4.0 * sum(p.numel() * 4 for p in model.parameters())  # fp32 weights, gradients, two AdamW moments
    return StepEstimate(per_sequence, fixed, batch, context, (a, b, c))


def available_bytes(device: torch.device) -> int | None:
    """Memory this process may still use on ``device``; None when the platform does not say."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    if device.type != "cpu":
        return None
    limits = [v for v in (_meminfo_available(), _cgroup_available()) if v is not None]
    if not limits and hasattr(os, "sysconf"):
        with contextlib.suppress(ValueError, OSError):
            limits.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    return min(limits) if limits else None


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_available() -> int | None:
    """A container's limit (cgroup v2) minus what it uses: MemAvailable reports the host's memory."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit == "max":
            return None
        return int(limit) - int(Path("/sys/fs/cgroup/memory.current").read_text())
    except (OSError, ValueError):
        return None


def check_step_memory(model: nn.Module, batch: int, context: int, device: torch.device, precision: str,
                      processes: int = 1) -> StepEstimate | None:
    """Refuse (one line, with the estimate and the fix) a step that cannot fit in the available memory.

    ``processes``: training processes sharing this device's memory (CPU ranks on one machine).
    Returns the estimate, or None when the available memory is not known.
    """
    available = available_bytes(device)
    if available is None:
        return None
    est = estimate_step(model, batch, context, device, precision)
    if est.total * processes <= available:
        return est
    share = available / processes
    fits = int((share - est.fixed) // est.per_sequence) if est.per_sequence > 0 else batch
    where = f"{device.type} memory" + (f" shared by {processes} processes" if processes > 1 else "")
    if fits >= 1:
        fix = f"use --batch-size {fits} or less (or a shorter --context)"
    else:
        longest = est.longest_context(share)
        fix = (f"even batch 1 does not fit: use --context {longest} or less" if longest >= 1
               else "the model alone does not fit: use a smaller model")
    raise ConfigError(f"one training step needs about {_size(est.total * processes)} "
                      f"(batch {batch} × context {context}: {_size(est.batch * est.per_sequence)} of activations, "
                      f"{_size(est.fixed)} of weights and optimizer state) but only {_size(available)} of {where} "
                      f"is available; {fix}")


def _size(nbytes: float) -> str:
    return f"{nbytes / GIB:.1f} GiB" if nbytes >= GIB else f"{nbytes / 2**20:.1f} MiB"
