import json
import shutil
from pathlib import Path

import pytest
import torch

pytest.register_assert_rewrite("geometry_checks", "literal")  # its checks' failures read as the tests' own do


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def random_phases(*shape: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return (torch.rand(*shape, dtype=dtype) * 2 - 1) * 4.0  # beyond [-π, π) on purpose


def assert_paths_agree(layer: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The fused and the reference path give the literal references' output (tests/literal.py), and the same
    gradients (the state's and every parameter's, the literal step's included), in float64; returns x detached."""
    from literal import literal_step

    x = x.detach().requires_grad_()
    fused, ref = layer(x), layer(x, path="reference")
    literal, _, _ = literal_step(layer, x)
    assert torch.allclose(fused, literal, atol=1e-10, rtol=0)
    assert torch.allclose(ref, literal, atol=1e-10, rtol=0)
    weights = torch.randn_like(fused)
    g_fused = torch.autograd.grad((fused * weights).sum(), [x, *layer.parameters()])
    g_ref = torch.autograd.grad((ref * weights).sum(), [x, *layer.parameters()])
    g_lit = torch.autograd.grad((literal * weights).sum(), [x, *layer.parameters()], allow_unused=True)
    for a, b, c in zip(g_fused, g_ref, g_lit, strict=True):
        assert torch.allclose(a, b, atol=1e-10, rtol=0)
        assert torch.allclose(a, torch.zeros_like(a) if c is None else c, atol=1e-10, rtol=0)
    return x.detach()


@pytest.fixture
def in_tmp(tmp_path, monkeypatch) -> Path:
    """Runs in tmp_path, with lab's results/ and runs/ there (every reader and writer reads lab.protocol's)."""
    from lab import protocol

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(protocol, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(protocol, "RUNS", tmp_path / "runs")
    return tmp_path


def write_results(tmp: Path, rows: list[dict]) -> None:
    """Each fabricated result where the lab keeps it: tmp/results/<group>/<name>.json."""
    for r in rows:
        path = tmp / "results" / r["group"] / f"{r['name']}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(r))


# the vector geometries' compiled kernels (ops/native.py) build wherever a C++ compiler is installed
HAS_COMPILER = shutil.which("c++") is not None or shutil.which("g++") is not None


@pytest.fixture(params=["compiled", "python"])
def backend(request, monkeypatch):
    """The test runs on the compiled kernels and on the Python functions."""
    from kuramoto_attention.ops import native

    if request.param == "python":
        monkeypatch.setenv(native.ENV, "0")
    elif not native.available(torch.zeros(1)):
        if HAS_COMPILER:
            pytest.fail("a C++ compiler is installed but the compiled kernels did not build (see stderr)")
        pytest.skip("no C++ compiler: the compiled kernels cannot be built here")
    return request.param
