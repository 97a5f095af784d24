"""Dynamics diagnostics of a trained KuramotoLM (paper §4 "dynamics", the paper).

The paper's claims about *how* the model works are claims about numbers we can read off a
forward pass: it synchronises locally (|G| near 1) without collapsing globally (the order
parameter over a whole sequence falls with depth), and its learned ω run from fast in early
layers to slow in later ones. ``diagnose(model, idx)`` measures these per layer and head, plus
what explains them: attention entropy and reach, the sign of the value gates (synchronising
v > 0 vs repelling v < 0) and how often the tanh bound saturates.

Attention maps and increments come from the T×T reference path of the layer; the states
(``model.phases``) and the knockout use the fused path (the two agree to 1e-10 in float64).
Everything runs in float32 without gradients: it is for a handful of sequences, not for
training-sized batches.

JSON: JSON has no infinity or NaN, so ``to_dict``/``to_json`` write every non-finite float
as ``null``. In particular the timescale 2π/|ω| of a coordinate with ω = 0 (no drift: an
infinitely slow oscillator) is ``inf`` in the tensors and ``null`` in JSON, and the
feed-forward saturation of a model without feed-forward (``ff = "none"``) is NaN / ``null``.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from kuramoto_attention.errors import ConfigError
from kuramoto_attention.layers.bound import Bound
from kuramoto_attention.layers.groups import build_geometry
from kuramoto_attention.layers.groups.base import Geometry
from kuramoto_attention.layers.kuramoto_attention import KuramotoAttention
from kuramoto_attention.models.kuramoto import KuramotoLM
from kuramoto_attention.ops.attention import split_heads

SATURATION_LEVEL = 0.95  # an increment "saturates" the bound when its size is ≥ 95% of the radius
HIST_BINS = 41
OFFSETS = 8  # the offset profile covers t − u = 0..OFFSETS


@dataclass
class Diagnostics:
    """Per-layer (L) and per-head (H) measurements on one batch (B, T).

    Summary fields (written to JSON):
      group            str       the compact group of the states ("torus", "su2", "sphere").
      local_order      (L, H)    mean |G_{t,j}|, G = Σ_u A_{t,u} x_{u,j}: coherence with the attended tokens. x_{u,j}
                                 is the oscillator as a unit vector (e^{iθ} on the torus, the quaternion itself on
                                 SU(2)), |·| its Euclidean norm, so both lie in [0, 1] and mean the same thing.
      global_order     (L+1, H)  mean_j |mean_t x_{t,j}| of the state before layer 0 (row 0) and after
                                 each layer (row i+1): coherence over the whole sequence.
      entropy          (L, H)    −Σ_u A_{t,u} log A_{t,u} in nats, averaged over queries (log(t+1) if uniform).
      distance         (L, H)    Σ_u A_{t,u} (t − u), averaged over queries: how far back a head looks.
      offset_profile   (L, H, D+1) A_{t,t−Δ} for Δ = 0..D (D = OFFSETS), averaged over queries t ≥ D: how
                                 a head spreads its attention over the last few positions.
      peak_offset      (L, H)    the Δ of each head's largest offset_profile entry.
      self_weight      (L, H)    A_{t,t} averaged over queries: attention a token pays itself, which moves
                                 nothing (sin(θ_t − θ_t) = 0); the cosine kernel scores the self pair
                                 highest unless the gates say otherwise, so this is the layer's "no-op" mass.
      sync_fraction    (L, H)    fraction of value gates v > 0 (pull toward the attended mean).
      repel_fraction   (L, H)    fraction of value gates v < 0 (push away); with sync_fraction sums to 1
                                 unless some v are exactly 0.
      omega            (L, H, k/H) the learned drift rates ω (radians per token; on SU(2) |Ω_j|, the angle per
                                 token of the left rotation exp(tΩ_j); on the sphere the rms of Ω_j's plane rates).
      median_abs_omega (L, H)    median |ω| per head (torch.median: the lower middle value).
      timescale        (L, H)    2π / median |ω| in tokens: one full turn of the typical drift (inf if 0).
      layer_median_abs_omega, layer_timescale (L,): the same over all of a layer's coordinates.
      attn_saturation  (L,)      fraction of attention increments at ≥ 95% of the bound radius.
      ff_saturation    (L,)      the same for feed-forward increments (NaN without feed-forward).
      attn_drive       (L,)      median of the bound's tanh argument over the attention increments (‖x‖ per
                                 token, or |x_j|/r_j per coordinate, ``Bound.drive``): where it is past about 2
                                 the step's length is r whatever x, and the gradient through x's length is gone.
      ff_drive         (L,)      the same for feed-forward increments (NaN without feed-forward).
      bound            str       "norm" | "elementwise": what saturation counts (see ``saturation``).
      knockout_bpc     (L, 2)    bits per byte of predicting the batch's next bytes with layer i's attention
                                 step (column 0) or feed-forward step (column 1) replaced by the identity,
                                 minus the intact model's (NaN without feed-forward): what each step is worth.
    Raw fields (for plots, not written to JSON; on the CPU):
      tokens (B, T); states: L+1 tensors (B, T, k) (SU(2): (B, T, k, 4)); attention: L tensors (B, H, T, T);
      value_gates: L tensors (B, T, k), summarised in JSON as a histogram.
    """

    group: str
    local_order: Tensor
    global_order: Tensor
    entropy: Tensor
    distance: Tensor
    offset_profile: Tensor
    peak_offset: Tensor
    self_weight: Tensor
    sync_fraction: Tensor
    repel_fraction: Tensor
    omega: Tensor
    median_abs_omega: Tensor
    timescale: Tensor
    layer_median_abs_omega: Tensor
    layer_timescale: Tensor
    attn_saturation: Tensor
    ff_saturation: Tensor
    attn_drive: Tensor
    ff_drive: Tensor
    bound: str
    knockout_bpc: Tensor
    tokens: Tensor = field(metadata={"raw": True})
    states: list[Tensor] = field(metadata={"raw": True})
    attention: list[Tensor] = field(metadata={"raw": True})
    value_gates: list[Tensor] = field(metadata={"raw": True})

    @property
    def depth(self) -> int:
        return self.local_order.shape[0]

    @property
    def heads(self) -> int:
        return self.local_order.shape[1]

    def value_gate_histogram(self, bins: int = HIST_BINS) -> dict[str, Any]:
        """Counts of value-gate values per layer on shared, zero-symmetric bin edges."""
        edge = max(float(v.abs().max()) for v in self.value_gates) or 1.0
        edges = torch.linspace(-edge, edge, bins + 1)
        counts = [torch.histc(v.flatten(), bins=bins, min=-edge, max=edge).long().tolist() for v in self.value_gates]
        return {"edges": edges.tolist(), "counts": counts}

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe plain data: nested lists of floats, non-finite values as None."""
        out: dict[str, Any] = {"depth": self.depth, "heads": self.heads, "batch": list(self.tokens.shape)}
        for f in fields(self):
            if not f.metadata.get("raw"):
                out[f.name] = _json_safe(getattr(self, f.name))
        out["value_gate_histogram"] = _json_safe(self.value_gate_histogram())
        out["saturation_level"] = SATURATION_LEVEL
        return out

    def to_json(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_dict(), indent=1, allow_nan=False) + "\n")
        return path


def _json_safe(value: Any) -> Any:
    if isinstance(value, Tensor):
        value = value.tolist()
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return value


# --------------------------------------------------------------------------- measurements
def _norm(parts: list[Tensor]) -> Tensor:
    """√(Σ_c x_c²) of a vector given by its coordinates, summed in order (on the torus exactly √(Re² + Im²))."""
    sq = parts[0] ** 2
    for p in parts[1:]:
        sq = sq + p**2
    return torch.sqrt(sq)


def local_order(attn: Tensor, x: Tensor, geometry: Geometry | None = None) -> Tensor:
    """mean |G| per head, G_{t,j} = Σ_u A_{t,u} x_{u,j} (the oscillators as unit vectors); attn (B, H, T, T), x the
    layer input (B, T, k, …) -> (H,). ``geometry`` defaults to the torus (x the phases θ)."""
    coords = (geometry or build_geometry("torus")).coordinates(x)  # c tensors (B, T, k)
    return _norm([attn @ split_heads(c, attn.shape[1]) for c in coords]).mean(dim=(0, 2, 3))


def global_order(x: Tensor, heads: int, geometry: Geometry | None = None) -> Tensor:
    """|mean_t x_{t,j}| averaged over a head's oscillators and the batch; x (B, T, k, …) -> (H,)."""
    coords = (geometry or build_geometry("torus")).coordinates(x)
    r = _norm([split_heads(c, heads).mean(dim=2) for c in coords])  # (B, H, k/H)
    return r.mean(dim=(0, 2))


def attention_entropy(attn: Tensor) -> Tensor:
    """−Σ_u A log A in nats (0 log 0 = 0), averaged over batch and queries -> (H,)."""
    plogp = torch.where(attn > 0, attn * torch.log(attn.clamp_min(1e-30)), torch.zeros_like(attn))
    return -plogp.sum(-1).mean(dim=(0, 2))


def attention_distance(attn: Tensor) -> Tensor:
    """Σ_u A_{t,u} (t − u), averaged over batch and queries -> (H,)."""
    t = attn.shape[-1]
    pos = torch.arange(t, dtype=attn.dtype, device=attn.device)
    lag = (pos[:, None] - pos[None, :]).clamp_min(0)  # causal A is 0 where u > t anyway
    return (attn * lag).sum(-1).mean(dim=(0, 2))


def offset_profile(attn: Tensor, max_offset: int) -> Tensor:
    """A_{t,t−Δ} for Δ = 0..max_offset, averaged over batch and queries t ≥ max_offset -> (H, max_offset + 1).
    Queries t < max_offset are left out so that every Δ averages over the same queries."""
    if attn.shape[-1] <= max_offset:
        raise ValueError(f"offset profile up to {max_offset} needs more than {max_offset} positions, "
                         f"got {attn.shape[-1]}")
    return torch.stack([attn.diagonal(offset=-d, dim1=-2, dim2=-1)[..., max_offset - d:].mean(dim=(0, 2))
                        for d in range(max_offset + 1)], dim=-1)


def gate_sign_fractions(v: Tensor, heads: int) -> tuple[Tensor, Tensor]:
    """Fractions of v > 0 and v < 0 per head over tokens and coordinates; v (B, T, k)."""
    vh = split_heads(v, heads)
    return (vh > 0).float().mean(dim=(0, 2, 3)), (vh < 0).float().mean(dim=(0, 2, 3))


def knockout(model: KuramotoLM, idx: Tensor) -> Tensor:
    """(L, 2) ΔBPC of next-byte prediction on idx (B, T) with one step replaced by the identity:
    column 0 the layer's attention step, column 1 its feed-forward step (NaN where there is none)."""

    def bpc(skip: frozenset[tuple[str, int]]) -> float:
        logits = model.readout(model.phases(idx[:, :-1], skip)[-1])
        return F.cross_entropy(logits.flatten(0, 1).float(), idx[:, 1:].flatten()).item() / math.log(2)

    base = bpc(frozenset())
    rows = [[bpc(frozenset({("attn", i)})) - base,
             bpc(frozenset({("ff", i)})) - base if block.ff is not None else math.nan]
            for i, block in enumerate(model.blocks)]
    return torch.tensor(rows, dtype=torch.float64)


def omega_timescale(abs_omega: Tensor) -> Tensor:
    """2π / |ω| in tokens (one full turn of the drift); inf where ω = 0."""
    return torch.where(abs_omega > 0, 2 * math.pi / abs_omega.clamp_min(1e-30), torch.full_like(abs_omega, math.inf))


def saturation(increment: Tensor, bound: Bound) -> float:
    """Fraction of bounded increments within 5% of the radius.

    norm: per token, ‖y‖ ≥ 0.95 r over its whole increment (n·tangent); elementwise: per coordinate,
    |y_j| ≥ 0.95 r_j. A saturated increment means the layer wanted a larger step than the bound allows.
    """
    norm = bound.norm()  # the norm bound's radius (None: elementwise)
    if norm is not None:
        r = norm.log_radius.exp().to(increment.dtype)
        return (increment.norm(dim=-1) >= SATURATION_LEVEL * r).float().mean().item()
    r = bound.radius.to(increment.dtype)
    return (increment.abs() >= SATURATION_LEVEL * r).float().mean().item()


# --------------------------------------------------------------------------- driver
def _float32_model(model: Any) -> KuramotoLM:
    if not isinstance(model, KuramotoLM):
        raise ConfigError(f"diagnostics need a KuramotoLM, got {type(model).__name__} (transformer runs have none)")
    if any(p.dtype != torch.float32 for p in model.parameters()):
        model = copy.deepcopy(model).float()  # never change the caller's model in place
    return model


def diagnose(model: KuramotoLM, idx: Tensor) -> Diagnostics:
    """All diagnostics of ``model`` on the byte batch ``idx`` (B, T) int64, in float32, no gradients.

    The states come from ``model.phases``; A and the attention increment from the layer's
    reference path at each layer's input; the mid-block state for the feed-forward is the input moved by
    bound(v ⊙ a) (θ + bound(v ⊙ a) on the torus). Results are on the CPU.
    """
    model = _float32_model(model)
    if idx.dtype != torch.long or idx.dim() != 2:
        raise ValueError(f"idx must be an int64 tensor of shape (B, T), got {idx.dtype} {tuple(idx.shape)}")
    device = next(model.parameters()).device
    idx = idx.to(device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            return _diagnose(model, idx)
    finally:
        model.train(was_training)


def _diagnose(model: KuramotoLM, idx: Tensor) -> Diagnostics:
    states = model.phases(idx)
    heads, geo = model.config.heads, model.geometry
    keys = ("local", "entropy", "distance", "offsets", "self", "sync", "repel", "attn_sat", "ff_sat", "attn_drive",
            "ff_drive", "attention", "value_gates")
    rows: dict[str, list[Any]] = {k: [] for k in keys}
    for block, theta in zip(model.blocks, states[:-1], strict=True):
        layer: KuramotoAttention = block.attn
        a, attn = layer.coupling(theta)
        v = layer.value(geo.lift(theta))
        raw = geo.tangent_gate(v) * a.flatten(2)  # v ⊙ increment (B, T, k·tangent)
        step = layer.bound(raw)
        mid = layer.bound.move(geo, theta, raw)  # the state after the attention step (θ + step on the torus)
        ff_raw = None if block.ff is None else block.ff.update(mid)
        ff_step = None if ff_raw is None else block.ff.bound(ff_raw)
        rows["local"].append(local_order(attn, theta, geo))
        rows["entropy"].append(attention_entropy(attn))
        rows["distance"].append(attention_distance(attn))
        rows["offsets"].append(offset_profile(attn, min(OFFSETS, attn.shape[-1] - 1)))
        rows["self"].append(attn.diagonal(dim1=-2, dim2=-1).mean(dim=(0, 2)))
        sync, repel = gate_sign_fractions(v, heads)
        rows["sync"].append(sync)
        rows["repel"].append(repel)
        rows["attn_sat"].append(saturation(step, layer.bound))
        rows["ff_sat"].append(math.nan if ff_step is None else saturation(ff_step, block.ff.bound))
        rows["attn_drive"].append(layer.bound.drive(raw).median().item())
        rows["ff_drive"].append(math.nan if ff_raw is None else block.ff.bound.drive(ff_raw).median().item())
        rows["attention"].append(attn.cpu())
        rows["value_gates"].append(v.cpu())
    omega = torch.stack([geo.drift_rate(blk.attn.omega.detach().float()).view(heads, -1)
                         for blk in model.blocks]).cpu()
    med_head = omega.abs().median(dim=-1).values
    med_layer = omega.abs().flatten(1).median(dim=-1).values

    def stack(key: str) -> Tensor:
        return torch.stack(rows[key]).cpu()

    offsets = stack("offsets")
    return Diagnostics(
        group=geo.name,
        local_order=stack("local"),
        global_order=torch.stack([global_order(s, heads, geo) for s in states]).cpu(),
        entropy=stack("entropy"),
        distance=stack("distance"),
        offset_profile=offsets,
        peak_offset=offsets.argmax(dim=-1),
        self_weight=stack("self"),
        sync_fraction=stack("sync"),
        repel_fraction=stack("repel"),
        omega=omega,
        median_abs_omega=med_head,
        timescale=omega_timescale(med_head),
        layer_median_abs_omega=med_layer,
        layer_timescale=omega_timescale(med_layer),
        attn_saturation=torch.tensor(rows["attn_sat"]),
        ff_saturation=torch.tensor(rows["ff_sat"]),
        attn_drive=torch.tensor(rows["attn_drive"]),
        ff_drive=torch.tensor(rows["ff_drive"]),
        bound=model.config.attention.bound,
        knockout_bpc=knockout(model, idx),
        tokens=idx.cpu(),
        states=[s.cpu() for s in states],
        attention=rows["attention"],
        value_gates=rows["value_gates"],
    )


# --------------------------------------------------------------------------- run directories
def valid_batch(run_dir: str | Path, batch: int = 4, context: int | None = None,
                data_dir: str | None = None) -> Tensor:
    """``batch`` windows of ``context`` bytes (default: the run's) from the run's valid split.

    The windows start at evenly spaced offsets, so a report is reproducible without a seed
    and covers the split rather than one spot of it.
    """
    from kuramoto_attention.training.data import load_corpus
    from kuramoto_attention.training.train import load_run

    if batch < 1:
        raise ConfigError("--batch must be >= 1")
    cfg = load_run(run_dir, {}).train_cfg
    context = context or cfg.context
    if context < 2:
        raise ConfigError("--context must be >= 2")
    data = load_corpus(cfg.corpus, data_dir or cfg.data_dir).splits["valid"]
    if len(data) < context:
        raise ConfigError(f"valid split of {cfg.corpus} has {len(data):,} bytes, fewer than context {context}; "
                          "use a smaller --context")
    starts = torch.linspace(0, len(data) - context, batch).long().tolist()
    rows = [torch.from_numpy(data[s:s + context].astype("int64")) for s in starts]
    return torch.stack(rows)


def diagnose_run(run_dir: str | Path, batch: int = 4, context: int | None = None,
                 data_dir: str | None = None) -> Diagnostics:
    """Load a run's checkpoint and diagnose it on a batch of its valid split (see ``valid_batch``)."""
    from kuramoto_attention.training.checkpoint import load_model

    model, _ = load_model(Path(run_dir))
    if not isinstance(model, KuramotoLM):
        raise ConfigError(f"diagnostics need a KuramotoLM; {run_dir} holds a {type(model).__name__}")
    return diagnose(model, valid_batch(run_dir, batch, context, data_dir))
