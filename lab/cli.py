"""The lab's entry point, run from the repository root: ``python -m lab ACTION [GROUP ...]`` (``--help``)."""

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from kuramoto_attention.cli import OneLineParser, run_main
from kuramoto_attention.errors import ConfigError
from lab import protocol
from lab.groups import DYNAMICS_GROUPS, FROZEN, GROUPS
from lab.retired import RETIRED
from lab.runner import run_group


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m lab", description="the replication lab: run groups, write RESULTS.md")
    p.add_argument("action", choices=["run", "report", "replicate", "dynamics", "gap", "probe", "probe40",
                                      "induction"],
                   help="run GROUP; report: RESULTS.md and the notebook from results/; replicate: every protocol "
                        "group (not the frozen ones), then report; "
                        "dynamics [GROUP ...]: the paper's dynamics claims on the groups' Kuramoto runs (named groups "
                        "replace or join their rows of results/dynamics.json); "
                        "gap [GROUP]: where ka-1m loses to tf-1m, per position, per byte difficulty and per "
                        "recall (budget40: its 40M-token runs); "
                        "probe: linear probes of earlier bytes in every state of main's seed-0 pair, the best "
                        "variant and the 5M pair; probe40: issue 46's probes of the 40M pair and the fixes (the gap by "
                        "copy depth, a fitted output temperature, step lengths); induction: two-layer models on a "
                        "synthetic copy task (minutes)")
    p.add_argument("group", nargs="*", help=f"{', '.join(GROUPS)} (frozen: {', '.join(FROZEN)}; retired, reported "
                   f"only: {', '.join(RETIRED)}); dynamics takes several (default: {' '.join(DYNAMICS_GROUPS)})")
    p.add_argument("--only", action="append", help="run only these run names (induction: these models)")
    p.add_argument("--out", metavar="DIR", help="work in DIR (DIR/results, DIR/runs, DIR/RESULTS.md) instead of the "
                   "repository's results/ and runs/experiments/: a rerun from scratch of one's own")
    p.add_argument("--rerun", action="store_true", help="run: train the group's runs again even where a result (or "
                   "another group's identical run) exists; each replaced result and run directory is kept as "
                   "NAME.replaced")
    p.add_argument("--dry-run", action="store_true", help="run: print the order, the durations and what would "
                   "train, and train nothing")
    p.add_argument("--data-dir")
    p.set_defaults(func=_cmd)
    return p


def _cmd(args: Any) -> None:
    with protocol.rooted(args.out):
        _action(args)


def _action(args: Any) -> None:
    if (args.rerun or args.dry_run) and args.action != "run":
        raise ConfigError("--rerun and --dry-run go with run")
    if args.action == "run":
        if len(args.group) != 1:
            raise ConfigError(f"run needs one GROUP: {', '.join([*GROUPS, *FROZEN])}")
        run_group(args.group[0], args.data_dir, args.only, rerun=args.rerun, dry_run=args.dry_run)
    elif args.action == "replicate":
        for group in GROUPS:
            run_group(group, args.data_dir)
    if args.action in ("dynamics", "replicate"):
        from lab.studies.dynamics import measure, merged, write

        named = args.action == "dynamics" and bool(args.group)  # named groups join the recorded rows
        rows = [row for group in (args.group if named else DYNAMICS_GROUPS) for row in measure(group, args.data_dir)]
        print(f"wrote {write(merged(rows) if named else rows)}")
    if args.action in ("gap", "replicate"):
        from lab.studies import gap

        if args.action == "gap" and len(args.group) > 1:
            raise ConfigError("gap takes one GROUP (default: main)")
        print(f"wrote {gap.write(gap.measure(args.group[0] if args.group else 'main', args.data_dir))}")
    if args.action in ("probe", "replicate"):
        from lab.studies import probe

        if args.action == "probe" and args.group:
            raise ConfigError("probe takes no GROUP (it probes main's seed-0 pair and the best variant)")
        print(f"wrote {probe.write(probe.measure(args.data_dir))}")
    if args.action == "probe40":
        from lab.studies import probe40

        if args.group:
            raise ConfigError("probe40 takes no GROUP (it probes the 40M pair and fixes40's runs)")
        print(f"wrote {probe40.write(probe40.measure(args.data_dir))}")
    if args.action in ("induction", "replicate"):
        from lab.studies import induction

        if args.action == "induction" and args.group:
            raise ConfigError("induction takes no GROUP (it trains its own small models on a synthetic task)")
        models = tuple(args.only) if args.action == "induction" and args.only else tuple(induction.MODELS)
        print(f"wrote {induction.write(induction.measure(models=models))}")
    if args.action in ("report", "replicate"):
        from lab.writers.results_md import write_report
        from lab.writers.summary import update_readme

        for path in write_report(protocol.RESULTS.parent):
            print(f"wrote {path}")
        if (written := update_readme(protocol.RESULTS.parent / "README.md")) is not None:
            print(f"wrote {written} (its headline table)")


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
