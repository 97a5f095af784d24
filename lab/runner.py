"""``python -m lab run GROUP``: train, evaluate and record a group's runs, skipping finished ones and twins."""

import json
import math
import statistics
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from kuramoto_attention.diagnostics.measure import diagnose, valid_batch
from kuramoto_attention.errors import ConfigError
from kuramoto_attention.models.config import flat_fields
from kuramoto_attention.models.presets import PRESETS

# Everything a run needs is imported here, not lazily inside functions: a group runs for hours, and a
# module first imported mid-group would be the edited file on disk, not the one the group started with.
from kuramoto_attention.training.checkpoint import CheckpointError, find_checkpoint, load_model, write_json_atomic
from kuramoto_attention.training.data import load_corpus
from kuramoto_attention.training.evaluate import evaluate_bpc
from kuramoto_attention.training.train import load_run, prepare_run, train
from lab import protocol
from lab.groups import FROZEN, GROUPS, RETIRED, all_results, flops_per_token, order, plan
from lab.protocol import Spec, load_results
from lab.records import _config_diffs, mismatch, run_dir_of, same_run, same_training


def run_spec(spec: Spec, data_dir: str | None, trained: dict[str, Any] | None = None) -> dict[str, Any]:
    """Train (resuming), evaluate, write results/GROUP/NAME.json; ``trained``: another group's run to evaluate."""
    out = protocol.RESULTS / spec.group / f"{spec.name}.json"
    run_dir = run_dir_of(trained) if trained else protocol.RUNS / spec.group / spec.name
    train_overrides = {**spec.train, "data_dir": data_dir}
    started = time.time()
    if trained:
        summary = json.loads((run_dir / "summary.json").read_text())
    elif _has_checkpoint(run_dir) and (run_dir / "run.json").exists():
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
    metrics = read_log(run_dir)
    speeds = [m["tokens_per_s"] for m in metrics if "tokens_per_s" in m][1:]  # first includes compile
    result = {
        "group": spec.group, "name": spec.name, "preset": spec.preset, "family": run.family,
        "model_overrides": spec.model, "model": flat_fields(run.model_cfg), "train": asdict(run.train_cfg),
        "params": summary["params"], "tokens": summary["tokens"], "corpus": corpus.name,
        "eval_split": spec.eval_split, "eval_bpc": ev["bpc"], "eval_bytes": ev["bytes_scored"],
        "eval_stride": ev["stride"], "final_valid_estimate": summary["valid_bpc_estimate"],
        **log_fields(metrics, run.train_cfg.grad_clip, run.train_cfg.warmup),
        "train_tokens_per_s": sorted(speeds)[len(speeds) // 2] if speeds else math.nan,
        "wall_s": trained["wall_s"] if trained and "wall_s" in trained else round(time.time() - started, 1),
        "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"),
    }
    if trained:
        result["trained_in"] = _trained_name(trained)
    if run.family == "kuramoto":
        result["diagnostics"] = run_diagnostics(run_dir, data_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out, result)
    return result


def read_log(run_dir: Path) -> list[dict[str, Any]]:
    """A run's metrics.jsonl, one record per step (and per evaluation)."""
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def log_fields(metrics: list[dict[str, Any]], clip: float, warmup: int) -> dict[str, Any]:
    """What a result keeps of its run's log: the validation curve with training figures per evaluation, clipping."""
    points, window, norms = [], [], []
    for m in metrics:
        if "train_bpc" in m:
            window.append(m["train_bpc"])
            if "grad_norm" in m:  # logged since the trainer kept it
                norms.append(m["grad_norm"])
        if "valid_bpc" in m:
            points.append({"tokens": m["tokens"], "elapsed_s": m["elapsed_s"], "valid_bpc": m["valid_bpc"],
                           "train_bpc": sum(window) / len(window) if window else None,
                           "grad_norm": statistics.median(finite) if (finite := [g for g in norms
                                                                                  if math.isfinite(g)]) else None,
                           "clipped": sum(g > clip for g in norms) / len(norms) if norms and clip > 0 else None})
            window, norms = [], []
    fields: dict[str, Any] = {"valid_curve": [[m["tokens"], m["valid_bpc"]] for m in metrics if "valid_bpc" in m],
                              "curve": points}
    if rough := clipping(metrics, clip, warmup):
        fields["clipping"] = rough
    return fields


def relogged(result: dict[str, Any], run_dir: Path) -> dict[str, Any] | None:
    """A result with the log fields it lacks read from its run's log now; None: nothing to add, or not its log."""
    try:
        metrics = read_log(run_dir)
    except (OSError, json.JSONDecodeError):  # not on this machine, or not a whole log: the record stays as it is
        return None
    fields = log_fields(metrics, result["train"]["grad_clip"], result["train"]["warmup"])
    if fields["valid_curve"] != result["valid_curve"]:
        return None
    new = {**result, **fields}
    return new if new != result else None


def clipping(metrics: list[dict[str, Any]], clip: float, warmup: int) -> dict[str, Any] | None:
    """How many steps after the warmup exceeded the clip, and where their gradient sat; None: no norms or no clip."""
    steps = [m for m in metrics if "grad_norm" in m and m["step"] > warmup and math.isfinite(m["grad_norm"])
             and m["grad_norm"] > 0]
    if not steps or clip <= 0:
        return None
    clipped = [m for m in steps if m["grad_norm"] > clip]
    out: dict[str, Any] = {"clip": clip, "after_step": warmup, "steps": len(steps), "clipped_steps": len(clipped)}

    def shares(rows: list[dict[str, Any]]) -> dict[str, float]:  # a part without a gradient at a step holds none
        names = dict.fromkeys(k for r in rows for k in r["part_grad_norms"])
        return {k: statistics.median(r["part_grad_norms"].get(k, 0.0) ** 2 / r["grad_norm"] ** 2 for r in rows)
                for k in names}

    if all("part_grad_norms" in m for m in steps):
        out["parts"] = {"clipped": shares(clipped), "all": shares(steps)}
    return out


def _trained_name(result: dict[str, Any]) -> str:
    return str(run_dir_of(result).relative_to(protocol.RUNS))


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
        "attn_drive": d.attn_drive.tolist(),
        "ff_drive": [x if math.isfinite(x) else None for x in d.ff_drive.tolist()],
        "local_order": d.local_order.mean(dim=1).tolist(), "global_order": d.global_order.mean(dim=1).tolist(),
        "entropy": d.entropy.mean(dim=1).tolist(),
        "self_weight": d.self_weight.mean(dim=1).tolist(), "layer_median_abs_omega": d.layer_median_abs_omega.tolist(),
        "attn_radius": [b.attn.bound.radius.mean().item() for b in model.blocks],
        "tau": [b.attn.log_tau.exp().tolist() for b in model.blocks],
        "knockout_bpc": [[x if math.isfinite(x) else None for x in row] for row in d.knockout_bpc.tolist()],
    }


def estimate(group: str) -> tuple[int, float, int] | None:
    """(runs, seconds, runs estimated) for ``group`` from the committed results' wall_s; None: not plannable."""
    with protocol.at_root(protocol.COMMITTED):
        try:
            specs = plan(group)
        except ConfigError:
            return None
        pool = all_results()
        own = {r["name"]: r for r in load_results(group)}
        seconds, scaled = 0.0, 0
        for spec in specs:
            r = own.get(spec.name) or same_run(spec, pool)
            if r is not None and "wall_s" in r:
                seconds += r["wall_s"]
                continue
            tokens = spec.train.get("tokens", protocol.PROTOCOL["tokens"])
            rates = sorted(p["wall_s"] / p["tokens"] for p in pool if p["preset"] == spec.preset and "wall_s" in p)
            if rates:
                seconds += rates[len(rates) // 2] * tokens
            else:  # a preset never run here: the median seconds per model FLOP of every run, times its FLOPs
                per_flop = sorted(p["wall_s"] / p["tokens"] / flops_per_token(p["preset"]) for p in pool
                                  if "wall_s" in p and p["preset"] in PRESETS)
                seconds += per_flop[len(per_flop) // 2] * flops_per_token(spec.preset) * tokens if per_flop else 0
            scaled += 1
    return len(specs), seconds, scaled


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def describe(group: str) -> str:
    """The order in which ``group`` and the groups it reads run, with each one's size and duration."""
    steps = []
    total = 0.0
    for g in order(group):
        if g in RETIRED or (est := estimate(g)) is None:  # a retired group is read, never planned
            steps.append(f"{g} (retired at {RETIRED[g].commit}: its recorded results are read; `{RETIRED[g].rerun(g)}` "
                         "reruns it)" if g in RETIRED else f"{g} (not plannable on the committed results)")
            continue
        n, seconds, scaled = est
        total += seconds
        steps.append(f"{g}: {n} run{'s' * (n != 1)}, about {_hours(seconds)}"
                     + (f" ({scaled} not yet recorded, estimated from their preset's seconds per token, or from the "
                        "median seconds per model FLOP for a preset never run)" if scaled else ""))
    upstream = " → ".join(order(group))
    return (f"order: {upstream} (each sweep before the groups that read its best rate); " + "; ".join(steps)
            + (f"; about {_hours(total)} in all" if len(steps) > 1 else "")
            + " (wall-clock of the committed runs on the machine that made them, one run at a time)")


def _move_aside(path: Path) -> None:
    """Keep a replaced result or run directory beside its new one (PATH.replaced, then .replaced-2, ...)."""
    target, n = path.with_name(path.name + ".replaced"), 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.replaced-{n}")
    path.rename(target)


def run_group(group: str, data_dir: str | None, only: list[str] | None = None, rerun: bool = False,
              dry_run: bool = False) -> None:
    """Train the group's runs that are not done (``rerun``: all, keeping NAME.replaced; ``dry_run``: say what)."""
    try:
        specs = plan(group)
    except ConfigError as exc:
        if group not in (*GROUPS, *FROZEN):  # nothing to describe: the one line names the groups
            raise
        raise ConfigError(f"{exc}; {describe(group)}") from None
    print(f"[{group}] {describe(group)}", flush=True)
    if only:
        unknown = sorted(set(only) - {s.name for s in specs})
        if unknown:
            raise ConfigError(f"{group} plans no run {', '.join(unknown)}; its runs: "
                              f"{', '.join(s.name for s in specs)}")
        specs = [s for s in specs if s.name in only]
    results, runs = protocol.RESULTS, protocol.RUNS
    if not dry_run and not rerun:
        for r in load_results(group):  # results written before diagnostics or a log field were recorded: add them
            run_dir = runs / group / r["name"]
            if newer := relogged(r, run_dir):
                print(f"[{group}] {r['name']}: added what its log holds and its result did not keep", flush=True)
                r = newer
                write_json_atomic(results / group / f"{r['name']}.json", r)
            if r["family"] == "kuramoto" and "diagnostics" not in r and (run_dir / "checkpoint").exists():
                r["diagnostics"] = run_diagnostics(run_dir, data_dir)
                write_json_atomic(results / group / f"{r['name']}.json", r)
    done = {r["name"]: r for r in load_results(group)}
    pool = all_results()  # every group's results, read once for the twin checks below
    todo = []
    for spec in specs:
        if spec.name in done and not rerun:
            why = mismatch(spec, done[spec.name])
            state = (f"STALE ({why}); move {results / group / spec.name}.json and {runs / group / spec.name} "
                     f"away, or pass --rerun, to rerun it" if why else "done")
            print(f"[{group}] {spec.name}: {state}, skipping", flush=True)
            continue
        twin = same_run(spec, pool) if not rerun else None
        if twin is not None:  # the notebook shows the twin's result in this group's table, marked as such
            print(f"[{group}] {spec.name}: already run as {twin['group']}/{twin['name']} (same config, seed and "
                  "split), skipping (--rerun trains it here)", flush=True)
            continue
        todo.append((spec, same_training(spec, pool) if not rerun else None))
    planned = f"{len(specs)} run{'s' * (len(specs) != 1)} planned"
    evaluate = sum(trained is not None for _, trained in todo)
    print(f"[{group}] {planned}, {len(todo) - evaluate} to train"
          + (f" and {evaluate} to evaluate from another group's training" if evaluate else "")
          + f" under {results} and {runs}"
          + (" (dry run: nothing trained; the durations above are those of training it from scratch)"
             if dry_run else ""), flush=True)
    if dry_run:
        for spec, trained in todo:
            print(f"[{group}] {spec.name}: " + (f"would evaluate {_trained_name(trained)}'s checkpoint on "
                                               f"{spec.eval_split}" if trained else
                                               f"would train ({spec.train.get('tokens'):,} tokens)"), flush=True)
        return
    for spec, trained in todo:
        recorded = results / group / f"{spec.name}.json"
        if rerun and recorded.exists():  # a finished run: start again (an interrupted rerun has no result: resumed)
            for old in (recorded, runs / group / spec.name):
                if old.exists():
                    print(f"[{group}] {spec.name}: rerun: the old {old} is kept as {old.name}.replaced", flush=True)
                    _move_aside(old)
        if trained:
            print(f"[{group}] {spec.name}: trained as {_trained_name(trained)} (same config and seed, scored on "
                  f"{trained['eval_split']}): evaluating its checkpoint on {spec.eval_split}", flush=True)
        else:
            print(f"[{group}] {spec.name}: training", flush=True)
        r = run_spec(spec, data_dir, trained)
        print(f"[{group}] {spec.name}: {r['eval_split']} {r['eval_bpc']:.4f} after {r['tokens']:,} tokens", flush=True)
    if todo:
        out = "" if results == Path("results") else f" --out {results.parent}"
        print(f"[{group}] done; `python -m lab report{out}` writes the report", flush=True)
