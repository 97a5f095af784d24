import pytest
import torch


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def random_phases(*shape: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return (torch.rand(*shape, dtype=dtype) * 2 - 1) * 4.0  # beyond [-π, π) on purpose
