"""``python -m benchmarks.query_key_ab``: compiled torus training with the gated query and key as their custom
operators (``ops/fused.py: query_key``) against inductor's own fusion of the plain expressions, for the rule in
``fused_query_key``. Both models are built and compiled in one process and their steps alternate, so that the machine's
drift hits both alike; prints each model's step times and the median of the paired differences. Timings are fair only
on an idle machine; writes nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import types

import torch

from benchmarks.bench import _train_parts
from kuramoto_attention.cli import OneLineParser, run_main
from kuramoto_attention.errors import ConfigError
from kuramoto_attention.layers.groups.base import Geometry
from kuramoto_attention.layers.groups.torus import Torus
from kuramoto_attention.models.config import apply_overrides
from kuramoto_attention.models.presets import build_model, get_preset


def build(preset: str, overrides: dict[str, str], operators: bool) -> torch.nn.Module:
    """The preset's model; with ``operators`` False its torus computes the query and key from the plain expressions.
    A preset whose query and key never take the operators (not the torus, or no gates) is a ConfigError."""
    family, cfg = get_preset(preset)
    if overrides:
        cfg = apply_overrides(family, cfg, overrides)
    if family != "kuramoto" or cfg.attention.group != "torus" or not cfg.attention.gates:
        raise ConfigError(f"{preset} has no gated torus query and key to compare; choose a torus preset such as "
                          "ka-1m or ka-1m-tuned")
    model = build_model(family, cfg).train()
    if not operators:
        for module in model.modules():
            for child in vars(module).values():
                if isinstance(child, Torus):
                    child.gated_query_key = types.MethodType(Geometry.gated_query_key, child)  # type: ignore[method-assign]
    return model


def overrides_of(items: list[str]) -> dict[str, str]:
    """``name=value`` arguments as a dict; anything else is a ConfigError."""
    bad = [item for item in items if "=" not in item]
    if bad:
        raise ConfigError(f"overrides are name=value, got {', '.join(map(repr, bad))} (e.g. clock=0)")
    return dict(item.split("=", 1) for item in items)


def run(args: argparse.Namespace) -> None:
    overrides = overrides_of(args.overrides)
    torch.manual_seed(0)
    data = torch.randint(0, 256, (32, 257), generator=torch.Generator().manual_seed(0))
    x, y = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    steps = {name: _train_parts(build(args.preset, overrides, name == "operators"), args.precision, compiled=True)
             for name in ("operators", "inductor")}
    times: dict[str, list[float]] = {name: [] for name in steps}
    for i in range(3 + args.pairs):  # 3 warm-up pairs (the compile)
        for name in sorted(steps, reverse=i % 2 == 1):  # alternate which goes first
            forward_backward, update = steps[name]
            start = time.perf_counter()
            forward_backward(x, y)
            update()
            if i >= 3:
                times[name].append(1e3 * (time.perf_counter() - start))
    diffs = [a - b for a, b in zip(times["operators"], times["inductor"], strict=True)]
    summary = ", ".join(f"{name} min {min(t):.0f} median {statistics.median(t):.0f} ms" for name, t in times.items())
    print(f"{args.preset} {overrides or ''} compile {args.precision}: {summary}; operators − inductor, median of "
          f"{args.pairs} pairs {statistics.median(diffs):+.1f} ms (operators faster in {sum(d < 0 for d in diffs)})")


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m benchmarks.query_key_ab", description=__doc__.splitlines()[0])
    p.add_argument("preset", help="a torus preset with gates, e.g. ka-1m-tuned")
    p.add_argument("overrides", nargs="*", help="config fields as name=value, e.g. clock=0 or dim=160")
    p.add_argument("--pairs", type=int, default=16, help="alternating step pairs timed (default 16)")
    p.add_argument("--precision", default="bf16", choices=("fp32", "bf16"))
    p.set_defaults(func=run)
    return p


if __name__ == "__main__":
    sys.exit(run_main(build_parser()))
