"""python -m benchmarks.native_ab: bad input is one error line; --paired runs a tiny torus model both ways."""

import pytest

from benchmarks import native_ab
from kuramoto_attention.cli import run_main


@pytest.mark.parametrize(("argv", "message"), [
    (["--presets", "ka-nope"], "unknown preset"),
    (["--modes", "jit"], "--modes takes eager and/or compile"),
    (["--precisions", "fp16"], "--precisions takes fp32 and/or bf16"),
    (["--paired", "--pairs", "0"], "--pairs must be at least 1"),
    (["--paired", "--presets", "ka-su2-1m", "--modes", "compile"], "needs a torus preset"),
    (["--paired", "--presets", "ka-1m", "--modes", "compile"], "needs a torus preset"),
])
def test_bad_input_is_one_line(capsys, argv, message):
    assert run_main(native_ab.build_parser(), argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_paired_alternates_the_backends(capsys, monkeypatch):
    monkeypatch.delenv("KURAMOTO_NATIVE", raising=False)
    monkeypatch.setattr(native_ab, "_train_parts", lambda model, precision, compiled: (lambda x, y: None, lambda: None))
    assert run_main(native_ab.build_parser(), ["--paired", "--presets", "ka-tiny", "--precisions", "fp32",
                                               "--pairs", "2"]) in (0, None)
    out = capsys.readouterr().out
    assert "ka-tiny eager fp32" in out and "median of 2 pairs" in out
    assert "KURAMOTO_NATIVE" not in __import__("os").environ  # the switch is put back
