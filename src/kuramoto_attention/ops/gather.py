"""Rows of a small table read by index, with the gradient summed back by aten's own ``index_add_``.

torch.compile writes ``index_select``'s backward on the CPU as a scatter of atomic adds, one per element, about ten
times slower than ``index_add_`` for the vector geometries' embedding (a few hundred rows, every token's gradient). As
custom operators both directions run as aten runs them in eager mode, compiled or not: the numbers are eager
autograd's (``index_select``'s derivative is this ``index_add_``), the same in both modes.
"""

from __future__ import annotations

import torch
from torch import Tensor


@torch.library.custom_op("kuramoto::select_rows", mutates_args=())
def _select(table: Tensor, dim: int, index: Tensor) -> Tensor:
    return table.index_select(dim, index)


@_select.register_fake
def _(table: Tensor, dim: int, index: Tensor) -> Tensor:
    shape = list(table.shape)
    shape[dim] = index.numel()
    return table.new_empty(shape)


@torch.library.custom_op("kuramoto::select_rows_backward", mutates_args=())
def _select_backward(grad: Tensor, dim: int, index: Tensor, rows: int) -> Tensor:
    shape = list(grad.shape)
    shape[dim] = rows
    return grad.new_zeros(shape).index_add_(dim, index, grad)


@_select_backward.register_fake
def _(grad: Tensor, dim: int, index: Tensor, rows: int) -> Tensor:
    shape = list(grad.shape)
    shape[dim] = rows
    return grad.new_empty(shape)


def _setup(ctx: torch.autograd.function.FunctionCtx, inputs: tuple[Tensor, int, Tensor], output: Tensor) -> None:
    table, dim, index = inputs
    ctx.save_for_backward(index)
    ctx.dim, ctx.rows = dim, table.shape[dim]


def _backward(ctx: torch.autograd.function.FunctionCtx, grad: Tensor) -> tuple[Tensor, None, None]:
    (index,) = ctx.saved_tensors
    return _select_backward(grad, ctx.dim, index, ctx.rows), None, None


_select.register_autograd(_backward, setup_context=_setup)


def _setup_backward(ctx: torch.autograd.function.FunctionCtx, inputs: tuple[Tensor, int, Tensor, int],
                    output: Tensor) -> None:
    _, dim, index, _ = inputs
    ctx.save_for_backward(index)
    ctx.dim = dim


def _backward_backward(ctx: torch.autograd.function.FunctionCtx, grad: Tensor) -> tuple[Tensor, None, None, None]:
    (index,) = ctx.saved_tensors  # the sum's adjoint reads the rows again
    return _select(grad, ctx.dim, index), None, None, None


_select_backward.register_autograd(_backward_backward, setup_context=_setup_backward)


def select_rows(table: Tensor, dim: int, index: Tensor) -> Tensor:
    """``table.index_select(dim, index)`` (index 1-D, int64) with its backward run as aten's ``index_add_``."""
    return _select(table, dim % table.dim(), index)
