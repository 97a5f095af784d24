"""``python -m benchmarks.native_ab``: training throughput with the compiled CPU kernels (ops/native.py) and without
them (KURAMOTO_NATIVE=0: the same functions in PyTorch operators).

By default, for the vector geometries: one setting after the other in one process, each against tf-1m measured beside
it as the full bench measures it (``bench_training``); one line per preset, mode, precision and backend with tokens/s
of both models and the kernel efficiency (ka's achieved FLOP/s over tf's). With ``--paired``: one model per preset
whose steps alternate between the two backends, and the median of the paired differences, which a few percent can be
judged by on a machine whose speed drifts. Under torch.compile the vector kernels are chosen when the graph is traced,
so there ``--paired`` takes the torus presets whose compiled step calls the query and key's operators (which read the
switch on every call). Timings are fair only on an idle machine; writes nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Iterator

import torch

from benchmarks.bench import Plan, _train_parts, bench_training, flop_parity
from kuramoto_attention.cli import OneLineParser, run_main
from kuramoto_attention.errors import ConfigError
from kuramoto_attention.models.presets import build_model, get_preset
from kuramoto_attention.ops import native
from kuramoto_attention.ops.fused import operators_when_compiled

PRESETS = ("ka-su2-1m", "ka-su2-1m-tuned", "ka-sphere-1m")
BACKENDS = {"compiled kernels": "1", "PyTorch operators": "0"}


def against_tf(preset: str, mode: str, precision: str, repeats: int) -> None:
    for backend, env in BACKENDS.items():
        with native_env(env):
            plan = Plan(((preset, "tf-1m"),), (mode,), (256,), 1 << 30, repeats=repeats, precisions=(precision,))
            rows = bench_training(plan)
        for row in rows:
            ka, tf = (statistics.median(row[s]["tokens_per_s"]) for s in ("ka", "tf"))
            print(f"{preset} {mode} {precision} {backend}: ka {ka:,.0f} tok/s, tf-1m {tf:,.0f} tok/s, "
                  f"efficiency {ka / tf / flop_parity(row):.3f}", flush=True)


@contextlib.contextmanager
def native_env(value: str) -> Iterator[None]:
    """KURAMOTO_NATIVE set to ``value`` for the block, then as it was."""
    before = os.environ.get(native.ENV)
    os.environ[native.ENV] = value
    try:
        yield
    finally:
        if before is None:
            del os.environ[native.ENV]
        else:
            os.environ[native.ENV] = before


def check_paired(preset: str, modes: list[str]) -> None:
    """A ConfigError unless switching the kernels per step changes what ``preset`` runs in every mode: a gated torus
    (its query and key's operators read the switch on each call) whose compiled step reaches the operators (d not a
    multiple of 16, ``fused_query_key``), or any preset in eager mode."""
    family, cfg = get_preset(preset)
    torus = family == "kuramoto" and cfg.attention.group == "torus"
    if torus and not cfg.attention.gates:
        raise ConfigError(f"{preset} has no gated query and key: the compiled kernels never run for it")
    if "compile" in modes and not (torus and operators_when_compiled("cpu", cfg.dim // cfg.heads)):
        raise ConfigError(f"--paired under compile needs a torus preset whose compiled step calls the query and key's "
                          f"operators (head d not a multiple of 16, e.g. ka-1m-tuned); {preset} is not one: the "
                          "vector kernels are chosen when the graph is traced. Use --modes eager")


def paired(preset: str, mode: str, precision: str, pairs: int) -> None:
    torch.manual_seed(0)
    data = torch.randint(0, 256, (32, 257), generator=torch.Generator().manual_seed(0))
    x, y = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    forward_backward, update = _train_parts(build_model(*get_preset(preset)).train(), precision, mode == "compile")
    times: dict[str, list[float]] = {name: [] for name in BACKENDS}
    for i in range(3 + pairs):  # 3 warm-up pairs (the compile)
        for name in sorted(BACKENDS, reverse=i % 2 == 1):  # alternate which goes first
            with native_env(BACKENDS[name]):
                start = time.perf_counter()
                forward_backward(x, y)
                update()
                if i >= 3:
                    times[name].append(1e3 * (time.perf_counter() - start))
    diffs = [a - b for a, b in zip(*times.values(), strict=True)]
    summary = ", ".join(f"{name} median {statistics.median(t):.0f} ms" for name, t in times.items())
    print(f"{preset} {mode} {precision}: {summary}; compiled kernels − PyTorch operators, median of {pairs} pairs "
          f"{statistics.median(diffs):+.1f} ms (kernels faster in {sum(d < 0 for d in diffs)})", flush=True)


def run(args: argparse.Namespace) -> None:
    presets, modes, precisions = (v.split(",") for v in (args.presets, args.modes, args.precisions))
    if args.repeats < 1:
        raise ConfigError("--repeats must be at least 1")
    if args.pairs < 1:
        raise ConfigError("--pairs must be at least 1")
    if bad := [m for m in modes if m not in ("eager", "compile")]:
        raise ConfigError(f"--modes takes eager and/or compile, got {', '.join(map(repr, bad))}")
    if bad := [p for p in precisions if p not in ("fp32", "bf16")]:
        raise ConfigError(f"--precisions takes fp32 and/or bf16, got {', '.join(map(repr, bad))}")
    for preset in presets:  # every mistake stops here, before anything runs
        get_preset(preset)
        if args.paired:
            check_paired(preset, modes)
    for preset in presets:
        for mode in modes:
            for precision in precisions:
                if args.paired:
                    paired(preset, mode, precision, args.pairs)
                else:
                    against_tf(preset, mode, precision, args.repeats)


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m benchmarks.native_ab", description=__doc__.splitlines()[0])
    p.add_argument("--presets", default=",".join(PRESETS), help="presets, comma-separated (default the vector ones)")
    p.add_argument("--modes", default="eager", help="eager and/or compile, comma-separated (default eager)")
    p.add_argument("--precisions", default="fp32,bf16", help="fp32 and/or bf16, comma-separated")
    p.add_argument("--repeats", type=int, default=3, help="interleaved repeats per measurement (default 3)")
    p.add_argument("--paired", action="store_true", help="alternate the backends step by step in one model")
    p.add_argument("--pairs", type=int, default=16, help="with --paired: step pairs timed (default 16)")
    p.set_defaults(func=run)
    return p


if __name__ == "__main__":
    sys.exit(run_main(build_parser()))
