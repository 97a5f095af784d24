"""benchmarks/query_key_ab.py: its two models differ only in how the torus computes the gated query and key."""

import pytest
import torch

from benchmarks.query_key_ab import build
from kuramoto_attention.layers.groups import torus


def test_the_inductor_model_never_calls_the_operators_and_computes_the_same(monkeypatch):
    x = torch.randint(0, 256, (2, 8))
    torch.manual_seed(0)
    operators = build("ka-tiny", {"clock": "2"}, operators=True)
    torch.manual_seed(0)
    plain = build("ka-tiny", {"clock": "2"}, operators=False)
    want = operators(x)

    def refuse(*args):
        raise AssertionError("the plain model called the query/key operators")

    monkeypatch.setattr(torus, "query_key", refuse)
    assert torch.allclose(plain(x), want, atol=1e-5)
    with pytest.raises(AssertionError, match="called the query/key operators"):
        operators(x)


@pytest.mark.parametrize(("argv", "message"), [
    (["tf-1m"], "tf-1m has no gated torus query and key"),
    (["ka-su2-1m"], "ka-su2-1m has no gated torus query and key"),
    (["ka-tiny", "clock"], "overrides are name=value, got 'clock'"),
    (["ka-tiny", "nonsense=1"], "no field 'nonsense'"),
    (["ka-tiny", "--pairs", "x"], "invalid int value"),
])
def test_bad_input_is_one_error_line(argv, message, capsys):
    from benchmarks.query_key_ab import build_parser
    from kuramoto_attention.cli import run_main

    assert run_main(build_parser(), argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error:") and message in err
