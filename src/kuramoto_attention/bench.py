"""``kuramoto bench``: the speed and memory comparison of issue 6, measured side by side in one process.

Writes BENCHMARKS.md (tables, PASS/FAIL per target, machine and exact command) and a JSON file of
every raw measurement, so each number in the document can be recomputed from the JSON. Four parts:
training throughput (ka vs tf, eager/compile × fp32/bf16), peak memory of one training step against
sequence length, cached vs recomputed generation, and achieved FLOP/s against the measured matmul peak.

Timings are fair only on an otherwise idle machine; ``--quick`` is the CI smoke test (tiny models,
meaningless numbers, no timing assertions anywhere).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .layer import KuramotoAttention
from .presets import ConfigError, build_model, get_preset
from .transformer import SelfAttention, TransformerLM

GIB = 2**30
# thresholds: ka/tf tokens/s (default mode; eager fp32), fused/reference peak memory, cache speed-up
DEFAULT_MODE, EAGER_FP32 = ("compile", "bf16"), ("eager", "fp32")
TARGETS = {"default": 1.0, "eager_fp32": 0.9, "memory": 0.10, "generation": 10.0}


@dataclass(frozen=True)
class Plan:
    """Every size the run uses, fixed up front so the document can state it."""

    pairs: tuple[tuple[str, str], ...]
    modes: tuple[str, ...]
    mem_lengths: tuple[int, ...]
    mem_cap_bytes: int
    batch: int = 32
    context: int = 256
    gen_total: int = 1024  # prompt included
    matmul_n: int = 2048
    repeats: int = 5
    steps: int = 3  # training steps per timed measurement
    warmup: int = 2
    precisions: tuple[str, ...] = ("fp32", "bf16")


def add_subcommand(sub: Any) -> None:
    p = sub.add_parser("bench", help="throughput, memory, generation and FLOP/s: ka vs tf; writes BENCHMARKS.md")
    p.add_argument("--quick", action="store_true", help="CI smoke run: tiny presets and sizes, no compile")
    p.add_argument("--out", help="Markdown output (default BENCHMARKS.md; with --quick a temporary folder)")
    p.add_argument("--json-out", help="raw measurements (default results/bench.json, or OUT's name with .json)")
    p.add_argument("--json", action="store_true", help="also print the raw measurements as JSON on stdout")
    p.add_argument("--repeats", type=int, help="interleaved repeats per measurement (default 5; quick 1)")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction,
                   help="also measure torch.compile (default on; quick off)")
    p.add_argument("--mem-cap-gib", type=float, help="skip memory measurements estimated above this (default 12)")
    p.set_defaults(func=_cmd)


def make_plan(args: Any) -> Plan:
    """The issue's sizes, or tiny ones for ``--quick``; the memory cap never exceeds 60% of free RAM."""
    cap = int((12.0 if args.mem_cap_gib is None else args.mem_cap_gib) * GIB)
    if (args.repeats is not None and args.repeats < 1) or cap <= 0:
        raise ConfigError("--repeats and --mem-cap-gib must be positive")
    with contextlib.suppress(OSError, StopIteration, ValueError):
        meminfo = Path("/proc/meminfo").read_text().splitlines()
        cap = min(cap, int(0.6 * 1024 * int(next(x for x in meminfo if x.startswith("MemAvailable:")).split()[1])))
    compiled = args.compile if args.compile is not None else not args.quick
    modes = ("eager", "compile") if compiled else ("eager",)
    if args.quick:
        return Plan((("ka-tiny", "tf-tiny"),), modes, (64, 128), cap, batch=8, context=32, gen_total=64,
                    matmul_n=256, repeats=args.repeats or 1, steps=1, warmup=1)
    return Plan((("ka-1m", "tf-1m"), ("ka-5m", "tf-5m")), modes, (256, 512, 1024, 2048, 4096), cap,
                repeats=args.repeats or 5)


def _log(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- FLOPs
def model_flops(model: nn.Module, context: int) -> dict[str, int]:
    """Analytic training FLOPs per token: 6·N_mm + 6·L·T·(d_qk + d_v).

    N_mm counts the weights multiplied per token: every nn.Linear weight (a shared gate module once
    per layer that applies it) and the transformer's tied output head; the embedding lookups are
    gathers, not matmuls. The attention term is QKᵀ and A·V at 2 FLOPs per multiply-add, forward plus
    twice that backward, over the full T (no causal halving). Kuramoto's q/k features and values are
    ψ(θ) of width 2k, the transformer's have width d. Elementwise work (cos, sin, softmax) is not counted.
    """
    cfg = model.config
    n_mm = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    if isinstance(model, TransformerLM):
        n_mm += model.tok_embedding.weight.numel() if model.head is None else 0
        d_qk = d_v = cfg.dim
    else:
        if model.shared_gates is not None:
            n_mm += (cfg.depth - 1) * model.shared_gates.proj.weight.numel()
        d_qk, d_v = 2 * cfg.dim, 2 * cfg.dim if cfg.value == "circular" else cfg.dim
    attn = 6 * cfg.depth * context * (d_qk + d_v)
    return {"matmul_params": n_mm, "d_qk": d_qk, "d_v": d_v, "flops_per_token": 6 * n_mm + attn}


def matmul_peak(n: int, repeats: int) -> dict[str, float]:
    """Best FLOP/s of n×n @ n×n in fp32 and in bf16 tensors (what autocast hands to the CPU kernels)."""
    out = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
        a @ b  # warm-up: thread pool and kernel selection
        best = 0.0
        for _ in range(max(3, repeats)):
            t0 = time.perf_counter()
            for _ in range(3):
                a @ b
            best = max(best, 3 * 2 * n**3 / (time.perf_counter() - t0))
        out[name] = best
    return out


# --------------------------------------------------------------------------- training throughput
def _train_step(model: nn.Module, precision: str, compiled: bool) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """One step as train.py takes it: autocast forward, fp32 loss, backward, clip, AdamW."""
    from .train import TrainConfig, autocast, make_optimizer

    net = torch.compile(model) if compiled else model
    opt, device = make_optimizer(model, TrainConfig()), torch.device("cpu")

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        with autocast(device, precision):
            logits = net(x)
        loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    return step


def bench_training(plan: Plan) -> list[dict[str, Any]]:
    """Per size and setting, ka and tf alternate A B A B after a warm-up (which holds the compile)."""
    rows = []
    data = torch.randint(0, 256, (plan.batch, plan.context + 1), generator=torch.Generator().manual_seed(0))
    x, y = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    tokens = plan.batch * plan.context * plan.steps
    for ka_name, tf_name in plan.pairs:
        torch.manual_seed(0)
        models = {n: build_model(*get_preset(n)) for n in (ka_name, tf_name)}
        for mode in plan.modes:
            for precision in plan.precisions:
                _log(f"training {ka_name} vs {tf_name}, {mode} {precision}")
                row: dict[str, Any] = {"pair": f"{ka_name} vs {tf_name}", "mode": mode, "precision": precision,
                                       "batch": plan.batch, "context": plan.context, "tokens_per_measurement": tokens}
                try:
                    steps = {n: _train_step(m.train(), precision, mode == "compile") for n, m in models.items()}
                    for step in steps.values():
                        for _ in range(plan.warmup):
                            step(x, y)
                except Exception as exc:  # e.g. no C++ compiler for inductor: record it, keep benchmarking
                    rows.append({**row, "error": f"{type(exc).__name__}: {exc}"[:300]})
                    continue
                runs: dict[str, list[float]] = {n: [] for n in models}
                for _ in range(plan.repeats):
                    for n, step in steps.items():
                        t0 = time.perf_counter()
                        for _ in range(plan.steps):
                            step(x, y)
                        runs[n].append(tokens / (time.perf_counter() - t0))
                for side, n in (("ka", ka_name), ("tf", tf_name)):
                    flops = model_flops(models[n], plan.context)
                    row[side] = {"preset": n, "tokens_per_s": runs[n], "median": statistics.median(runs[n]), **flops,
                                 "achieved_flops": statistics.median(runs[n]) * flops["flops_per_token"]}
                row["ratio"] = row["ka"]["median"] / row["tf"]["median"]
                rows.append(row)
    return rows


# --------------------------------------------------------------------------- memory
def peak_bytes(fn: Callable[[], None]) -> int:
    """Peak of (bytes allocated − bytes freed) during fn, from the profiler's allocator events.

    Every CPU tensor allocation and free passes through c10's allocator, which reports to the
    profiler when ``profile_memory`` is on; replaying those events in time order gives the exact
    high-water mark of tensor memory above what existed before fn, independent of malloc caching,
    page reuse and other processes (which make RSS deltas unreliable for small sizes).
    """
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    current = peak = 0
    for _, nbytes in events:
        current += nbytes
        peak = max(peak, current)
    return peak


def bench_memory(plan: Plan) -> list[dict[str, Any]]:
    """One attention layer at ka-1m width (dim 128, 4 heads), batch 1, fp32: forward + backward.

    Before each measurement the peak is estimated, from the previous length's measurement scaled
    by (T/T_prev)², or analytically for the first length (reference: 8 tensors of B·H·T²·k/H floats;
    the others: 4 of B·H·T² as if scores were materialised); above the cap it is skipped, not run.
    """
    ka_cfg, tf_cfg = get_preset("ka-1m")[1], get_preset("tf-1m")[1]
    torch.manual_seed(0)
    ka, tf = KuramotoAttention(ka_cfg.dim, ka_cfg.heads, **ka_cfg.layer_fields()), SelfAttention(tf_cfg)
    subjects: dict[str, tuple[nn.Module, dict[str, str], int]] = {
        "kuramoto-fused": (ka, {"path": "fused"}, 4 * ka_cfg.heads),
        "kuramoto-reference": (ka, {"path": "reference"}, 8 * ka_cfg.dim),
        "transformer": (tf, {}, 4 * tf_cfg.heads),
    }
    rows = []
    for name, (layer, kwargs, per_t2) in subjects.items():
        last: tuple[int, int] | None = None
        for t in plan.mem_lengths:
            est = last[1] * (t / last[0]) ** 2 if last else per_t2 * t * t * 4
            row: dict[str, Any] = {"subject": name, "T": t, "estimate_bytes": int(est)}
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


# --------------------------------------------------------------------------- generation
def bench_generation(plan: Plan) -> list[dict[str, Any]]:
    """Greedy generation from a 1-token prompt to ``gen_total`` tokens, cached vs recomputed, alternated."""
    rows = []
    n_new = plan.gen_total - 1
    for name in plan.pairs[0]:
        torch.manual_seed(0)
        model = build_model(*get_preset(name)).eval()
        prompt = torch.full((1, 1), 10, dtype=torch.long)
        runs: dict[str, list[float]] = {"cache": [], "recompute": []}
        outs = {}
        for _ in range(plan.repeats):
            for key in runs:
                _log(f"generation {name} {key}")
                t0 = time.perf_counter()
                outs[key] = model.generate(prompt, n_new, temperature=0, use_cache=key == "cache")
                runs[key].append(n_new / (time.perf_counter() - t0))
        med = {k: statistics.median(v) for k, v in runs.items()}
        rows.append({"preset": name, "new_tokens": n_new, "tokens_per_s": runs, "median": med,
                     "ratio": med["cache"] / med["recompute"], "same_tokens": bool(torch.equal(*outs.values()))})
    return rows


# --------------------------------------------------------------------------- targets
def judge(value: float | None, threshold: float, op: str) -> str:
    if value is None:
        return "N/A"
    return "PASS" if (value >= threshold if op == ">=" else value < threshold) else "FAIL"


def evaluate_targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    """Every PASS/FAIL of the document, computed from the measurements (N/A when not measured)."""
    out = []
    for key, (mode, prec), label in (("default", DEFAULT_MODE, "default mode (bf16 autocast + compile)"),
                                     ("eager_fp32", EAGER_FP32, "eager fp32")):
        for ka_name, tf_name in res["plan"]["pairs"]:
            row = next((r for r in res["training"] if r["pair"] == f"{ka_name} vs {tf_name}" and r["mode"] == mode
                        and r["precision"] == prec and "ratio" in r), None)
            value = row["ratio"] if row else None
            out.append({"name": f"throughput {ka_name}/{tf_name}, {label}", "value": value, "op": ">=",
                        "threshold": TARGETS[key], "status": judge(value, TARGETS[key], ">="),
                        "note": "" if row else "not measured in this run"})
    mem = {(r["subject"], r["T"]): r.get("peak_bytes") for r in res["memory"]}
    t_max = max(res["plan"]["mem_lengths"])
    both = [t for t in res["plan"]["mem_lengths"]
            if mem.get(("kuramoto-fused", t)) is not None and mem.get(("kuramoto-reference", t)) is not None]
    value = note = None
    if t_max in both:
        value = mem[("kuramoto-fused", t_max)] / mem[("kuramoto-reference", t_max)]
    elif both:
        t = max(both)
        note = (f"cannot be evaluated: reference skipped at T={t_max}; largest T with both measured: {t}, "
                f"fused/reference = {mem[('kuramoto-fused', t)] / mem[('kuramoto-reference', t)]:.4f}")
    out.append({"name": f"peak memory fused/reference at T={t_max}", "value": value, "op": "<",
                "threshold": TARGETS["memory"], "status": judge(value, TARGETS["memory"], "<"),
                "note": note or ("" if value is not None else "cannot be evaluated: nothing measured")})
    for g in res["generation"]:
        out.append({"name": f"generation speed-up with cache, {g['preset']}", "value": g["ratio"], "op": ">=",
                    "threshold": TARGETS["generation"], "status": judge(g["ratio"], TARGETS["generation"], ">="),
                    "note": ""})
    return out


# --------------------------------------------------------------------------- document
def machine_info() -> dict[str, Any]:
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError, StopIteration):
        model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name"))
    return {"cpu": model, "cores": os.cpu_count(), "cores_usable": len(os.sched_getaffinity(0)),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__,
            "threads": torch.get_num_threads(), "python": platform.python_version(), "platform": platform.platform(),
            "load_average_at_start": os.getloadavg()[0],
            "date": datetime.datetime.now(datetime.UTC).isoformat("T", "seconds")}


def _table(head: list[str], rows: list[list[Any]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
            *("| " + " | ".join(map(str, r)) + " |" for r in rows), ""]


def _mib(n: int | None) -> str:
    return "—" if n is None else f"{n / 2**20:.1f}"


def render(res: dict[str, Any]) -> str:
    """BENCHMARKS.md: targets first, then each part with its method; every figure comes from ``res``."""
    m, plan = res["machine"], res["plan"]
    lines = ["# Benchmarks", ""]
    if res["quick"]:
        lines += ["**Quick smoke run (`--quick`): tiny models and sizes; these numbers are not benchmarks.**", ""]
    lines += ["Produced by `" + res["command"] + "`; raw measurements in `" + res["json_path"] + "`.", "",
              "## Targets", ""]
    lines += _table(["target", "measured", "required", "result"],
                    [[t["name"], "—" if t["value"] is None else f"{t['value']:.3f}", f"{t['op']} {t['threshold']}",
                      f"**{t['status']}**" + (f" ({t['note']})" if t["note"] else "")] for t in res["targets"]])
    lines += ["## Machine", "", f"- CPU: {m['cpu']} ({m['cpu_capability']}); {m['cores']} cores, "
              f"{m['cores_usable']} usable", f"- torch {m['torch']}, {m['threads']} threads, Python {m['python']}, "
              f"{m['platform']}", f"- date {m['date']}; load average at start {m['load_average_at_start']:.2f} "
              "(timings assume an idle machine)", "", "## Training throughput", "",
              f"Tokens/s of one training step (forward, backward, grad clip, AdamW) at batch {plan['batch']} × "
              f"context {plan['context']}, median of {plan['repeats']} measurements of {plan['steps']} steps each. "
              "The two models alternate (A B A B) so drifts hit both alike; warm-up steps (which hold the compile) are excluded. "
              "The **default training mode is bf16 autocast + torch.compile**. Utilisation: analytic model FLOP/s "
              "over the measured matmul peak of the same precision.", ""]
    peak = res["matmul_peak"]
    trows = []
    for r in res["training"]:
        setting = [r["pair"], r["mode"], r["precision"]]
        if "error" in r:
            trows.append([*setting, "error", "", "", "", r["error"]])
            continue
        util = [f"{100 * r[s]['achieved_flops'] / peak[r['precision']]:.2f}%" for s in ("ka", "tf")]
        trows.append([*setting, f"{r['ka']['median']:,.0f}", f"{r['tf']['median']:,.0f}", f"{r['ratio']:.3f}", *util])
    lines += _table(["models", "mode", "precision", "ka tok/s", "tf tok/s", "ka/tf", "ka util", "tf util"], trows)
    lines += ["## Peak memory of one training step", "",
              "One attention layer at ka-1m width (dim 128, 4 heads; the transformer: one attention block of tf-1m), "
              "batch 1, fp32, forward + backward of the output's sum. Measured with `torch.profiler` "
              "(`profile_memory=True`): every tensor allocation and free on the CPU allocator is an event, and the "
              "peak of their running sum is the step's high-water mark above what existed before (exact for tensors, "
              "unaffected by malloc caching and other processes; library scratch space outside torch's allocator is "
              f"not seen). A measurement estimated above {plan['mem_cap_bytes'] / GIB:.1f} GiB is skipped and its "
              "estimate shown instead (previous length's peak × (T/T_prev)², or an analytic count for the first).", ""]
    mem = {(r["subject"], r["T"]): r for r in res["memory"]}
    subjects = list(dict.fromkeys(r["subject"] for r in res["memory"]))

    def cell(r: dict[str, Any]) -> str:
        return _mib(r["peak_bytes"]) if "peak_bytes" in r else f"skipped (est. {_mib(r['estimate_bytes'])})"

    lines += _table(["T", *[f"{s} (MiB)" for s in subjects]],
                    [[t, *[cell(mem[(s, t)]) for s in subjects]] for t in plan["mem_lengths"]])
    lines += ["## Generation", "", f"Greedy generation of {plan['gen_total'] - 1} tokens after a 1-token prompt "
              "(eager fp32, batch 1): with the KV cache each step feeds one token; without it each step recomputes "
              "the whole sequence. Median tokens/s over the repeats, cache and recompute alternated.", ""]
    lines += _table(["model", "cache tok/s", "recompute tok/s", "speed-up", "same tokens"],
                    [[g["preset"], f"{g['median']['cache']:,.1f}", f"{g['median']['recompute']:,.1f}",
                      f"{g['ratio']:.1f}×", g["same_tokens"]] for g in res["generation"]])
    lines += ["## FLOP counting", "", f"Matmul peak of this machine ({plan['matmul_n']}² square matmuls, best of "
              f"repeats): fp32 {peak['fp32'] / 1e9:,.1f} GFLOP/s, bf16 {peak['bf16'] / 1e9:,.1f} GFLOP/s.", "",
              "Model FLOPs per token = 6 · N_mm + 6 · L · T · (d_qk + d_v). N_mm: every nn.Linear weight (a shared "
              "gate module counted once per layer using it) plus the transformer's tied output head; embedding "
              "lookups are not matmuls. The attention term counts QKᵀ and A·V (2 FLOPs per multiply-add, backward "
              "twice forward) over the full T with no causal halving; for Kuramoto the query/key features and the "
              "values are ψ(θ) of width 2k, for the transformer width d. Elementwise work is not counted.", ""]
    flops = {r[s]["preset"]: r[s] for r in res["training"] if "ka" in r for s in ("ka", "tf")}
    lines += _table(["model", "N_mm", "d_qk", "d_v", "FLOPs/token"],
                    [[n, f"{f['matmul_params']:,}", f["d_qk"], f["d_v"], f"{f['flops_per_token']:,}"]
                     for n, f in flops.items()])
    return "\n".join(lines)


# --------------------------------------------------------------------------- command
def _command(args: Any) -> str:
    """The command line that reproduces this run (only the options given)."""
    parts = ["kuramoto", "bench"] + (["--quick"] if args.quick else []) + (["--json"] if args.json else [])
    for flag in ("out", "json_out", "repeats", "mem_cap_gib"):
        if getattr(args, flag) is not None:
            parts += ["--" + flag.replace("_", "-"), str(getattr(args, flag))]
    if args.compile is not None:
        parts.append("--compile" if args.compile else "--no-compile")
    return shlex.join(parts)


def run_bench(args: Any) -> tuple[dict[str, Any], Path, Path]:
    plan = make_plan(args)
    """Measure everything, judge the targets, write the Markdown and the JSON; returns (results, md, json)."""
    out = Path(args.out or (tempfile.mkdtemp(prefix="kuramoto-bench-") if args.quick else ".")) / (
        "" if args.out else "BENCHMARKS.md")
    json_path = Path(args.json_out) if args.json_out else (
        out.with_suffix(".json") if args.out or args.quick else Path("results") / "bench.json")
    res: dict[str, Any] = {"command": _command(args), "quick": bool(args.quick), "json_path": str(json_path),
                           "machine": machine_info(), "plan": asdict(plan)}
    _log("matmul peak")
    res["matmul_peak"] = matmul_peak(plan.matmul_n, plan.repeats)
    res["training"] = bench_training(plan)
    res["memory"] = bench_memory(plan)
    res["generation"] = bench_generation(plan)
    res["targets"] = evaluate_targets(json.loads(json.dumps(res)))  # judged on exactly what the JSON holds
    for path, text in ((json_path, json.dumps(res, indent=2)), (out, render(res))):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    return res, out, json_path


def _cmd(args: Any) -> None:
    res, out, json_path = run_bench(args)
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        for t in res["targets"]:
            print(f"{t['status']:<4}  {t['name']}" + (f"  ({t['note']})" if t["note"] else ""))
    _log(f"wrote {out} and {json_path}")
