"""The transformers integration is optional: the core package, its command and its training never import
transformers (nor what only the ``hf`` extra installs). Runs with or without the extra."""

import json
import subprocess
import sys

CORE = ["kuramoto_attention", "kuramoto_attention.cli", "kuramoto_attention.training.train",
        "kuramoto_attention.training.checkpoint", "kuramoto_attention.training.evaluate",
        "kuramoto_attention.diagnostics.report", "kuramoto_attention.models.presets"]
EXTRA = ("transformers", "accelerate", "tokenizers")

PROBE = f"""
import importlib, json, sys
for name in {CORE!r}:
    importlib.import_module(name)
from kuramoto_attention.cli import build_parser
build_parser().parse_args(["export", "run", "out"])
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {EXTRA!r})))
"""


def test_the_core_package_never_imports_transformers():
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []

