"""Named model presets and the family registry.

Widths are chosen so that every parameter (embeddings included) sums to within ±3% of
the nominal size; ``kuramoto params`` prints the exact counts.
"""

from dataclasses import replace
from typing import Any

import torch

from kuramoto_attention.errors import ConfigError
from kuramoto_attention.layers.kuramoto_attention import AttentionConfig
from kuramoto_attention.models.config import apply_overrides as apply_overrides  # re-exported for preset users
from kuramoto_attention.models.config import config_from_dict as read_config
from kuramoto_attention.models.kuramoto import KuramotoConfig, KuramotoLM
from kuramoto_attention.models.lm import ByteLM
from kuramoto_attention.models.transformer import TransformerConfig, TransformerLM

FAMILIES: dict[str, tuple[type, type[ByteLM]]] = {
    "kuramoto": (KuramotoConfig, KuramotoLM),
    "transformer": (TransformerConfig, TransformerLM),
}

PRESETS: dict[str, tuple[str, Any]] = {
    "ka-tiny": ("kuramoto", KuramotoConfig(dim=16, depth=2, heads=2, ff_hidden=32, context=32)),
    "tf-tiny": ("transformer", TransformerConfig(dim=16, depth=2, heads=2, ff_hidden=32, context=32)),
    # the feed-forward reads P ψ(θ), one P (2k -> k) shared by all layers: a hidden unit costs 3k weights, as the
    # transformer's 3d, so 312 units per layer keep the totals matched (on ψ(θ) itself, 5k: 200 units, 0.060 test
    # BPC worse over three seeds; RESULTS.md). ka-5m keeps the unprojected feed-forward until it is rerun
    "ka-1m": ("kuramoto", KuramotoConfig(dim=128, depth=4, heads=4, ff_hidden=312, ff_proj="shared")),
    "tf-1m": ("transformer", TransformerConfig(dim=128, depth=5, heads=4, ff_hidden=336)),
    # the best 1M torus variant at the protocol's 10M tokens (issue 4), outside the paper's score: no self term,
    # a learned phase lag, 8 clock oscillators per head; k = 160 paid for by one pair of metric gates for all layers
    # and by the value and metric gates reading the feed-forward's shared P ψ(θ) (k wide) instead of ψ(θ) (2k)
    "ka-1m-tuned": ("kuramoto", KuramotoConfig(
        dim=160, depth=4, heads=4, ff_hidden=350, ff_proj="shared", shared_gates=True, value_gate_input="ff-proj",
        gates_input="ff-proj",
        attention=AttentionConfig(self_coupling=False, phase_lag=True, clock=8, clock_init=4.0))),
    # SU(2) (issue 25): 64 unit quaternions per token, so the lift φ (4·64 = 256 wide) and with it the attention's
    # query/key and value widths are ka-1m's (2·128); ka-1m's layout otherwise (shared P 4n -> n before the
    # feed-forward, which emits a 3n-wide su(2) increment), the feed-forward's width filling the budget
    "ka-su2-1m": ("kuramoto", KuramotoConfig(dim=64, depth=4, heads=4, ff_hidden=524, ff_proj="shared",
                                             attention=AttentionConfig(group="su2"))),
    # ka-1m-tuned's recipe on SU(2) (issue 25): what of it applies off the torus (no self term, 8 clocks per head, one
    # pair of metric gates for all layers, they and the value gate reading the shared P; the phase lag is the torus's
    # only), the oscillators it pays for taken as ka-1m-tuned's were (64 -> 80 quaternions)
    "ka-su2-1m-tuned": ("kuramoto", KuramotoConfig(
        dim=80, depth=4, heads=4, ff_hidden=494, ff_proj="shared", shared_gates=True, value_gate_input="ff-proj",
        gates_input="ff-proj", attention=AttentionConfig(group="su2", self_coupling=False, clock=8, clock_init=4.0))),
    # the sphere S³ ⊂ R⁴ (issue 25's stretch goal, AKOrN's oscillators): ka-su2-1m's layout, the lift as wide; the
    # feed-forward emits a 4n-wide ambient increment (4 numbers per oscillator, not 3), so it is narrower
    "ka-sphere-1m": ("kuramoto", KuramotoConfig(dim=64, depth=4, heads=4, ff_hidden=437, ff_proj="shared",
                                                attention=AttentionConfig(group="sphere"))),
    # the tuned recipe carried to 5M (issue 26): the same ingredients, k = 320 in 8 heads of 40 (ka-1m-tuned's head
    # width), 5 layers as ka-5m
    "ka-5m-tuned": ("kuramoto", KuramotoConfig(
        dim=320, depth=5, heads=8, ff_hidden=800, ff_proj="shared", shared_gates=True, value_gate_input="ff-proj",
        gates_input="ff-proj",
        attention=AttentionConfig(self_coupling=False, phase_lag=True, clock=8, clock_init=4.0))),
    "ka-5m": ("kuramoto", KuramotoConfig(dim=256, depth=5, heads=8, ff_hidden=442)),
    "tf-5m": ("transformer", TransformerConfig(dim=256, depth=6, heads=8, ff_hidden=728)),
}

# what each preset is, in a few words (the README's preset table, ``kuramoto params``)
SUMMARY = {
    "ka-tiny": "for tests and smoke runs", "tf-tiny": "for tests and smoke runs",
    "ka-1m": "the paper's layer; the feed-forward reads a shared P ψ(θ)",
    "tf-1m": "RoPE + SwiGLU, pre-RMSNorm, tied embeddings",
    "ka-1m-tuned": "no self term, phase lag, 8 clocks, shared gates reading P ψ(θ)",
    "ka-su2-1m": "ka-1m's layout on SU(2): 64 unit quaternions per token",
    "ka-su2-1m-tuned": "ka-1m-tuned's recipe on SU(2), less the phase lag: 80 quaternions",
    "ka-sphere-1m": "ka-1m's layout on the sphere S³ ⊂ R⁴ (AKOrN's oscillators)",
    "ka-5m-tuned": "ka-1m-tuned's recipe at 5M: k = 320 in 8 heads",
    "ka-5m": "the 5M Kuramoto model", "tf-5m": "the 5M transformer",
}

NOMINAL = {"ka-1m": 1_000_000, "ka-1m-tuned": 1_000_000, "ka-su2-1m": 1_000_000, "ka-su2-1m-tuned": 1_000_000,
           "ka-sphere-1m": 1_000_000,
           "tf-1m": 1_000_000, "ka-5m": 5_000_000, "ka-5m-tuned": 5_000_000, "tf-5m": 5_000_000}


def get_preset(name: str) -> tuple[str, Any]:
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}")
    family, cfg = PRESETS[name]
    return family, replace(cfg)


def build_model(family: str, cfg: Any) -> ByteLM:
    if family not in FAMILIES:
        raise ConfigError(f"unknown model family {family!r}; choose one of: {', '.join(FAMILIES)}")
    try:
        return FAMILIES[family][1](cfg)
    except ValueError as exc:  # invalid field values: report as a config error
        raise ConfigError(str(exc)) from None


def config_from_dict(data: dict[str, Any]) -> tuple[str, Any]:
    """(family, config) from a saved config (a checkpoint's or run.json's: the family, then the fields)."""
    data = dict(data)
    family = data.pop("family", None)
    if family not in FAMILIES:
        raise ConfigError(f"config has unknown family {family!r}; expected one of {', '.join(FAMILIES)}")
    return family, read_config(family, FAMILIES[family][0], data)


def preset_table() -> list[dict[str, Any]]:
    """Name, parameter count, depth, width, heads of every preset (built on the meta device)."""
    rows = []
    for name, (family, cfg) in PRESETS.items():
        with torch.device("meta"):
            n = build_model(family, cfg).num_params()
        row = {"name": name, "family": family, "params": n, "depth": cfg.depth, "width": cfg.dim,
               "heads": cfg.heads, "ff_hidden": cfg.ff_hidden, "what": SUMMARY.get(name, "")}
        if name in NOMINAL:
            row["nominal"] = NOMINAL[name]
            row["deviation"] = round(n / NOMINAL[name] - 1, 4)
        rows.append(row)
    return rows
