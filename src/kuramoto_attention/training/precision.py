"""The training precision: bf16 autocast (matmuls in bfloat16, the states and the optimizer in float32) or fp32."""

from __future__ import annotations

import contextlib

import torch


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()
