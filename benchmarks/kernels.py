"""``python -m benchmarks.kernels``: the ten compiled vector kernels (ops/csrc/vectors.cpp) alone, at one layer's
shapes of a training step (default: ka-su2-1m-tuned's, batch 32 × context 256 tokens of 80 oscillators in 4 heads,
query/key rows of 96, bf16 features and attention output as under autocast), each one's minimum over interleaved
repeats. ``--against FILE`` builds a second vectors.cpp (an older one: ``git show REV:src/kuramoto_attention/ops/
csrc/vectors.cpp > old.cpp``, REV 84200c4 or later: the kernels must take the same arguments), times it beside the
current one and checks that every output is identical. Timings are fair only on an idle machine; writes nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import time
from pathlib import Path
from types import ModuleType

import torch
from torch.utils import cpp_extension

from kuramoto_attention.ops import native


def build(source: Path) -> ModuleType:
    digest = hashlib.sha1(source.read_bytes() + " ".join(native.compile_flags()).encode()).hexdigest()[:12]
    return cpp_extension.load(f"kuramoto_vectors_bench_{digest}", [str(source), *map(str, native.SOURCES[1:])],
                              extra_cflags=native.compile_flags(), extra_include_paths=[str(native.CSRC)],
                              extra_ldflags=["-fopenmp"], verbose=False)


def calls(m: ModuleType, batch: int, context: int, n: int, heads: int, width: int) -> dict:
    """The ten kernels on fixed random inputs (unit quaternions, a step, gradients), as zero-argument calls."""
    gen = torch.Generator().manual_seed(0)
    tokens, quat = batch * context, "quaternion"

    def unit(*shape: int) -> list[torch.Tensor]:
        q = torch.randn(4, *shape, generator=gen)
        return list(q / q.norm(dim=0, keepdim=True))

    x, rotation = unit(tokens, n), unit(context, n)
    soft, tau = torch.rand(tokens, 2 * n, generator=gen) + 0.1, torch.rand(heads, generator=gen) + 0.5
    inv_mean = 1 / soft.view(tokens, 2 * heads, -1).mean(-1)
    mean = torch.randn(batch, heads, context, 4 * n // heads, generator=gen).bfloat16()
    value, dy = torch.rand(tokens, n, generator=gen), torch.randn(4, tokens, n, generator=gen)
    w = list((0.3 * torch.randn(tokens, n, 3, generator=gen)).bfloat16().unbind(-1))
    dq, dk = (torch.randn(batch, heads, context, width, generator=gen).bfloat16() for _ in "qk")
    _, sq, h = m.step_forward(quat, x, mean, value, 0.5)
    extra = torch.randn(heads, context, width - 4 * n // heads, generator=gen).bfloat16()
    gates = (soft, inv_mean, tau)
    return {
        "features forward": lambda: m.features_forward(quat, x, rotation, *gates, extra, extra, heads, context, True,
                                                       width),
        "features backward": lambda: m.features_backward(quat, dq, dk, x, rotation, *gates, heads, context, True),
        "step forward": lambda: m.step_forward(quat, x, mean, value, 0.5),
        "step backward": lambda: m.step_backward(quat, dy, x, mean, value, 0.5, sq, h),
        "move forward": lambda: (m.move_forward(quat, x, w),),
        "move backward": lambda: m.move_backward(quat, dy, x, w),
        "lift forward": lambda: (m.lift_forward(x, True),),
        "lift backward": lambda: (m.lift_backward(dy.view(-1, n * 4).bfloat16(), n, torch.float32),),
        "heads forward": lambda: (m.heads_forward(x, heads, context, True),),
        "heads backward": lambda: (m.heads_backward(mean, n, torch.float32),),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.kernels", description=__doc__.splitlines()[0])
    p.add_argument("--against", type=Path, help="another vectors.cpp to build, time and compare")
    p.add_argument("--repeats", type=int, default=15, help="interleaved repeats (default 15)")
    p.add_argument("--shape", default="32,256,80,4,96", help="batch,context,oscillators,heads,query/key width")
    args = p.parse_args(argv)
    shape = tuple(int(v) for v in args.shape.split(","))
    builds = {"current": native.SOURCE, **({"against": args.against} if args.against else {})}
    jobs = {name: calls(build(src), *shape) for name, src in builds.items()}
    if "against" in jobs:
        for kernel, f in jobs["current"].items():
            same = all(torch.equal(a, b) for a, b in zip(f(), jobs["against"][kernel](), strict=True))
            print(f"{kernel}: outputs {'identical' if same else 'DIFFERENT'}")
    best = {name: dict.fromkeys(j, float("inf")) for name, j in jobs.items()}
    for _ in range(args.repeats):
        for name, j in jobs.items():
            for kernel, f in j.items():
                start = time.perf_counter()
                f(), f(), f()
                best[name][kernel] = min(best[name][kernel], (time.perf_counter() - start) / 3)
    for name, times in best.items():
        print(f"{name}: " + ", ".join(f"{k} {1e3 * v:.2f}" for k, v in times.items()) +
              f"; sum {1e3 * sum(times.values()):.1f} ms")


if __name__ == "__main__":
    main()
