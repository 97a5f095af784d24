"""Linear probes of earlier bytes (`python -m lab probe`) on tiny models and hand-made features."""

import json

import pytest
import torch
from rendered import cells, rows

from kuramoto_attention import KuramotoConfig, KuramotoLM
from kuramoto_attention.errors import ConfigError
from kuramoto_attention.models.presets import build_model, get_preset
from kuramoto_attention.ops.torus import lift
from lab import protocol
from lab.cli import main as lab_main
from lab.studies import probe
from lab.writers import studies


def test_ridge_probe_reads_a_linearly_coded_byte_and_not_noise():
    gen = torch.Generator().manual_seed(0)
    y = torch.randint(0, 8, (400,), generator=gen)
    codes = torch.randn(8, 16, generator=gen, dtype=torch.float64)
    x = codes[y] + 0.01 * torch.randn(400, 16, generator=gen, dtype=torch.float64)  # the byte, linearly coded
    assert probe.ridge_accuracy(x[:200], y[:200], x[200:], y[200:], classes=8) == 1.0
    noise = torch.randn(400, 16, generator=gen, dtype=torch.float64)  # nothing about y: near chance (1/8)
    assert probe.ridge_accuracy(noise[:200], y[:200], noise[200:], y[200:], classes=8) < 0.3


def test_states_are_the_readouts_view_along_depth():
    model = KuramotoLM(KuramotoConfig(dim=8, depth=2, heads=2, ff_hidden=8))
    idx = torch.randint(0, 256, (2, 5))
    feats = probe.states(model, idx)
    assert len(feats) == 3 and all(f.shape == (2, 5, 16) and f.dtype == torch.float64 for f in feats)
    torch.testing.assert_close(feats[0], lift(model.embed(idx)).double())
    with torch.no_grad():  # the last state's view is what the readout reads: its linear map gives the logits
        torch.testing.assert_close(model.prototypes(feats[-1].float()), model(idx))
    tf = build_model(*get_preset("tf-tiny"))
    last = probe.states(tf, idx)[-1]
    with torch.no_grad():
        torch.testing.assert_close(last.float() @ tf.tok_embedding.weight.T, tf(idx))


def test_probe_run_shapes_and_offsets():
    """Offset j scores x_{t−j}: on the embedding (every byte its own phases) the current byte is exact."""
    model = KuramotoLM(KuramotoConfig(dim=16, depth=1, heads=2, ff_hidden=8))
    windows = torch.randint(0, 8, (8, 40), generator=torch.Generator().manual_seed(1))  # 8 distinct bytes
    acc = probe.probe_run(model, windows, offsets=(0, 1))
    assert len(acc) == 2 and all(len(row) == 2 for row in acc)
    assert acc[0][0] == 1.0  # 8 bytes, 16 phases each: a linear map of ψ separates them
    assert acc[1][0] < 0.4  # the embedding knows nothing about the byte before (chance 1/8)
    with pytest.raises(ConfigError, match="at least 2 windows"):
        probe.probe_run(model, windows[:1])


def test_write_and_missing_runs(tmp_path, monkeypatch):
    # measure finds a run through its group's results (or an identical run's): none here
    monkeypatch.setattr(protocol, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(protocol, "RUNS", tmp_path / "runs")
    with pytest.raises(ConfigError, match="python -m lab run main"):
        probe.measure(None)
    monkeypatch.setattr(protocol, "RESULTS", tmp_path)
    res = {"windows": 4, "context": 16, "offsets": [0, 1], "ridge": 1e-3,
           "runs": [{"group": "main", "name": "ka-1m-seed0", "family": "kuramoto", "depth": 1, "ff_proj": "shared",
                     "accuracy": [[1.0, 0.9], [0.01, 0.4]]},
                    {"group": "main", "name": "tf-1m-seed0", "family": "transformer", "depth": 2,
                     "accuracy": [[1.0, 0.95, 0.9], [0.01, 0.6, 0.7]]}]}
    path = probe.write(res)
    assert path.name == "probe.json" and json.loads(path.read_text()) == res
    text = studies.probe_tables()
    assert rows(text, "main/ka-1m-seed0")[:2] == [["main/ka-1m-seed0", "current (j = 0)", "1.000", "0.900", "—"],
                                                  ["main/ka-1m-seed0", "j = 1", "0.010", "0.400", "—"]]
    assert cells(text, "main/tf-1m-seed0")[2:] == ["1.000", "0.950", "0.900"]
    # per earlier byte: the accuracy at the last state, and the best state's (here the last, after its block)
    assert rows(text, "main/ka-1m-seed0")[2][1:] == ["0.400 (0.400 after block 1)"]
    assert rows(text, "main/tf-1m-seed0")[2][1:] == ["0.700 (0.700 after block 2)"]
    slots = studies.notebook_slots()
    assert [slots[f"probe_{k}"] for k in ("windows", "context", "ridge", "first")] == [4, 16, 1e-3, 1]


def test_cli_probe_takes_no_group(capsys):

    assert lab_main(["probe", "main"]) == 2
    assert "probe takes no GROUP" in capsys.readouterr().err


def test_probe_runs_add_the_best_5m_pair(tmp_path, monkeypatch):
    import json

    from lab import protocol

    monkeypatch.setattr(protocol, "RESULTS", tmp_path)
    assert probe.probe_runs() == list(probe.PROBE_RUNS)
    (tmp_path / "scale").mkdir()
    for name, preset, bpc in (("ka-5m", "ka-5m", 2.2), ("ka-5m-lr-0.001", "ka-5m", 2.1), ("tf-5m", "tf-5m", 2.0)):
        family = "kuramoto" if preset.startswith("ka") else "transformer"
        row = {"group": "scale", "name": name, "preset": preset, "family": family, "eval_split": "test",
               "model": {}, "train": {}, "model_overrides": {}, "eval_bpc": bpc}
        (tmp_path / "scale" / f"{name}.json").write_text(json.dumps(row))
    assert probe.probe_runs()[-2:] == [("scale", "ka-5m-lr-0.001"), ("scale", "tf-5m")]
