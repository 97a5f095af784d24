"""Fine-tuning an exported Kuramoto model under transformers' Trainer with our optimizer's parameter groups: the
loss falls, and save_pretrained -> from_pretrained gives back the trained model exactly."""

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # Trainer's requirement (in the hf extra)

import torch
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments, default_data_collator

import kuramoto_attention.hf  # noqa: F401
from kuramoto_attention import build_model, get_preset
from kuramoto_attention.errors import ConfigError
from kuramoto_attention.hf import (
    KuramotoByteTokenizer,
    KuramotoForCausalLM,
    KuramotoLMConfig,
    make_optimizer,
    optimizer_groups,
)
from kuramoto_attention.training.config import TrainConfig

BLOCK = 32


class TextBlocks(torch.utils.data.Dataset):
    """A text file as consecutive blocks of BLOCK bytes, each its own labels (the model shifts them)."""

    def __init__(self, path, tokenizer) -> None:
        ids = tokenizer(path.read_text(encoding="utf-8"))["input_ids"]
        self.blocks = torch.tensor(ids[: len(ids) // BLOCK * BLOCK]).view(-1, BLOCK)

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.blocks[i], "labels": self.blocks[i]}


@pytest.fixture
def exported(tmp_path):
    family, cfg = get_preset("ka-tiny")
    torch.manual_seed(0)
    out = tmp_path / "ka-tiny"
    KuramotoForCausalLM.from_byte_lm(build_model(family, cfg)).save_pretrained(out)
    KuramotoByteTokenizer().save_pretrained(out)
    return out


def test_trainer_fine_tunes_and_the_saved_model_round_trips(exported, tmp_path):
    text = tmp_path / "train.txt"
    text.write_text("Kuramoto oscillators synchronise; attention couples them. " * 60, encoding="utf-8")
    model = AutoModelForCausalLM.from_pretrained(exported)
    data = TextBlocks(text, KuramotoByteTokenizer.from_pretrained(exported))
    args = TrainingArguments(output_dir=str(tmp_path / "trainer"), max_steps=12, per_device_train_batch_size=8,
                             learning_rate=3e-3, lr_scheduler_type="constant", logging_steps=1, save_strategy="no",
                             report_to=[], use_cpu=True, disable_tqdm=True, seed=0)
    trainer = Trainer(model=model, args=args, train_dataset=data, data_collator=default_data_collator,
                      optimizers=(make_optimizer(model, lr=3e-3), None))
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 12 and sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.3

    model.save_pretrained(tmp_path / "tuned")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "tuned")
    trained, back = model.state_dict(), loaded.state_dict()
    assert trained.keys() == back.keys() and all(torch.equal(trained[k], back[k]) for k in trained)
    idx = torch.randint(0, 256, (2, 40))
    with torch.no_grad():
        assert torch.equal(model.eval()(idx).logits, loaded.eval()(idx).logits)


def test_optimizer_groups_are_the_training_groups_at_their_rates():
    """Every parameter once; the angles (phases, ω, clocks) never decayed and at the phase multiplier, the rest at
    the base rate with decay on matrices only; a retired option is the one line naming its commit."""
    family, cfg = get_preset("ka-1m-tuned")
    model = KuramotoForCausalLM(KuramotoLMConfig(kuramoto=build_model(family, cfg).config_dict()))
    inner, base = model.model, 1e-3
    groups = optimizer_groups(model, lr=base)
    names = {id(p): n.removeprefix("model.") for n, p in model.named_parameters()}
    grouped = [names[id(p)] for g in groups for p in g["params"]]
    assert sorted(grouped) == sorted(names.values())
    for group in groups:
        members = {names[id(p)] for p in group["params"]}
        if members <= inner.phase_parameter_names():
            assert group["weight_decay"] == 0.0 and group["lr"] == pytest.approx(base * TrainConfig.phase_lr_mult)
        else:
            assert group["lr"] == pytest.approx(base)
            decayed = group["weight_decay"] > 0
            assert all((dict(model.named_parameters())["model." + n].dim() >= 2) == decayed for n in members
                       if n not in inner.no_weight_decay())
    with pytest.raises(ConfigError, match=r"^training option shared_lr_mult=0.5 was retired after commit 25e20b6"):
        optimizer_groups(model, lr=base, shared_lr_mult=0.5)
