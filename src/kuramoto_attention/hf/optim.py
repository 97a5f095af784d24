"""Our optimizer's parameter groups for a transformers model, for users who build their own optimizer (or hand one
to ``Trainer(optimizers=(opt, None))``).

The groups are ``kuramoto train``'s (``training.optim.make_optimizer``): weight decay on matrices only, and the angles
(the embedding's phases, ω, β, the clocks') never decayed and stepped at ``phase_lr_mult`` (×20 by default) times the
base rate; at the base rate they barely move, and training is markedly worse. Each group's ``lr`` is the base rate
times its multiplier, so that a scheduler which scales every group's initial rate (as transformers' do) keeps the
ratios.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from torch import nn

from kuramoto_attention.training.config import TrainConfig, without_retired_options
from kuramoto_attention.training.optim import make_optimizer as make_byte_lm_optimizer


def _byte_lm(model: nn.Module) -> nn.Module:
    """Our model inside a transformers one (``.model``), or ours itself."""
    inner = getattr(model, "model", model)
    if not hasattr(inner, "phase_parameter_names"):
        raise TypeError(f"{type(model).__name__} is not a kuramoto-attention model (KuramotoForCausalLM or ByteLM)")
    return inner


def optimizer_groups(model: nn.Module, **options: Any) -> list[dict[str, Any]]:
    """AdamW parameter groups (``params``, ``weight_decay``, ``lr``, ``lr_mult``) of ``model``;
    ``options``: ``TrainConfig`` fields (``lr``, ``weight_decay``, ``phase_lr_mult``, ``omega_lr_mult``), the
    training defaults otherwise."""
    cfg = replace(TrainConfig(), **without_retired_options(options))
    groups = make_byte_lm_optimizer(_byte_lm(model), cfg).param_groups
    return [{"params": g["params"], "weight_decay": g["weight_decay"], "lr": cfg.lr * g["lr_mult"],
             "lr_mult": g["lr_mult"]} for g in groups]


def make_optimizer(model: nn.Module, **options: Any) -> torch.optim.AdamW:
    """AdamW over ``optimizer_groups(model, **options)`` with the training's betas."""
    cfg = replace(TrainConfig(), **without_retired_options(options))
    return torch.optim.AdamW(optimizer_groups(model, **options), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2))
