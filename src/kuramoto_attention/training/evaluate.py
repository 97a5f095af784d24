"""Bits per byte over a whole split, the way the field reports it.

Sliding window: every byte from position 1 on is predicted exactly once. The first window
scores all of its positions; each later window moves by ``stride`` and scores only its
last ``stride`` positions, so each prediction sees at least ``context − stride`` bytes of
history (default stride = context/2). ``stride = context`` is the non-overlapping mode.
"""

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from kuramoto_attention.errors import ConfigError
from kuramoto_attention.models.lm import ByteLM
from kuramoto_attention.training.precision import autocast


def window_plan(n: int, context: int, stride: int) -> list[tuple[int, int]]:
    """(start, n_scored) per window over a stream of n bytes (n − 1 predictions)."""
    if n < 2:
        raise ConfigError("the split has fewer than 2 bytes: nothing to score")
    context = min(context, n - 1)
    plan = [(0, context)]
    end = context  # predictions made so far cover targets 1..end
    while end < n - 1:
        new_end = min(end + stride, n - 1)
        plan.append((new_end - context, new_end - end))
        end = new_end
    return plan


@torch.no_grad()
def evaluate_bpc(
    model: ByteLM,
    data: np.ndarray,
    context: int,
    *,
    stride: int | None = None,
    batch_size: int = 32,
    device: torch.device | str = "cpu",
    precision: str = "bf16",
    max_bytes: int | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Mean cross-entropy in bits over the split (or its first ``max_bytes``)."""
    if batch_size < 1 or context < 1:
        raise ConfigError(f"batch_size and context must be >= 1, got {batch_size} and {context}")
    stride = stride or max(1, context // 2)
    if not 0 < stride <= context:
        raise ConfigError(f"stride must be in [1, context={context}], got {stride}")
    device = torch.device(device)
    n = len(data) if max_bytes is None else min(len(data), max_bytes)
    plan = window_plan(n, context, stride)
    ctx = min(context, n - 1)
    model.eval()
    total_nats, total_scored = 0.0, 0
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(plan), unit="win", mininterval=1.0)
    for i in range(0, len(plan), batch_size):
        chunk = plan[i:i + batch_size]
        windows = np.stack([np.asarray(data[s:s + ctx + 1]) for s, _ in chunk]).astype(np.int64)
        xy = torch.from_numpy(windows).to(device)
        with autocast(device, precision):
            logits = model(xy[:, :-1])
        nll = F.cross_entropy(logits.float().transpose(1, 2), xy[:, 1:], reduction="none")  # (B, ctx)
        for row, (_, scored) in enumerate(chunk):
            total_nats += nll[row, ctx - scored:].sum().item()
            total_scored += scored
        if bar is not None:
            bar.update(len(chunk))
    if bar is not None:
        bar.close()
    return {"bpc": total_nats / total_scored / math.log(2), "bytes_scored": total_scored, "windows": len(plan),
            "context": ctx, "stride": stride}
