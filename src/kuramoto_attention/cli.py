"""The ``kuramoto`` command: params, train, eval, sample, data, report, export.

User mistakes (unknown preset, missing data, corrupt checkpoint, bad values) end with one
``error: ...`` line on stderr and exit status 2, never a traceback.
"""

import argparse
import json
import math
import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import fields
from pathlib import Path
from types import FrameType
from typing import Any

# Only light modules here: torch is imported by the commands that need it, so --help and a mistyped command line
# answer at once, and the start-up signal handlers (``quit_on_signal``) are in place before the heavy imports.
from kuramoto_attention.diagnostics import report
from kuramoto_attention.errors import ConfigError
from kuramoto_attention.models.config import retired_error
from kuramoto_attention.training.allocator import keep_freed_memory
from kuramoto_attention.training.config import RESUMABLE, RETIRED_OPTIONS, TrainConfig, option_of

_PRECISION = next(option_of(f) for f in fields(TrainConfig) if f.name == "precision")  # one declaration for all
PRECISIONS, PRECISION_HELP = _PRECISION.choices, f"{_PRECISION.help} (default auto)"

# user mistakes raised by modules the commands import lazily: (module, class); an instance exists only once its
# module is imported, so they are looked up in sys.modules instead of importing torch to classify an error
LAZY_USER_ERRORS = (("kuramoto_attention.training.data", "DataError"),
                    ("kuramoto_attention.training.checkpoint", "CheckpointError"))
DESCRIPTION = ("kuramoto: train, evaluate, sample and report on byte-level Kuramoto-attention and transformer "
               "language models. A user mistake ends in one 'error:' line and exit status 2.")


def _key_values(pairs: Sequence[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--model expects KEY=VALUE, got {pair!r}")
        out[key.strip()] = value.strip()
    return out


def cmd_params(args: argparse.Namespace) -> None:
    from kuramoto_attention.models.presets import preset_table

    rows = preset_table()
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    w = max(len("preset"), *(len(r["name"]) for r in rows))
    print(f"{'preset':<{w}} {'family':<12} {'params':>10} {'depth':>5} {'width':>5} {'heads':>5} {'ff':>5}")
    for r in rows:
        print(f"{r['name']:<{w}} {r['family']:<12} {r['params']:>10,} {r['depth']:>5} {r['width']:>5} "
              f"{r['heads']:>5} {r['ff_hidden']:>5}")


def add_train_options(p: argparse.ArgumentParser) -> None:
    """One flag per ``TrainConfig`` option, derived from its declaration (help, type, choices; config.py): a value
    option as ``--name VALUE``, a switch as a bare flag that sets the opposite of its default (``--compile``,
    ``--no-progress``). A flag left out is None, so the preset, the config file or the saved run decides."""
    for f in fields(TrainConfig):
        opt = option_of(f)
        if opt.flag is None:
            continue
        default = getattr(TrainConfig, f.name)
        if opt.flag == "switch":
            name = f.name if default is False else f"no_{f.name}"
            p.add_argument("--" + name.replace("_", "-"), dest=f.name, action="store_const", const=not default,
                           default=None, help=opt.help)
            continue
        text = opt.help if "default" in opt.help else f"{opt.help} (default {default})"
        p.add_argument("--" + f.name.replace("_", "-"), type=opt.kind, choices=opt.choices, help=text)
    for name, (default, _) in RETIRED_OPTIONS.items():  # not listed; given, one line naming the commit that has it
        p.add_argument("--" + name.replace("_", "-"), dest=name, action=RetiredFlag, help=argparse.SUPPRESS,
                       nargs=0 if isinstance(default, bool) else None, type=None if isinstance(default, bool) else
                       type(default))


class RetiredFlag(argparse.Action):
    """A retired training option's flag (``training.config.RETIRED_OPTIONS``): refused with the commit that has it."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        default, commit = RETIRED_OPTIONS[self.dest]
        value = not default if values == [] else values
        raise UsageError(str(retired_error(f"training option {self.dest}", value, commit, "run")))


def cmd_train(args: argparse.Namespace) -> None:
    from kuramoto_attention.training.train import load_run, prepare_run, train

    overrides: dict[str, Any] = {f.name: getattr(args, f.name) for f in fields(TrainConfig)
                                 if getattr(args, f.name, None) is not None}
    if args.context is not None and args.context < 1:
        raise ConfigError("--context must be >= 1 (leave it out for the preset's)")
    if args.resume:
        if args.preset or args.config or args.model or args.run_dir:
            raise ConfigError("--resume continues a run with its saved config in its own directory; drop "
                              "--preset/--config/--model/--run-dir")
        # anything but the budget and bookkeeping would make the run another one than its record (the batches drawn,
        # the schedule, the optimizer): refused even at the saved value, so a command line never seems to change it
        fixed = [f"--{k.replace('_', '-')}" for k in overrides if k not in RESUMABLE]
        if fixed:
            raise ConfigError(f"--resume cannot change {', '.join(fixed)} (the saved run would not continue as "
                              "recorded); start a new run instead")
        run = load_run(args.resume, overrides)
    else:
        run = prepare_run(args.preset, args.config, _key_values(args.model), overrides, args.run_dir)
    summary = train(run, resume=bool(args.resume))
    # under torchrun every rank returns the summary; one line per run, not per process
    if summary.get("nothing_to_do") or int(os.environ.get("RANK", "0")) != 0:
        return
    steps, batches = summary["step"], run.train_cfg.eval_batches
    print(f"done: {steps} step{'s' * (steps != 1)}, {summary['tokens']:,} tokens in {summary['elapsed_s']:.0f} s; "
          f"valid BPC {summary['valid_bpc_estimate']:.4f} (estimate on {batches} batch{'es' * (batches != 1)}; "
          f"full split: kuramoto eval {run.run_dir} --split valid)")
    print(f"run dir: {run.run_dir}")


def cmd_eval(args: argparse.Namespace) -> None:
    import torch

    from kuramoto_attention.training.checkpoint import load_model
    from kuramoto_attention.training.data import DataError, corpus_checksum, load_corpus
    from kuramoto_attention.training.evaluate import evaluate_bpc
    from kuramoto_attention.training.precision import precision_note, resolve_precision
    from kuramoto_attention.training.train import load_run, resolve_device

    for flag in ("batch_size", "context", "stride", "max_bytes"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            hint = " (leave it out for the run's)" if flag == "context" else ""
            raise ConfigError(f"--{flag.replace('_', '-')} must be >= 1{hint}")
    run = load_run(args.run_dir, {})
    device = resolve_device(args.device)
    model, _ = load_model(Path(args.run_dir), map_location=device)
    corpus_spec = args.corpus or run.train_cfg.corpus
    corpus = load_corpus(corpus_spec, args.data_dir or run.train_cfg.data_dir)
    recorded = run.record.get("corpus_sha256")
    if args.corpus is None and recorded is not None and corpus_checksum(corpus_spec) != recorded:
        raise DataError(f"corpus {corpus_spec} changed since {args.run_dir} was trained on it (its SHA-256 differs "
                        "from the one recorded in run.json): restore the file, or name another with --corpus")
    trained = run.train_cfg.context
    context = args.context if args.context is not None else trained
    if context > trained:  # positions past the trained context were never seen (RoPE, clocks): refused, not clamped
        raise ConfigError(f"--context {context} is longer than the context the run was trained at ({trained}); "
                          f"use --context {trained} or less")
    stride = context if args.non_overlapping else args.stride
    if stride is not None and stride > context:
        raise ConfigError(f"--stride {stride} is longer than the context ({context}); use --stride {context} or less")
    precision = resolve_precision(args.precision, device)
    note = precision_note(args.precision, device)
    if note and not args.json:
        print(note, file=sys.stderr)
    with torch.inference_mode():
        result = evaluate_bpc(model, corpus.splits[args.split], context, stride=stride, batch_size=args.batch_size,
                              device=device, precision=precision, max_bytes=args.max_bytes,
                              progress=not (args.json or args.no_progress))
    result.update(run_dir=str(args.run_dir), split=args.split, corpus=corpus.name, precision=precision)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{corpus.name} {args.split}: {result['bpc']:.4f} bits per byte over {result['bytes_scored']:,} bytes "
              f"(context {result['context']}, stride {result['stride']})")


def cmd_sample(args: argparse.Namespace) -> None:
    import torch

    from kuramoto_attention.training.checkpoint import load_model
    from kuramoto_attention.training.precision import autocast, precision_note
    from kuramoto_attention.training.train import resolve_device

    if args.length < 1:
        raise ConfigError("--length must be >= 1")
    if args.top_k is not None and args.top_k < 1:
        raise ConfigError("--top-k must be >= 1")
    if not (args.temperature >= 0 and math.isfinite(args.temperature)):
        raise ConfigError(f"--temperature must be >= 0 and finite (0: greedy), got {args.temperature}")
    if not args.prompt:
        raise ConfigError("--prompt must not be empty: the model continues at least one byte (the default is a "
                          "newline, --prompt $'\\n')")
    # the bytes as given: os.fsencode undoes the surrogate escapes of undecodable bytes in argv (UTF-8 otherwise)
    prompt_bytes = os.fsencode(args.prompt)
    device = resolve_device(args.device)
    model, _ = load_model(Path(args.run_dir), map_location=device)
    model.eval()
    prompt = torch.tensor([list(prompt_bytes)], dtype=torch.long, device=device)
    gen = torch.Generator(device=device).manual_seed(args.seed)
    note = precision_note(args.precision, device)
    if note:
        print(note, file=sys.stderr)
    with autocast(device, args.precision):
        out = model.generate(prompt, args.length, temperature=args.temperature, top_k=args.top_k, generator=gen,
                             compile=args.compile)
    data = bytes(out[0].tolist())
    if args.raw:  # exactly the bytes, no newline: for files and pipes
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    # text: invalid UTF-8 as U+FFFD, then what the terminal's encoding cannot show as "?" (else UnicodeEncodeError)
    encoding = sys.stdout.encoding or "utf-8"
    text = data.decode("utf-8", errors="replace")
    sys.stdout.write(text.encode(encoding, errors="replace").decode(encoding) + "\n")


def cmd_data(args: argparse.Namespace) -> None:
    from kuramoto_attention.training.data import fetch, load_corpus

    if args.action == "fetch":
        path = fetch(args.name, args.data_dir)
        print(f"{args.name}: verified, at {path}")
    else:
        print(load_corpus(args.name, args.data_dir).describe())


def cmd_export(args: argparse.Namespace) -> None:
    """The run as a directory Hugging Face transformers loads (kuramoto_attention.hf; the ``hf`` extra)."""
    try:
        from kuramoto_attention.hf.export import export_run
    except ImportError as exc:  # transformers missing or of an unsupported version: the message names the fix
        raise ConfigError(str(exc)) from None
    result = export_run(args.run_dir, args.out)
    load = (f"transformers alone loads it: AutoModelForCausalLM.from_pretrained({str(result.out)!r})"
            if result.family == "transformer" else
            f"AutoModelForCausalLM.from_pretrained({str(result.out)!r}, trust_remote_code=True), or without the flag "
            f"after import kuramoto_attention.hf")
    print(f"exported {args.run_dir} ({result.family}, {result.params:,} parameters) to {result.out} as "
          f"{result.architecture}; {load}")


class UsageError(Exception):
    """A command line argparse refuses (an unknown flag, an invalid choice, a missing argument)."""


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad command line as one ``error:`` line (``run_main``), not usage plus error;
    its subcommand parsers are of the same class."""

    def error(self, message: str):  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="kuramoto", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("params", help="parameter count, depth, width and heads of every preset")
    p.add_argument("--json", action="store_true", help="print the table as JSON (default: a text table)")
    p.set_defaults(func=cmd_params)

    p = sub.add_parser("train", help="train a model (preset or TOML config plus flag overrides)")
    p.add_argument("--preset", help="a preset name, as `kuramoto params` lists them (default ka-1m)")
    p.add_argument("--config", help="TOML file with preset = ..., [model] and [train] tables (default: none)")
    p.add_argument("--model", action="append", default=[], metavar="KEY=VALUE",
                   help="model field override, repeatable, e.g. --model heads=8 (default: the preset's fields)")
    p.add_argument("--run-dir", help="where to write logs and checkpoints (default runs/PRESET-TIME)")
    p.add_argument("--resume", metavar="RUN_DIR",
                   help="continue a run exactly from its last checkpoint (default: start a new run); it may change "
                        "only " + ", ".join(f"--{k.replace('_', '-')}" for k in sorted(RESUMABLE) if k != "progress")
                        + ", --no-progress, and run.json records each change with its step")
    add_train_options(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("eval", help="bits per byte of a trained run over a whole split")
    p.add_argument("run_dir", help="a run directory written by `kuramoto train`")
    p.add_argument("--split", choices=["train", "valid", "test"], default="valid",
                   help="which split to score (default valid)")
    p.add_argument("--stride", type=int, help="sliding-window stride (default context/2)")
    p.add_argument("--non-overlapping", action="store_true", help="stride = context (default: context/2)")
    p.add_argument("--context", type=int, help="window length, >= 1 (default: the run's)")
    p.add_argument("--corpus", help="evaluate on another corpus than the run's (default: the run's)")
    p.add_argument("--data-dir", help="folder holding the corpora (default: the run's, then $KURAMOTO_DATA)")
    p.add_argument("--batch-size", type=int, default=32, help="windows per forward pass (default 32)")
    p.add_argument("--max-bytes", type=int, help="only the first N bytes of the split (default: all)")
    p.add_argument("--precision", choices=PRECISIONS, default="auto",
                   help=PRECISION_HELP)
    p.add_argument("--device", default="auto", help="auto, cpu or cuda[:N] (default auto)")
    p.add_argument("--json", action="store_true", help="print one JSON object, no progress bar (default: one line)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (default: a bar on stderr)")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("sample", help="generate text from a trained run")
    p.add_argument("run_dir", help="a run directory written by `kuramoto train`")
    p.add_argument("--prompt", default="\n",
                   help="text to continue, at least one byte; printed before the continuation (default: a newline)")
    p.add_argument("--length", type=int, default=200, help="bytes to generate (default 200)")
    p.add_argument("--temperature", type=float, default=0.8,
                   help="sampling temperature, >= 0; 0 is greedy (default 0.8)")
    p.add_argument("--top-k", type=int, help="sample among the k likeliest bytes only (default: all 256)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda[:N] (default auto)")
    p.add_argument("--precision", choices=PRECISIONS, default="auto",
                   help=PRECISION_HELP)
    p.add_argument("--raw", action="store_true",
                   help="write the bytes exactly, without a newline (default: text, invalid UTF-8 shown as U+FFFD)")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the forward (a one-time compile first; worth it for long samples; "
                        "default: eager)")
    p.set_defaults(func=cmd_sample)

    p = sub.add_parser("data", help="fetch or describe a corpus")
    p.add_argument("action", choices=["fetch", "info"], help="fetch: download and verify; info: describe the splits")
    p.add_argument("name", help="fetch: enwik8; info: any corpus spec")
    p.add_argument("--data-dir", help="folder holding the corpora (default: $KURAMOTO_DATA)")
    p.set_defaults(func=cmd_data)

    p = sub.add_parser("export", help="write a run as a directory Hugging Face transformers loads (the hf extra)")
    p.add_argument("run_dir", help="a run directory written by `kuramoto train` (or its checkpoint directory)")
    p.add_argument("out", help="the directory to write: new, or empty (transformer runs: LlamaForCausalLM; Kuramoto "
                               "runs: KuramotoForCausalLM, registered by `import kuramoto_attention.hf`)")
    p.set_defaults(func=cmd_export)

    report.add_subcommand(sub)  # the report's options live beside its code
    report_parser = sub.choices["report"]
    report_parser.set_defaults(func=_checked_report(report_parser.get_default("func")))
    return parser


def _checked_report(func: Callable[[argparse.Namespace], None]) -> Callable[[argparse.Namespace], None]:
    """The report command with its paths checked first: a file given as the run or the output folder, or an output
    folder whose parent does not exist, is one ``error:`` line, not a traceback from deep inside ``mkdir``."""

    def run(args: argparse.Namespace) -> None:
        from kuramoto_attention.training.checkpoint import check_directory

        check_directory(args.run_dir, "run directory")
        if args.out is not None:
            out = check_directory(args.out, "--out")
            if not out.parent.is_dir():
                raise ConfigError(f"--out {out}: its parent folder {out.parent} does not exist; create it or give "
                                  "another --out")
        func(args)

    return run


def _user_error(exc: BaseException) -> bool:
    if isinstance(exc, ConfigError):
        return True
    return any((module := sys.modules.get(name)) is not None and isinstance(exc, getattr(module, cls))
               for name, cls in LAZY_USER_ERRORS)


def _interrupted_at_start(signum: int, frame: FrameType | None) -> None:
    """Ctrl-C or SIGTERM while the command imports and checks its inputs: one line and out at once. Raising
    KeyboardInterrupt here could land inside torch's C++ start-up (pybind11's ``terminate called``); nothing has been
    written yet (training installs its own handlers before it creates its run directory)."""
    print(f"interrupted ({signal.Signals(signum).name})", file=sys.stderr, flush=True)
    os._exit(128 + signum)


class quit_on_signal:
    """Install ``_interrupted_at_start`` for SIGINT and SIGTERM for the duration (main thread only), restoring the
    previous handlers after (the CLI runs in-process in tests and notebooks)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __enter__(self) -> "quit_on_signal":
        import threading

        self.previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self.previous[sig] = signal.signal(sig, _interrupted_at_start)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def run_main(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> int:
    """Parse and run ``args.func``; a user mistake ends with one ``error:`` line and exit status 2 (also the lab's
    and the benchmark's entry points)."""
    with quit_on_signal():
        try:
            args = parser.parse_args(argv)
        except UsageError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        try:
            args.malloc = keep_freed_memory()  # the process's setting: the CLI's (allocator.py), not the library's
            args.func(args)
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130
        except Exception as exc:
            if _user_error(exc):
                print(f"error: {exc}", file=sys.stderr)
                return 2
            train = sys.modules.get("kuramoto_attention.training.train")
            if train is not None and isinstance(exc, train.TrainingInterrupted):  # a checkpoint of the last step
                if exc.rank == 0:
                    print(f"interrupted: {exc}", file=sys.stderr)
                return 128 + exc.signum
            raise
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
