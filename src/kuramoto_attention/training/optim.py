"""The optimisation step: AdamW's parameter groups, the learning-rate schedule, and gradient clipping with the norm
of each part of the model (which weights a spike is in). ``kuramoto train`` and the benchmark both take it from here."""

from __future__ import annotations

import math

import torch
from torch import nn

from kuramoto_attention.models.lm import ByteLM
from kuramoto_attention.training.config import TrainConfig


def lr_at(cfg: TrainConfig, progress: float, step: int) -> float:
    """Linear warmup over ``warmup`` steps, then cosine from lr to lr·min_lr_ratio over progress ∈ [0, 1].

    The cosine's clock is the whole run's progress, starting at step 0 (not at the end of warmup), so
    the rate steps down a little when warmup ends: to 0.985·lr at step 100 of a 10M-token protocol run,
    0.775·lr in a 300-step run. Every run in results/ used this schedule; it is kept for comparability.
    """
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    cos = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * cos)


def gradient_parts(model: ByteLM) -> dict[str, list[nn.Parameter]]:
    """The model's parameters by part, for the gradient norms the log keeps: the angles (phases, ω) together, every
    other parameter under its top module, per layer (``blocks.2.ff``, ``shared_gates``, ``prototypes``). Generic
    over the families: the names come from the modules, so a new module is a new part without a change here."""
    angles = model.phase_parameter_names()
    parts: dict[str, list[nn.Parameter]] = {}
    for name, p in model.named_parameters():
        path = name.split(".")
        part = "angles" if name in angles else ".".join(path[:3] if path[0] == "blocks" else path[:1])
        parts.setdefault(part, []).append(p)
    return parts


class GradientClip:
    """Clip the gradients to norm ``max_norm`` (0: no clip), all in one norm. The parameters are split into parts
    once, not at every step; a call returns the whole norm before clipping, and each part's (``gradient_parts``),
    also before clipping: which weights a spike is in."""

    def __init__(self, model: ByteLM, max_norm: float) -> None:
        self.clip = max_norm if max_norm > 0 else float("inf")
        self.params = list(model.parameters())  # model order: the one norm sums as it always has
        self.parts = gradient_parts(model)

    def __call__(self) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        # each gradient's norm once: the parts' norms and the clip's are all made of them
        each = {id(p): torch.linalg.vector_norm(p.grad.float()) for p in self.params if p.grad is not None}

        def norm(ps: list[nn.Parameter]) -> torch.Tensor:
            found = [each[id(p)] for p in ps if id(p) in each]
            return torch.linalg.vector_norm(torch.stack(found)) if found else torch.zeros(())

        parts = {k: norm(ps) for k, ps in self.parts.items() if any(id(p) in each for p in ps)}
        total = norm(self.params)
        nn.utils.clip_grads_with_norm_(self.params, self.clip, total)
        return total, parts


def rounded_norms(norms: dict[str, torch.Tensor]) -> dict[str, float]:
    """The parts' norms for the log: one device sync for all, 4 significant digits."""
    values = torch.stack([*norms.values()]).tolist() if norms else []
    return {k: float(f"{v:.4g}") for k, v in zip(norms, values, strict=True)}


def make_optimizer(model: ByteLM, cfg: TrainConfig) -> torch.optim.AdamW:
    """Weight decay on matrices only; phases (embedding phases, ω) never decayed, own lr multiplier."""
    # the groups come from the modules themselves (each says which of its parameters are angles), not from names
    no_decay, phases, rates = model.no_weight_decay(), model.phase_parameter_names(), model.omega_parameter_names()
    groups: dict[str, list[nn.Parameter]] = {k: [] for k in ("decay", "no_decay", "phase", "omega")}
    for name, p in model.named_parameters():
        if name in phases:
            groups["omega" if name in rates else "phase"].append(p)
        else:
            groups["decay" if p.dim() >= 2 and name not in no_decay else "no_decay"].append(p)
    param_groups = [  # this order: a checkpoint's optimizer state is matched to its groups by position
        {"params": groups["decay"], "weight_decay": cfg.weight_decay, "lr_mult": 1.0},
        {"params": groups["no_decay"], "weight_decay": 0.0, "lr_mult": 1.0},
        {"params": groups["phase"], "weight_decay": 0.0, "lr_mult": cfg.phase_lr_mult},
        {"params": groups["omega"], "weight_decay": 0.0,
         "lr_mult": cfg.phase_lr_mult if cfg.omega_lr_mult is None else cfg.omega_lr_mult},
    ]
    param_groups = [g for g in param_groups if g["params"]]
    return torch.optim.AdamW(param_groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2))
