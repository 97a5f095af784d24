"""Training, exact resume after SIGKILL, evaluation, sampling and the CLI's error handling."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from kuramoto_attention.cli import main
from kuramoto_attention.errors import ConfigError
from kuramoto_attention.training.checkpoint import load_model
from kuramoto_attention.training.config import TrainConfig
from kuramoto_attention.training.evaluate import evaluate_bpc, window_plan
from kuramoto_attention.training.optim import lr_at
from kuramoto_attention.training.train import batch_generator

TINY = ["--context", "16", "--batch-size", "4", "--precision", "fp32", "--no-progress", "--eval-batches", "2"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
    rng = np.random.default_rng(0)
    words = [b"kuramoto ", b"phase ", b"torus ", b"attention ", b"sync ", b"\n"]
    text = b"".join(words[i] for i in rng.integers(0, len(words), 6000))
    path = tmp_path_factory.mktemp("corpus") / "tiny.txt"
    path.write_bytes(text)
    return f"text:{path}"


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kuramoto_attention.cli", *args], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("preset", ["ka-tiny", "tf-tiny"])
def test_train_writes_logs_checkpoint_and_learns(tmp_path, corpus, preset):
    run = tmp_path / "run"
    assert main(["train", "--preset", preset, "--corpus", corpus, "--steps", "40", "--eval-every", "20",
                 "--lr", "1e-2", "--warmup", "5", "--run-dir", str(run), *TINY]) == 0
    rows = metrics(run)
    assert [r["step"] for r in rows] == list(range(1, 41))
    assert rows[-1]["loss"] < rows[0]["loss"] - 1.0
    assert "valid_bpc" in rows[19] and "valid_bpc" in rows[39]
    # throughput counts step time only (elapsed_s), not the evaluation between the two records
    a, b = rows[19], rows[39]
    assert b["tokens_per_s"] == pytest.approx((b["tokens"] - a["tokens"]) / (b["elapsed_s"] - a["elapsed_s"]))
    model, cfg = load_model(run)
    assert cfg["family"] == ("kuramoto" if preset.startswith("ka") else "transformer")
    type(model).from_pretrained(run / "checkpoint")  # the checkpoint is a save_pretrained directory
    assert json.loads((run / "summary.json").read_text())["tokens"] == 40 * 4 * 16


def test_sigkill_then_resume_gives_identical_losses(tmp_path, corpus):
    args = ["train", "--preset", "ka-tiny", "--corpus", corpus, "--steps", "150", "--ckpt-every", "5",
            "--eval-every", "25", "--lr", "5e-3", "--warmup", "10", *TINY]
    ref = tmp_path / "ref"
    assert cli(*args, "--run-dir", str(ref)).returncode == 0
    killed = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "kuramoto_attention.cli", *args, "--run-dir", str(killed)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline:
        log = killed / "metrics.jsonl"
        if log.exists() and len(log.read_text().splitlines()) >= 23:
            break
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    n_before = len(metrics(killed))
    assert 0 < n_before < 150, "the run was not killed mid-training"
    resumed = cli("train", "--resume", str(killed))
    assert resumed.returncode == 0, resumed.stderr
    a, b = metrics(ref), metrics(killed)
    assert [r["step"] for r in b] == list(range(1, 151))
    assert [r["loss"] for r in a] == [r["loss"] for r in b]  # bitwise: fp32 eager, same batches, same state
    assert [r.get("valid_bpc") for r in a] == [r.get("valid_bpc") for r in b]


def test_resume_extends_budget(tmp_path, corpus):
    run = tmp_path / "run"
    assert main(["train", "--preset", "tf-tiny", "--corpus", corpus, "--steps", "6", "--run-dir", str(run), *TINY]) == 0
    assert main(["train", "--resume", str(run), "--steps", "10", "--no-progress"]) == 0
    assert [r["step"] for r in metrics(run)] == list(range(1, 11))


def test_batches_differ_by_rank_and_repeat_by_step():
    def first(gen):
        return torch.randint(0, 10**9, (4,), generator=gen)

    assert torch.equal(first(batch_generator(0, 0, 5)), first(batch_generator(0, 0, 5)))
    assert not torch.equal(first(batch_generator(0, 0, 5)), first(batch_generator(0, 1, 5)))
    assert not torch.equal(first(batch_generator(0, 0, 5)), first(batch_generator(0, 0, 6)))


def test_lr_schedule_warmup_then_cosine():
    cfg = TrainConfig(lr=1.0, warmup=10, min_lr_ratio=0.1, steps=100)
    assert lr_at(cfg, 0.0, 0) == pytest.approx(0.1)
    assert lr_at(cfg, 0.1, 9) == pytest.approx(1.0)
    assert lr_at(cfg, 1.0, 100) == pytest.approx(0.1)
    assert lr_at(cfg, 0.5, 50) == pytest.approx(0.55)


@pytest.mark.parametrize("n,context,stride", [(50, 8, 4), (50, 8, 8), (9, 8, 3), (100, 16, 5), (5, 8, 4)])
def test_window_plan_scores_every_target_once(n, context, stride):
    scored = []
    for start, k in window_plan(n, context, stride):
        ctx = min(context, n - 1)
        assert start >= 0 and start + ctx <= n - 1
        scored += list(range(start + ctx - k + 1, start + ctx + 1))  # target positions
    assert scored == list(range(1, n))


def test_evaluate_matches_direct_computation():
    model = load_model_tiny()
    data = np.random.default_rng(1).integers(0, 256, 200).astype(np.uint8)
    ev = evaluate_bpc(model, data, 200, precision="fp32")  # one window holds everything
    idx = torch.from_numpy(data.astype(np.int64))[None]
    with torch.no_grad():
        nll = torch.nn.functional.cross_entropy(model(idx[:, :-1])[0], idx[0, 1:])
    assert ev["bpc"] == pytest.approx(nll.item() / np.log(2), rel=1e-5)
    # every stride scores the same 199 bytes; with a causal model and full context they agree
    for stride in (50, 100, 200):
        assert evaluate_bpc(model, data, 200, stride=stride, precision="fp32")["bytes_scored"] == 199
    short = evaluate_bpc(model, data, 32, stride=16, precision="fp32")
    assert short["bytes_scored"] == 199 and short["windows"] > 1


def load_model_tiny():
    from kuramoto_attention import KuramotoConfig, KuramotoLM

    return KuramotoLM(KuramotoConfig(dim=8, depth=1, heads=2, ff_hidden=8)).eval()


def test_eval_and_sample_cli(tmp_path, corpus, capsys):
    run = tmp_path / "run"
    main(["train", "--preset", "ka-tiny", "--corpus", corpus, "--steps", "5", "--run-dir", str(run), *TINY])
    capsys.readouterr()
    assert main(["eval", str(run), "--split", "test", "--json", "--precision", "fp32"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["split"] == "test" and 0 < res["bpc"] < 9 and res["stride"] == 8
    assert main(["eval", str(run), "--non-overlapping", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["stride"] == 16
    assert main(["sample", str(run), "--prompt", "phase ", "--length", "20", "--top-k", "5"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("phase ")
    greedy = ["sample", str(run), "--prompt", "phase ", "--length", "8", "--temperature", "0"]
    assert main(greedy) == 0
    eager = capsys.readouterr().out
    assert main([*greedy, "--compile"]) == 0
    assert capsys.readouterr().out == eager


@pytest.mark.parametrize("argv,needle", [
    (["train", "--preset", "ka-7m", "--steps", "1"], "unknown preset"),
    (["train", "--preset", "ka-tiny"], "budget"),
    (["train", "--preset", "ka-tiny", "--steps", "1", "--lr", "-1"], "lr"),
    (["train", "--preset", "ka-tiny", "--steps", "1", "--model", "ff=sideways"], "ff"),
    (["train", "--preset", "ka-tiny", "--steps", "1", "--model", "width=3"], "no field"),
    (["train", "--preset", "ka-tiny", "--steps", "1", "--corpus", "text:/nonexistent/file.txt"], "nonexistent"),
    (["train", "--preset", "ka-tiny", "--steps", "1", "--corpus", "enwik7", "--data-dir", "/nonexistent"],
     "/nonexistent"),
    (["train", "--preset", "ka-tiny", "--steps", "1", "--precision", "fp8"], "precision"),
    (["train", "--preset", "ka-tiny", "--steps", "1", "--phase-lr-mult", "-1"], "phase_lr_mult"),
    (["train", "--resume", "/nonexistent/run", "--seed", "3"], "--resume cannot change --seed"),
    (["train", "--resume", "/nonexistent/run", "--run-dir", "x"], "drop --preset/--config/--model/--run-dir"),
    (["eval", "/nonexistent/run"], "run directory"),
    (["eval", "/nonexistent/run", "--batch-size", "0"], "--batch-size must be >= 1"),
    (["sample", "/nonexistent/run", "--temperature", "-1"], "--temperature must be >= 0"),
    (["sample", "/nonexistent/run"], "does not exist"),
])
def test_user_errors_are_one_line(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err and needle in err


def test_corrupt_and_mismatched_checkpoint(tmp_path, corpus, capsys):
    run = tmp_path / "run"
    main(["train", "--preset", "ka-tiny", "--corpus", corpus, "--steps", "2", "--run-dir", str(run), *TINY])
    weights = run / "checkpoint" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    assert main(["eval", str(run)]) == 2
    assert "corrupt checkpoint" in capsys.readouterr().err
    assert main(["train", "--preset", "ka-tiny", "--corpus", corpus, "--steps", "2", "--run-dir", str(run), *TINY]) == 2
    assert "already holds a checkpoint" in capsys.readouterr().err  # never overwrite earlier work
    run = tmp_path / "run2"
    main(["train", "--preset", "ka-tiny", "--corpus", corpus, "--steps", "2", "--run-dir", str(run), *TINY])
    cfg = run / "checkpoint" / "model_config.json"
    cfg.write_text(cfg.read_text().replace('"ff_hidden": 32', '"ff_hidden": 48'))
    assert main(["sample", str(run)]) == 2
    assert "checkpoint" in capsys.readouterr().err
    (run / "checkpoint" / "trainer_state.pt").write_bytes(b"garbage")
    assert main(["train", "--resume", str(run), "--steps", "4"]) == 2


def test_nonsense_flag_value_exits_without_traceback():
    proc = cli("train", "--steps", "many")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "invalid int value" in proc.stderr


def test_distributed_two_cpu_processes_keep_weights_identical(tmp_path, corpus):
    run = tmp_path / "ddp"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         "-m", "kuramoto_attention.cli", "train", "--preset", "ka-tiny", "--corpus", corpus, "--steps", "6",
         "--run-dir", str(run), *TINY], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((run / "summary.json").read_text())
    a, b = summary["rank_weight_checksums"]
    assert a == b
    assert summary["tokens"] == 6 * 4 * 16 * 2  # two ranks, different batches
    assert len(metrics(run)) == 6  # rank 0 alone writes logs
    assert proc.stdout.count("done:") == 1 and proc.stdout.count("run dir:") == 2  # and prints the summary (issue 24)


def test_readme_main_command_defaults_work(tmp_path, capsys):
    """The quickstart's `kuramoto train --steps N`: default preset and the offline stdlib corpus."""
    assert main(["train", "--steps", "1", "--eval-batches", "1", "--batch-size", "2", "--no-progress",
                 "--run-dir", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "corpus: stdlib" in out and "valid BPC" in out and f"run dir: {tmp_path / 'run'}" in out
    assert json.loads((tmp_path / "run" / "run.json").read_text())["model"]["family"] == "kuramoto"


def test_minutes_and_tokens_budgets(tmp_path, corpus):
    run = tmp_path / "minutes"
    assert main(["train", "--preset", "ka-tiny", "--corpus", corpus, "--minutes", "0.002", "--run-dir", str(run),
                 *TINY]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["step"] >= 1 and summary["elapsed_s"] >= 0.12 - 0.05
    run = tmp_path / "tokens"
    assert main(["train", "--preset", "ka-tiny", "--corpus", corpus, "--tokens", "640", "--run-dir", str(run),
                 *TINY]) == 0
    assert json.loads((run / "summary.json").read_text())["step"] == 10  # 640 tokens / (4 × 16) per step


def test_toml_config_file(tmp_path, corpus):
    cfg = tmp_path / "run.toml"
    cfg.write_text('preset = "ka-tiny"\n[model]\nff = "lift"\nheads = 1\n[train]\nsteps = 3\nlr = 0.01\n')
    run = tmp_path / "run"
    assert main(["train", "--config", str(cfg), "--corpus", corpus, "--run-dir", str(run), *TINY]) == 0
    saved = json.loads((run / "run.json").read_text())
    assert saved["model"]["ff"] == "lift" and saved["model"]["heads"] == 1 and saved["train"]["lr"] == 0.01
    bad = tmp_path / "bad.toml"
    bad.write_text("preset = [")
    assert main(["train", "--config", str(bad), "--steps", "1"]) == 2


def test_resume_drops_a_metrics_line_cut_by_a_kill(tmp_path, corpus):
    run = tmp_path / "run"
    assert main(["train", "--preset", "tf-tiny", "--corpus", corpus, "--steps", "4", "--ckpt-every", "2",
                 "--run-dir", str(run), *TINY]) == 0
    with open(run / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 5, "tokens": 3')  # a write interrupted mid-line
    assert main(["train", "--resume", str(run), "--steps", "6", "--no-progress"]) == 0
    assert [r["step"] for r in metrics(run)] == list(range(1, 7))


def test_optimizer_groups_phases_and_omega():
    from kuramoto_attention import AttentionConfig, KuramotoConfig, KuramotoLM
    from kuramoto_attention.training.optim import make_optimizer

    model = KuramotoLM(KuramotoConfig(dim=8, depth=2, heads=2, ff_hidden=8,
                                      attention=AttentionConfig(phase_lag=True, clock=2)))
    groups = make_optimizer(model, TrainConfig(steps=1, phase_lr_mult=20.0, omega_lr_mult=1.0)).param_groups
    ids = {id(p): g for g in groups for p in g["params"]}
    assert ids[id(model.phase_embedding)]["lr_mult"] == 20.0 and ids[id(model.phase_embedding)]["weight_decay"] == 0
    assert ids[id(model.blocks[0].attn.extras.lag)]["lr_mult"] == 20.0  # the lag β is an angle too
    assert ids[id(model.blocks[0].attn.extras.lag)]["weight_decay"] == 0
    assert ids[id(model.blocks[0].attn.omega)]["lr_mult"] == 1.0
    clock = model.blocks[0].attn.clock  # the clock's ω and β are angles as well; its weights a decayed matrix
    assert ids[id(clock.omega)]["lr_mult"] == 1.0 and ids[id(clock.lag)]["lr_mult"] == 20.0
    assert ids[id(clock.weight)]["weight_decay"] > 0
    assert ids[id(model.prototypes.weight)]["weight_decay"] > 0 and ids[id(model.prototypes.bias)]["weight_decay"] == 0
    same = make_optimizer(model, TrainConfig(steps=1, phase_lr_mult=5.0)).param_groups
    assert {g["lr_mult"] for g in same if any(p is model.blocks[1].attn.omega for p in g["params"])} == {5.0}


def test_the_retired_training_options_name_the_commit_that_has_them(tmp_path, corpus, capsys):
    """shared_lr_mult and clip_angles_apart lost their screens and left the library: asked for as a flag, in a
    config file or by a caller, each is one line naming the commit to check out; a saved run holding one at its old
    default (every run of the years they existed) resumes as before."""
    from kuramoto_attention.training.config import train_config_from, without_retired_options

    line = r"training option {}=.* was retired after commit 25e20b6; to load or rerun this run, `git checkout 25e20b6`"
    for flags, name in ((["--shared-lr-mult", "0.25"], "shared_lr_mult"),
                        (["--clip-angles-apart"], "clip_angles_apart")):
        assert main(["train", "--preset", "ka-tiny", "--corpus", corpus, "--steps", "1", "--run-dir",
                     str(tmp_path / "x"), *flags, *TINY]) == 2
        err = capsys.readouterr().err.strip()
        assert re.fullmatch("error: " + line.format(name) + r".*", err) and "\n" not in err, err
        assert not (tmp_path / "x").exists()
    config = tmp_path / "c.toml"
    config.write_text("[train]\nshared_lr_mult = 0.5\nsteps = 1\n")
    assert main(["train", "--config", str(config), "--corpus", corpus, "--run-dir", str(tmp_path / "y"), *TINY]) == 2
    assert re.search(line.format("shared_lr_mult"), capsys.readouterr().err)
    for options in ({"steps": 1, "shared_lr_mult": 1.0}, {"steps": 1, "clip_angles_apart": True}):
        with pytest.raises(ConfigError, match=line.format(".*")):  # asked for: refused even at the old default
            train_config_from(options)
    assert train_config_from({"steps": 1, "shared_lr_mult": 1.0, "clip_angles_apart": False}, saved=True) == \
        train_config_from({"steps": 1})
    with pytest.raises(ConfigError, match=line.format("clip_angles_apart")):  # a saved run that used it
        without_retired_options({"clip_angles_apart": True}, saved=True)


def test_clipping_brings_the_whole_norm_to_the_clip_and_reports_each_part():
    """One norm: every gradient shrinks by the same factor. The whole norm before clipping is returned, and each
    part's (the angles together; a transformer has none)."""
    from kuramoto_attention import KuramotoConfig, KuramotoLM, TransformerConfig, TransformerLM
    from kuramoto_attention.training.optim import GradientClip

    model = KuramotoLM(KuramotoConfig(dim=8, depth=2, heads=2, ff_hidden=8)).double()
    names = model.phase_parameter_names()

    def fill() -> tuple[float, float]:  # weights' gradients of norm 3, the angles' of norm 40
        for p in model.parameters():
            p.grad = torch.ones_like(p)
        for is_angle, norm in ((False, 3.0), (True, 40.0)):
            ps = [p for n, p in model.named_parameters() if (n in names) == is_angle]
            total = torch.cat([p.grad.flatten() for p in ps]).norm()
            for p in ps:
                p.grad *= norm / total
        return 3.0, 40.0

    def norm_of(is_angle: bool) -> float:
        return float(torch.cat([p.grad.flatten() for n, p in model.named_parameters()
                                if (n in names) == is_angle]).norm())

    w, a = fill()
    whole, parts = GradientClip(model, 1.0)()
    assert float(whole) == pytest.approx((w**2 + a**2) ** 0.5) and float(parts["angles"]) == pytest.approx(a)
    assert float(torch.stack(list(parts.values())).norm()) == pytest.approx(float(whole))  # the parts make the whole
    assert set(parts) == {"angles", "blocks.0.attn", "blocks.0.ff", "blocks.1.attn", "blocks.1.ff", "prototypes"}
    scale = 1.0 / (w**2 + a**2) ** 0.5
    assert norm_of(False) == pytest.approx(w * scale, rel=1e-5) and norm_of(True) == pytest.approx(a * scale, rel=1e-5)
    fill()
    GradientClip(model, 0.0)()  # 0: no clip
    assert norm_of(False) == pytest.approx(w) and norm_of(True) == pytest.approx(a)
    tf = TransformerLM(TransformerConfig(dim=8, depth=1, heads=2, ff_hidden=8))
    for p in tf.parameters():
        p.grad = torch.ones_like(p)
    whole, parts = GradientClip(tf, 1.0)()
    assert "angles" not in parts and float(whole) == pytest.approx(sum(p.numel() for p in tf.parameters()) ** 0.5)
    assert {"tok_embedding", "blocks.0.attn", "blocks.0.ff", "norm"} <= set(parts)


def test_training_logs_each_parts_gradient_norm(tmp_path, corpus):
    run = tmp_path / "run"
    assert main(["train", "--preset", "ka-tiny", "--corpus", corpus, "--steps", "3", "--eval-every", "3",
                 "--grad-clip", "0.01", "--run-dir", str(run), *TINY]) == 0
    rows = metrics(run)
    for r in rows:  # the parts' norms (4 digits) make up the whole norm before clipping
        parts = r["part_grad_norms"]
        assert parts["angles"] > 0
        assert sum(v**2 for v in parts.values()) ** 0.5 == pytest.approx(r["grad_norm"], rel=1e-3)
    assert "clip_angles_apart" not in json.loads((run / "run.json").read_text())["train"]


def test_diverging_loss_is_one_line_and_saves_nothing(tmp_path, corpus, capsys):
    run = tmp_path / "run"
    code = main(["train", "--preset", "tf-tiny", "--corpus", corpus, "--steps", "30", "--lr", "1e30", "--warmup", "1",
                 "--grad-clip", "0", "--ckpt-every", "1000", "--run-dir", str(run), *TINY])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: loss became non-finite at step") and "\n" not in err
    assert not (run / "checkpoint").exists()  # the diverged state was not written over anything


def test_untyped_training_options_are_refused():
    from kuramoto_attention.errors import ConfigError
    from kuramoto_attention.training.config import train_config_from

    with pytest.raises(ConfigError, match="training option lr must be of type float, got '3e-3'"):
        train_config_from({"lr": "3e-3", "steps": 1})
    with pytest.raises(ConfigError, match="steps must be of type int"):
        train_config_from({"steps": 1.5})
    assert train_config_from({"lr": 1, "steps": 1, "omega_lr_mult": 2.0}).lr == 1  # an int is a float
