"""The replication protocol of issue 4 as code: ``kuramoto experiment run GROUP`` trains and
evaluates every run of a group (one at a time, resuming interrupted runs, skipping finished
ones) and writes one small JSON summary per run under ``results/GROUP/``;
``kuramoto experiment report`` regenerates RESULTS.md and the plot from those files only.

The groups and their runs are defined in ``groups.py``; the settings they share in ``protocol.py``.
"""

import contextlib
import json
import math
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

# Everything a run needs is imported here, not lazily inside functions: a group runs for hours, and a
# module first imported mid-group would be the edited file on disk, not the one the group started with.
from .checkpoint import CheckpointError, find_checkpoint, load_model, write_json_atomic
from .data import load_corpus
from .diagnostics import diagnose, valid_batch
from .evaluate import evaluate_bpc
from .groups import DYNAMICS_GROUPS, FROZEN, GROUPS, all_results, plan
from .presets import FAMILIES, ConfigError, apply_overrides, get_preset
from .protocol import RESULTS, RUNS, TRAIN_DEFAULTS, Spec, load_results
from .train import load_run, prepare_run, train, train_config_from

# where a run's data came from and how it reported progress: not part of what was trained
_NOT_SETTINGS = ("data_dir", "progress", "device", "family")


def expected_configs(spec: Spec) -> tuple[dict[str, Any], dict[str, Any]]:
    """The full model and training configs a spec trains with (the preset and defaults filled in)."""
    family, preset_cfg = get_preset(spec.preset)
    return asdict(apply_overrides(family, preset_cfg, spec.model)), asdict(train_config_from(dict(spec.train)))


# What a record made before a model field existed ran with (the field's first default), so that a later
# change of that default makes such records stale instead of silently matching. A missing training field
# counts at today's TrainConfig default: changing a training default needs an entry of its own here.
RECORDED_BEFORE: dict[str, Any] = {"self_coupling": True, "embed_spread": 1.0, "fp32_attention": False,
                                   "phase_lag": False, "phase_lag_spread": 0.0, "content_lag": False,
                                   "ff_output": "increment", "coupling_lag": False, "value_lag": False,
                                   "readout_gain": "none", "readout_gain_init": 1.0, "clock": 0,
                                   "clock_init": 0.0, "clock_log_weight": False, "readout_harmonics": 1,
                                   "readout_tied": False, "ff_proj": "none", "ff_proj_dim": 0,
                                   "step_gate": False, "value_gate_input": "lift",
                                   "gates_input": "lift"}


def _config_diffs(spec: Spec, model: dict[str, Any], train_cfg: dict[str, Any]) -> list[str]:
    """How recorded model and training configs (a run.json's or a result's) differ from the spec's.
    A field the record lacks was added later: it counts at ``RECORDED_BEFORE`` or the config's default."""
    expected = dict(zip(("model", "train"), expected_configs(spec), strict=True))
    defaults = {"model": {**asdict(FAMILIES[get_preset(spec.preset)[0]][0]()), **RECORDED_BEFORE},
                "train": TRAIN_DEFAULTS}
    return [f"{part} {k}={recorded.get(k, defaults[part][k])!r} (spec {v!r})"
            for part, recorded in (("model", model), ("train", train_cfg))
            for k, v in expected[part].items()
            if k not in _NOT_SETTINGS and recorded.get(k, defaults[part][k]) != v]


def mismatch(spec: Spec, result: dict[str, Any]) -> str | None:
    """Why a results file no longer records what its spec asks for (None: it does). A preset or training
    default, an override or a best learning rate that moved makes a finished run stale; it is reported,
    never silently reused."""
    diffs = _config_diffs(spec, result["model"], result["train"])
    if result["model_overrides"] != spec.model:
        diffs.append(f"model overrides {result['model_overrides']} (spec {spec.model})")
    return ", ".join(diffs) or None


def same_run(spec: Spec, pool: list[dict[str, Any]] | None = None) -> dict[str, Any] | None:
    """A finished run of another group that trained and evaluated exactly what ``spec`` asks for (same
    full model and training configs, seed and split), or None: a spec need not be run twice. ``pool``:
    the results to search (default: every group's), for callers that ask about many specs."""
    family = get_preset(spec.preset)[0]
    for r in all_results() if pool is None else pool:
        if (r["group"], r["name"]) != (spec.group, spec.name) and r["eval_split"] == spec.eval_split \
                and r["family"] == family and not _config_diffs(spec, r["model"], r["train"]):
            return r
    return None


def with_twins(group: str) -> list[dict[str, Any]]:
    """A group's results plus, for each planned run not made because another group already made it
    identically (``same_run``), that run under the planned name, with ``twin`` naming it ("GROUP/NAME")."""
    rows = load_results(group)
    with contextlib.suppress(ConfigError):  # a group that cannot be planned yet has no twins either
        done, pool = {r["name"] for r in rows}, all_results()
        for spec in plan(group):
            r = same_run(spec, pool) if spec.name not in done else None
            if r is not None:
                twin = f"{r['group']}/{r['name']}"  # the run's own group and name; the row is this group's
                rows.append({**r, "group": group, "name": spec.name, "preset": spec.preset,
                             "model_overrides": spec.model, "twin": twin})
    return rows


def run_dir_of(result: dict[str, Any]) -> Path:
    """Where a result's model was trained (a twin's: the other group's run)."""
    return RUNS / result["twin"] if "twin" in result else RUNS / result["group"] / result["name"]


def run_spec(spec: Spec, data_dir: str | None) -> dict[str, Any]:
    """Train (resuming if interrupted), evaluate on the whole split, write results/GROUP/NAME.json."""
    out = RESULTS / spec.group / f"{spec.name}.json"
    run_dir = RUNS / spec.group / spec.name
    train_overrides = {**spec.train, "data_dir": data_dir}
    started = time.time()
    if _has_checkpoint(run_dir) and (run_dir / "run.json").exists():
        # resume only what this spec would start: the stored run.json, not the spec, says what was trained
        saved = json.loads((run_dir / "run.json").read_text())
        diffs = _config_diffs(spec, saved["model"], saved["train"])
        if diffs:
            raise ConfigError(f"{run_dir} was started with other settings than {spec.group}/{spec.name} now "
                              f"specifies ({', '.join(diffs)}); move it away to rerun the spec from scratch")
        summary = train(load_run(run_dir, train_overrides), resume=True)
    else:
        summary = train(prepare_run(spec.preset, None, spec.model, train_overrides, str(run_dir)))
    run = load_run(run_dir, {})
    model, _ = load_model(run_dir)
    corpus = load_corpus(run.train_cfg.corpus, data_dir)
    with torch.inference_mode():
        ev = evaluate_bpc(model, corpus.splits[spec.eval_split], run.train_cfg.context, precision="bf16")
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    curve = [[m["tokens"], m["valid_bpc"]] for m in metrics if "valid_bpc" in m]
    # per evaluation: training seconds so far and the mean training BPC since the previous one (overfitting, wall clock)
    points, window = [], []
    for m in metrics:
        if "train_bpc" in m:
            window.append(m["train_bpc"])
        if "valid_bpc" in m:
            points.append({"tokens": m["tokens"], "elapsed_s": m["elapsed_s"], "valid_bpc": m["valid_bpc"],
                           "train_bpc": sum(window) / len(window) if window else None})
            window = []
    speeds = [m["tokens_per_s"] for m in metrics if "tokens_per_s" in m][1:]  # first includes compile
    result = {
        "group": spec.group, "name": spec.name, "preset": spec.preset, "family": run.family,
        "model_overrides": spec.model, "model": asdict(run.model_cfg), "train": asdict(run.train_cfg),
        "params": summary["params"], "tokens": summary["tokens"], "corpus": corpus.name,
        "eval_split": spec.eval_split, "eval_bpc": ev["bpc"], "eval_bytes": ev["bytes_scored"],
        "eval_stride": ev["stride"], "final_valid_estimate": summary["valid_bpc_estimate"],
        "valid_curve": curve, "curve": points,
        "train_tokens_per_s": sorted(speeds)[len(speeds) // 2] if speeds else math.nan,
        "wall_s": round(time.time() - started, 1), "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d"),
    }
    if run.family == "kuramoto":
        result["diagnostics"] = run_diagnostics(run_dir, data_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out, result)
    return result


def _has_checkpoint(run_dir: Path) -> bool:
    try:
        find_checkpoint(run_dir)
    except CheckpointError:
        return False
    return True


def run_diagnostics(run_dir: Path, data_dir: str | None) -> dict[str, Any]:
    """Per-layer summary of a trained Kuramoto run (bound saturation, order parameters, learned scales)."""
    model, _ = load_model(run_dir)
    d = diagnose(model, valid_batch(run_dir, batch=4, data_dir=data_dir))
    return {
        "attn_saturation": d.attn_saturation.tolist(),
        "ff_saturation": [x if math.isfinite(x) else None for x in d.ff_saturation.tolist()],  # NaN: no ff
        "local_order": d.local_order.mean(dim=1).tolist(), "global_order": d.global_order.mean(dim=1).tolist(),
        "entropy": d.entropy.mean(dim=1).tolist(),
        "self_weight": d.self_weight.mean(dim=1).tolist(), "layer_median_abs_omega": d.layer_median_abs_omega.tolist(),
        "attn_radius": [b.attn.bound.radius.mean().item() if b.attn.bound.kind != "none" else None
                        for b in model.blocks],
        "tau": [b.attn.log_tau.exp().tolist() for b in model.blocks],
        "knockout_bpc": [[x if math.isfinite(x) else None for x in row] for row in d.knockout_bpc.tolist()],
    }


def run_group(group: str, data_dir: str | None, only: list[str] | None = None) -> None:
    for r in load_results(group):  # results written before diagnostics were recorded: add them once
        run_dir = RUNS / group / r["name"]
        if r["family"] == "kuramoto" and "diagnostics" not in r and (run_dir / "checkpoint").exists():
            r["diagnostics"] = run_diagnostics(run_dir, data_dir)
            write_json_atomic(RESULTS / group / f"{r['name']}.json", r)
    done = {r["name"]: r for r in load_results(group)}
    for spec in plan(group):
        if only and spec.name not in only:
            continue
        if spec.name in done:
            why = mismatch(spec, done[spec.name])
            state = (f"STALE ({why}); move {RESULTS / group / spec.name}.json and {RUNS / group / spec.name} "
                     "away to rerun it" if why else "done")
            print(f"[{group}] {spec.name}: {state}, skipping", flush=True)
            continue
        twin = same_run(spec)
        if twin is not None:  # RESULTS.md shows the twin's result in this group's table, marked as such
            print(f"[{group}] {spec.name}: already run as {twin['group']}/{twin['name']} (same config, seed and "
                  "split), skipping", flush=True)
            continue
        print(f"[{group}] {spec.name}: training", flush=True)
        r = run_spec(spec, data_dir)
        print(f"[{group}] {spec.name}: {r['eval_split']} {r['eval_bpc']:.4f} after {r['tokens']:,} tokens", flush=True)


def add_subcommand(sub: Any) -> None:
    p = sub.add_parser("experiment", help="run the replication protocol or regenerate RESULTS.md")
    p.add_argument("action", choices=["run", "report", "replicate", "dynamics", "gap", "probe"],
                   help="run GROUP; report: RESULTS.md from results/; replicate: every protocol group (not the "
                        "frozen ones), then report; "
                        "dynamics [GROUP ...]: the paper's dynamics claims on the groups' Kuramoto runs; "
                        "gap [GROUP]: where ka-1m loses to tf-1m, per position and per byte difficulty; "
                        "probe: linear probes of earlier bytes in every state of main's seed-0 pair, the best "
                        "variant and the 5M pair")
    p.add_argument("group", nargs="*", help=f"{', '.join(GROUPS)} (frozen: {', '.join(FROZEN)}); dynamics takes "
                   f"several (default: {' '.join(DYNAMICS_GROUPS)})")
    p.add_argument("--only", action="append", help="run only these run names")
    p.add_argument("--data-dir")
    p.set_defaults(func=_cmd)


def _cmd(args: Any) -> None:
    if args.action == "run":
        if len(args.group) != 1:
            raise ConfigError(f"experiment run needs one GROUP: {', '.join([*GROUPS, *FROZEN])}")
        run_group(args.group[0], args.data_dir, args.only)
    elif args.action == "replicate":
        for group in GROUPS:
            run_group(group, args.data_dir)
    if args.action in ("dynamics", "replicate"):
        from .dynamics import measure, write

        groups = args.group if args.action == "dynamics" and args.group else DYNAMICS_GROUPS
        print(f"wrote {write([row for group in groups for row in measure(group, args.data_dir)])}")
    if args.action in ("gap", "replicate"):
        from . import gap

        if args.action == "gap" and len(args.group) > 1:
            raise ConfigError("experiment gap takes one GROUP (default: main)")
        print(f"wrote {gap.write(gap.measure(args.group[0] if args.group else 'main', args.data_dir))}")
    if args.action in ("probe", "replicate"):
        from . import probe

        if args.action == "probe" and args.group:
            raise ConfigError("experiment probe takes no GROUP (it probes main's seed-0 pair and the best variant)")
        print(f"wrote {probe.write(probe.measure(args.data_dir))}")
    if args.action in ("report", "replicate"):
        from .results import write_results_md

        print(f"wrote {write_results_md()}")
