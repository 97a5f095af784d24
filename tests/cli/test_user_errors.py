"""What a new user hit (issue 24): mistakes that crashed, runs that corrupted each other, loads that gave random
weights. Each test reproduces one item; every user mistake must end in one ``error:`` line and exit status 2."""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from kuramoto_attention.cli import build_parser, main
from kuramoto_attention.training.checkpoint import load_state

TINY = ["--context", "16", "--batch-size", "4", "--precision", "fp32", "--no-progress", "--eval-batches", "2"]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    rng = np.random.default_rng(0)
    words = [b"kuramoto ", b"phase ", b"torus ", b"attention ", b"sync ", b"\n"]
    path = tmp_path_factory.mktemp("corpus") / "tiny.txt"
    path.write_bytes(b"".join(words[i] for i in rng.integers(0, len(words), 6000)))
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory, corpus) -> Path:
    """A finished 4-step ka-tiny run, shared by the tests that only read it."""
    run_dir = tmp_path_factory.mktemp("shared") / "run"
    assert main(["train", "--preset", "ka-tiny", "--corpus", f"text:{corpus}", "--steps", "4",
                 "--run-dir", str(run_dir), *TINY]) == 0
    return run_dir


def train_argv(corpus: Path, run_dir: Path, *extra: str, steps: int = 4, preset: str = "ka-tiny") -> list[str]:
    return ["train", "--preset", preset, "--corpus", f"text:{corpus}", "--steps", str(steps), "--run-dir",
            str(run_dir), *TINY, *extra]


def one_error_line(capsys, needle: str) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err, err
    assert needle in err, err
    return err


def cli(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kuramoto_attention.cli", *args], capture_output=True, text=True,
                          timeout=300, **kw)


# ------------------------------------------------------------------------------------------------- defect 1
@pytest.mark.parametrize("argv", [
    ["train", "--preset", "ka-tiny", "--steps", "1", "--run-dir", "{file}"],
    ["train", "--preset", "ka-tiny", "--steps", "1", "--run-dir", "{file}/sub"],
    ["train", "--resume", "{file}"],
    ["eval", "{file}"],
    ["sample", "{file}"],
    ["report", "{file}"],
    ["report", "{run}", "--out", "{file}"],
])
def test_a_file_given_as_a_directory_is_one_line(argv, run, tmp_path, capsys):
    file = tmp_path / "FILE"
    file.write_text("not a directory")
    argv = [a.format(file=file, run=run) for a in argv]
    assert main(argv) == 2
    one_error_line(capsys, "is a file")
    assert file.read_text() == "not a directory"


# ------------------------------------------------------------------------------------------------- defect 3
def test_a_second_process_is_refused_while_the_first_holds_the_directory(tmp_path, corpus, capsys):
    run_dir = tmp_path / "run"
    first = subprocess.Popen([sys.executable, "-m", "kuramoto_attention.cli",
                              *train_argv(corpus, run_dir, "--ckpt-every", "2", steps=100_000)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (run_dir / "checkpoint").exists():
            time.sleep(0.01)
        assert (run_dir / "checkpoint").exists(), "the first run never wrote a checkpoint"
        assert main(["train", "--resume", str(run_dir), "--steps", "1", "--no-progress"]) == 2
        one_error_line(capsys, "in use by another training process")
        assert main(train_argv(corpus, run_dir, "--seed", "7")) == 2
        one_error_line(capsys, "in use by another training process")
    finally:
        os.kill(first.pid, signal.SIGKILL)  # the lock dies with its process: the run can be resumed at once
        first.wait()
    assert main(["train", "--resume", str(run_dir), "--steps", "6", "--no-progress"]) == 0
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, max(steps) + 1))  # one run's rows, none interleaved


def test_a_fresh_run_never_mixes_with_the_run_already_there(tmp_path, corpus, capsys):
    run_dir = tmp_path / "run"
    assert main(train_argv(corpus, run_dir)) == 0
    capsys.readouterr()
    assert main(train_argv(corpus, run_dir, "--seed", "3")) == 2
    one_error_line(capsys, "already holds a checkpoint")
    # a run killed before its first checkpoint leaves run.json and metrics: another run may not write over them
    for name in ("checkpoint", "summary.json"):
        path = run_dir / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    record = (run_dir / "run.json").read_text()
    assert main(train_argv(corpus, run_dir, "--seed", "3")) == 2
    one_error_line(capsys, "already holds another run")
    assert (run_dir / "run.json").read_text() == record
    # --resume continues it from step 0 with its own settings (it never saved a checkpoint)
    assert main(["train", "--resume", str(run_dir), "--no-progress"]) == 0
    assert "resuming from step 0 (no checkpoint yet)" in capsys.readouterr().out
    assert json.loads((run_dir / "run.json").read_text())["train"]["seed"] == 0


# ------------------------------------------------------------------------------------------------- defect 4
def _saved(tmp_path: Path, preset: str) -> Path:
    from kuramoto_attention.models.presets import build_model, get_preset

    out = tmp_path / preset
    build_model(*get_preset(preset)).save_pretrained(out)
    return out


@pytest.mark.parametrize("saved,loader,needle", [
    ("ka-tiny", "TransformerLM", "holds a kuramoto model, not a transformer one"),
    ("tf-tiny", "KuramotoLM", "holds a transformer model, not a kuramoto one"),
])
def test_from_pretrained_of_the_other_family_is_refused(saved, loader, needle, tmp_path):
    import kuramoto_attention

    path = _saved(tmp_path, saved)
    with pytest.raises(ValueError, match=needle):
        getattr(kuramoto_attention, loader).from_pretrained(path)
    config = json.loads((path / "config.json").read_text())
    del config["family"]  # as save_pretrained wrote it before the family was recorded
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="another family"):
        getattr(kuramoto_attention, loader).from_pretrained(path)


def test_from_pretrained_refuses_missing_unexpected_and_misshapen_tensors(tmp_path):
    from kuramoto_attention import KuramotoLM

    path = _saved(tmp_path, "ka-tiny")
    model = KuramotoLM.from_pretrained(path)  # the same family loads, every tensor equal
    weights = load_file(path / "model.safetensors")
    assert all(torch.equal(weights[k], v) for k, v in model.state_dict().items())
    dropped = dict(weights)
    name = sorted(dropped)[0]
    del dropped[name]
    save_file({**dropped, "extra.weight": torch.zeros(2)}, path / "model.safetensors")
    with pytest.raises(ValueError, match=rf"1 missing tensor\(s\) \({name}\); 1 unexpected tensor\(s\) \(extra"):
        KuramotoLM.from_pretrained(path)
    save_file({**weights, name: torch.zeros(3)}, path / "model.safetensors")
    with pytest.raises(ValueError, match="of another shape"):
        KuramotoLM.from_pretrained(path)


def test_a_checkpoint_that_does_not_fit_its_config_is_one_line(run, tmp_path, capsys):
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    weights = load_file(copy / "checkpoint" / "model.safetensors")
    save_file({k: v for k, v in weights.items() if not k.startswith("blocks.1.")}, copy / "checkpoint" /
              "model.safetensors")
    assert main(["sample", str(copy), "--length", "2"]) == 2
    one_error_line(capsys, "missing tensor(s) (blocks.1.")


# ------------------------------------------------------------------------------------------------- defect 5
@pytest.mark.parametrize("toml,needle", [
    ('preset = "ka-tiny"\n[modle]\ndim = 64\n', "modle"),
    ('preset = "ka-tiny"\nlearning_rate = 1\n', "learning_rate"),
    ('preset = 3\n', "preset must be a string"),
    ('preset = "ka-tiny"\nmodel = 3\n', "model must be a table"),
    ('preset = "ka-tiny"\n[train]\nlearning_rate = 1\n', "learning_rate"),
    ('preset = "ka-tiny"\n[train]\nlr = inf\n', "finite"),
])
def test_toml_unknown_keys_and_tables_are_errors(toml, needle, tmp_path, corpus, capsys):
    config = tmp_path / "run.toml"
    config.write_text(toml)
    assert main(["train", "--config", str(config), "--corpus", f"text:{corpus}", "--steps", "1",
                 "--run-dir", str(tmp_path / "run"), *TINY]) == 2
    one_error_line(capsys, needle)
    assert not (tmp_path / "run" / "run.json").exists()


# ------------------------------------------------------------------------------------------------- defect 6
def test_resume_refuses_a_flag_that_would_rewrite_the_record(tmp_path, corpus, capsys):
    from kuramoto_attention.errors import ConfigError
    from kuramoto_attention.training.train import load_run

    run_dir = tmp_path / "run"
    assert main(train_argv(corpus, run_dir, steps=6)) == 0
    record = (run_dir / "run.json").read_text()
    capsys.readouterr()
    assert main(["train", "--resume", str(run_dir), "--lr", "1e-2"]) == 2
    one_error_line(capsys, "--resume cannot change --lr")
    assert (run_dir / "run.json").read_text() == record
    with pytest.raises(ConfigError, match=r"cannot change lr \(0.002 -> 0.01\)"):
        load_run(run_dir, {"lr": 0.01})
    assert load_run(run_dir, {"lr": 0.002}).changes == {}  # the saved value is no change
    # a finished run with nothing to add: said so, nothing rewritten
    assert main(["train", "--resume", str(run_dir), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "nothing to do: run finished at step 6" in out and "done:" not in out
    assert (run_dir / "run.json").read_text() == record


def test_resume_records_each_change_with_its_step(tmp_path, corpus, capsys):
    run_dir = tmp_path / "run"
    assert main(train_argv(corpus, run_dir, steps=6)) == 0
    assert main(["train", "--resume", str(run_dir), "--steps", "8", "--eval-every", "50", "--no-progress"]) == 0
    assert "resuming from step 6; steps 6 -> 8; eval_every 100 -> 50" in capsys.readouterr().out
    assert main(["train", "--resume", str(run_dir), "--steps", "10", "--no-progress"]) == 0
    saved = json.loads((run_dir / "run.json").read_text())
    assert saved["train"]["steps"] == 10 and saved["train"]["eval_every"] == 50
    assert saved["changes"] == [{"step": 6, "changed": {"steps": [6, 8], "eval_every": [100, 50]}},
                                {"step": 8, "changed": {"steps": [8, 10]}}]


# ------------------------------------------------------------------------------------------------- defect 7
def test_text_corpus_is_recorded_by_absolute_path_and_checksum(tmp_path, corpus, monkeypatch, capsys):
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(corpus, home / "mine.txt")
    monkeypatch.chdir(home)
    assert main(["train", "--preset", "tf-tiny", "--corpus", "text:mine.txt", "--steps", "2", "--run-dir", "run",
                 *TINY]) == 0
    saved = json.loads((home / "run" / "run.json").read_text())
    assert saved["train"]["corpus"] == f"text:{home / 'mine.txt'}"
    assert len(saved["corpus_sha256"]) == 64
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    capsys.readouterr()
    assert main(["eval", str(home / "run"), "--json", "--precision", "fp32"]) == 0
    assert json.loads(capsys.readouterr().out)["corpus"] == f"text:{home / 'mine.txt'}"
    (home / "mine.txt").write_bytes((home / "mine.txt").read_bytes()[::-1])  # same size, other bytes
    assert main(["eval", str(home / "run")]) == 2
    one_error_line(capsys, "changed since")
    assert main(["train", "--resume", str(home / "run"), "--steps", "4", "--no-progress"]) == 2
    one_error_line(capsys, "changed since")


# ------------------------------------------------------------------------------------------- rough edges
def test_a_step_that_cannot_fit_in_memory_is_refused_before_training(tmp_path, corpus, monkeypatch, capsys):
    from kuramoto_attention.training import memory

    monkeypatch.setattr(memory, "available_bytes", lambda device: 2 * 2**20)
    run_dir = tmp_path / "run"
    assert main(train_argv(corpus, run_dir, "--batch-size", "64")) == 2
    err = one_error_line(capsys, "one training step needs about")
    assert "(batch 64 × context 16:" in err and "but only 2.0 MiB of cpu memory is available; use --batch-size" in err
    fits = int(err.split("use --batch-size ")[1].split()[0])
    assert 1 <= fits < 64
    assert not (run_dir / "metrics.jsonl").exists()
    assert main(train_argv(corpus, run_dir, "--batch-size", str(fits))) == 0  # the fix it names works
    monkeypatch.setattr(memory, "available_bytes", lambda device: 2**10)
    assert main(train_argv(corpus, tmp_path / "other")) == 2
    one_error_line(capsys, "the model alone does not fit")


@pytest.mark.parametrize("preset", ["ka-tiny", "tf-tiny"])
def test_memory_estimate_extrapolates_exactly(preset):
    """The quadratic through three short contexts predicts what a long one saves (the estimate's premise)."""
    from kuramoto_attention.models.presets import build_model, get_preset
    from kuramoto_attention.training.memory import activation_bytes, estimate_step, saved_bytes

    model = build_model(*get_preset(preset))
    cpu = torch.device("cpu")
    a, b, c = activation_bytes(model, 100_000, cpu, "fp32")
    assert a + b * 640 + c * 640**2 == pytest.approx(saved_bytes(model, 640, cpu, "fp32"), rel=1e-6)
    rng = torch.get_rng_state()
    est = estimate_step(model, 32, 100_000, cpu, "fp32")
    assert torch.equal(rng, torch.get_rng_state())  # the estimate leaves the run's random stream alone
    assert est.total > 4 * 2**30  # ka-tiny's --context 100000 at batch 32 (the issue): gigabytes, refused early


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_saves_a_checkpoint_and_prints_the_resume_command(sig, tmp_path, corpus):
    run_dir = tmp_path / "my run"  # a space: the printed command must be quoted to be typed as it is
    proc = subprocess.Popen([sys.executable, "-m", "kuramoto_attention.cli",
                             *train_argv(corpus, run_dir, "--ckpt-every", "100000", steps=100_000)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    log = run_dir / "metrics.jsonl"
    while time.time() < deadline and not (log.exists() and len(log.read_text().splitlines()) >= 5):
        time.sleep(0.01)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, err
    assert "Traceback" not in err
    assert f"continue with: kuramoto train --resume '{run_dir}'" in err
    rows = log.read_text().splitlines()
    state = load_state(run_dir / "checkpoint")
    assert state["step"] == len(rows) >= 5  # the checkpoint holds the last step logged, not an older one
    resumed = cli("train", "--resume", str(run_dir), "--steps", str(state["step"] + 2), "--no-progress")
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming from step {state['step']}" in resumed.stdout


def test_context_zero_is_one_rule_for_train_and_eval(run, tmp_path, corpus, capsys):
    assert main(train_argv(corpus, tmp_path / "run", "--context", "0")) == 2
    train_err = one_error_line(capsys, "--context must be >= 1")
    assert main(["eval", str(run), "--context", "0"]) == 2
    eval_err = one_error_line(capsys, "--context must be >= 1")
    assert train_err.split("(")[0] == eval_err.split("(")[0]


@pytest.mark.parametrize("argv,needle", [
    (["train", "--preset", "ka-tiny", "--steps", "1", "--phase-lr-mult", "inf"], "phase_lr_mult must be a finite"),
    (["train", "--preset", "ka-tiny", "--steps", "1", "--lr", "nan"], "lr must be a finite"),
    (["train", "--preset", "ka-tiny", "--minutes", "inf"], "minutes must be a finite"),
    (["sample", "{run}", "--temperature", "inf"], "--temperature must be >= 0 and finite"),
    (["sample", "{run}", "--prompt", ""], "--prompt must not be empty"),
])
def test_non_finite_numbers_and_empty_prompts_are_refused(argv, needle, run, capsys):
    assert main([a.format(run=run) for a in argv]) == 2
    one_error_line(capsys, needle)


def test_eval_no_progress(run, capfd):
    assert main(["eval", str(run), "--no-progress", "--precision", "fp32"]) == 0
    out, err = capfd.readouterr()
    assert "bits per byte" in out and err == ""


def _options(parser):
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name in ("params", "train", "eval", "sample", "data"):
        for action in sub.choices[name]._actions:
            if action.dest != "help" and action.help != argparse.SUPPRESS:  # a retired option's flag is not listed
                yield name, action


def test_every_option_has_help_with_its_default():
    parser = build_parser()
    for command, action in _options(parser):
        assert action.help, f"{command} {action.option_strings or action.dest} has no help"
        if action.option_strings:  # an option's text says what happens when it is left out
            assert "default" in action.help, f"{command} {action.option_strings[0]}: no default in {action.help!r}"
    top = parser.format_help()
    assert "``" not in top and ":mod:" not in top


def test_sample_raw_bytes_and_a_non_utf8_terminal(run, capfdbinary):
    # an undecodable argv byte arrives as a surrogate escape; --raw gives back exactly the bytes
    assert main(["sample", str(run), "--prompt", "\udcffphase", "--length", "5", "--raw"]) == 0
    out = capfdbinary.readouterr().out
    assert out.startswith(b"\xffphase") and len(out) == 6 + 5
    ascii_stdout = cli("sample", str(run), "--prompt", "phasé \udcff", "--length", "5",
                       env={**os.environ, "PYTHONIOENCODING": "ascii"})
    assert ascii_stdout.returncode == 0 and "Traceback" not in ascii_stdout.stderr, ascii_stdout.stderr
    assert ascii_stdout.stdout.startswith("phas? ?")


def test_profiler_noise_stays_off_the_terminal(capfd):
    from benchmarks.bench import peak_bytes

    assert peak_bytes(lambda: torch.ones(1000).sum()) > 0
    err = capfd.readouterr().err
    assert "profiler_start" not in err and "SyncActivityProfilerHandler" not in err


def test_license_is_in_the_repository_and_the_wheel(tmp_path):
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License")
    src = tmp_path / "src"
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_bytes((ROOT / name).read_bytes())
    (src / "src" / "kuramoto_attention").mkdir(parents=True)
    (src / "src" / "kuramoto_attention" / "__init__.py").write_text("")  # the metadata is what is checked
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(tmp_path / "dist"), str(src)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        licenses = [n for n in zf.namelist() if n.endswith("/LICENSE")]
        assert licenses and zf.read(licenses[0]).decode() == text
        metadata = zf.read(next(n for n in zf.namelist() if n.endswith("/METADATA"))).decode()
    assert "License-Expression: MIT" in metadata or "License: MIT" in metadata
