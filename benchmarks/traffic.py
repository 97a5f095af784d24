"""``python -m benchmarks.traffic``: the bytes one eager training step writes in data movement alone (copies, casts,
concatenations, padding, zero fills), by operator and by where it was called, for each preset given.

Unlike a timing, this count does not depend on the machine or its load: it is what a change that removes a layout
pass or a cast should lower, and what it can be judged by on a machine too noisy to time. A forward operator is
named by the library line that called it, a backward one by its operator alone (autograd runs it). Writes nothing.
"""

from __future__ import annotations

import argparse
import collections
import traceback
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.bench import _train_step
from kuramoto_attention.models.presets import build_model, get_preset

# the operators that only move data: their output's bytes are the traffic counted
MOVES = frozenset({"copy_", "_to_copy", "clone", "cat", "stack", "constant_pad_nd", "slice_backward",
                   "select_backward", "fill_", "zero_", "new_zeros", "zeros", "contiguous"})


class _Count(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.bytes: collections.Counter[tuple[str, str, str]] = collections.Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        name = func.__name__.split(".")[0]
        first = out[0] if isinstance(out, (tuple, list)) else out
        if name in MOVES and isinstance(first, torch.Tensor):
            frames = [f for f in traceback.extract_stack() if "kuramoto_attention" in f.filename]
            where = f"{frames[-1].filename.split('kuramoto_attention/')[-1]}:{frames[-1].lineno}" if frames else ""
            self.bytes[(name, where or "backward", f"{str(first.dtype).removeprefix('torch.')} "
                        f"{tuple(first.shape)}")] += first.numel() * first.element_size()
        return out


def traffic(preset: str, precision: str, batch: int, context: int) -> collections.Counter[tuple[str, str, str]]:
    """Bytes written by data-movement operators in one training step (after one step of warm-up)."""
    torch.manual_seed(0)
    step = _train_step(build_model(*get_preset(preset)).train(), precision, False)
    gen = torch.Generator().manual_seed(0)
    x, y = (torch.randint(0, 256, (batch, context), generator=gen) for _ in range(2))
    step(x, y)
    with _Count() as count:
        step(x, y)
    return count.bytes


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.traffic", description=__doc__.splitlines()[0])
    p.add_argument("--presets", default="ka-su2-1m-tuned,ka-sphere-1m,tf-1m", help="presets, comma-separated")
    p.add_argument("--precision", default="bf16", choices=("fp32", "bf16"))
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--top", type=int, default=12, help="the largest entries listed per preset (default 12)")
    args = p.parse_args()
    for preset in args.presets.split(","):
        counted = traffic(preset, args.precision, args.batch, args.context)
        print(f"{preset} {args.precision} {args.batch}x{args.context}: {sum(counted.values()) / 1e6:,.0f} MB moved "
              "in one training step")
        for (name, where, what), size in counted.most_common(args.top):
            print(f"  {size / 1e6:8.1f} MB  {name:16s} {what:28s} {where}")


if __name__ == "__main__":
    main()
