"""``python -m benchmarks``: issue 6's speed and memory comparison, ka vs tf measured side by side in one process.

Parts: training throughput (eager/compile × fp32/bf16), peak memory of a training step against sequence
length, cached vs recomputed generation, achieved FLOP/s against the measured matmul peak. Writes
BENCHMARKS.md and a JSON of every raw measurement, from which each figure and PASS/FAIL is recomputable.
Timings are fair only on an idle machine; ``--quick`` is the CI smoke test (tiny sizes, no timing asserts).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from functools import partial
from itertools import accumulate, product
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from kuramoto_attention.cli import OneLineParser, run_main
from kuramoto_attention.diagnostics.flops import model_flops
from kuramoto_attention.errors import ConfigError
from kuramoto_attention.layers.kuramoto_attention import KuramotoAttention
from kuramoto_attention.models.presets import build_model, get_preset
from kuramoto_attention.models.transformer import SelfAttention
from kuramoto_attention.training.allocator import minor_faults
from kuramoto_attention.training.config import TrainConfig
from kuramoto_attention.training.optim import GradientClip, make_optimizer
from kuramoto_attention.training.precision import autocast, resolve_precision

MIB, GIB = 2**20, 2**30
LATEST = Path("results") / "bench.json"  # the full run BENCHMARKS.md shows
ARCHIVE = Path("results") / "bench-runs"  # every full run's JSON, kept: machines change between sessions
# thresholds: ka/tf tokens/s (default mode; eager fp32), fused/reference peak memory, cache speed-up
# Issue 26 replaced the throughput targets (ka/tf tokens/s >= 1.0, >= 0.9: they assumed ka does fewer FLOPs per token,
# and it does more) by kernel efficiency, ka's achieved FLOP/s over tf's, and the gap at equal training FLOPs
# kernel efficiency is judged per geometry: the torus at 0.95, the vector geometries (SU(2), the sphere) at 0.90
TARGETS = {"efficiency": 0.95, "efficiency_vector": 0.90, "equal_flops_gap": 0.03, "memory": 0.10,
           "step_memory": 1.5, "generation": 10.0}
# every preset of the README's headline table is a target, each against the transformer of its size
HEADLINE_PAIRS = (("ka-1m", "tf-1m"), ("ka-1m-tuned", "tf-1m"), ("ka-su2-1m", "tf-1m"), ("ka-su2-1m-tuned", "tf-1m"),
                  ("ka-sphere-1m", "tf-1m"), ("ka-5m", "tf-5m"), ("ka-5m-tuned", "tf-5m"))
EQUAL_FLOPS = tuple((p, f"flops/{p}-flops-tf-10m") for p in ("ka-1m-tuned", "ka-su2-1m-tuned", "ka-1m"))
FLOPS_METHOD = (
    "Model FLOPs per token = 6 · N_mm + 6 · L · T · (d_qk + d_v). N_mm: every nn.Linear weight, as often as a "
    "forward pass applies it (shared metric gates once per layer; the shared P once per layer whose feed-forward reads "
    "P ψ(θ), and once more per layer whose metric gates or value gate read it, one product serving both), plus a tied "
    "output head (ψ(E) for Kuramoto): a weight shared by L layers counts once in the parameters but L times here; "
    "embedding lookups are gathers, not matmuls. The attention term counts QKᵀ and A·V (2 FLOPs per multiply-add, "
    "backward twice forward) over the full T with no causal halving; for Kuramoto the query/key features and the "
    "values are ψ(θ) of width 2k (queries and keys 2c wider per head with c clock oscillators), for the transformer "
    "width d. Elementwise work (cos, sin, softmax, AdamW) is not counted.")
MEMORY_METHOD = (
    "One attention layer at ka-1m width (dim 128, 4 heads; the transformer: the attention module of a tf-1m "
    "block), batch 1, fp32, forward + backward of the output's sum. Measured with `torch.profiler` "
    "(`profile_memory=True`): every tensor allocation and free on the CPU allocator is an event, and the peak of "
    "their running sum is the step's high-water mark above what existed before. This is exact for tensors and, "
    "unlike a peak-RSS delta, unaffected by malloc caching, page reuse and other processes; scratch space that "
    "libraries allocate outside torch's allocator is not seen.")


@dataclass(frozen=True)
class Plan:
    """Every size the run uses, fixed up front so the document can state it."""

    pairs: tuple[tuple[str, str], ...]  # the targets' pairs
    modes: tuple[str, ...]
    mem_lengths: tuple[int, ...]
    mem_cap_bytes: int
    batch: int = 32
    context: int = 256
    gen_total: int = 1024  # prompt included
    matmul_n: int = 2048
    repeats: int = 5
    steps: int = 3  # training steps per timed measurement
    warmup: int = 5  # steps before timing (training: alternated), holding the compile; lets each heap settle
    precisions: tuple[str, ...] = ("fp32", "bf16")
    extra_pairs: tuple[tuple[str, str], ...] = ()  # measured as the pairs are, judged by no target
    generation_presets: tuple[str, ...] = ()  # the generation section's models (none given: the first pair)
    # (preset, reference preset, batch, T): one whole training step's peak memory of the one over the other's
    step_memory: tuple[str, str, int, int] | None = None
    # the README's first command, timed whole (start-up, data, training, validation) as a user runs it: its steps
    # and extra arguments (quick: a tiny model, a few steps)
    quickstart: tuple[int, tuple[str, ...]] = (100, ())

    def all_pairs(self) -> tuple[tuple[str, str], ...]:
        return self.pairs + self.extra_pairs


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="python -m benchmarks",
        description="throughput, memory, generation and FLOP/s: ka vs tf; writes BENCHMARKS.md")
    p.add_argument("--quick", action="store_true", help="CI smoke run: tiny presets and sizes, no compile")
    p.add_argument("--out", help="Markdown output (default BENCHMARKS.md; with --quick a temporary folder)")
    p.add_argument("--json", action="store_true", help="also print the raw measurements (results/bench.json, or "
                   "beside --out) on stdout")
    p.add_argument("--repeats", type=int, help="interleaved repeats per measurement (default 5; quick 1)")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction,
                   help="also measure torch.compile (default on; quick off)")
    p.add_argument("--mem-cap-gib", type=float, help="skip memory measurements estimated above this (default 12)")
    p.add_argument("--render", action="store_true", help="measure nothing: rewrite BENCHMARKS.md from "
                   "results/bench.json and the recorded runs in results/bench-runs/")
    p.set_defaults(func=_cmd)
    return p


def make_plan(args: Any) -> Plan:
    """The issue's sizes, or tiny ones for ``--quick``; the memory cap never exceeds 60% of free RAM."""
    cap = int((12.0 if args.mem_cap_gib is None else args.mem_cap_gib) * GIB)
    if (args.repeats is not None and args.repeats < 1) or cap <= 0:
        raise ConfigError("--repeats and --mem-cap-gib must be positive")
    with contextlib.suppress(OSError, StopIteration, ValueError):
        meminfo = Path("/proc/meminfo").read_text().splitlines()
        cap = min(cap, int(0.6 * 1024 * int(next(x for x in meminfo if x.startswith("MemAvailable:")).split()[1])))
    modes = ("eager", "compile") if (not args.quick if args.compile is None else args.compile) else ("eager",)
    if args.quick:
        return Plan((("ka-tiny", "tf-tiny"),), modes, (64, 128), cap, batch=8, context=32, gen_total=64,
                    matmul_n=256, repeats=args.repeats or 1, steps=1, warmup=1,
                    step_memory=("ka-tiny", "tf-tiny", 2, 32), quickstart=(2, ("--preset", "ka-tiny")))
    return Plan(HEADLINE_PAIRS, modes, (256, 512, 1024, 2048, 4096), cap, repeats=args.repeats or 5,
                generation_presets=("ka-1m", "tf-1m", "ka-su2-1m", "ka-su2-1m-tuned"),
                step_memory=("ka-su2-1m-tuned", "ka-1m", 4, 4096))


def _log(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)  # stderr: stdout stays pure JSON under --json


def matmul_peak(n: int, repeats: int) -> dict[str, float]:
    """Best FLOP/s of n×n @ n×n on fp32 and on bf16 tensors (what autocast hands to the CPU kernels)."""
    out = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
        a @ b  # warm-up: thread pool and kernel selection
        out[name] = 2 * n**3 / min(timeit.repeat(lambda a=a, b=b: a @ b, number=1, repeat=max(3, repeats)))
    return out


def interleaved(jobs: dict[str, Callable[[], Any]], repeats: int, work: float) -> tuple[dict[str, list[float]], dict]:
    """(work/second of each job, each job's last result), run A B A B … so drifts hit every job alike."""
    runs: dict[str, list[float]] = {k: [] for k in jobs}
    last: dict[str, Any] = {}
    for _ in range(repeats):
        for k, job in jobs.items():
            t0 = time.perf_counter()
            last[k] = job()
            runs[k].append(work / (time.perf_counter() - t0))
    return runs, last


Batch = Callable[[torch.Tensor, torch.Tensor], None]


def _train_parts(model: nn.Module, precision: str, compiled: bool) -> tuple[Batch, Callable[[], None]]:
    """A training step as train.py takes it, in its two halves: (autocast forward, fp32 loss, backward) on a batch,
    then (clip, AdamW)."""
    net = torch.compile(model) if compiled else model
    cfg, device = TrainConfig(), torch.device("cpu")
    opt, clip = make_optimizer(model, cfg), GradientClip(model, cfg.grad_clip)

    def forward_backward(x: torch.Tensor, y: torch.Tensor) -> None:
        with autocast(device, precision):
            logits = net(x)
        loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()

    def update() -> None:
        clip()
        opt.step()

    return forward_backward, update


def _train_step(model: nn.Module, precision: str, compiled: bool) -> Batch:
    """One whole training step (``_train_parts``' two halves)."""
    forward_backward, update = _train_parts(model, precision, compiled)

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        forward_backward(x, y)
        update()

    return step


def _batch(plan: Plan) -> tuple[torch.Tensor, torch.Tensor]:
    """One fixed batch of random bytes (inputs, next-byte targets): speed does not depend on the text."""
    data = torch.randint(0, 256, (plan.batch, plan.context + 1), generator=torch.Generator().manual_seed(0))
    return data[:, :-1].contiguous(), data[:, 1:].contiguous()


def _counted_steps(step: Batch, x: torch.Tensor, y: torch.Tensor,
                   steps: int, faults: list[int]) -> None:
    """``steps`` training steps; appends the minor page faults they took to ``faults``."""
    before = minor_faults()
    for _ in range(steps):
        step(x, y)
    faults.append(minor_faults() - before)


def bench_training(plan: Plan) -> list[dict[str, Any]]:
    """Per size and setting, ka and tf alternate A B A B after a warm-up (which holds the compile)."""
    rows = []
    x, y = _batch(plan)
    tokens = plan.batch * plan.context * plan.steps
    for ka_name, tf_name in plan.all_pairs():
        torch.manual_seed(0)
        models = {n: build_model(*get_preset(n)).train() for n in (ka_name, tf_name)}
        for mode, precision in product(plan.modes, plan.precisions):
            _log(f"training {ka_name} vs {tf_name}, {mode} {precision}")
            row: dict[str, Any] = {"pair": f"{ka_name} vs {tf_name}", "mode": mode, "precision": precision,
                                   "batch": plan.batch, "context": plan.context, "tokens_per_measurement": tokens}
            try:
                torch.compiler.reset()  # earlier settings' graphs must not count against dynamo's recompile limit
                steps = {n: _train_step(m, precision, mode == "compile") for n, m in models.items()}
                for _ in range(plan.warmup):  # alternated as the timed steps are (the module doc of allocator.py)
                    for step in steps.values():
                        step(x, y)
            except Exception as exc:  # e.g. no C++ compiler for inductor: record it, keep benchmarking
                rows.append({**row, "error": f"{type(exc).__name__}: {exc}"[:300]})
                continue
            faults: dict[str, list[int]] = {n: [] for n in steps}
            runs, _ = interleaved({n: partial(_counted_steps, step, x, y, plan.steps, faults[n])
                                   for n, step in steps.items()}, plan.repeats, tokens)
            for side, n in (("ka", ka_name), ("tf", tf_name)):
                med, flops = statistics.median(runs[n]), model_flops(models[n], plan.context)
                row[side] = {"preset": n, "tokens_per_s": runs[n], "median": med, **flops,
                             "achieved_flops": med * flops["flops_per_token"],
                             "minor_faults_per_step": statistics.median(faults[n]) / plan.steps}
            rows.append({**row, "ratio": row["ka"]["median"] / row["tf"]["median"]})
    return rows


def attention_shape(model: nn.Module) -> dict[str, int]:
    """What one training step hands the attention kernel: layers, heads and per-head widths (``model_flops``'s)."""
    flops, cfg = model_flops(model, 1), model.config
    return {"layers": cfg.depth, "heads": cfg.heads, "d_qk": flops["d_qk"] // cfg.heads,
            "d_v": flops["d_v"] // cfg.heads}


def bench_attention(plan: Plan) -> list[dict[str, Any]]:
    """The causal SDPA call alone at each model's shapes: forward + backward of every layer's call on
    contiguous random inputs (batch × heads × context × width), ka and tf alternated, per precision.

    Kuramoto's queries, keys and values are ψ-features of width 2k/H per head (queries and keys 2c wider with c
    clock oscillators), the transformer's k/H: at the same head count its kernel does twice the multiply-adds,
    and this part no other optimisation touches.
    """
    rows = []
    for ka_name, tf_name in plan.all_pairs():
        with torch.device("meta"):
            shapes = {n: attention_shape(build_model(*get_preset(n))) for n in (ka_name, tf_name)}
        for precision in plan.precisions:
            _log(f"attention kernel {ka_name} vs {tf_name}, {precision}")
            dtype = torch.bfloat16 if precision == "bf16" else torch.float32
            jobs = {n: _attention_job(plan, s, dtype) for n, s in shapes.items()}
            for job in jobs.values():
                job()  # warm-up
            runs, _ = interleaved(jobs, plan.repeats, 1.0)
            row: dict[str, Any] = {"pair": f"{ka_name} vs {tf_name}", "precision": precision}
            for side, n in (("ka", ka_name), ("tf", tf_name)):
                row[side] = {"preset": n, **shapes[n], "ms_per_step": 1e3 / statistics.median(runs[n])}
            rows.append(row)
    return rows


def _attention_job(plan: Plan, shape: dict[str, int], dtype: torch.dtype) -> Callable[[], None]:
    def widths(d: int) -> torch.Tensor:
        return torch.randn(plan.batch, shape["heads"], plan.context, d, dtype=dtype, requires_grad=True)

    q, k, v = widths(shape["d_qk"]), widths(shape["d_qk"]), widths(shape["d_v"])

    def step() -> None:
        for _ in range(shape["layers"]):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            out.backward(torch.ones_like(out))

    return step


def attention_ceiling(res: dict[str, Any]) -> list[dict[str, Any]]:
    """Per attention row, the eager ka/tf throughput ratio if everything but the attention kernel cost ka
    exactly what it costs tf: step_tf / (step_tf − attention_tf + attention_ka), steps from the eager rows."""
    out = []
    for a in res.get("attention", []):
        train = next((r for r in res["training"] if r["pair"] == a["pair"] and r["mode"] == "eager"
                      and r["precision"] == a["precision"] and "ratio" in r), None)
        if train is None:
            continue
        step_ms = {s: 1e3 * train["batch"] * train["context"] / train[s]["median"] for s in ("ka", "tf")}
        rest = {s: step_ms[s] - a[s]["ms_per_step"] for s in ("ka", "tf")}
        out.append({"pair": a["pair"], "precision": a["precision"], "step_ms": step_ms, "rest_ms": rest,
                    "ceiling": step_ms["tf"] / (rest["tf"] + a["ka"]["ms_per_step"]), "ratio": train["ratio"]})
    return out


def bench_profile(plan: Plan, top: int = 12) -> dict[str, list[dict[str, Any]]]:
    """Where one eager training step spends its time, per model of the first pair, in the default
    precision: ``torch.profiler``'s operators by self CPU time (the evidence the optimisations act on)."""
    from torch.profiler import ProfilerActivity, profile

    x, y = _batch(plan)
    out = {}
    for name in plan.pairs[0]:
        _log(f"profile {name}")
        torch.manual_seed(0)
        precision = resolve_precision(TrainConfig().precision, torch.device("cpu"))
        step = _train_step(build_model(*get_preset(name)).train(), precision, compiled=False)
        for _ in range(plan.warmup):
            step(x, y)
        with quiet_profiler(), profile(activities=[ProfilerActivity.CPU]) as prof:
            step(x, y)
        ops = [e for e in prof.key_averages() if not e.key.startswith(("autograd::", "Optimizer."))]
        total = sum(e.self_cpu_time_total for e in ops)
        ops.sort(key=lambda e: -e.self_cpu_time_total)
        out[name] = [{"op": e.key, "calls": e.count, "self_ms": e.self_cpu_time_total / 1e3,
                      "share": e.self_cpu_time_total / total} for e in ops[:top]]
    return out


# Where a training step's time goes, by kind of work: the profiler's operators, each in the first kind its name starts
# with (inductor's compiled graphs are one event each: what the compiler fused, the elementwise work)
STEP_PARTS = (("attention (SDPA)", ("aten::_scaled_dot_product",)),
              ("matmuls", ("aten::mm", "aten::addmm", "aten::bmm")), ("compiled kernels", ("## Call CompiledFxGraph",)))


def _by_part(prof: Any) -> dict[str, float]:
    """Self CPU ms of one profiled region per STEP_PARTS kind, the rest under "other"."""
    out = dict.fromkeys([name for name, _ in STEP_PARTS] + ["other"], 0.0)
    for e in prof.key_averages():
        part = next((name for name, prefixes in STEP_PARTS if e.key.startswith(prefixes)), "other")
        out[part] += e.self_cpu_time_total / 1e3
    return out


def bench_step_parts(plan: Plan) -> list[dict[str, Any]]:
    """Per model of the targets' pairs, in the protocol's training mode (compiled bf16; eager where compile is off):
    one step's forward + backward split by kind of work (``_by_part``), and its clip + AdamW, in ms of the profiler's
    self CPU time. Shows where ka's step loses to tf's when its kernel efficiency falls short."""
    from torch.profiler import ProfilerActivity, profile

    compiled = "compile" in plan.modes
    x, y = _batch(plan)
    rows = []
    for name in dict.fromkeys(p for pair in plan.pairs for p in pair):
        _log(f"step parts {name}")
        torch.compiler.reset()  # each model compiled afresh: earlier models' graphs must not reach dynamo's limit
        torch.manual_seed(0)
        forward_backward, update = _train_parts(build_model(*get_preset(name)).train(), "bf16", compiled)
        for _ in range(plan.warmup):
            forward_backward(x, y)
            update()
        with quiet_profiler(), profile(activities=[ProfilerActivity.CPU]) as fb:
            forward_backward(x, y)
        with quiet_profiler(), profile(activities=[ProfilerActivity.CPU]) as up:
            update()
        rows.append({"preset": name, "mode": "compile" if compiled else "eager", "precision": "bf16",
                     "parts_ms": _by_part(fb), "update_ms": sum(_by_part(up).values())})
    return rows


# Kineto's own log lines ("USDT:2026-01-01 12:00:00 1:1 SyncActivityProfilerHandler.cpp:52] profiler_start")
PROFILER_LOG = re.compile(r"^[A-Z]+:\d{4}-\d\d-\d\d [\d:.]+ \d+:\d+ \w+\.cpp:\d+\]")


@contextlib.contextmanager
def quiet_profiler() -> Iterator[None]:
    """Keep Kineto's log lines (one per profiler start, stop and stage) off the terminal.

    They are written from C++ straight to file descriptor 2, where no Python or environment setting of this
    torch build reaches, so fd 2 goes to a temporary file meanwhile; every other line in it is passed on.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            lines = tmp.read().decode(errors="replace").splitlines(keepends=True)
            kept = "".join(line for line in lines if not PROFILER_LOG.match(line))
            if kept:
                sys.stderr.write(kept)
                sys.stderr.flush()


def peak_bytes(fn: Callable[[], None]) -> int:
    """Peak of (bytes allocated − bytes freed) during fn, replaying the profiler's allocator events in
    time order (why this and not RSS: ``MEMORY_METHOD``)."""
    from torch.profiler import ProfilerActivity, profile

    with quiet_profiler(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    return max(accumulate(nbytes for _, nbytes in events), default=0)


def bench_memory(plan: Plan) -> list[dict[str, Any]]:
    """One attention layer at ka-1m width (dim 128, 4 heads), batch 1, fp32: forward + backward.

    Each measurement is estimated first (analytic first length: reference 8 tensors of B·H·T²
    floats (the materialised coupling matrix, its scores and their gradients), the others 4 of B·H·T² as if scores
    were materialised) so none can exhaust the machine.
    """
    ka_cfg, tf_cfg = get_preset("ka-1m")[1], get_preset("tf-1m")[1]
    torch.manual_seed(0)
    ka, tf = KuramotoAttention(ka_cfg.dim, ka_cfg.heads, ka_cfg.attention), SelfAttention(tf_cfg)
    subjects: dict[str, tuple[nn.Module, dict[str, str], int]] = {  # layer, forward kwargs, analytic bytes/T²/4
        "kuramoto-fused": (ka, {"path": "fused"}, 4 * ka_cfg.heads),
        "kuramoto-reference": (ka, {"path": "reference"}, 8 * ka_cfg.heads), "transformer": (tf, {}, 4 * tf_cfg.heads)}
    rows = []
    for name, (layer, kwargs, per_t2) in subjects.items():
        last: tuple[int, int] | None = None
        for t in plan.mem_lengths:
            est = int(last[1] * (t / last[0]) ** 2 if last else per_t2 * t * t * 4)
            row: dict[str, Any] = {"subject": name, "T": t, "estimate_bytes": est}
            if est > plan.mem_cap_bytes:
                rows.append({**row, "skipped": f"estimate {est / GIB:.1f} GiB > cap {plan.mem_cap_bytes / GIB:.1f}"})
                continue
            _log(f"memory {name} T={t}")
            inp = torch.randn(1, t, ka_cfg.dim, requires_grad=True)
            layer.zero_grad(set_to_none=True)
            peak = peak_bytes(lambda layer=layer, inp=inp, kwargs=kwargs: layer(inp, **kwargs).sum().backward())
            rows.append({**row, "peak_bytes": peak})
            last = (t, peak)
    return rows


def bench_step_memory(plan: Plan) -> list[dict[str, Any]]:
    """Peak memory of one whole training step (fp32 forward, next-byte cross-entropy, backward) of each model of
    ``plan.step_memory`` at its batch × T, measured as ``peak_bytes`` measures the attention layer's."""
    if plan.step_memory is None:
        return []
    *names, batch, t = plan.step_memory
    gen = torch.Generator().manual_seed(0)
    data = torch.randint(0, 256, (batch, t + 1), generator=gen)
    rows = []
    for name in names:
        torch.manual_seed(0)
        model = build_model(*get_preset(name)).train()
        _log(f"step memory {name} {batch}x{t}")

        def step(model: nn.Module = model) -> None:
            logits = model(data[:, :-1])
            F.cross_entropy(logits.flatten(0, 1), data[:, 1:].flatten()).backward()

        rows.append({"preset": name, "batch": batch, "T": t, "peak_bytes": peak_bytes(step)})
    return rows


class _CountOps(TorchDispatchMode):
    """Counts the ATen operators dispatched inside it (views and no-op casts included: each costs a launch)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.count += 1
        return func(*args, **(kwargs or {}))


def ops_per_cached_token(model: nn.Module, prompt: torch.Tensor, n: int = 16) -> float:
    """ATen operators one eager cached decoding step dispatches: generating 2n tokens minus generating n, over n
    (the prompt's step and the loop's setup cancel). At batch 1 each costs a launch, so this, not FLOPs, sets the
    cached rate."""
    counts = []
    for steps in (n, 2 * n):
        with _CountOps() as c:
            model.generate(prompt, steps, temperature=0)
        counts.append(c.count)
    return (counts[1] - counts[0]) / n


def bench_generation(plan: Plan) -> list[dict[str, Any]]:
    """Greedy generation from a 1-token prompt to ``gen_total`` tokens, cached vs recomputed, alternated;
    eager, and compiled (both paths through ``generate(compile=True)``) when the plan compiles."""
    rows = []
    n_new, prompt = plan.gen_total - 1, torch.full((1, 1), 10, dtype=torch.long)  # prompt: one newline byte
    for mode in plan.modes:
        compiled = mode == "compile"
        for name in plan.generation_presets or plan.pairs[0]:
            torch.compiler.reset()  # as in bench_step_parts
            torch.manual_seed(0)
            model = build_model(*get_preset(name)).eval()
            jobs = {k: partial(model.generate, prompt, n_new, temperature=0, use_cache=k == "cache",
                               compile=compiled) for k in ("cache", "recompute")}
            for k in jobs:  # warm-up (and compilation: the first steps, then one dynamic-shape graph)
                model.generate(prompt, 40, temperature=0, use_cache=k == "cache", compile=compiled)
            _log(f"generation {name}, {mode}")
            runs, outs = interleaved(jobs, plan.repeats, n_new)
            med = {k: statistics.median(v) for k, v in runs.items()}
            rows.append({"preset": name, "mode": mode, "new_tokens": n_new, "tokens_per_s": runs, "median": med,
                         "ratio": med["cache"] / med["recompute"],
                         "same_tokens": bool(torch.equal(*outs.values()))})
            if not compiled:
                rows[-1]["ops_per_cached_token"] = ops_per_cached_token(model, prompt)
    return rows


def bench_quickstart(plan: Plan) -> list[dict[str, Any]]:
    """Wall-clock seconds of the README's first command (``kuramoto train --steps N``, in a fresh process), in the
    precision ``auto`` picks on this machine and in fp32 (what ``auto`` picks where bf16 is not native)."""
    steps, extra = plan.quickstart
    auto = resolve_precision("auto", torch.device("cpu"))
    rows = []
    for precision in dict.fromkeys(["auto", "fp32"] if auto != "fp32" else ["auto"]):
        _log(f"quickstart: kuramoto train --steps {steps} --precision {precision}")
        with tempfile.TemporaryDirectory() as tmp:
            argv = ["train", "--steps", str(steps), "--precision", precision, "--run-dir", f"{tmp}/run", *extra]
            start = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "kuramoto_attention.cli", *argv], capture_output=True,
                                  text=True)
            wall = time.perf_counter() - start
        row = {"command": shlex.join(["kuramoto", *argv[:5], *extra]), "precision": precision,
               "resolved": auto if precision == "auto" else precision}
        rows.append({**row, "wall_s": wall} if proc.returncode == 0
                    else {**row, "error": (proc.stderr.strip().splitlines() or ["no output"])[-1]})
    return rows


def flop_parity(row: dict[str, Any]) -> float | None:
    """The ka/tf tokens/s of a training row at equal achieved FLOP/s: tf's model FLOPs per token over ka's
    (``FLOPS_METHOD``). None for a row recorded without FLOP counts."""
    if "flops_per_token" not in row.get("ka", {}) or "flops_per_token" not in row.get("tf", {}):
        return None
    return row["tf"]["flops_per_token"] / row["ka"]["flops_per_token"]


def efficiency_key(preset: str) -> str:
    """The efficiency threshold a Kuramoto preset is judged by: the torus's, or the vector geometries'."""
    _, cfg = get_preset(preset)
    attention = getattr(cfg, "attention", None)
    return "efficiency" if attention is None or attention.group == "torus" else "efficiency_vector"


def _repeat_spread(row: dict[str, Any], parity: float, t: float) -> str:
    """The efficiency of each repeat (ka's and tf's measurements of one round, taken back to back): the verdict is
    the medians', and a range across the threshold says that this run alone cannot settle it."""
    per = [ka / tf / parity for ka, tf in zip(row["ka"]["tokens_per_s"], row["tf"]["tokens_per_s"], strict=True)]
    if len(per) < 2:
        return ""
    lo, hi = min(per), max(per)
    return f"; repeats {lo:.3f}–{hi:.3f}" + (f", across {t}: within this run's noise" if lo < t <= hi else "")


def _target(name: str, value: float | None, key: str, op: str = ">=", note: str = "") -> dict[str, Any]:
    """One target row: PASS/FAIL of ``value op threshold``, N/A when there is no measurement."""
    t = TARGETS[key]
    ok = {">=": lambda: value >= t, "<": lambda: value < t, "<=": lambda: value <= t}[op]
    status = "N/A" if value is None else "PASS" if ok() else "FAIL"
    return {"name": name, "value": value, "op": op, "threshold": t, "status": status, "note": note, "key": key}


def evaluate_targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    """Every PASS/FAIL of the document, computed from the measurements (N/A when not measured)."""
    out = []
    for mode, prec in (("compile", "bf16"), ("eager", "fp32")):  # the protocol's training mode, and plain eager
        for ka_name, tf_name in res["plan"]["pairs"]:
            row = next((r for r in res["training"] if r["pair"] == f"{ka_name} vs {tf_name}" and r["mode"] == mode
                        and r["precision"] == prec and "ratio" in r), None)
            parity = row and flop_parity(row)
            key = efficiency_key(ka_name)
            value = row["ratio"] / parity if row and parity else None  # (ka tok/s · ka FLOPs) / (tf tok/s · tf FLOPs)
            note = ("not measured in this run" if not row else "recorded without FLOP counts" if parity is None else
                    f"tokens/s ratio {row['ratio']:.3f}; ka's model FLOPs per token are {1 / parity:.3f}× tf's"
                    + _repeat_spread(row, parity, TARGETS[key]))
            out.append(_target(f"kernel efficiency {ka_name}/{tf_name} (achieved FLOP/s), {mode} {prec}", value,
                               key, note=note))
    out += equal_flops_targets()
    mem = {(r["subject"], r["T"]): r["peak_bytes"] for r in res["memory"] if "peak_bytes" in r}
    both = [t for t in res["plan"]["mem_lengths"] if ("kuramoto-fused", t) in mem and ("kuramoto-reference", t) in mem]
    ratio = {t: mem[("kuramoto-fused", t)] / mem[("kuramoto-reference", t)] for t in both}
    t_max = max(res["plan"]["mem_lengths"])
    ref_row = next((r for r in res["memory"] if r["subject"] == "kuramoto-reference" and r["T"] == t_max), None)
    fused = mem.get(("kuramoto-fused", t_max))
    value, note = ratio.get(t_max), ""
    if value is None and fused is not None and ref_row is not None and both:
        # the reference's T×T×k tensors make its peak exactly quadratic in T (the measured lengths show it):
        # judge against that extrapolation, and say so
        value = fused / ref_row["estimate_bytes"]
        note = (f"reference not run at T={t_max} (over the memory cap); judged against its estimate "
                f"{ref_row['estimate_bytes'] / MIB:,.0f} MiB, extrapolated as T² from the largest T measured "
                f"({max(both)}: fused/reference = {ratio[max(both)]:.4f})")
    elif value is None:
        note = "cannot be evaluated: the reference or the fused path was not measured at this length"
    out.append(_target(f"peak memory fused/reference at T={t_max}", value, "memory", "<", note))
    steps = res.get("step_memory", [])
    if len(steps) == 2:
        (a, b), (batch, t) = steps, (steps[0]["batch"], steps[0]["T"])
        out.append(_target(f"peak training-step memory {a['preset']}/{b['preset']} at batch {batch} × T {t}",
                           a["peak_bytes"] / b["peak_bytes"], "step_memory", "<=",
                           f"{a['peak_bytes'] / MIB:,.0f} MiB against {b['peak_bytes'] / MIB:,.0f} MiB"))
    for g in res["generation"]:
        out.append(_target(f"generation speed-up with cache, {g['preset']}, {g.get('mode', 'eager')}", g["ratio"],
                           "generation", note="" if g.get("same_tokens", True) else "the cached tokens differ"))
    return out


def equal_flops_targets(results: Path = Path("results")) -> list[dict[str, Any]]:
    """The test-BPC gap of each Kuramoto preset trained for tf-1m's 10M-token training FLOPs (the lab's ``flops``
    group) against tf-1m at 10M (``main``, seed 0), read from the lab's result files; N/A until they exist."""
    out = []
    tf_path = results / "main" / "tf-1m-seed0.json"
    for preset, name in EQUAL_FLOPS:
        ka_path = results / f"{name}.json"
        value, note = None, "run `python -m lab run flops` (and main) first"
        if ka_path.exists() and tf_path.exists():
            ka, tf = json.loads(ka_path.read_text()), json.loads(tf_path.read_text())
            value = ka["eval_bpc"] - tf["eval_bpc"]
            note = (f"{preset} after {ka['tokens']:,} tokens {ka['eval_bpc']:.4f} against tf-1m after "
                    f"{tf['tokens']:,} {tf['eval_bpc']:.4f} (test BPC, seed 0)")
        out.append(_target(f"equal-FLOP gap {preset} − tf-1m (tf's 10M-token FLOPs)", value, "equal_flops_gap", "<=",
                           note))
    return out


# CPU features that decide how fast bf16 matmuls run (AMX tiles ~2x AVX-512 BF16): two machines with the same
# model name can differ here, and the bf16 ratios with them.
MATMUL_FLAGS = ("avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16")


def machine_info() -> dict[str, Any]:
    model, flags = platform.processor() or platform.machine(), "unknown (no flags line in /proc/cpuinfo)"
    with contextlib.suppress(OSError, StopIteration):
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        model = next(line.split(":", 1)[1].strip() for line in lines if line.startswith("model name"))
        present = set(next(line.split(":", 1)[1].split() for line in lines if line.startswith("flags")))
        flags = ", ".join(f for f in MATMUL_FLAGS if f in present) or "none of " + ", ".join(MATMUL_FLAGS)
    return {"cpu": model, "matmul_flags": flags, "cores": os.cpu_count(), "cores_usable": len(os.sched_getaffinity(0)),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__,
            "threads": torch.get_num_threads(), "python": platform.python_version(), "platform": platform.platform(),
            "load_average_at_start": os.getloadavg()[0], "date": datetime.datetime.now(datetime.UTC).isoformat()[:19]}


def _table(head: list[str], rows: list[list[Any]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
            *("| " + " | ".join(map(str, r)) + " |" for r in rows), ""]


LAB_TARGETS = frozenset({"equal_flops_gap"})  # targets read from the lab's results, not measured by a bench run


def _history_section(history: list[dict[str, Any]]) -> list[str]:
    """Each recorded full run's targets side by side (one column per run, oldest first): the same code can pass
    on one machine and fail on another, and a reader should see both."""
    if len(history) < 2:
        return []
    # a run's own measurements only: the equal-FLOP gaps are read from the lab's runs as they stand now, the same
    # for every column, so they stay in the targets above
    measured = [[t for t in evaluate_targets(run) if t.get("key") not in LAB_TARGETS] for run in history]
    names = list(dict.fromkeys(t["name"] for targets in reversed(measured) for t in targets))
    verdicts = [{t["name"]: t for t in targets} for targets in measured]

    def cell(t: dict[str, Any] | None) -> str:
        return "—" if t is None or t["value"] is None else f"{t['value']:.3f} {t['status']}"

    lines = ["## Every recorded full run", "", f"The targets of each full `python -m benchmarks` run recorded in "
             f"`{ARCHIVE}/` (one JSON per run, written by the run itself), oldest first; the sections above are "
             "the latest. Machines differ between sessions: the ratios move with the CPU, not only with the code. "
             "The runs with 2 warm-up steps per model took them one model after the other, the later ones "
             "alternated. The matmul peak and the load at the start say how fast and how quiet each machine was.", ""]
    head = ["target", *(f"{r['machine']['date'][:16]} {r['machine']['cpu']}" for r in history)]
    warmup = ["training warm-up steps per model", *(str(r["plan"]["warmup"]) for r in history)]
    peak = ["matmul peak fp32 / bf16, GFLOP/s",
            *(" / ".join(f"{r['matmul_peak'][p] / 1e9:.0f}" for p in ("fp32", "bf16")) for r in history)]
    load = ["load average at start", *(_load(r) for r in history)]
    return lines + _table(head, [warmup, peak, load, *([n, *(cell(v.get(n)) for v in verdicts)] for n in names)])


def _load(run: dict[str, Any]) -> str:
    value = run["machine"].get("load_average_at_start")
    return "—" if value is None else f"{value:.2f}"


def load_history() -> list[dict[str, Any]]:
    """Every recorded full run (``ARCHIVE``), oldest first."""
    runs = [json.loads(f.read_text()) for f in ARCHIVE.glob("*.json")]
    return sorted(runs, key=lambda r: r["machine"]["date"])


def _mib(r: dict[str, Any]) -> str:
    return f"{r['peak_bytes'] / MIB:,.1f}" if "peak_bytes" in r else f"skipped (est. {r['estimate_bytes'] / MIB:,.0f})"


def render(res: dict[str, Any], history: list[dict[str, Any]] | None = None) -> str:
    """BENCHMARKS.md: targets first, then each part with its method; every figure comes from ``res`` (and the
    last section from ``history``, the recorded full runs)."""
    m, plan, peak = res["machine"], res["plan"], res["matmul_peak"]
    quick = ["**Quick smoke run (`--quick`): tiny models and sizes; these numbers are not benchmarks.**", ""]
    lines = ["# Benchmarks", "", *(quick if res["quick"] else [])]
    lines += [f"Produced by `{res['command']}`; raw measurements in `{res['json_path']}`.", "", "## Targets", ""]
    lines += _table(["target", "measured", "required", "result"],
                    [[t["name"], "—" if t["value"] is None else f"{t['value']:.3f}", f"{t['op']} {t['threshold']}",
                      f"**{t['status']}**" + (f" ({t['note']})" if t["note"] else "")] for t in res["targets"]])
    lines += ["## Machine", "", f"- CPU: {m['cpu']} ({m['cpu_capability']}); {m['cores']} cores, "
              f"{m['cores_usable']} usable",
              f"- matmul features: {m.get('matmul_flags', 'not recorded')}",
              f"- torch {m['torch']}, {m['threads']} threads, Python {m['python']}, "
              f"{m['platform']}", f"- date {m['date']}; load average at start {m['load_average_at_start']:.2f} "
              "(timings assume an idle machine)", f"- memory: {m.get('malloc', 'not recorded')}", "",
              "## Training throughput", "",
              f"Tokens/s of one training step (forward, backward, grad clip, AdamW) at batch {plan['batch']} × "
              f"context {plan['context']}, median of {plan['repeats']} measurements of {plan['steps']} steps each. "
              f"The two models alternate (A B A B) so drifts hit both alike; {plan['warmup']} warm-up steps each, "
              "also alternated (they hold the compile, and after them the process's heap has grown to what both "
              "steps need), are excluded. The **default training mode** (what `kuramoto train` does without flags) "
              f"is {res['default_mode']['mode']} {res['default_mode']['precision']}. "
              "Utilisation: analytic model FLOP/s (below) over the measured matmul peak of the same precision. "
              "**FLOP parity**: the ka/tf ratio at equal achieved FLOP/s, tf's model FLOPs per token over ka's; "
              "**FLOP/s ka/tf**: the measured ratio over it, i.e. ka's achieved FLOP/s over tf's (= ka util / tf util; "
              "above 1: ka's step turns FLOPs into tokens faster than tf's). "
              "Faults: minor page faults per step (median), memory the kernel had to map in afresh "
              "(`allocator.py`: what the process's malloc setting above is for).", ""]
    trows = []
    for r in res["training"]:
        setting = [r["pair"], r["mode"], r["precision"]]
        if "error" in r:
            trows.append([*setting, "error", "", "", "", "", "", r["error"], ""])
            continue
        util = [f"{100 * r[s]['achieved_flops'] / peak[r['precision']]:.2f}%" for s in ("ka", "tf")]
        faults = " / ".join(f"{r[s]['minor_faults_per_step']:,.0f}" if "minor_faults_per_step" in r[s] else "—"
                            for s in ("ka", "tf"))
        parity = flop_parity(r)
        per_flop = ["—", "—"] if parity is None else [f"{parity:.3f}", f"{r['ratio'] / parity:.3f}"]
        trows.append([*setting, f"{r['ka']['median']:,.0f}", f"{r['tf']['median']:,.0f}", f"{r['ratio']:.3f}",
                      *per_flop, *util, faults])
    lines += _table(["models", "mode", "precision", "ka tok/s", "tf tok/s", "ka/tf", "FLOP parity", "FLOP/s ka/tf",
                     "ka util", "tf util", "faults/step ka / tf"], trows)
    lines += _attention_section(res)
    lines += ["## Profile of one eager training step", "", "`torch.profiler`, one step in the default precision "
              f"({res['default_mode']['precision']}) after warm-up; operators by self CPU time, share of the "
              "step's total operator time (autograd and optimizer wrappers excluded, their kernels counted).", ""]
    for name, ops in res.get("profile", {}).items():
        lines += [f"**{name}**", ""]
        lines += _table(["operator", "calls", "self ms", "share"],
                        [[f"`{o['op']}`", o["calls"], f"{o['self_ms']:,.1f}", f"{o['share']:.1%}"] for o in ops])
    lines += _step_parts_section(res)
    lines += ["## Peak memory of one attention layer's training step", "",
              MEMORY_METHOD + f" A measurement estimated above {plan['mem_cap_bytes'] / GIB:.1f} GiB is skipped "
              "and its estimate shown (previous length's peak × (T/T_prev)², or an analytic count).", ""]
    mem = {(r["subject"], r["T"]): r for r in res["memory"]}
    subjects = list(dict.fromkeys(r["subject"] for r in res["memory"]))
    lines += _table(["T", *[f"{s} (MiB)" for s in subjects]],
                    [[t, *[_mib(mem[(s, t)]) for s in subjects]] for t in plan["mem_lengths"]])
    if res.get("step_memory"):
        lines += ["**One whole training step** (fp32 forward, cross-entropy, backward), peak memory measured alike:",
                  ""]
        lines += _table(["model", "batch × T", "peak (MiB)"],
                        [[r["preset"], f"{r['batch']} × {r['T']}", f"{r['peak_bytes'] / MIB:,.0f}"]
                         for r in res["step_memory"]])
    lines += ["## Generation", "", f"Greedy generation of {plan['gen_total'] - 1} tokens after a 1-token prompt "
              "(fp32, batch 1): with the KV cache each step feeds one token; without it each step recomputes "
              "the whole sequence. Median tokens/s over the repeats, cache and recompute alternated. Compiled: "
              "`generate(..., compile=True)` for both (`torch.compile(dynamic=True)`, compiled before timing). "
              "**Operators per cached token** (eager): the ATen operators one cached step dispatches, views and "
              "no-op casts included, counted with a dispatch mode; at batch 1 each costs a launch, so the eager "
              "cached rate follows this count and the machine's per-operator overhead, not FLOPs.", ""]
    lines += _table(["model", "mode", "cache tok/s", "recompute tok/s", "speed-up", "same tokens",
                     "operators per cached token"],
                    [[g["preset"], g.get("mode", "eager"), f"{g['median']['cache']:,.1f}",
                      f"{g['median']['recompute']:,.1f}", f"{g['ratio']:.1f}×", g["same_tokens"],
                      f"{g['ops_per_cached_token']:.0f}" if "ops_per_cached_token" in g else "—"]
                     for g in res["generation"]])
    lines += _quickstart_section(res)
    lines += ["## FLOP counting", "", f"Matmul peak of this machine ({plan['matmul_n']}² square matmuls, best of "
              f"repeats): fp32 {peak['fp32'] / 1e9:,.1f} GFLOP/s, bf16 {peak['bf16'] / 1e9:,.1f} GFLOP/s.", "",
              FLOPS_METHOD, ""]
    flops = {r[s]["preset"]: r[s] for r in res["training"] if "ratio" in r for s in ("ka", "tf")}
    lines += _table(["model", "N_mm", "d_qk", "d_v", "FLOPs/token"],
                    [[n, f"{f['matmul_params']:,}", f["d_qk"], f["d_v"], f"{f['flops_per_token']:,}"]
                     for n, f in flops.items()])
    return "\n".join(lines + _history_section(history or []))


def _quickstart_section(res: dict[str, Any]) -> list[str]:
    if not res.get("quickstart"):
        return []
    lines = ["## Quickstart", "", "The README's first command timed whole in a fresh process (imports, corpus, "
             "compile where the default compiles, training, validation), on this machine: in the precision `auto` "
             "picks here and in fp32, which `auto` picks on a CPU without native bf16 (such a CPU's own fp32 speed "
             "differs from this one's).", ""]
    return lines + _table(["command", "precision", "ran in", "wall-clock"],
                          [[f"`{q['command']}`", q["precision"], q["resolved"],
                            f"{q['wall_s'] / 60:.1f} min" if "wall_s" in q else f"error: {q['error']}"]
                           for q in res["quickstart"]])


def _step_parts_section(res: dict[str, Any]) -> list[str]:
    """The step split by kind of work, each Kuramoto model beside its transformer (absent from older runs)."""
    rows = res.get("step_parts")
    if not rows:
        return []
    parts = [name for name, _ in STEP_PARTS] + ["other"]
    mode = f"{rows[0]['mode']} {rows[0]['precision']}"
    body = [[r["preset"], *(f"{r['parts_ms'][p]:,.1f}" for p in parts), f"{sum(r['parts_ms'].values()):,.1f}",
             f"{r['update_ms']:,.1f}"] for r in rows]
    return ["## Where the training step goes", "",
            f"One training step of each target model in {mode} (the lab's training mode), after warm-up: forward + "
            "backward split by kind of work, in ms of `torch.profiler`'s self CPU time (attention: the SDPA calls, "
            "forward and backward; matmuls: `mm`/`addmm`/`bmm`; compiled kernels: the graphs inductor fused, i.e. "
            "the elementwise work around them), then gradient clipping + AdamW. One profiled step, so about ±5%.",
            "", *_table(["model", *parts, "forward + backward", "clip + AdamW"], body)]


def _attention_section(res: dict[str, Any]) -> list[str]:
    if not res.get("attention"):
        return []
    plan = res["plan"]
    lines = ["## The attention kernel alone", "", "One training step's causal `scaled_dot_product_attention` calls "
             f"(forward + backward, one per layer) at batch {plan['batch']} × context {plan['context']}, on "
             "contiguous random inputs of each model's shapes (layers × heads × per-head query/key and value "
             f"width), median of {plan['repeats']}, ka and tf alternated. Kuramoto's features are ψ(θ), 2k/H wide "
             "per head against the transformer's k/H. The **ceiling** is the eager ka/tf throughput ratio if "
             "everything else in ka's step (matmuls, elementwise work, optimizer) cost exactly what it costs tf: "
             "step_tf / (step_tf − attention_tf + attention_ka), steps from the eager rows above; a ratio above "
             "it needs ka's other work to be cheaper than the transformer's.", ""]
    ceilings = {(c["pair"], c["precision"]): c for c in attention_ceiling(res)}
    rows = []
    for a in res["attention"]:
        c = ceilings.get((a["pair"], a["precision"]))
        shape = [f"{a[s]['layers']} × {a[s]['heads']} × {a[s]['d_qk']}/{a[s]['d_v']}" for s in ("ka", "tf")]
        rows.append([a["pair"], a["precision"], shape[0], f"{a['ka']['ms_per_step']:,.1f}", shape[1],
                     f"{a['tf']['ms_per_step']:,.1f}",
                     *(("—", "—", "—") if c is None else (f"{c['rest_ms']['ka']:,.1f} / {c['rest_ms']['tf']:,.1f}",
                                                          f"{c['ceiling']:.3f}", f"{c['ratio']:.3f}"))])
    return lines + _table(["models", "precision", "ka layers × heads × d_qk/d_v", "ka ms", "tf shape", "tf ms",
                           "rest of the step ka / tf (ms)", "ceiling", "measured ratio"], rows)


def _command(args: Any) -> str:
    """The command line that reproduces this run (only the options given)."""
    parts = ["python", "-m", "benchmarks"] + (["--quick"] if args.quick else []) + (["--json"] if args.json else [])
    for flag in ("out", "repeats", "mem_cap_gib"):
        if getattr(args, flag) is not None:
            parts += ["--" + flag.replace("_", "-"), str(getattr(args, flag))]
    if args.compile is not None:
        parts.append("--compile" if args.compile else "--no-compile")
    return shlex.join(parts)


def output_paths(args: Any) -> tuple[Path, Path]:
    """(Markdown, JSON). Only a full run without --out writes the repository's BENCHMARKS.md and
    results/bench.json; --out puts the JSON beside it (same name, .json), and --quick alone a temporary
    folder, so a smoke run never overwrites the real numbers."""
    if args.out or args.quick:
        out = Path(args.out or Path(tempfile.mkdtemp(prefix="kuramoto-bench-")) / "BENCHMARKS.md")
        return out, out.with_suffix(".json")
    return Path("BENCHMARKS.md"), LATEST


def archive_path(res: dict[str, Any]) -> Path:
    """Where a full run's JSON is kept besides ``LATEST``: named by its start time (UTC)."""
    return ARCHIVE / (res["machine"]["date"].replace(":", "-") + ".json")


def rerender() -> Path:
    """``--render``: BENCHMARKS.md again from the latest run's JSON and the recorded runs, measuring nothing."""
    if not LATEST.exists():
        raise ConfigError(f"{LATEST} not found: run `python -m benchmarks` (from the repository root) first")
    out = output_paths(argparse.Namespace(out=None, quick=False))[0]
    res = json.loads(LATEST.read_text())
    res["targets"] = evaluate_targets(res)  # today's targets, judged on the recorded measurements
    out.write_text(render(res, load_history()) + "\n")
    return out


def run_bench(args: Any) -> tuple[dict[str, Any], Path, Path]:
    """Measure everything, judge the targets, write the Markdown and the JSON; returns (results, md, json)."""
    plan = make_plan(args)
    out, json_path = output_paths(args)
    default = TrainConfig()  # the default mode is what `kuramoto train` does without flags
    machine = {**machine_info(), "malloc": getattr(args, "malloc", "unchanged (not run through the CLI)")}
    res: dict[str, Any] = {"command": _command(args), "quick": bool(args.quick), "json_path": str(json_path),
                           "machine": machine, "plan": asdict(plan),
                           "default_mode": {"mode": "compile" if default.compile else "eager",
                                            # what `auto` resolves to on this machine's CPU, where the bench runs
                                            "precision": resolve_precision(default.precision, torch.device("cpu"))}}
    _log("matmul peak")
    res["matmul_peak"] = matmul_peak(plan.matmul_n, plan.repeats)
    res["training"] = bench_training(plan)
    res["attention"] = bench_attention(plan)
    res["profile"] = bench_profile(plan)
    res["step_parts"] = bench_step_parts(plan)
    res["memory"] = bench_memory(plan)
    res["step_memory"] = bench_step_memory(plan)
    res["generation"] = bench_generation(plan)
    res["quickstart"] = bench_quickstart(plan)
    res["targets"] = evaluate_targets(json.loads(json.dumps(res)))  # judged on exactly what the JSON holds
    text = json.dumps(res, indent=2)
    paths = [json_path, archive_path(res)] if json_path == LATEST else [json_path]
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(res, load_history() if json_path == LATEST else []) + "\n")
    return res, out, json_path


def _cmd(args: Any) -> None:
    if args.render:
        if args.quick or args.out:
            raise ConfigError("--render rewrites the repository's BENCHMARKS.md; it takes no --quick or --out")
        _log(f"wrote {rerender()} from {LATEST} and {ARCHIVE}/")
        return
    res, out, json_path = run_bench(args)
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        for t in res["targets"]:
            print(f"{t['status']:<4}  {t['name']}" + (f"  ({t['note']})" if t["note"] else ""))
    _log(f"wrote {out} and {json_path}")


def main(argv: list[str] | None = None) -> int:
    return run_main(build_parser(), argv)
