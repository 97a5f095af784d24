"""``python -m benchmarks.native_ab``: the vector geometries' training throughput with the compiled CPU kernels
(ops/native.py) and without them (KURAMOTO_NATIVE=0: the same Functions in PyTorch operators), one setting after the
other in one process, each against tf-1m measured beside it as the full bench measures it (``bench_training``).
Prints one line per preset, mode, precision and backend: tokens/s of both models and the kernel efficiency (ka's
achieved FLOP/s over tf's). Timings are fair only on an idle machine; writes nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics

from benchmarks.bench import Plan, bench_training, flop_parity
from kuramoto_attention.ops import native

PRESETS = ("ka-su2-1m", "ka-su2-1m-tuned", "ka-sphere-1m")


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.native_ab", description=__doc__.splitlines()[0])
    p.add_argument("--presets", default=",".join(PRESETS), help="vector-geometry presets, comma-separated")
    p.add_argument("--modes", default="eager", help="eager and/or compile, comma-separated (default eager)")
    p.add_argument("--precisions", default="fp32,bf16", help="fp32 and/or bf16, comma-separated")
    p.add_argument("--repeats", type=int, default=3, help="interleaved repeats per measurement (default 3)")
    args = p.parse_args()
    for preset in args.presets.split(","):
        for mode in args.modes.split(","):
            for precision in args.precisions.split(","):
                for backend, env in (("compiled kernels", "1"), ("PyTorch operators", "0")):
                    os.environ[native.ENV] = env
                    plan = Plan(((preset, "tf-1m"),), (mode,), (256,), 1 << 30, repeats=args.repeats,
                                precisions=(precision,))
                    for row in bench_training(plan):
                        ka, tf = (statistics.median(row[s]["tokens_per_s"]) for s in ("ka", "tf"))
                        print(f"{preset} {mode} {precision} {backend}: ka {ka:,.0f} tok/s, tf-1m {tf:,.0f} tok/s, "
                              f"efficiency {ka / tf / flop_parity(row):.3f}", flush=True)


if __name__ == "__main__":
    main()
