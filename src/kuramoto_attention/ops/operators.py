"""Python functions as custom operators that torch.compile calls whole."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def whole_operator(name: str, fn: Callable[..., Any], fake: Callable[..., Any] | None = None) -> Any:
    """``fn`` as the operator ``kuramoto::<name>``, with ``fake`` (default: ``fn`` itself) as its fake implementation.

    torch.compile then calls it as it is: inductor does not fuse across it or rewrite its inside. It finds the
    outputs' shapes and strides by running ``fake`` on fake tensors. So ``fake`` may use only operations that fake
    tensors support (no compiled kernel reading their data), and, as every operator, returns new tensors, of the
    shapes and strides ``fn``'s have: no input, and no two outputs that share memory.
    """
    op = torch.library.custom_op(f"kuramoto::{name}", fn, mutates_args=())
    op.register_fake(fake or fn)
    return op
