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
