"""The lab's entry point, run from the repository root: ``python -m lab ACTION [GROUP ...]``.

    run GROUP        train and evaluate every run of a group (resuming, skipping finished runs)
    report           regenerate RESULTS.md (and the lab notebook) from results/ only
    replicate        every protocol group in order, then the studies and the report
    dynamics | gap | probe   the studies (they read trained runs under runs/experiments/)
"""

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from kuramoto_attention.cli import run_main
from kuramoto_attention.errors import ConfigError
from lab.groups import DYNAMICS_GROUPS, FROZEN, GROUPS
from lab.runner import run_group


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m lab", description="the replication lab: run groups, write RESULTS.md")
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
    return p


def _cmd(args: Any) -> None:
    if args.action == "run":
        if len(args.group) != 1:
            raise ConfigError(f"run needs one GROUP: {', '.join([*GROUPS, *FROZEN])}")
        run_group(args.group[0], args.data_dir, args.only)
    elif args.action == "replicate":
        for group in GROUPS:
            run_group(group, args.data_dir)
    if args.action in ("dynamics", "replicate"):
        from lab.studies.dynamics import measure, write

        groups = args.group if args.action == "dynamics" and args.group else DYNAMICS_GROUPS
        print(f"wrote {write([row for group in groups for row in measure(group, args.data_dir)])}")
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
    if args.action in ("report", "replicate"):
        from lab.writers.results_md import write_results_md

        print(f"wrote {write_results_md()}")


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
