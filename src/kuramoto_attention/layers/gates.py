"""The score's learned parts outside the geometry: the metric gates and the positional clocks.

    g^q_t = ρ(W_q φ(x_t) + b_q),  g^k_t = ρ(W_k φ(x_t) + b_k)       ρ = softplus, then ÷ its mean over the head
    clock term  Σ_c w_c cos(ω_c (t − u) + β_c)                        (per head, added to the coupling sum)

φ is the geometry's lift (ψ(θ) on the torus), or a map P of it that a model shares between layers.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from kuramoto_attention.layers.log_rate import raw
from kuramoto_attention.ops.attention import rotary_angles


class Borrowed:
    """A module this one applies but does not own (a model's shared P or shared gates): held by reference, so it is
    not registered twice. Its owner registers it once; a standalone layer's parameters() and state_dict() leave it
    out."""

    def __init__(self, module: nn.Module | None) -> None:
        self.module = module

    def __call__(self, x: Tensor) -> Tensor:
        assert self.module is not None
        return self.module(x)


def read(source: Borrowed, lifted: Tensor, mapped: Tensor | None) -> Tensor:
    """What a gate reads: the lift itself (no source), or P applied to it, computed here unless the caller has it."""
    if source.module is None:
        if mapped is not None:
            raise ValueError("got P φ(x) for a gate that reads the lift itself")
        return lifted
    return source(lifted) if mapped is None else mapped


def metric_gates(z: Tensor, heads: int, q_scale: Tensor | None = None) -> Tensor:
    """ρ of the stacked logits z (B, T, 2n): g^q, g^k as (2, B, H, T, n/H), in z's dtype.

    softplus, then divided by the mean over each head's oscillators, so the gates are a positive diagonal metric of
    mean 1. ``q_scale`` (H,) multiplies g^q in the same pass (the fused path folds the temperature τ in here).
    """
    return token_major_gates(z, heads, q_scale).permute(2, 0, 3, 1, 4)


def token_major_gates(z: Tensor, heads: int, q_scale: Tensor | None = None) -> Tensor:
    """``metric_gates`` laid out as z is, (B, T, 2, H, n/H): what a path that splits the heads last reads (a kernel
    that writes every token's features in place runs faster than one that transposes them as it goes)."""
    b, t, _ = z.shape
    g = F.softplus(z).view(b, t, 2, heads, -1)
    scale = g.mean(dim=-1, keepdim=True).reciprocal()  # (B, T, 2, H, 1): cheap
    if q_scale is not None:
        scale = scale * torch.stack((q_scale, torch.ones_like(q_scale))).view(2, heads, 1)
    return (g * scale.to(g.dtype)).to(z.dtype)


def gated_features(feat: Tensor, logits: Tensor | None, heads: int, tau: Tensor, dtype: torch.dtype,
                   query: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """q = τ g^q ⊙ feat, k = g^k ⊙ feat, one gate per oscillator over its c components: feat (B, T, H, c, d)
    (token-major) -> (B, H, T, c·d) each (views of token-major tensors), in ``dtype``; ``query``: the query's own
    features where they differ; ``logits`` the gates' (B, T, 2n), or None (every gate 1)."""
    feats = (feat if query is None else query, feat)
    if logits is None:  # τ on the query, nothing on the key
        gates: tuple[Tensor | None, ...] = (tau.to(dtype).view(heads, 1, 1), None)
    else:
        g = token_major_gates(logits, heads, q_scale=tau).to(dtype)  # (B, T, 2, H, d): τ g^q, g^k
        gates = (g[:, :, 0, :, None, :], g[:, :, 1, :, None, :])
    q, k = ((f.to(dtype) if gate is None else f.to(dtype) * gate).flatten(-2).transpose(1, 2)
            for f, gate in zip(feats, gates, strict=True))
    return q, k


class PhaseGates(nn.Module):
    """The gate logits W φ(x) + b for the query and the key gates (W_q and W_k stacked: 2n outputs).

    One per layer, or one that all layers share (the model passes it in). ``proj`` is W (its inputs: the lift's width,
    or P's outputs); ``source`` a map P of the lift that they read instead of the lift itself, held by its owner (the
    model's shared P) and applied here.
    """

    def __init__(self, proj: nn.Linear, source: nn.Linear | None = None) -> None:
        super().__init__()
        if source is not None and source.out_features != proj.in_features:
            raise ValueError(f"the gates read {proj.in_features} inputs, P gives {source.out_features}")
        self.proj = proj
        self.source = Borrowed(source)

    @staticmethod
    def projection(inputs: int, oscillators: int) -> nn.Linear:
        """W (inputs -> 2n), drawn as the gates start: small weights, zero bias (every gate 1 at first)."""
        proj = nn.Linear(inputs, 2 * oscillators)
        nn.init.normal_(proj.weight, std=0.02)
        nn.init.zeros_(proj.bias)
        return proj

    def forward(self, lifted: Tensor, mapped: Tensor | None = None) -> Tensor:
        """(B, T, 2n) logits; ``mapped``: P φ(x), when the caller has computed it already."""
        return self.proj(read(self.source, lifted, mapped))


class PositionalClock(nn.Module):
    """``count`` clock oscillators per head whose phase is the position alone (outside the paper's score).

    They add Σ_c w_c cos(ω_c (t − u) + β_c) to each head's coupling sum: a content-free positional preference that
    can peak at any offset, without spending state oscillators whose phase would have to be the same for every
    byte. As features: the query gets τ w_c (cos(ω_c t + β_c), sin(ω_c t + β_c)), the key (cos ω_c u, sin ω_c u).
    ω: RoPE's geometric frequencies; β: spread over the circle (the clocks start peaked at different offsets);
    w = ``init`` (0: the paper's score at init), a decayed (H, count) matrix.
    """

    def __init__(self, heads: int, count: int, base: float, init: float = 0.0) -> None:
        super().__init__()
        self.omega = nn.Parameter(rotary_angles(count, base).float().repeat(heads, 1))  # (H, c)
        self.lag = nn.Parameter(torch.empty(heads, count).uniform_(-torch.pi, torch.pi))
        self.weight = nn.Parameter(torch.full((heads, count), float(init)))

    def angles(self) -> list[nn.Parameter]:
        """The parameters that are angles (the optimizer's phase group)."""
        return [raw(self, "omega"), self.lag]

    def features(self, pos: Tensor, tau: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """(query, key) features (1, H, T, 2c) for positions pos (T,); tau (H,) the heads' temperatures."""
        angle = self.omega[:, None, :] * pos[:, None].to(self.omega.dtype)  # (H, T, c): ω_c t
        q_angle = angle + self.lag[:, None, :]
        amp = (tau[:, None] * self.weight)[:, None, :]  # (H, 1, c)
        q = torch.cat((amp * torch.cos(q_angle), amp * torch.sin(q_angle)), dim=-1)
        k = torch.cat((torch.cos(angle), torch.sin(angle)), dim=-1)
        return q.unsqueeze(0).to(dtype), k.unsqueeze(0).to(dtype)

    def score(self, offset: Tensor) -> Tensor:
        """Σ_c w_c cos(ω_c Δ + β_c) for offsets Δ (T, T)  ->  (H, T, T) (the reference path's term)."""
        angle = self.omega[:, None, None, :] * offset[..., None].to(self.omega.dtype) + self.lag[:, None, None, :]
        return (self.weight[:, None, None, :] * torch.cos(angle)).sum(-1)
