"""Kuramoto attention: one adaptive Kuramoto synchronisation step (the paper's section 2), on any compact group.

    g^q_t, g^k_t = ρ(W φ(x_t) + b)                               metric gates (gates.py)
    s_{t,u} = τ/√d Σ_j g^q_{t,j} g^k_{u,j} ⟨drift_t x_{t,j}, drift_u x_{u,j}⟩  [+ clocks]   per head, d = n/H
    A_{t,·} = softmax_{u ≤ t} s_{t,·}                            (u < t without self-coupling)
    G_{t,j} = Σ_u A_{t,u} x_{u,j}                                 the on-manifold mean's resultant
    x_t ← move(x_t, bound(v(x_t) ⊙ increment(x_t, G_t)))          v = W_v φ(x) + b, signed

On the torus (``torus.py``) ⟨·,·⟩ gives cos(θ_t − θ_u + ω(t − u)), the increment is Σ_u A_{t,u} sin(θ_u − θ_t) and
the move θ + step: the paper's layer, written out literally in ``naive.py``. Two paths share the parameters:
``fused`` (default), one causal SDPA call per layer with memory linear in T, and ``reference``, the T × T kernel
written out (tests, diagnostics, ``return_attention``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Literal

import torch
from torch import Tensor, nn

from kuramoto_attention.layers import naive
from kuramoto_attention.layers.bound import Bound
from kuramoto_attention.layers.cross_coupling import OscillatorMix
from kuramoto_attention.layers.gates import Borrowed, PhaseGates, PositionalClock, metric_gates, read
from kuramoto_attention.layers.geometry import Geometry
from kuramoto_attention.layers.harmonics import Harmonics
from kuramoto_attention.layers.log_rate import learn_in_log, raw
from kuramoto_attention.layers.sphere import Sphere
from kuramoto_attention.layers.su2 import SU2
from kuramoto_attention.layers.torus import Torus
from kuramoto_attention.ops.attention import KVCache, causal_attention, compute_dtype, merge_heads, split_heads

Path = Literal["fused", "reference"]
GEOMETRIES: dict[str, type[Geometry]] = {"torus": Torus, "su2": SU2, "sphere": Sphere}  # sphere: S³ ⊂ R⁴


@dataclass
class AttentionConfig:
    """The layer's options; every one is a paper field, an ablation, or an ingredient of a preset."""

    group: str = "torus"  # the compact group the states live on (GEOMETRIES)
    gates: bool = True  # learned metric gates; False: every gate 1 (the bare kernel; ablation)
    # the drift rates ω: learned; learned as log ω, the clocks' too (log_rate.py: each step moves a rate by a factor,
    # not by an amount that swamps RoPE's slow rates; the torus only); or ω ≡ 0 (no position; ablation)
    omega: Literal["learned", "log", "zero"] = "learned"
    # "circular": A averages the states themselves (the Kuramoto step); "projection": values W_v φ(x) (ablation)
    value: Literal["circular", "projection"] = "circular"
    # "norm": r·tanh(‖x‖)·x/‖x‖ over a token's increment, one learned r; "elementwise": r ⊙ tanh(x/r), r per coordinate
    bound: Literal["norm", "elementwise"] = "norm"
    # s in the norm bound r·tanh(‖x‖/s)·x/‖x‖: "one" (the paper's reading) or "learned" from s = r (bound.py says why);
    # the feed-forward's bound takes it too
    bound_scale: Literal["one", "learned"] = "one"
    tau: Literal["learned", "fixed"] = "learned"  # the temperature τ per head (log-parametrised) or fixed at tau_init
    tau_init: float = 1.0
    # r at init. Radius 10: at 1, 97-100% of increments sat on the bound and training stalled (the notebook's screen)
    radius_init: float = 10.0
    value_init: float = 1.0  # the value gate's initial bias (> 0: every oscillator starts synchronising)
    omega_base: float = 10000.0  # base of ω's geometric initialisation (RoPE's)
    # False: t couples to u < t only (token 0 keeps its own term). The self term adds nothing to the increment
    # (sin 0 = 0), so dropping it spends A's whole mass on earlier tokens instead of on "stay" (ka-1m-tuned)
    self_coupling: bool = True
    # A learned per-oscillator phase lag β in the score, cos(θ_t − θ_u + ω(t − u) + β): without it a coordinate whose
    # phase is the same for every token scores Σ_j w_j cos(ω_j (t − u)), which peaks at u = t, so no head could prefer
    # an earlier offset by position alone (ka-1m-tuned; the torus only)
    phase_lag: bool = False
    # Oscillators of a head coupled across through a learned complex mix (cross_coupling.py; from the identity, 2d²
    # weights per head each; the torus only): in the score, the query's oscillators mixed (C); in the step, the
    # attended states' (K), so that oscillator j synchronises to l. The paper's layer couples j to j only, and at 40M
    # tokens the gap is largest on bytes that copying predicts (`python -m lab gap budget40`); yet on a synthetic copy
    # task it learns to copy without them (`python -m lab induction`). Issue 26's leads (RESULTS.md: their scores)
    cross_score: bool = False
    cross_coupling: bool = False
    clock: int = 0  # positional clock oscillators per head (gates.py PositionalClock); 0: none
    clock_init: float = 0.0  # their weights' initial value (0: the paper's score at init)
    # M: the increment Σ_u A_{t,u} Σ_{m ≤ M} c_m sin(m(θ_u − θ_t)), c_1 = 1, c_m learned per oscillator from 0
    # (harmonics.py, Daido's coupling; the torus only). 1: the paper's Kuramoto term
    harmonics: int = 1

    def __post_init__(self) -> None:
        checks = [
            (self.group in GEOMETRIES, f"group must be one of {tuple(GEOMETRIES)}"),
            (self.omega in ("learned", "log", "zero"), "omega must be 'learned', 'log' or 'zero'"),
            (self.value in ("circular", "projection"), "value must be 'circular' or 'projection'"),
            (self.bound in ("norm", "elementwise"), "bound must be 'norm' or 'elementwise'"),
            (self.bound_scale == "one" or (self.bound_scale == "learned" and self.bound == "norm"),
             "bound_scale must be 'one', or 'learned' with bound='norm'"),
            (self.tau in ("learned", "fixed"), "tau must be 'learned' or 'fixed'"),
            (_finite(self.tau_init) and self.tau_init > 0, "tau_init must be a finite number > 0"),
            (_finite(self.radius_init) and self.radius_init > 0, "radius_init must be a finite number > 0"),
            (_finite(self.value_init), "value_init must be finite"),
            (_finite(self.omega_base) and self.omega_base > 1, "omega_base must be a finite number > 1"),
            (isinstance(self.clock, int) and self.clock >= 0, "clock must be an integer >= 0 (oscillators per head)"),
            (_finite(self.clock_init), "clock_init must be finite"),
            (isinstance(self.harmonics, int) and not isinstance(self.harmonics, bool) and self.harmonics >= 1,
             "harmonics must be an integer >= 1 (1: the plain Kuramoto term)"),
            (not self.cross_coupling or (self.value == "circular" and self.harmonics == 1),
             "cross_coupling mixes the averaged states: it needs value='circular' and harmonics=1"),
            (self.harmonics == 1 or self.value == "circular",
             "harmonics > 1 needs value='circular' (they weigh the averaged states' multiples)"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(f"{message}, got {_got(self, message)}")

    @classmethod
    def from_fields(cls, **fields_: Any) -> AttentionConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(fields_) - known)
        if unknown:
            raise TypeError(f"KuramotoAttention has no field {unknown[0]!r}; fields: {', '.join(sorted(known))}")
        return cls(**fields_)


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _got(cfg: AttentionConfig, message: str) -> str:
    return repr(getattr(cfg, message.split()[0]))


class KuramotoAttention(nn.Module):
    """The attention step on a batch of states: (B, T, n) phases on the torus, (B, T, n, 4) unit quaternions on SU(2)
    (``group`` says which manifold).

    ``KuramotoAttention(dim, heads, **fields)``: ``dim`` = n oscillators, ``heads`` H (contiguous groups of n/H), the
    keyword fields fill an ``AttentionConfig`` (or pass ``config=``). Modules a model shares between layers are passed
    in and borrowed, not registered here (their owner registers them once): ``shared_gates`` (one PhaseGates for every
    layer), ``gate_input`` / ``value_input`` (a map P of the lift for this layer's own gates / its value gate to read).
    """

    def __init__(self, dim: int, heads: int = 1, config: AttentionConfig | None = None, *,
                 shared_gates: PhaseGates | None = None, gate_input: nn.Linear | None = None,
                 value_input: nn.Linear | None = None, **fields_: Any) -> None:
        super().__init__()
        if config is not None and fields_:
            raise TypeError("pass either config= or keyword fields, not both")
        cfg = config if config is not None else AttentionConfig.from_fields(**fields_)
        for name, n in (("dim", dim), ("heads", heads)):
            if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                raise ValueError(f"{name} must be a positive integer, got {n!r}")
        if dim % heads:
            raise ValueError(f"dim={dim} must be divisible by heads={heads}")
        self.config, self.dim, self.heads, self.head_dim = cfg, dim, heads, dim // heads
        self.geometry = GEOMETRIES[cfg.group]()
        # fields whose other values need the torus's geometry: a scalar phase (lag, harmonics) or a rate that is a
        # number (log ω), not a rotation axis
        for name, plain in (("phase_lag", (False,)), ("cross_score", (False,)), ("cross_coupling", (False,)),
                            ("harmonics", (1,)), ("omega", ("learned", "zero"))):
            if getattr(cfg, name) not in plain and not isinstance(self.geometry, Torus):
                raise ValueError(f"{name}={getattr(cfg, name)!r} is defined on the torus only, got group={cfg.group!r}")
        lift_dim = self.geometry.components * dim

        # built in this order so that every config draws the same initial numbers from the same seed
        self.gates: PhaseGates | None = None
        if cfg.gates and shared_gates is None:
            self.gates = PhaseGates(lift_dim, dim, gate_input.out_features if gate_input is not None else 0)
            if gate_input is not None:
                self.gates.read_through(gate_input)
        self.shared_gates = Borrowed(shared_gates if cfg.gates else None)
        if cfg.omega == "zero":
            self.register_buffer("omega", self.geometry.zero_drift(dim), persistent=False)
        else:
            self.omega = nn.Parameter(self.geometry.init_drift(dim, heads, cfg.omega_base))
        self.lag = nn.Parameter(torch.zeros(dim)) if cfg.phase_lag else None
        self.query_mix = OscillatorMix(heads, self.head_dim) if cfg.cross_score else None
        self.coupling_mix = OscillatorMix(heads, self.head_dim) if cfg.cross_coupling else None
        self.clock = PositionalClock(heads, cfg.clock, cfg.omega_base, cfg.clock_init) if cfg.clock else None
        if cfg.omega == "log":
            for owner in (self, self.clock) if self.clock is not None else (self,):
                learn_in_log(owner, "omega")
        log_tau = torch.full((heads,), math.log(cfg.tau_init))
        if cfg.tau == "learned":
            self.log_tau = nn.Parameter(log_tau)
        else:
            self.register_buffer("log_tau", log_tau)
        self.value_source = Borrowed(value_input)
        self.value_gate = nn.Linear(value_input.out_features if value_input is not None else lift_dim, dim)  # signed
        nn.init.normal_(self.value_gate.weight, std=0.02)
        nn.init.constant_(self.value_gate.bias, cfg.value_init)
        self.value_proj = nn.Linear(lift_dim, dim * self.geometry.tangent, bias=False) \
            if cfg.value == "projection" else None
        self.bound = Bound(dim * self.geometry.tangent, cfg.bound, cfg.radius_init, cfg.bound_scale)
        self.harmonics = Harmonics(dim, cfg.harmonics) if cfg.harmonics > 1 else None

    # ----------------------------------------------------------------- parts
    @property
    def gate_module(self) -> PhaseGates | None:
        """The metric gates this layer applies (its own or the model's shared ones), or None (gates off)."""
        return self.gates if self.gates is not None else self.shared_gates.module

    def angles(self) -> list[nn.Parameter]:
        """The parameters that are angles (the optimizer's phase group; never decayed)."""
        own = [p for p in (raw(self, "omega"), self.lag) if isinstance(p, nn.Parameter)]
        return own + (self.clock.angles() if self.clock is not None else [])

    def drift_parameters(self) -> list[nn.Parameter]:
        """The parameters the optimiser steps for the drift rates ω, the state's and the clocks' (log ω for
        omega="log"; none for ω ≡ 0)."""
        rates = [raw(self, "omega")] + ([raw(self.clock, "omega")] if self.clock is not None else [])
        return [p for p in rates if isinstance(p, nn.Parameter)]

    def input_maps(self) -> list[nn.Linear]:
        """The borrowed maps P one forward pass applies, once per application (FLOP counting)."""
        gates = self.gate_module
        maps = [gates.source.module] if gates is not None and gates.source.module is not None else []
        if self.value_source.module is not None and not (maps and maps[0] is self.value_source.module):
            maps.append(self.value_source.module)  # one P φ(x) serves both when they read the same P
        return maps

    def _mapped(self, lifted: Tensor) -> Tensor | None:
        """P φ(x), once, when the metric gates and the value gate read the same P (ka-1m-tuned); else None."""
        gates, source = self.gate_module, self.value_source.module
        if source is not None and gates is not None and gates.source.module is source:
            return source(lifted)
        return None

    def _logits(self, lifted: Tensor, mapped: Tensor | None) -> Tensor | None:
        gates = self.gate_module
        return None if gates is None else gates(lifted, mapped)

    def value(self, lifted: Tensor, mapped: Tensor | None = None) -> Tensor:
        """v = W_v φ(x) + b (or W_v P φ(x) + b with ``value_input``): (B, T, n·c) -> (B, T, n)."""
        return self.value_gate(read(self.value_source, lifted, mapped))

    def _tau(self) -> Tensor:
        return self.log_tau.exp()

    # ----------------------------------------------------------------- paths
    def _fused(self, x: Tensor, cache: KVCache | None) -> Tensor:
        """The new states via one causal SDPA call. The lift is cast once to the matmul dtype for the gates, the
        values and the value gate; the increment reads it in the state's dtype."""
        geo = self.geometry
        lifted = geo.lift(x)
        lifted_mm = lifted.to(compute_dtype(lifted))
        offset = cache.length if cache is not None else 0
        pos = torch.arange(offset, offset + x.shape[1], device=x.device, dtype=x.dtype)
        mapped = self._mapped(lifted_mm)
        q, k = geo.query_key(x, pos, self.omega, self._logits(lifted_mm, mapped), self.heads, self._tau(),
                             lifted_mm.dtype, self.lag, self.query_mix)
        if self.clock is not None:  # 2c more query/key features per head
            cq, ck = self.clock.features(pos, self._tau(), lifted_mm.dtype)
            q = torch.cat((q, cq.expand(q.shape[0], -1, -1, -1)), dim=-1)
            k = torch.cat((k, ck.expand(k.shape[0], -1, -1, -1)), dim=-1)
        if self.value_proj is not None:
            v = split_heads(self.value_proj(lifted_mm), self.heads)
        else:
            v = geo.values(x, lifted_mm, self.heads)
            if self.harmonics is not None:  # ψ(mθ_u), m = 2..M, beside ψ(θ_u): one SDPA call averages them all
                v = torch.cat((v, self.harmonics.values(x, self.heads, v.dtype)), dim=-1)
        if cache is not None:
            k, v = cache.update(k, v)
        mean = causal_attention(q, k, v, scale=1.0 / math.sqrt(self.head_dim),
                                exclude_self=not self.config.self_coupling)
        if self.coupling_mix is not None:  # K G: linear, so it commutes with A
            mean = self.coupling_mix(mean)
        value = self.value(lifted_mm, mapped)
        if self.value_proj is not None:  # the ablation: A · W_v φ(x) is the increment itself
            return geo.move(x, geo.tangent_gate(value.to(x.dtype)) * merge_heads(mean).to(x.dtype), self.bound)
        if self.harmonics is not None:
            first, higher = mean[..., :2 * self.head_dim], mean[..., 2 * self.head_dim:]  # ψ(θ_u), then ψ(mθ_u)
            inc = geo.increment(x, lifted, first) + self.harmonics.increment(x, higher)
            return geo.move(x, geo.tangent_gate(value.to(x.dtype)) * inc, self.bound)
        return geo.step(x, lifted, mean, value, self.bound)

    def _reference(self, x: Tensor, lifted: Tensor) -> tuple[Tensor, Tensor]:
        """(increment, A) from the literal formulas (``naive.py``): the T × T kernel and the sum over u."""
        t_len = x.shape[1]
        mapped = self._mapped(lifted)
        logits = self._logits(lifted, mapped)
        if logits is None:
            ones = lifted.new_ones(x.shape[0], self.heads, t_len, self.head_dim)
            gq, gk = ones, ones
        else:
            gq, gk = metric_gates(logits, self.heads).unbind(0)
        pos = torch.arange(t_len, device=x.device, dtype=x.dtype)
        extra = None if self.clock is None else self.clock.score(pos[:, None] - pos[None, :]).to(x.dtype)
        kern = self.geometry.reference_kernel(x, self.omega, self.heads, self.lag,
                                              self.query_mix)
        s = naive.score(kern, gq, gk, self._tau().to(x.dtype), extra)
        attn = naive.coupling_matrix(s, self.config.self_coupling)
        if self.value_proj is not None:
            return merge_heads(attn @ split_heads(self.value_proj(lifted), self.heads)), attn
        if self.coupling_mix is not None:
            inc = self.coupling_mix.reference_increment(x, attn)
        else:
            inc = self.geometry.reference_increment(x, attn)
        if self.harmonics is not None:
            inc = inc + self.harmonics.reference_increment(x, attn)
        return inc, attn

    # ----------------------------------------------------------------- API
    def coupling(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The raw increment before value gate and bound, (B, T, n) on the torus, (B, T, n, tangent) on SU(2), and
        the coupling matrix A (B, H, T, T), from the reference path. With ``value="projection"`` (the ablation) the
        first output is A · W_v φ(x)."""
        self.geometry.check_state(x, self.dim)
        inc, attn = self._reference(x, self.geometry.lift(x))
        return self.geometry.tangent_view(inc), attn

    def forward(self, x: Tensor, *, return_attention: bool = False, path: Path = "fused",
                cache: KVCache | None = None) -> Tensor | tuple[Tensor, Tensor]:
        """States (B, T, n) -> new states; with ``return_attention`` also A (B, H, T, T) (from the reference path).
        ``cache`` (fused path only) holds the keys and values of earlier tokens."""
        self.geometry.check_state(x, self.dim)
        if path not in ("fused", "reference"):
            raise ValueError(f"path must be 'fused' or 'reference', got {path!r}")
        if return_attention or path == "reference":
            if cache is not None:
                raise ValueError("the reference path does not take a cache; use path='fused'")
            lifted = self.geometry.lift(x)
            inc, attn = self._reference(x, lifted)
            value = self.geometry.tangent_gate(self.value(lifted).to(x.dtype))
            new = self.geometry.move(x, value * inc, self.bound)
            return (new, attn) if return_attention else new
        return self._fused(x, cache)
