"""Can a layer learn to copy? Two-layer models on a synthetic induction task (``python -m lab induction``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from kuramoto_attention.errors import ConfigError
from kuramoto_attention.layers.kuramoto_attention import AttentionConfig
from kuramoto_attention.models.kuramoto import KuramotoConfig
from kuramoto_attention.models.lm import ByteLM
from kuramoto_attention.models.presets import TUNED_SCORE, build_model
from kuramoto_attention.models.transformer import TransformerConfig
from lab.studies import save


@dataclass(frozen=True)
class Task:
    segment: int = 24  # L
    alphabet: int = 32  # V
    batch: int = 32
    steps: int = 8000  # the transformer's copy accuracy sits near chance for thousands of steps, then jumps
    lr: float = 3e-3
    eval_every: int = 1000
    eval_sequences: int = 512
    seeds: tuple[int, ...] = (0, 1)

    @property
    def context(self) -> int:
        return 2 * self.segment - 1  # the model reads all but the last symbol


TUNED = {k: TUNED_SCORE[k] for k in ("self_coupling", "phase_lag")}  # ka-1m-tuned's score, less its clocks
MODELS: dict[str, dict[str, Any]] = {  # name -> the Kuramoto layer's fields ("tf": the transformer)
    "tf": {},
    "ka": TUNED,
    "ka-cross-coupling": {**TUNED, "cross_coupling": True},
    "ka-cross-both": {**TUNED, "cross_score": True, "cross_coupling": True},
    "ka-cross-score": {**TUNED, "cross_score": True},
    "ka-value-projection": {**TUNED, "value": "projection"},
}


def sequences(task: Task, n: int, gen: torch.Generator) -> torch.Tensor:
    """n sequences (n, 2L): L random symbols, their copy from a random start s < L/2, then fresh symbols."""
    length = task.segment
    first = torch.randint(0, task.alphabet, (n, length), generator=gen)
    fresh = torch.randint(0, task.alphabet, (n, length), generator=gen)
    start = torch.randint(0, length // 2, (n, 1), generator=gen)
    src = start + torch.arange(length)  # where each symbol of the second half comes from, while in the segment
    second = torch.where(src < length, first.gather(1, src.clamp_max(length - 1)), fresh)
    return torch.cat((first, second), dim=1)


def copy_accuracy(model: ByteLM, x: torch.Tensor, task: Task) -> float:
    """Next-symbol accuracy on the copy's first L/2 predictions (each one's source is in the first half)."""
    length = task.segment
    with torch.no_grad():
        pred = model(x[:, :-1])[:, length:length + length // 2].argmax(-1)
    return (pred == x[:, length + 1:length + 1 + length // 2]).float().mean().item()


def build(name: str, task: Task) -> ByteLM:
    shape = {"dim": 32, "depth": 2, "heads": 2, "ff_hidden": 64, "context": task.context}
    if name == "tf":
        return build_model("transformer", TransformerConfig(**shape))
    return build_model("kuramoto", KuramotoConfig(**shape, attention=AttentionConfig(**MODELS[name])))


def train(name: str, seed: int, task: Task) -> dict[str, Any]:
    """One model trained on fresh batches; its copy accuracy on held-out sequences every ``eval_every`` steps."""
    torch.manual_seed(seed)
    model = build(name, task)
    opt = torch.optim.AdamW(model.parameters(), lr=task.lr, weight_decay=0.0)
    data, held_out = torch.Generator().manual_seed(1000 + seed), torch.Generator().manual_seed(-1 - seed)
    test = sequences(task, task.eval_sequences, held_out)
    curve = []
    for step in range(task.steps + 1):
        if step % task.eval_every == 0:
            curve.append({"step": step, "accuracy": copy_accuracy(model, test, task)})
        if step == task.steps:
            break
        x = sequences(task, task.batch, data)
        logits = model(x[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return {"model": name, "seed": seed, "params": model.num_params(), "curve": curve}


def measure(task: Task = Task(), models: tuple[str, ...] = tuple(MODELS)) -> dict[str, Any]:
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        raise ConfigError(f"induction has no model {unknown[0]!r}; choose from {', '.join(MODELS)}")
    runs = []
    for name in models:
        for seed in task.seeds:
            runs.append(train(name, seed, task))
            print(f"induction: {name} seed {seed}: copy accuracy {runs[-1]['curve'][-1]['accuracy']:.3f}", flush=True)
    return {"task": asdict(task), "models": {m: MODELS[m] for m in models}, "runs": runs}


def write(res: dict[str, Any]) -> Path:
    return save("induction.json", res)
