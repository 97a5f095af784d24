"""``kuramoto export RUN OUT``: each family's run becomes a directory transformers loads, whose greedy tokens are
``kuramoto sample``'s; every mistake (an existing OUT, a corrupt or incomplete run, no transformers) is one
``error:`` line, exit status 2, and leaves no OUT behind."""

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import kuramoto_attention.hf  # noqa: F401
from kuramoto_attention.cli import main
from kuramoto_attention.training.checkpoint import load_model

TINY = ["--context", "16", "--batch-size", "4", "--precision", "fp32", "--no-progress", "--eval-batches", "2"]
PRESETS = {"kuramoto": "ka-tiny", "transformer": "tf-tiny"}
ARCHITECTURES = {"kuramoto": "KuramotoForCausalLM", "transformer": "LlamaForCausalLM"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    rng = np.random.default_rng(0)
    words = [b"kuramoto ", b"phase ", b"torus ", b"attention ", b"sync ", "café ☕ ".encode(), b"\n"]
    path = tmp_path_factory.mktemp("corpus") / "tiny.txt"
    path.write_bytes(b"".join(words[i] for i in rng.integers(0, len(words), 6000)))
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory, corpus) -> dict[str, Path]:
    """A finished 6-step tiny run of each family."""
    root = tmp_path_factory.mktemp("runs")
    for family, preset in PRESETS.items():
        assert main(["train", "--preset", preset, "--corpus", f"text:{corpus}", "--steps", "6", "--lr", "0.01",
                     "--run-dir", str(root / family), *TINY]) == 0
    return {family: root / family for family in PRESETS}


@pytest.fixture(scope="module")
def exported(tmp_path_factory, runs) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("exports")
    for family, run in runs.items():
        assert main(["export", str(run), str(root / family)]) == 0
    return {family: root / family for family in PRESETS}


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err, err
    return err


@pytest.mark.parametrize("family", PRESETS)
def test_the_export_loads_with_the_auto_classes_and_our_logits(family, runs, exported):
    out = exported[family]
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "README.md"} <= \
        {p.name for p in out.iterdir()}
    hf = AutoModelForCausalLM.from_pretrained(out)
    assert type(hf).__name__ == ARCHITECTURES[family]
    ours, _ = load_model(runs[family])
    idx = torch.randint(0, 256, (2, 48))
    with torch.no_grad():
        assert torch.allclose(hf(idx).logits, ours.eval()(idx), atol=1e-5, rtol=0)


@pytest.mark.parametrize("family", PRESETS)
def test_greedy_generate_gives_the_bytes_kuramoto_sample_gives(family, runs, exported, capsysbinary):
    prompt, length = "café sync ", 32
    assert main(["sample", str(runs[family]), "--prompt", prompt, "--length", str(length), "--temperature", "0",
                 "--raw", "--device", "cpu"]) == 0
    sampled = capsysbinary.readouterr().out
    tok = AutoTokenizer.from_pretrained(exported[family])
    model = AutoModelForCausalLM.from_pretrained(exported[family])
    ids = model.generate(**tok(prompt, return_tensors="pt"), max_new_tokens=length, do_sample=False)
    assert bytes(ids[0].tolist()) == sampled
    assert tok.decode(ids[0]) == sampled.decode("utf-8", "surrogateescape")


def test_an_existing_directory_is_refused_and_an_empty_one_taken(runs, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["export", str(runs["transformer"]), str(out)]) == 2
    one_error_line(capsys)
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["export", str(runs["transformer"]), str(empty)]) == 0
    assert (empty / "model.safetensors").exists()


def test_a_missing_incomplete_or_corrupt_run_is_refused(runs, tmp_path, capsys):
    corrupt = tmp_path / "corrupt"
    shutil.copytree(runs["kuramoto"], corrupt)
    weights = corrupt / "checkpoint" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    incomplete = tmp_path / "incomplete"
    incomplete.mkdir()
    for run in (tmp_path / "missing", incomplete, corrupt):
        out = tmp_path / f"out-{run.name}"
        assert main(["export", str(run), str(out)]) == 2
        one_error_line(capsys)
        assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if ".export-" in p.name]  # no half-written directory either


def test_without_transformers_export_is_one_line_naming_the_extra(runs, tmp_path, monkeypatch, capsys):
    real_version = importlib.metadata.version

    def version(name: str) -> str:
        if name == "transformers":
            raise importlib.metadata.PackageNotFoundError(name)
        return real_version(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    for name in [m for m in sys.modules if m.startswith("kuramoto_attention.hf")]:
        monkeypatch.delitem(sys.modules, name)  # imported afresh, as in a process without transformers
    assert main(["export", str(runs["kuramoto"]), str(tmp_path / "out")]) == 2
    assert "[hf]" in one_error_line(capsys)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("found", "supported"), [("5.6.0", True), ("5.25.0", True), ("5.30.0.dev0", True),
                                                  ("5.5.4", False), ("4.57.1", False), ("6.0.0", False)])
def test_a_transformers_outside_the_supported_range_is_refused(found, supported, monkeypatch):
    from kuramoto_attention.hf import requirements

    monkeypatch.setattr(importlib.metadata, "version", lambda name: found)
    if supported:
        requirements.check_transformers()
    else:
        with pytest.raises(ImportError):
            requirements.check_transformers()


def _fresh_python(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """``code`` in a new interpreter that has not imported kuramoto_attention.hf (nothing registered)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=300)


def test_a_kuramoto_export_loads_without_the_import_given_trust_remote_code(runs, exported, tmp_path):
    """transformers' own route for an architecture it does not ship: auto_map names the classes of the installed
    package (the directory's module holds no model code), and the logits are ours."""
    out = exported["kuramoto"]
    assert "kuramoto_attention.hf" in (out / "kuramoto_remote.py").read_text()
    idx = torch.randint(0, 256, (1, 24), generator=torch.Generator().manual_seed(3))
    ours, _ = load_model(runs["kuramoto"])
    with torch.no_grad():
        expected = ours.eval()(idx)
    torch.save({"idx": idx, "expected": expected}, tmp_path / "io.pt")
    code = f"""
import sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
model = AutoModelForCausalLM.from_pretrained({str(out)!r}, trust_remote_code=True)
tokenizer = AutoTokenizer.from_pretrained({str(out)!r}, trust_remote_code=True)
assert "kuramoto_attention.hf" in sys.modules  # brought in by the directory's module, not by this script
io = torch.load("io.pt")
with torch.no_grad():
    assert torch.allclose(model(io["idx"]).logits, io["expected"], atol=1e-5, rtol=0)
assert tokenizer("é").input_ids == [0xC3, 0xA9]
print(type(model).__name__)
"""
    done = _fresh_python(code, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("KuramotoForCausalLM")


def test_without_the_import_or_the_flag_transformers_names_the_flag(exported, tmp_path):
    out = str(exported["kuramoto"])
    code = f"from transformers import AutoModelForCausalLM; AutoModelForCausalLM.from_pretrained({out!r})"
    done = _fresh_python(code, tmp_path)
    assert done.returncode != 0 and "trust_remote_code=True" in done.stderr


def test_a_transformer_export_carries_no_code(exported):
    assert not list(exported["transformer"].glob("*.py"))
    assert "auto_map" not in json.loads((exported["transformer"] / "config.json").read_text())
