"""Python functions as custom operators that torch.compile calls whole."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def whole_operator(name: str, fn: Callable[..., Any]) -> Any:
    """``fn`` as the operator ``kuramoto::<name>``, with ``fn`` itself as its fake implementation.

    torch.compile then calls it as it is: inductor does not fuse across it or rewrite its inside. It finds the
    outputs' shapes and strides by running ``fn`` on fake tensors. So ``fn`` may use only operations that fake tensors
    support, and, as every operator, returns new tensors: no input, and no two outputs that share memory.
    """
    op = torch.library.custom_op(f"kuramoto::{name}", fn, mutates_args=())
    op.register_fake(fn)
    return op
