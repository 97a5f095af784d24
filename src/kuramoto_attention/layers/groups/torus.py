"""The torus T^n: the abelian case, where the score and the mean have closed forms (the paper's layer).

State θ (B, T, n) angles; lift ψ(θ) = (cos θ, sin θ) (B, T, 2n); drift φ_t = θ_t + ω t (ω (n,), RoPE's frequencies
within each head at init). With cos(x − y) = cos x cos y + sin x sin y the score is the dot product of
q_t = τ g^q_t ⊙ ψ(φ_t + β) and k_u = g^k_u ⊙ ψ(φ_u), and G is the attention output for values ψ(θ_u); the
increment a = Im(e^{−iθ} G) and the move θ + step. The literal T × T form is ``layers/naive.py``.

The torus's own options, each a parameter of the layer held in ``TorusExtras``: a phase lag β in the score
(``phase_lag``), learned complex mixes of a head's oscillators in the score and in the step (``cross_score``,
``cross_coupling``: cross_coupling.py), higher harmonics of the coupling (``harmonics``: harmonics.py); and drift
rates learned as log ω (``omega="log"``: a rate, which only the torus's drift is). In eager training the elementwise
work around the attention runs hand-fused (``ops/fused.py``); under torch.compile and without autograd, the plain
expressions here, except the gated query and key where torch.compile's own loops are slower (``fused_query_key``).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from kuramoto_attention.layers.bound import NormBound
from kuramoto_attention.layers.groups.base import Geometry
from kuramoto_attention.layers.groups.cross_coupling import OscillatorMix
from kuramoto_attention.layers.groups.harmonics import Harmonics
from kuramoto_attention.ops.attention import rotary_angles, with_extra
from kuramoto_attention.ops.fused import bounded_step, fused_applies, fused_query_key, gated_step, query_key
from kuramoto_attention.ops.torus import lift, tangent_projection


class TorusExtras(nn.Module):
    """A torus layer's own parameters: the phase lag β (n,), the query's and the step's oscillator mixes, the
    harmonics' weights. Each is None when its option is off; none draws random numbers (all start at 0)."""

    def __init__(self, config: Any, oscillators: int, heads: int) -> None:
        super().__init__()
        self.lag = nn.Parameter(torch.zeros(oscillators)) if config.phase_lag else None
        self.query_mix = OscillatorMix(heads, oscillators // heads) if config.cross_score else None
        self.coupling_mix = OscillatorMix(heads, oscillators // heads) if config.cross_coupling else None
        self.harmonics = Harmonics(oscillators, config.harmonics) if config.harmonics > 1 else None

    def angles(self) -> list[nn.Parameter]:
        """The parameters that are angles (the optimiser's phase group): β."""
        return [self.lag] if self.lag is not None else []


class Torus(Geometry):
    name = "torus"
    components = 2
    tangent = 1
    options = frozenset({"phase_lag", "cross_score", "cross_coupling", "harmonics", "omega=log", "ff=angles"})
    state_name = "phases θ"

    def state_shape(self, oscillators: int) -> tuple[int, ...]:
        return (oscillators,)

    def init_embedding(self, vocab: int, oscillators: int) -> Tensor:
        return torch.empty(vocab, oscillators).uniform_(-torch.pi, torch.pi)  # every byte spread over the circle

    def embed(self, table: Tensor, idx: Tensor) -> Tensor:
        return F.embedding(idx, table)  # = table[idx]; its backward is 2× faster on the CPU

    def lift(self, x: Tensor) -> Tensor:
        return lift(x)

    def init_drift(self, oscillators: int, heads: int, base: float) -> Tensor:
        return rotary_angles(oscillators // heads, base).float().repeat(heads)

    def extras(self, config: Any, oscillators: int, heads: int) -> TorusExtras | None:
        parts = TorusExtras(config, oscillators, heads)
        return parts if any(True for _ in parts.parameters()) else None  # none of the options on: no module

    # ------------------------------------------------------------------ the step
    def drifted(self, x: Tensor, pos: Tensor, drift: Tensor, heads: int,
                extras: nn.Module | None = None) -> tuple[Tensor, Tensor]:
        # token-major, (B, T, H, ·), the heads split by a view at the end: compiled, a kernel that writes each token's
        # features in place runs faster than one that transposes them to (B, H, T, ·) as it writes
        b, t, n = x.shape
        d = n // heads
        theta = x.view(b, t, heads, d)
        drifted = drift.view(heads, d).to(x.dtype) * pos[:, None, None]  # ω t: (T, H, d)
        key = lift(theta + drifted).unflatten(-1, (2, d))  # ψ(φ) per head: (B, T, H, 2, d)
        lag = None if extras is None or extras.lag is None else extras.lag.to(x.dtype).view(heads, d)
        mix = None if extras is None else extras.query_mix
        if mix is not None:  # e^{i(ωt + β)} ⊙ C e^{iθ_t}
            query = mix.query(theta, drifted if lag is None else drifted + lag).unflatten(-1, (2, d))
        elif lag is not None:
            query = lift(theta + drifted + lag).unflatten(-1, (2, d))  # ψ(φ + β)
        else:
            query = key
        return query, key

    def gated_query_key(self, x: Tensor, pos: Tensor, drift: Tensor, logits: Tensor | None, heads: int, tau: Tensor,
                        dtype: torch.dtype, extras: nn.Module | None = None,
                        extra: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        if logits is not None and (extras is None or extras.query_mix is None) and fused_query_key(x, heads):
            lag = None if extras is None or extras.lag is None else extras.lag.to(x.dtype)
            return with_extra(*query_key(x, drift, pos, lag, logits, tau, dtype), extra)
        return super().gated_query_key(x, pos, drift, logits, heads, tau, dtype, extras, extra)

    def values(self, x: Tensor, lifted: Tensor, heads: int, extras: nn.Module | None = None) -> Tensor:
        b, t, _ = lifted.shape  # ψ(θ_u) per head: [cos θ_h, sin θ_h]
        v = lifted.view(b, t, 2, heads, -1).permute(0, 3, 1, 2, 4).reshape(b, heads, t, -1)
        if extras is not None and extras.harmonics is not None:  # ψ(mθ_u), m = 2..M: one SDPA call averages them all
            v = torch.cat((v, extras.harmonics.values(x, heads, v.dtype)), dim=-1)
        return v

    def increment(self, x: Tensor, lifted: Tensor, mean: Tensor, extras: nn.Module | None = None) -> Tensor:
        b, t, n = x.shape
        heads = mean.shape[1]
        width = 2 * (n // heads)
        first = mean[..., :width]  # ψ(θ_u)'s mean; the harmonics' follow it
        if extras is not None and extras.coupling_mix is not None:  # K G: linear, so it commutes with A
            first = extras.coupling_mix(first)
        re_g, im_g = first.transpose(1, 2).to(x.dtype).chunk(2, dim=-1)  # (B, T, H, d) each
        cos_t, sin_t = (c.view(b, t, heads, n // heads) for c in lifted.chunk(2, dim=-1))
        inc = tangent_projection(cos_t, sin_t, re_g, im_g).reshape(b, t, n)
        if extras is not None and extras.harmonics is not None:
            inc = inc + extras.harmonics.increment(x, mean[..., width:])
        return inc

    def move(self, x: Tensor, step: Tensor) -> Tensor:
        return x + step.to(x.dtype)

    # ------------------------------------------------------------------ hand-fused in eager training
    def norm_move(self, x: Tensor, step: Tensor, bound: NormBound) -> Tensor:
        if fused_applies():  # θ + bound(step) in one pass
            return bounded_step(x, step, bound.log_radius)
        return super().norm_move(x, step, bound)

    def norm_step(self, x: Tensor, lifted: Tensor, mean: Tensor, value: Tensor, bound: NormBound,
                  extras: nn.Module | None = None) -> Tensor:
        plain = extras is None or (extras.coupling_mix is None and extras.harmonics is None)
        if plain and fused_applies():  # increment, value gate, bound, residual: one pass
            return gated_step(x, lifted, mean, value, bound.log_radius)
        return super().norm_step(x, lifted, mean, value, bound, extras)

    def coordinates(self, x: Tensor) -> tuple[Tensor, ...]:
        return torch.cos(x), torch.sin(x)
