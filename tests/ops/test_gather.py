"""select_rows (ops/gather.py) is index_select, values and gradients, eager and compiled, and its operators pass
torch.library's checks."""

import pytest
import torch

from kuramoto_attention.ops.gather import select_rows


@pytest.fixture
def table():
    gen = torch.Generator().manual_seed(0)
    return torch.randn(3, 7, 5, dtype=torch.float64, generator=gen).requires_grad_()


@pytest.fixture
def index():
    return torch.tensor([6, 0, 0, 3, 6, 6, 1, 2, 0, 5])  # repeats: their gradients add up


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_values_and_gradient_are_index_select_s(table, index, dim):
    index = index % table.shape[dim]
    out = select_rows(table, dim, index)
    ref = table.index_select(dim, index)
    assert torch.equal(out, ref)
    grad = torch.randn_like(ref)
    (mine,) = torch.autograd.grad(out, table, grad)
    (theirs,) = torch.autograd.grad(ref, table, grad)
    assert torch.equal(mine, theirs)


def test_gradcheck(table, index):
    assert torch.autograd.gradcheck(lambda t: select_rows(t, 1, index), (table,))


def test_gradgradcheck(table, index):
    assert torch.autograd.gradgradcheck(lambda t: select_rows(t, 1, index), (table,))


def test_compiled_is_eager_to_the_bit(table, index):
    grad = torch.randn(3, index.numel(), 5, dtype=torch.float64)
    eager = torch.autograd.grad(select_rows(table, 1, index), table, grad)[0]
    compiled_fn = torch.compile(lambda t: select_rows(t, 1, index), fullgraph=True, dynamic=False)
    compiled = torch.autograd.grad(compiled_fn(table), table, grad)[0]
    assert torch.equal(compiled, eager)


def test_operators_pass_opcheck(table, index):
    torch.library.opcheck(torch.ops.kuramoto.select_rows, (table, 1, index))
    grad = torch.randn(3, index.numel(), 5, dtype=torch.float64)
    torch.library.opcheck(torch.ops.kuramoto.select_rows_backward, (grad, 1, index, 7))


def test_empty_index(table):
    out = select_rows(table, 1, torch.zeros(0, dtype=torch.long))
    assert out.shape == (3, 0, 5)
    (grad,) = torch.autograd.grad(out.sum(), table)
    assert torch.equal(grad, torch.zeros_like(table))
