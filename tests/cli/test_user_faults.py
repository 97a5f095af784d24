"""What a new user hit on a second pass: the precision default on CPUs without bf16, start-up and disk-full faults,
invalid options that left run directories behind. Each test reproduces one fault; a user mistake ends in one
``error:`` line and exit status 2, and a refused run leaves no directory."""

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from kuramoto_attention.cli import build_parser, main
from kuramoto_attention.training import checkpoint
from kuramoto_attention.training.config import TrainConfig, train_config_from
from kuramoto_attention.training.precision import native_bf16, precision_note, resolve_precision

TINY = ["--context", "16", "--batch-size", "4", "--precision", "fp32", "--no-progress", "--eval-batches", "2"]
AVX2 = {"fpu", "sse2", "avx2", "fma"}
SAPPHIRE = AVX2 | {"avx512f", "avx512_bf16", "amx_bf16"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    rng = np.random.default_rng(0)
    words = [b"kuramoto ", b"phase ", b"torus ", b"attention ", b"sync ", b"\n"]
    path = tmp_path_factory.mktemp("corpus") / "tiny.txt"
    path.write_bytes(b"".join(words[i] for i in rng.integers(0, len(words), 6000)))
    return path


def train_argv(corpus: Path, run_dir: Path, *extra: str, steps: int = 4) -> list[str]:
    return ["train", "--preset", "ka-tiny", "--corpus", f"text:{corpus}", "--steps", str(steps), "--run-dir",
            str(run_dir), *TINY, *extra]


def one_error_line(capsys, needle: str) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err, err
    assert needle in err, err
    return err


# ------------------------------------------------------------------------------------------------- precision
def test_auto_precision_is_bf16_only_where_it_is_native():
    cpu = torch.device("cpu")
    assert resolve_precision("auto", cpu, AVX2) == "fp32"
    assert resolve_precision("auto", cpu, SAPPHIRE) == "bf16"
    assert resolve_precision("auto", cpu, {"avx512_bf16"}) == "bf16"
    assert resolve_precision("bf16", cpu, AVX2) == "bf16"  # explicit: honoured, with a warning
    assert resolve_precision("fp32", cpu, SAPPHIRE) == "fp32"
    assert not native_bf16(torch.device("meta"), SAPPHIRE)
    assert "emulated" in precision_note("bf16", cpu, AVX2)
    assert precision_note("bf16", cpu, SAPPHIRE) is None  # explicit and native: nothing to add
    assert precision_note("fp32", cpu, AVX2) is None
    assert "fp32" in precision_note("auto", cpu, AVX2)
    assert TrainConfig().precision == "auto"
    for command in ("train", "eval", "sample"):
        sub = build_parser()._subparsers._group_actions[0].choices[command]
        assert next(a for a in sub._actions if a.dest == "precision").choices == ("auto", "bf16", "fp32")


def test_the_run_records_the_precision_auto_resolved_to(tmp_path, corpus, capsys):
    run_dir = tmp_path / "run"
    argv = [a for a in train_argv(corpus, run_dir, steps=2) if a not in ("--precision", "fp32")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    recorded = json.loads((run_dir / "run.json").read_text())["train"]["precision"]
    assert recorded == resolve_precision("auto", torch.device("cpu"))
    assert out.count("precision:") == 1
    assert json.loads((run_dir / "summary.json").read_text())["precision"] == recorded


# ------------------------------------------------------------------------------------------------- options
@pytest.mark.parametrize("toml,needle", [
    ("beta1 = 1.5", "beta1"),
    ("beta2 = -0.1", "beta2"),
    ("beta2 = 1.0", "beta2"),
    ("min_lr_ratio = 2.0", "min_lr_ratio"),
    ("precision = \"fp16\"", "precision"),
    ("eval_every = 0", "eval_every"),
])
def test_an_option_out_of_range_is_one_line_and_leaves_no_directory(toml, needle, tmp_path, corpus, capsys):
    config = tmp_path / "bad.toml"
    config.write_text(f'preset = "ka-tiny"\n[train]\nsteps = 3\ncorpus = "text:{corpus}"\n{toml}\n')
    run_dir = tmp_path / "run"
    assert main(["train", "--config", str(config), "--run-dir", str(run_dir), "--no-progress"]) == 2
    one_error_line(capsys, needle)
    assert not run_dir.exists()


def test_every_option_is_declared_once_and_the_flags_follow():
    names = {f for f in TrainConfig.__dataclass_fields__}
    train = build_parser()._subparsers._group_actions[0].choices["train"]
    dests = {a.dest for a in train._actions}
    assert names <= dests  # every option has a flag (a switch or a value)
    args = train.parse_args(["--beta1", "0.8", "--no-progress", "--compile"])
    assert (args.beta1, args.progress, args.compile, args.lr) == (0.8, False, True, None)
    with pytest.raises(Exception, match="beta1"):
        train_config_from({"steps": 1, "beta1": 1.0})
    assert train_config_from({"steps": 1, "beta1": 0.0}).beta1 == 0.0


@pytest.mark.parametrize("extra,needle", [
    (["--corpus", "nosuchcorpus"], "nosuchcorpus"),
    (["--corpus", "text:/nonexistent/file.txt"], "file.txt"),
    (["--corpus", "text:{empty}"], "too small"),
    (["--corpus", "text:{folder}"], "not a file"),
    (["--context", "100000"], "too small"),
    (["--device", "cuda:99"] if torch.cuda.is_available() else ["--device", "cuda"], "cuda"),
    (["--model", "group=su2", "--model", "phase_lag=true"], "phase_lag"),
    (["--model", "group=su2", "--model", "harmonics=2"], "harmonics"),
    (["--model", "group=su2", "--model", "omega=log"], "omega"),
])
def test_a_failed_train_leaves_no_run_directory(extra, needle, tmp_path, corpus, capsys):
    """Every check before the directory is made, and the error the only line: nothing on stdout before it (the
    precision chosen is said once the run is sure to start)."""
    run_dir = tmp_path / "runs" / "mine"
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "folder").mkdir()
    extra = [a.format(empty=tmp_path / "empty.txt", folder=tmp_path / "folder") for a in extra]
    argv = train_argv(corpus, run_dir, *extra)
    if extra[0] == "--corpus":  # the last --corpus wins in argparse
        argv = [a for a in argv if a != f"text:{corpus}"]
        argv.remove("--corpus")
    assert main(argv) == 2
    assert capsys.readouterr().out == ""
    assert not run_dir.exists()


# ------------------------------------------------------------------------------------------------- disk full
@pytest.mark.parametrize("fault", [
    OSError(errno.ENOSPC, "No space left on device"),
    RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 2240 vs 2134"),
])
def test_a_full_disk_while_checkpointing_is_one_line_and_keeps_the_last_checkpoint(fault, tmp_path, corpus,
                                                                                   monkeypatch, capsys):
    run_dir = tmp_path / "run"
    assert main(train_argv(corpus, run_dir, "--ckpt-every", "2", steps=2)) == 0
    capsys.readouterr()
    before = (run_dir / "checkpoint" / "model.safetensors").read_bytes()
    real_save = torch.save

    def full(obj, path, *a, **k):
        real_save(obj, path, *a, **k)  # part of the file is written, then the disk is full
        raise fault

    monkeypatch.setattr(checkpoint.torch, "save", full)
    assert main(["train", "--resume", str(run_dir), "--steps", "4", "--no-progress"]) == 2
    err = one_error_line(capsys, "no space left")
    assert "step 4" in err and "step 2" in err and "--resume" in err
    assert not (run_dir / "checkpoint.tmp").exists()
    assert (run_dir / "checkpoint" / "model.safetensors").read_bytes() == before
    monkeypatch.setattr(checkpoint.torch, "save", real_save)
    assert main(["train", "--resume", str(run_dir), "--steps", "4", "--no-progress"]) == 0


def test_the_weights_file_has_the_mode_of_the_others(tmp_path, corpus):
    run_dir = tmp_path / "run"
    assert main(train_argv(corpus, run_dir, steps=1)) == 0
    modes = {p.name: p.stat().st_mode & 0o777 for p in (run_dir / "checkpoint").iterdir()}
    assert len(set(modes.values())) == 1, modes


# ------------------------------------------------------------------------------------------------- start-up
def test_help_parses_before_torch_is_imported():
    code = ("import sys\nfrom kuramoto_attention.cli import UsageError, build_parser\n"
            "for argv in (['--help'], ['train', '--help'], ['nosuchcommand']):\n"
            "    try:\n        build_parser().parse_args(argv)\n    except (SystemExit, UsageError):\n        pass\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def _handles_sigterm(pid: int) -> bool:
    """Whether the process catches SIGTERM (Python does not by default: the CLI's start-up handler does)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
    return bool(caught >> (signal.SIGTERM - 1) & 1)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_ctrl_c_in_the_first_instant_is_one_line_and_exit_130(tmp_path, corpus):
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "kuramoto_attention.cli", *train_argv(corpus, run_dir)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not _handles_sigterm(proc.pid) and proc.poll() is None:
        time.sleep(0.001)
    proc.send_signal(signal.SIGINT)  # in the middle of the imports
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "terminate called" not in err
    assert len(err.strip().splitlines()) == 1 and "interrupted" in err
    assert not run_dir.exists()


def test_the_console_script_module_catches_signals_before_any_other_import():
    # the console script imports kuramoto_attention.entry: its handlers are in place before the CLI's own imports
    # (~45 ms), so a signal right after start-up is one line; a signal on import exits as the CLI's handler does
    code = ("import sys, os, signal; import kuramoto_attention.entry; "
            "assert 'torch' not in sys.modules and 'kuramoto_attention.cli' not in sys.modules; "
            "os.kill(os.getpid(), signal.SIGINT); signal.pause()")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip() == "interrupted (SIGINT)"


# ------------------------------------------------------------------------------------------------- report, eval
def test_report_out_under_a_missing_folder_is_one_line(tmp_path, corpus, capsys):
    run_dir = tmp_path / "run"
    assert main(train_argv(corpus, run_dir, steps=1)) == 0
    capsys.readouterr()
    assert main(["report", str(run_dir), "--out", "/nonexistent/dir/x"]) == 2
    one_error_line(capsys, "/nonexistent/dir")


def test_eval_refuses_a_context_longer_than_the_trained_one(tmp_path, corpus, capsys):
    run_dir = tmp_path / "run"
    assert main(train_argv(corpus, run_dir, steps=1)) == 0
    capsys.readouterr()
    assert main(["eval", str(run_dir), "--context", "100000", "--no-progress"]) == 2
    one_error_line(capsys, "--context")
    assert main(["eval", str(run_dir), "--max-bytes", "200", "--no-progress", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["precision"] in ("bf16", "fp32") and result["context"] == 16


def test_sample_takes_a_precision(tmp_path, corpus, capsys):
    run_dir = tmp_path / "run"
    assert main(train_argv(corpus, run_dir, steps=1)) == 0
    capsys.readouterr()
    for precision in ("auto", "bf16", "fp32"):  # auto says its choice; an explicit one only that it is emulated
        assert main(["sample", str(run_dir), "--length", "8", "--precision", precision]) == 0
        note = precision_note(precision, torch.device("cpu"))
        assert capsys.readouterr().err == (f"{note}\n" if note else "")


def test_the_progress_bar_says_no_estimate_before_the_first(tmp_path, corpus, capfd):
    run_dir = tmp_path / "run"
    argv = [a for a in train_argv(corpus, run_dir, "--eval-every", "100", steps=2) if a != "--no-progress"]
    assert main(argv) == 0
    err = capfd.readouterr().err
    assert "nan" not in err


@pytest.mark.skipif(os.name != "posix", reason="POSIX modes")
def test_cli_module_import_stays_light():
    done = subprocess.run([sys.executable, "-c", "import sys, kuramoto_attention, kuramoto_attention.cli; "
                           "assert 'torch' not in sys.modules"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


# ------------------------------------------------------------------------------------------------- loading, lab
def test_from_pretrained_on_a_missing_path_a_run_dir_and_a_damaged_file(tmp_path, corpus):
    from kuramoto_attention.errors import ConfigError
    from kuramoto_attention.models.kuramoto import KuramotoLM

    with pytest.raises(ConfigError, match="does not exist"):
        KuramotoLM.from_pretrained(str(tmp_path / "nothing"))
    run_dir = tmp_path / "run"
    assert main(train_argv(corpus, run_dir, steps=1)) == 0
    with pytest.raises(ConfigError, match="checkpoint"):
        KuramotoLM.from_pretrained(str(run_dir))
    weights = run_dir / "checkpoint" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(ConfigError, match="damaged"):
        KuramotoLM.from_pretrained(str(run_dir / "checkpoint"))


def test_a_model_field_of_the_wrong_type_reads_an_int(capsys):
    assert main(["train", "--preset", "ka-tiny", "--steps", "1", "--model", "heads=x"]) == 2
    assert "an int" in one_error_line(capsys, "heads")


@pytest.mark.parametrize("text", ["{not json", "{}"])
def test_lab_report_names_a_corrupt_result_file(text, tmp_path, monkeypatch):
    from kuramoto_attention.errors import ConfigError
    from lab import protocol

    folder = tmp_path / "results" / "main"
    folder.mkdir(parents=True)
    (folder / "bad.json").write_text(text)
    with protocol.at_root(tmp_path / "results"), pytest.raises(ConfigError, match=r"bad\.json") as info:
        protocol.load_results("main")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("group", ["su2", "sphere"])
def test_a_zero_state_on_a_vector_group_is_refused(group):
    from kuramoto_attention import KuramotoAttention

    layer = KuramotoAttention(dim=8, heads=2, group=group)
    x = torch.nn.functional.normalize(torch.randn(1, 3, 8, 4), dim=-1)
    assert torch.isfinite(layer(x)).all()
    x[0, 1, 2] = 0.0
    with pytest.raises(ValueError, match="zero vector"):
        layer(x)


def test_lab_run_of_an_unknown_group_is_one_line(capsys):
    from lab.cli import main as lab_main

    assert lab_main(["run", "NONEXISTENT", "--dry-run"]) == 2
    err = one_error_line(capsys, "NONEXISTENT")
    assert "order:" not in err


def test_the_reports_smoothed_curve_is_the_weighted_mean_so_far():
    from kuramoto_attention.diagnostics.report import _ema, _table

    values = [10.0, 4.0, 3.0, 2.5, 2.0]
    for t, smooth in enumerate(_ema(values, alpha=0.1)):
        weights = [0.9 ** (t - s) for s in range(t + 1)]
        assert smooth == pytest.approx(sum(w * v for w, v in zip(weights, values, strict=False)) / sum(weights))
    assert "overflow-x:auto" in _table(["a"], [[1]])


def test_the_closing_line_counts_one_step_and_one_batch_in_the_singular(tmp_path, corpus, capsys):
    assert main(train_argv(corpus, tmp_path / "run", "--eval-batches", "1", steps=1)) == 0
    out = capsys.readouterr().out
    assert "done: 1 step, " in out and "(estimate on 1 batch; " in out
