"""The ``kuramoto`` console script's module: it installs the start-up signal handlers on import, before anything else
is imported (the CLI's own imports take ~45 ms), so that Ctrl-C or SIGTERM in a command's first instant is one line.

Only the console script imports this module; the library and ``kuramoto_attention.cli.main`` (in-process use) do not.
"""

import os
import signal
import sys


def _interrupted(signum: int, frame: object) -> None:
    print(f"interrupted ({signal.Signals(signum).name})", file=sys.stderr, flush=True)
    os._exit(128 + signum)


for _sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(_sig, _interrupted)


def main() -> int:
    from kuramoto_attention.cli import main as cli_main

    return cli_main()
