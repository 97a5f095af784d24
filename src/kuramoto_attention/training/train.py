"""Training: the loop (options: config.py; AdamW, schedule, clipping: optim.py), bf16 autocast,
optional torch.compile, seeded random-window batches, periodic validation, atomic
checkpoints with exact resume, and DistributedDataParallel under ``torchrun``.

Batches are a pure function of (seed, rank, step): resuming at step s draws exactly the
batches an uninterrupted run would have drawn, with no generator state to carry.

A run directory belongs to one training process at a time (an advisory lock, ``train.lock``, that the
operating system releases when the process ends, however it ends), and to one run: a fresh run refuses a
directory that holds another run's record. A resumed run keeps its settings; only the budget and
bookkeeping (device, intervals, progress display) may change, and each change is recorded in ``run.json``
with the step from which it applies. SIGINT and SIGTERM end training after the current step with a
checkpoint of it.
"""

import contextlib
import json
import math
import os
import shlex
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import IO, Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from kuramoto_attention.errors import ConfigError
from kuramoto_attention.models.lm import ByteLM
from kuramoto_attention.models.presets import apply_overrides, build_model, config_from_dict, get_preset
from kuramoto_attention.training.checkpoint import (
    CKPT,
    OLD,
    CheckpointSpaceError,
    check_directory,
    find_checkpoint,
    load_model,
    load_state,
    save_checkpoint,
    write_json_atomic,
)
from kuramoto_attention.training.config import RESUMABLE, TrainConfig, train_config_from, without_retired_options
from kuramoto_attention.training.data import Corpus, canonical_spec, corpus_checksum, load_corpus, sample_windows
from kuramoto_attention.training.memory import check_step_memory
from kuramoto_attention.training.optim import GradientClip, lr_at, make_optimizer, rounded_norms
from kuramoto_attention.training.precision import autocast, precision_note, resolve_precision

LN2 = math.log(2.0)
LOCK_FILE = "train.lock"
UNRECORDED = frozenset({"data_dir", "progress"})  # not part of what was trained (run.json's "changes" omit them)


class TrainingDiverged(ConfigError):
    """The loss became NaN or inf: a setting to change (lr, clipping), reported as one line."""


class TrainingInterrupted(Exception):
    """SIGINT or SIGTERM ended training after a step, with a checkpoint of that step (the CLI exits 128 + signal)."""

    def __init__(self, message: str, signum: int, rank: int) -> None:
        super().__init__(message)
        self.signum = signum
        self.rank = rank


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"unknown device {name!r}; use auto, cpu or cuda[:N]") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device cuda requested but CUDA is not available; use --device cpu")
    return device


def batch_generator(seed: int, rank: int, step: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + rank * 999_983 + step)


@torch.no_grad()
def estimate_bpc(model: nn.Module, data: Any, cfg: TrainConfig, context: int, device: torch.device) -> float:
    """Mean bits per byte on ``eval_batches`` fixed random windows (the same every call)."""
    was_training = model.training
    model.eval()
    total = 0.0
    gen = torch.Generator().manual_seed(1234)
    for _ in range(cfg.eval_batches):
        x, y = sample_windows(data, cfg.batch_size, context, gen)
        with autocast(device, cfg.precision):
            logits = model(x.to(device))
        total += F.cross_entropy(logits.float().flatten(0, 1), y.to(device).flatten()).item()
    model.train(was_training)
    return total / cfg.eval_batches / LN2


@dataclass
class Run:
    """Everything a training run needs, resolved from presets, files and flags."""

    family: str
    model_cfg: Any
    train_cfg: TrainConfig
    run_dir: Path
    record: dict[str, Any] = field(default_factory=dict)  # the run.json a resumed run was loaded from
    changes: dict[str, list[Any]] = field(default_factory=dict)  # training options a resume changes: [old, new]


def prepare_run(
    preset: str | None,
    config_file: str | None,
    model_overrides: dict[str, Any],
    train_overrides: dict[str, Any],
    run_dir: str | None,
) -> Run:
    """Merge preset < TOML file < flags into a Run (file: ``preset``, ``[model]``, ``[train]``)."""
    file_data = _read_config_file(config_file) if config_file else {}
    preset = preset or file_data.get("preset") or "ka-1m"
    family, model_cfg = get_preset(preset)
    model_cfg = apply_overrides(family, model_cfg, {**file_data.get("model", {}), **model_overrides})
    options = {**file_data.get("train", {}), **train_overrides}
    # one rule with `kuramoto eval`: a context, when given, is a length; the model's is the one left out
    if "context" in options and not (isinstance(options["context"], int) and options["context"] >= 1):
        raise ConfigError(f"context must be >= 1, got {options['context']!r} (leave it out for the preset's)")
    train_cfg = train_config_from(options)
    if train_cfg.context == 0:
        train_cfg = replace(train_cfg, context=model_cfg.context)
    # a text:PATH corpus by its absolute path: the run is evaluated and resumed from other directories too
    train_cfg = replace(train_cfg, corpus=canonical_spec(train_cfg.corpus))
    model_cfg = replace(model_cfg, context=train_cfg.context)
    name = run_dir or os.path.join("runs", f"{preset}-{time.strftime('%Y%m%d-%H%M%S')}")
    return Run(family, model_cfg, train_cfg, check_directory(name, "run directory"))


CONFIG_KEYS = {"preset": str, "model": dict, "train": dict}


def _read_config_file(config_file: str) -> dict[str, Any]:
    """A TOML config: ``preset = "..."``, a ``[model]`` and a ``[train]`` table, nothing else (a misspelt table
    would otherwise be ignored and the defaults trained)."""
    import tomllib

    try:
        data = tomllib.loads(Path(config_file).read_text())
    except (OSError, UnicodeDecodeError):
        raise ConfigError(f"cannot read config file {config_file}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {config_file} is not valid TOML: {exc}") from None
    unknown = sorted(set(data) - set(CONFIG_KEYS))
    if unknown:
        raise ConfigError(f"config file {config_file}: unknown key(s) or table(s) {', '.join(unknown)}; a config "
                          'holds preset = "...", a [model] table and a [train] table')
    for key, kind in CONFIG_KEYS.items():
        if key in data and not isinstance(data[key], kind):
            what = "a string" if kind is str else f"a table [{key}]"
            raise ConfigError(f"config file {config_file}: {key} must be {what}, got {data[key]!r}")
    return data


def load_run(run_dir: str | Path, train_overrides: dict[str, Any]) -> Run:
    """The Run stored in an existing run directory (for --resume and evaluation).

    ``train_overrides`` may change only what ``RESUMABLE`` names (the budget, bookkeeping); a value equal to
    the saved one is no change. The changes are returned in ``Run.changes``; ``train`` records them.
    """
    run_dir = check_directory(run_dir, "run directory")
    try:
        saved = json.loads((run_dir / "run.json").read_text())
    except FileNotFoundError:
        raise ConfigError(f"{run_dir} is not a run directory (no run.json); start it with `kuramoto train`") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ConfigError(f"{run_dir / 'run.json'} is corrupt; start a new run") from None
    family, model_cfg = config_from_dict(saved["model"])
    before = train_config_from(saved["train"], saved=True)
    train_cfg = train_config_from({**without_retired_options(saved["train"], saved=True), **train_overrides})
    changes = {k: [getattr(before, k), v] for k, v in train_overrides.items() if getattr(before, k) != v}
    fixed = [f"{k} ({old!r} -> {new!r})" for k, (old, new) in changes.items() if k not in RESUMABLE]
    if fixed:
        raise ConfigError(f"resuming {run_dir} cannot change {', '.join(fixed)}: the run would no longer be the one "
                          "recorded; start a new run instead")
    return Run(family, model_cfg, train_cfg, run_dir, record=saved, changes=changes)


class MetricsLog:
    """Append-only metrics.jsonl on rank 0 (plus TensorBoard when installed)."""

    def __init__(self, run_dir: Path, resume_step: int | None) -> None:
        self.path = run_dir / "metrics.jsonl"
        if resume_step is not None and self.path.exists():  # drop records the checkpoint never saw
            kept = [line for line in self.path.read_text().splitlines() if _step_of(line) <= resume_step]
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text("".join(line + "\n" for line in kept))
            os.replace(tmp, self.path)
        self.tb = None
        with contextlib.suppress(ImportError):
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(run_dir / "tensorboard"))

    def write(self, record: dict[str, Any]) -> None:
        with open(self.path, "a") as fh:
            fh.write(json.dumps(record) + "\n")
        if self.tb is not None:
            for k, v in record.items():
                if k != "step" and isinstance(v, int | float):
                    self.tb.add_scalar(k, v, record["step"])


def _step_of(line: str) -> float:
    """The step of a metrics line; a line cut short by a kill counts as unseen (dropped on resume)."""
    try:
        return json.loads(line)["step"]
    except (json.JSONDecodeError, KeyError, TypeError):
        return math.inf


def _distributed() -> tuple[int, int]:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend)
    return (dist.get_rank(), dist.get_world_size()) if world > 1 else (0, 1)


def _budget_steps(cfg: TrainConfig, world: int) -> int | None:
    per_step = cfg.batch_size * cfg.context * world
    candidates = [s for s in (cfg.steps, math.ceil(cfg.tokens / per_step) if cfg.tokens else 0) if s]
    return min(candidates) if candidates else None


class DiskFull(ConfigError):
    """No space left while writing a checkpoint: the previous checkpoint is intact (reported as one line)."""


@dataclass
class Session:
    """One training invocation's state, from the checked inputs to the summary: ``check_inputs`` makes it,
    ``setup_run`` writes the run's record, ``train_step`` advances it by one optimizer step, ``finish_run`` closes
    it."""

    run: Run
    resume: bool
    rank: int
    world: int
    device: torch.device
    train_data: Any
    valid_data: Any
    corpus_name: str
    corpus_text: str
    checksum: str | None
    has_ckpt: bool
    from_checkpoint: bool
    total_steps: int | None
    model: Any = None
    optimizer: Any = None
    state: dict[str, Any] = field(default_factory=dict)  # the trainer state a resumed run loads
    step: int = 0
    tokens: int = 0
    elapsed: float = 0.0
    valid_bpc: float = math.nan
    saved_step: int | None = None  # the step of the checkpoint on disk (None: none yet)
    finished: bool = False
    log: "MetricsLog | None" = None
    step_fn: Any = None
    bar: Any = None
    clip: Any = None
    t_last: float = 0.0
    tok_last: int = 0

    @property
    def cfg(self) -> TrainConfig:
        return self.run.train_cfg

    def done(self) -> bool:
        return _done(self.cfg, self.step, self.total_steps, self.elapsed)


def train(run: Run, resume: bool = False) -> dict[str, Any]:
    """Train ``run``; returns the final summary (also written to run_dir/summary.json).

    ``resume``: continue from the run directory's checkpoint (from step 0 when the run never wrote one).
    The summary has ``"nothing_to_do": True`` when a resumed run had already reached its budget.
    Everything that can be checked without writing (options, device, corpus, the model's build, the step's memory)
    is checked before the run directory is created; a directory this call created is removed if the call fails
    before writing the run's record into it.
    """
    rank, world = _distributed()
    # the handlers first: from here on a signal asks training to stop after a step, and the directory is not made yet
    with StopRequest() as stop:
        try:
            session = check_inputs(run, resume, rank, world)
            created = rank == 0 and not run.run_dir.exists()
            # rank 0 owns the directory (it alone writes there); the other ranks only read the checkpoint
            with RunLock(run.run_dir) if rank == 0 else contextlib.nullcontext(), _removed_if_unused(run.run_dir,
                                                                                                   created):
                setup_run(session)
                while not session.done():
                    if stop.agreed(world, session.device):  # between steps: every rank stops at the same one
                        _save(session)
                        if session.bar is not None:
                            session.bar.close()
                        raise TrainingInterrupted(f"{signal.Signals(stop.signum).name} at step {session.step}: "
                                                  f"checkpoint saved; continue with: "
                                                  f"{resume_command(run.run_dir, world)}", stop.signum, rank)
                    train_step(session)
                return finish_run(session)
        except KeyboardInterrupt:  # a second Ctrl-C: stopped without saving
            if not (run.run_dir / "run.json").exists():
                raise TrainingInterrupted("SIGINT before training started: nothing was written", signal.SIGINT,
                                          rank) from None
            raise TrainingInterrupted(f"SIGINT again: stopped at once, without a checkpoint of the last steps (the "
                                      f"previous checkpoint, if any, is intact); continue with: "
                                      f"{resume_command(run.run_dir, world)}", signal.SIGINT, rank) from None


@contextlib.contextmanager
def _removed_if_unused(run_dir: Path, created: bool) -> Iterator[None]:
    """Remove ``run_dir`` if this call created it and fails before writing the run's record (a refused run leaves no
    directory that looks like a run)."""
    try:
        yield
    except BaseException:
        if created and not (run_dir / "run.json").exists():
            shutil.rmtree(run_dir, ignore_errors=True)
        raise


def check_inputs(run: Run, resume: bool, rank: int, world: int) -> Session:
    """Everything checkable before the run directory is written: the device, the precision it resolves to (recorded
    in ``run.train_cfg``), the corpus and its size, and for a fresh run the model, its optimizer and the step's memory.
    Seeds torch's generator first, as the run always has: the model's initialisation depends on it."""
    cfg = run.train_cfg
    device = resolve_device(cfg.device)
    if device.type == "cuda" and world > 1:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    note = precision_note(cfg.precision, device) or f"precision: {resolve_precision(cfg.precision, device)}"
    run.train_cfg = cfg = replace(cfg, precision=resolve_precision(cfg.precision, device))
    corpus: Corpus = load_corpus(cfg.corpus, cfg.data_dir)
    checksum = corpus_checksum(cfg.corpus)
    recorded = run.record.get("corpus_sha256")
    if resume and recorded is not None and checksum != recorded:
        raise ConfigError(f"corpus {cfg.corpus} changed since {run.run_dir} was trained on it (SHA-256 {checksum}, "
                          f"recorded {recorded}): restore the file, or start a new run")
    train_data, valid_data = corpus.splits["train"], corpus.splits["valid"]
    if len(train_data) <= cfg.context + 1 or len(valid_data) <= cfg.context + 1:
        raise ConfigError(f"corpus {corpus.name} is too small for context {cfg.context}; use a shorter --context")
    has_ckpt = any((run.run_dir / name).exists() for name in (CKPT, OLD))
    s = Session(run, resume, rank, world, device, train_data, valid_data, corpus.name, corpus.describe(), checksum,
                has_ckpt, from_checkpoint=resume and has_ckpt,  # a resumed run that never saved starts at step 0
                total_steps=_budget_steps(cfg, world))
    torch.manual_seed(cfg.seed)
    if not s.from_checkpoint:
        s.model = build_model(run.family, run.model_cfg)
        _place(s)
    if rank == 0:  # said once, with the precision recorded in run.json; after the checks (a refused run says one line)
        print(note, flush=True)
    return s


def _place(s: Session) -> None:
    """The model on its device with its optimizer; then, unless the budget is already spent, the step's memory
    checked (a step that cannot fit would grow until the machine runs out of memory)."""
    s.model.to(s.device)
    s.optimizer = make_optimizer(s.model, s.cfg)
    if s.from_checkpoint:
        s.optimizer.load_state_dict(s.state["optimizer"])
        torch.set_rng_state(s.state["torch_rng"])
    s.finished = _done(s.cfg, s.step, s.total_steps, s.elapsed)
    if not s.finished:
        local = int(os.environ.get("LOCAL_WORLD_SIZE", s.world)) if s.device.type == "cpu" else 1
        check_step_memory(s.model, s.cfg.batch_size, s.cfg.context, s.device, s.cfg.precision, processes=local)


def setup_run(s: Session) -> None:
    """With the run directory locked: refuse another run's directory, load the checkpoint a resumed run continues,
    write run.json and the start-up lines, open the metrics log, and make the step function and progress bar."""
    run, cfg = s.run, s.cfg
    if not s.resume and s.rank == 0:
        _refuse_other_run(run, s.has_ckpt)
    if s.from_checkpoint:
        ckpt = find_checkpoint(run.run_dir)
        s.model, _ = load_model(ckpt)
        s.state = load_state(ckpt)
        s.step, s.tokens, s.elapsed = s.state["step"], s.state["tokens"], s.state["elapsed"]
        s.valid_bpc = s.state.get("valid_bpc", math.nan)
        s.saved_step = s.step
        _place(s)
    if s.rank == 0:
        if s.resume and s.finished:
            print(f"nothing to do: run finished at step {s.step} (extend its budget with --steps, --tokens or "
                  "--minutes)", flush=True)
        else:
            run.run_dir.mkdir(parents=True, exist_ok=True)
            write_json_atomic(run.run_dir / "run.json", _record(run, s.model, s.resume, s.step, s.checksum))
            print(f"corpus: {s.corpus_text}", flush=True)
            print(f"model: {run.family}, {s.model.num_params():,} parameters; run dir: {run.run_dir}", flush=True)
            if s.resume:
                changed = "".join(f"; {k} {old!r} -> {new!r}" for k, (old, new) in run.changes.items())
                print(f"resuming from step {s.step}" + (" (no checkpoint yet)" if not s.from_checkpoint else "")
                      + changed, flush=True)
    if s.rank == 0 and not s.finished:
        s.log = MetricsLog(run.run_dir, s.step if s.from_checkpoint else None)
        if not s.from_checkpoint and s.log.path.exists():
            s.log.path.unlink()
    net: nn.Module = s.model
    if s.world > 1:
        net = nn.parallel.DistributedDataParallel(s.model, device_ids=[s.device.index] if s.device.type == "cuda"
                                                  else None)
    s.step_fn = torch.compile(net) if cfg.compile else net
    s.bar = _progress(cfg.progress and s.rank == 0 and not s.finished, s.total_steps, s.step)
    s.t_last, s.tok_last = s.elapsed, s.tokens
    s.clip = GradientClip(s.model, cfg.grad_clip)
    s.model.train()


def train_step(s: Session) -> None:
    """One optimizer step: the scheduled rate, a batch drawn from (seed, rank, step), forward, a finiteness check
    every rank agrees on, backward, clipping, the update; then the metrics line, the validation estimate and the
    checkpoint when they are due."""
    cfg = s.cfg
    t0 = time.perf_counter()
    progress = s.step / s.total_steps if s.total_steps else s.elapsed / (cfg.minutes * 60)
    lr = lr_at(cfg, progress, s.step)
    for group in s.optimizer.param_groups:
        group["lr"] = lr * group["lr_mult"]
    x, y = sample_windows(s.train_data, cfg.batch_size, cfg.context, batch_generator(cfg.seed, s.rank, s.step))
    x, y = x.to(s.device, non_blocking=True), y.to(s.device, non_blocking=True)
    with autocast(s.device, cfg.precision):
        logits = s.step_fn(x)
    loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
    finite = torch.isfinite(loss.detach()).to(torch.float32)
    if s.world > 1:  # every rank must stop together, or the others hang in backward's all-reduce
        dist.all_reduce(finite, op=dist.ReduceOp.MIN)
    if not finite.item():  # never saved: the last checkpoint holds the last finite state
        raise TrainingDiverged(f"loss became non-finite at step {s.step}; nothing was saved after it (the "
                               f"checkpoint in {s.run.run_dir}, if any, is older): lower --lr or enable --grad-clip")
    s.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm, part_norms = s.clip()
    s.optimizer.step()
    s.step += 1
    s.tokens += cfg.batch_size * cfg.context * s.world
    s.elapsed += time.perf_counter() - t0
    if s.world > 1:  # every rank stops on rank 0's clock, so a minutes budget cannot desynchronise them
        t = torch.tensor([s.elapsed], dtype=torch.float64, device=s.device)
        dist.broadcast(t, 0)
        s.elapsed = t.item()
    record: dict[str, Any] = {"step": s.step, "tokens": s.tokens, "lr": lr, "loss": loss.item(),
                              "train_bpc": loss.item() / LN2, "grad_norm": grad_norm.item(),
                              "part_grad_norms": rounded_norms(part_norms)}
    last = s.done()
    if s.step % cfg.eval_every == 0 or last:
        s.valid_bpc = estimate_bpc(s.model, s.valid_data, cfg, cfg.context, s.device)
        # training throughput: step time only (``elapsed``), not evaluation or checkpointing
        record.update(valid_bpc=s.valid_bpc, tokens_per_s=(s.tokens - s.tok_last) / max(s.elapsed - s.t_last, 1e-9),
                      elapsed_s=s.elapsed)
        s.t_last, s.tok_last = s.elapsed, s.tokens
    if s.log is not None:
        s.log.write(record)
    if s.bar is not None:
        s.bar.update(1)
        # before the first estimate there is none: "n/a", not nan
        val = f"{s.valid_bpc:.3f}" if math.isfinite(s.valid_bpc) else "n/a"
        s.bar.set_postfix(loss=f"{record['loss']:.3f}", val_bpc=val,
                          tok_s=f"{s.tokens / max(s.elapsed, 1e-9):.0f}", refresh=False)
    if s.step % cfg.ckpt_every == 0 or last:
        _save(s)


def _save(s: Session) -> None:
    """A checkpoint of the current step (rank 0); a full disk is one line naming the checkpoint still intact."""
    if s.rank != 0:
        return
    try:
        save_checkpoint(s.run.run_dir, s.model, s.model.config_dict(), {
            "step": s.step, "tokens": s.tokens, "elapsed": s.elapsed, "valid_bpc": s.valid_bpc,
            "optimizer": s.optimizer.state_dict(), "torch_rng": torch.get_rng_state(),
        })
    except CheckpointSpaceError:
        if s.bar is not None:
            s.bar.close()
        kept = (f"the checkpoint of step {s.saved_step} is intact" if s.saved_step is not None
                else "no earlier checkpoint exists (the run restarts from step 0)")
        raise DiskFull(f"no space left on device writing the checkpoint at step {s.step} in {s.run.run_dir}; {kept}; "
                       f"free space and run: {resume_command(s.run.run_dir, s.world)}") from None
    s.saved_step = s.step


def finish_run(s: Session) -> dict[str, Any]:
    """Close the bar, write summary.json (rank 0) and, when distributed, check the replicas and leave the group."""
    run, world = s.run, s.world
    if s.bar is not None:
        s.bar.close()
    summary = {"run_dir": str(run.run_dir), "family": run.family, "params": s.model.num_params(), "step": s.step,
               "tokens": s.tokens, "elapsed_s": round(s.elapsed, 1), "valid_bpc_estimate": s.valid_bpc,
               "corpus": s.corpus_name, "precision": s.cfg.precision}
    if world > 1:  # DDP keeps replicas identical; record each rank's weights checksum to prove it
        fingerprint = torch.stack([p.detach().double().sum() for p in s.model.parameters()]).sum().reshape(1)
        gathered = [torch.zeros_like(fingerprint) for _ in range(world)]
        dist.all_gather(gathered, fingerprint)
        summary["rank_weight_checksums"] = [g.item() for g in gathered]
    if s.rank == 0 and not s.finished:
        write_json_atomic(run.run_dir / "summary.json", summary)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    return {**summary, "nothing_to_do": True} if s.finished else summary


def _refuse_other_run(run: Run, has_ckpt: bool) -> None:
    """A fresh run may not write over another run's record: only a restart of the very same settings, in a
    directory that never saved a checkpoint, starts it again from step 0 (nothing of it survives to mix with)."""
    if has_ckpt:
        raise ConfigError(f"{run.run_dir} already holds a checkpoint; continue it with --resume {run.run_dir} "
                          "or choose another --run-dir")
    try:
        saved = json.loads((run.run_dir / "run.json").read_text())
    except FileNotFoundError:
        return
    except (OSError, ValueError):
        saved = {}
    mine = {"model": asdict(run.model_cfg), "train": asdict(run.train_cfg)}
    differ = [f"{part}.{k}" for part in ("model", "train")
              for k in sorted(set(mine[part]) | set(saved.get(part, {})))
              if k not in UNRECORDED and k != "family" and mine[part].get(k) != saved.get(part, {}).get(k)]
    if differ:
        raise ConfigError(f"{run.run_dir} already holds another run (its settings differ in "
                          f"{', '.join(differ[:4])}{', ...' if len(differ) > 4 else ''}); continue it with "
                          f"--resume {run.run_dir}, or choose another --run-dir")


def _record(run: Run, model: ByteLM, resume: bool, step: int, checksum: str | None) -> dict[str, Any]:
    """run.json: the model and training settings now in force and, per resume that changed any, the step from
    which each change applies (so the record never disagrees with what was trained)."""
    record = dict(run.record) if resume else {}
    record.update(model=model.config_dict(), train=asdict(run.train_cfg))
    changes = {k: v for k, v in run.changes.items() if k not in UNRECORDED}
    if resume and changes:
        record["changes"] = [*record.get("changes", []), {"step": step, "changed": changes}]
    if checksum is not None:
        record["corpus_sha256"] = checksum
    return record


def resume_command(run_dir: Path, world: int) -> str:
    """The command that continues ``run_dir``, as it must be typed (quoted; under torchrun when distributed)."""
    if world > 1:
        per_node = os.environ.get("LOCAL_WORLD_SIZE", str(world))
        return (f"torchrun --nproc_per_node={per_node} -m kuramoto_attention.cli train --resume "
                f"{shlex.quote(str(run_dir))}")
    return f"kuramoto train --resume {shlex.quote(str(run_dir))}"


class RunLock:
    """An exclusive advisory lock on ``run_dir/train.lock`` for one training process.

    ``flock`` locks belong to the open file: the kernel drops them when the process ends, even by SIGKILL, so a
    killed run's directory can be resumed at once, while a second live process is refused with one line.
    """

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.fh: IO[str] | None = None

    def __enter__(self) -> "RunLock":
        check_directory(self.run_dir, "run directory")
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            fh = open(self.run_dir / LOCK_FILE, "a+")  # held open until __exit__: the lock lives on the open file
        except OSError as exc:
            raise ConfigError(f"cannot use run directory {self.run_dir}: {exc.strerror}") from None
        if not _try_lock(fh):
            fh.seek(0)
            holder = fh.read().strip() or "unknown"
            fh.close()
            raise ConfigError(f"{self.run_dir} is in use by another training process ({holder}); wait for it to "
                              "finish or choose another --run-dir")
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()}")
        fh.flush()
        self.fh = fh
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fh is not None:
            self.fh.close()  # closing the file releases the lock
            self.fh = None


def _try_lock(fh: IO[str]) -> bool:
    if sys.platform == "win32":
        import msvcrt

        try:
            msvcrt.locking(fh.fileno(), msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    import fcntl

    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


class StopRequest:
    """SIGINT/SIGTERM handlers that ask training to stop after the current step (instead of losing the steps
    since the last checkpoint). A second signal gets the default behaviour: stop now.

    Installed only in the main thread (Python delivers signals there); elsewhere training runs without them.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signum = 0
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        self.previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.signum = signum
        # a second Ctrl-C interrupts at once (KeyboardInterrupt; SIGTERM: the default action), whatever handler
        # the caller had (the CLI's start-up one quits without a word about the run)
        for sig in self.previous:
            signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)

    def agreed(self, world: int, device: torch.device) -> bool:
        """Whether any rank was asked to stop (every rank must stop at the same step, or the others hang)."""
        if world == 1:
            return bool(self.signum)
        flag = torch.tensor([float(self.signum)], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        self.signum = int(flag.item())
        return bool(self.signum)


def _done(cfg: TrainConfig, step: int, total_steps: int | None, elapsed: float) -> bool:
    if total_steps is not None and step >= total_steps:
        return True
    return bool(cfg.minutes) and elapsed >= cfg.minutes * 60


def _progress(enabled: bool, total: int | None, initial: int) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True, mininterval=1.0)
