"""benchmarks/kernels.py: the ten kernel calls it times run on the inputs it makes, at any shape."""

import pytest
import torch

from benchmarks.kernels import calls
from kuramoto_attention.ops import native


@pytest.mark.skipif(not native.available(torch.zeros(1)), reason="the compiled kernels did not build here")
def test_each_timed_call_runs_and_gives_tensors_of_the_shapes_asked_for():
    jobs = calls(native._module(), batch=2, context=3, n=8, heads=2, width=20)
    assert list(jobs) == ["features forward", "features backward", "step forward", "step backward", "move forward",
                          "move backward", "lift forward", "lift backward", "heads forward",
                          "heads backward"]
    q, k = jobs["features forward"]()
    assert q.shape == k.shape == (2, 2, 3, 20) and q.dtype == torch.bfloat16
    dx, dmean, dv, _ = jobs["step backward"]()
    assert dx.shape == (4, 6, 8) and dmean.shape == (2, 2, 3, 16) and dv.shape == (6, 8)
    assert jobs["lift forward"]()[0].shape == (6, 32) and jobs["lift backward"]()[0].shape == (4, 6, 8)
    assert jobs["heads forward"]()[0].shape == (2, 2, 3, 16) and jobs["heads backward"]()[0].shape == (4, 6, 8)
    assert all(torch.isfinite(t).all() for f in jobs.values() for t in f())
