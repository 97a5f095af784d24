"""Kuramoto attention: one adaptive Kuramoto synchronisation step (the paper's section 2), on any compact group.

    g^q_t, g^k_t = ρ(W φ(x_t) + b)                               metric gates (gates.py)
    s_{t,u} = τ/√d Σ_j g^q_{t,j} g^k_{u,j} ⟨drift_t x_{t,j}, drift_u x_{u,j}⟩  [+ clocks]   per head, d = n/H
    A_{t,·} = softmax_{u ≤ t} s_{t,·}                            (u < t without self-coupling)
    G_{t,j} = Σ_u A_{t,u} x_{u,j}                                 the on-manifold mean's resultant
    x_t ← move(x_t, bound(v(x_t) ⊙ increment(x_t, G_t)))          v = W_v φ(x) + b, signed

The group (``groups/``) says what φ, the drift, the increment and the move are; on the torus this is the paper's
layer, written out literally in ``naive.py``. Two paths share the parameters: ``fused`` (default), one causal SDPA
call per layer with memory linear in T, and ``reference``, the same features with the T × T coupling matrix
materialised (``return_attention``, diagnostics).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import torch
from torch import Tensor, nn

from kuramoto_attention.layers.bound import Bound
from kuramoto_attention.layers.gates import Borrowed, PhaseGates, PositionalClock, read
from kuramoto_attention.layers.groups import GEOMETRIES, build_geometry
from kuramoto_attention.layers.groups.base import Geometry
from kuramoto_attention.layers.log_rate import learn_in_log, raw
from kuramoto_attention.ops.attention import (
    KVCache,
    causal_attention,
    compute_dtype,
    explicit_attention,
    merge_heads,
    split_heads,
)

Path = Literal["fused", "reference"]
GROUP_OPTION = {"group_option": True}  # a field only some groups define (``Geometry.options`` lists a group's)


@dataclass
class AttentionConfig:
    """The layer's options: the paper's fields, its ablations and the variants the presets and studies use
    (docs/choices.md says what each does and why its default is what it is)."""

    group: str = "torus"  # the compact group the states live on (groups.GEOMETRIES)
    gates: bool = True  # learned metric gates; False: every gate 1 (the bare kernel; ablation)
    # the drift rates ω: learned; learned as log ω, the clocks' too (log_rate.py); or ω ≡ 0 (no position; ablation)
    omega: Literal["learned", "log", "zero"] = field(default="learned", metadata={"group_option": ("log",)})
    # "circular": A averages the states themselves (the Kuramoto step); "projection": values W_v φ(x) (ablation)
    value: Literal["circular", "projection"] = "circular"
    # "norm": r·tanh(‖x‖)·x/‖x‖ over a token's increment, one learned r; "elementwise": r ⊙ tanh(x/r), r per
    # coordinate (bound.py)
    bound: Literal["norm", "elementwise"] = "norm"
    tau: Literal["learned", "fixed"] = "learned"  # the temperature τ per head (log-parametrised) or fixed at tau_init
    tau_init: float = 1.0
    radius_init: float = 10.0  # r at init
    value_init: float = 1.0  # the value gate's initial bias (> 0: every oscillator starts synchronising)
    omega_base: float = 10000.0  # base of ω's geometric initialisation (RoPE's)
    self_coupling: bool = True  # False: t couples to u < t only (token 0 keeps its own term)
    # the torus's own options (groups/torus.py): a learned phase lag β in the score; the query's and the step's
    # oscillators mixed across a head; Daido's harmonics up to this order (1: the paper's term)
    phase_lag: bool = field(default=False, metadata=GROUP_OPTION)
    cross_score: bool = field(default=False, metadata=GROUP_OPTION)
    cross_coupling: bool = field(default=False, metadata=GROUP_OPTION)
    harmonics: int = field(default=1, metadata=GROUP_OPTION)
    clock: int = 0  # positional clock oscillators per head (gates.py PositionalClock); 0: none
    clock_init: float = 0.0  # their weights' initial value (0: the paper's score at init)
    # the last this many heads couple each token to the successors of the tokens it attends to: key u comes with the
    # value x_{u+1} (needs self_coupling=False, so that u + 1 ≤ t); 0: none
    successor_heads: int = 0

    def __post_init__(self) -> None:
        checks = [
            (self.group in GEOMETRIES, f"group must be one of {tuple(GEOMETRIES)}"),
            (self.omega in ("learned", "log", "zero"), "omega must be 'learned', 'log' or 'zero'"),
            (self.value in ("circular", "projection"), "value must be 'circular' or 'projection'"),
            (self.bound in ("norm", "elementwise"), "bound must be 'norm' or 'elementwise'"),
            (self.tau in ("learned", "fixed"), "tau must be 'learned' or 'fixed'"),
            (_finite(self.tau_init) and self.tau_init > 0, "tau_init must be a finite number > 0"),
            (_finite(self.radius_init) and self.radius_init > 0, "radius_init must be a finite number > 0"),
            (_finite(self.value_init), "value_init must be finite"),
            (_finite(self.omega_base) and self.omega_base > 1, "omega_base must be a finite number > 1"),
            (_count(self.clock, 0), "clock must be an integer >= 0 (oscillators per head)"),
            (_finite(self.clock_init), "clock_init must be finite"),
            (_count(self.harmonics, 1), "harmonics must be an integer >= 1 (1: the plain Kuramoto term)"),
            (not self.cross_coupling or (self.value == "circular" and self.harmonics == 1),
             "cross_coupling mixes the averaged states: it needs value='circular' and harmonics=1"),
            (self.harmonics == 1 or self.value == "circular",
             "harmonics > 1 needs value='circular' (they weigh the averaged states' multiples)"),
            (_count(self.successor_heads, 0), "successor_heads must be an integer >= 0"),
            (self.successor_heads == 0 or not self.self_coupling,
             "successor_heads needs self_coupling=False (with the self term, token t would read its own successor)"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(f"{message}, got {_got(self, message)}")
        build_geometry(self.group).check(self)  # the options only some groups define

    @classmethod
    def from_fields(cls, **fields_: Any) -> AttentionConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(fields_) - known)
        if unknown:
            raise TypeError(f"KuramotoAttention has no field {unknown[0]!r}; fields: {', '.join(sorted(known))}")
        return cls(**fields_)


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _count(x: Any, low: int) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= low


def _got(cfg: AttentionConfig, message: str) -> str:
    return repr(getattr(cfg, message.split()[0]))


class KuramotoAttention(nn.Module):
    """The attention step on a batch of states: (B, T, n) phases on the torus, (B, T, n, c) unit vectors on the
    vector-valued groups (``group`` says which manifold).

    ``KuramotoAttention(dim, heads, **fields)``: ``dim`` = n oscillators, ``heads`` H (contiguous groups of n/H), the
    keyword fields fill an ``AttentionConfig`` (or pass ``config=``). ``geometry``: the group's geometry, built from
    ``config.group`` when not given (a model builds one and passes it to every layer). Modules a model shares between
    layers are passed in and borrowed, not registered here (their owner registers them once): ``shared_gates`` (one
    PhaseGates for every layer), ``gate_input`` / ``value_input`` (a map P of the lift for this layer's own gates / its
    value gate to read).
    """

    def __init__(self, dim: int, heads: int = 1, config: AttentionConfig | None = None, *,
                 geometry: Geometry | None = None, shared_gates: PhaseGates | None = None,
                 gate_input: nn.Linear | None = None, value_input: nn.Linear | None = None, **fields_: Any) -> None:
        super().__init__()
        if config is not None and fields_:
            raise TypeError("pass either config= or keyword fields, not both")
        cfg = config if config is not None else AttentionConfig.from_fields(**fields_)
        for name, n in (("dim", dim), ("heads", heads)):
            if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                raise ValueError(f"{name} must be a positive integer, got {n!r}")
        if dim % heads:
            raise ValueError(f"dim={dim} must be divisible by heads={heads}")
        if cfg.successor_heads > heads:
            raise ValueError(f"successor_heads={cfg.successor_heads} exceeds heads={heads}")
        geo = build_geometry(cfg.group) if geometry is None else geometry
        if geo.name != cfg.group:
            raise ValueError(f"the geometry given is the {geo.name} group's, the config asks for {cfg.group!r}")
        geo.check(cfg)
        self.config, self.dim, self.heads, self.head_dim, self.geometry = cfg, dim, heads, dim // heads, geo
        lift_dim = geo.components * dim

        # built in this order so that every config draws the same initial numbers from the same seed
        self.gates: PhaseGates | None = None
        if cfg.gates and shared_gates is None:
            width = gate_input.out_features if gate_input is not None else lift_dim
            self.gates = PhaseGates(PhaseGates.projection(width, dim), gate_input)
        self.shared_gates = Borrowed(shared_gates if cfg.gates else None)
        drift = geo.init_drift(dim, heads, cfg.omega_base)
        if cfg.omega == "zero":
            self.register_buffer("omega", torch.zeros_like(drift), persistent=False)
        else:
            self.omega = nn.Parameter(drift)
        self.extras = geo.extras(cfg, dim, heads)  # the group's own parameters of this layer, if any
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
        self.value_proj = nn.Linear(lift_dim, dim * geo.tangent, bias=False) if cfg.value == "projection" else None
        self.bound = Bound(dim * geo.tangent, cfg.bound, cfg.radius_init)

    # ----------------------------------------------------------------- parts
    @property
    def gate_module(self) -> PhaseGates | None:
        """The metric gates this layer applies (its own or the model's shared ones), or None (gates off)."""
        return self.gates if self.gates is not None else self.shared_gates.module

    def angles(self) -> list[nn.Parameter]:
        """The parameters that are angles (the optimizer's phase group; never decayed)."""
        own = [p for p in (raw(self, "omega"),) if isinstance(p, nn.Parameter)]
        extra = self.extras.angles() if self.extras is not None and hasattr(self.extras, "angles") else []
        return own + extra + (self.clock.angles() if self.clock is not None else [])

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

    def value(self, lifted: Tensor, mapped: Tensor | None = None) -> Tensor:
        """v = W_v φ(x) + b (or W_v P φ(x) + b with ``value_input``): (B, T, n·c) -> (B, T, n)."""
        return self.value_gate(read(self.value_source, lifted, mapped))

    def _tau(self) -> Tensor:
        return self.log_tau.exp()

    # ----------------------------------------------------------------- the step
    def _inputs(self, x: Tensor, offset: int) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor | None]:
        """(lift, q, k, v, lift in the matmul dtype, P φ(x) or None) for states x at positions offset … offset + T − 1.
        The lift is cast once to the matmul dtype for the gates, the values and the value gate; a group whose step reads
        it (the torus's increment) gets it in the state's dtype, the others the cast one."""
        geo = self.geometry
        if geo.steps_read_lift:  # the step reads φ(x) in the state's dtype: lift, then cast once
            lifted = geo.lift(x)
            lifted_mm = lifted.to(compute_dtype(lifted))
        else:  # the lift in the matmuls' dtype in one pass (what the step is given of it it does not read)
            lifted = lifted_mm = geo.lift_as(x, compute_dtype(x))
        pos = torch.arange(offset, offset + x.shape[1], device=x.device, dtype=x.dtype)
        mapped = self._mapped(lifted_mm)
        gates = self.gate_module
        logits = None if gates is None else gates(lifted_mm, mapped)
        # the clocks' query/key features (2c more per head) go after the state's
        clock = None if self.clock is None else self.clock.features(pos, self._tau(), lifted_mm.dtype)
        q, k = geo.gated_query_key(x, pos, self.omega, logits, self.heads, self._tau(), lifted_mm.dtype, self.extras,
                                   clock)
        if self.value_proj is not None:
            v = split_heads(self.value_proj(lifted_mm), self.heads)
        else:
            v = geo.values(x, lifted_mm, self.heads, self.extras)
        return lifted, q, k, v, lifted_mm, mapped

    def _move(self, x: Tensor, lifted: Tensor, mean: Tensor, value: Tensor) -> Tensor:
        geo = self.geometry
        if self.value_proj is not None:  # the ablation: A · W_v φ(x) is the increment itself
            return self.bound.move(geo, x, geo.tangent_gate(value.to(x.dtype)) * merge_heads(mean).to(x.dtype))
        return self.bound.gated_move(geo, x, lifted, mean, value, self.extras)

    def _fused(self, x: Tensor, cache: KVCache | None) -> Tensor:
        lifted, q, k, v, lifted_mm, mapped = self._inputs(x, cache.length if cache is not None else 0)
        if cache is not None:
            k, v = cache.update(k, v)
        mean = causal_attention(q, k, v, scale=1.0 / math.sqrt(self.head_dim),
                                exclude_self=not self.config.self_coupling, successor_heads=self.config.successor_heads)
        return self._move(x, lifted, mean, self.value(lifted_mm, mapped))

    def _explicit(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """(new states, lift, the attention output G, A (B, H, T, T)) with A materialised."""
        lifted, q, k, v, lifted_mm, mapped = self._inputs(x, 0)
        mean, attn = explicit_attention(q, k, v, scale=1.0 / math.sqrt(self.head_dim),
                                        exclude_self=not self.config.self_coupling,
                                        successor_heads=self.config.successor_heads)
        return self._move(x, lifted, mean, self.value(lifted_mm, mapped)), lifted, mean, attn

    # ----------------------------------------------------------------- API
    def check_state(self, x: Tensor) -> None:
        """Raise ValueError naming the problem when x is not a batch of this layer's states: its shape, a dtype other
        than the layer's (outside autocast, which runs a float32 layer on float32 states), a non-finite value."""
        self.geometry.check_state(x, self.dim)
        own = self.value_gate.weight.dtype
        if x.dtype != own:
            raise ValueError(f"states of dtype {x.dtype} given to a {own} layer: convert them with .to({own}) "
                             f"(or the layer with .to({x.dtype}))")
        if not torch.compiler.is_compiling() and not bool(torch.isfinite(x).all()):
            raise ValueError("the states hold NaN or inf: every later position would read them (0 × NaN is NaN in the "
                             "attention's average); check what produced them")

    def coupling(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The raw increment before value gate and bound, (B, T, n) on the torus, (B, T, n, tangent) otherwise, and the
        coupling matrix A (B, H, T, T). With ``value="projection"`` (the ablation) the first output is A · W_v φ(x)."""
        self.check_state(x)
        _, lifted, mean, attn = self._explicit(x)
        if self.value_proj is not None:
            return self.geometry.tangent_view(merge_heads(mean).to(x.dtype)), attn
        return self.geometry.tangent_view(self.geometry.increment(x, lifted, mean, self.extras)), attn

    def forward(self, x: Tensor, *, return_attention: bool = False, path: Path = "fused",
                cache: KVCache | None = None, check: bool = True) -> Tensor | tuple[Tensor, Tensor]:
        """States (B, T, …) -> new states; with ``return_attention`` also A (B, H, T, T) (the reference path).
        ``cache`` (fused path only) holds the keys and values of earlier tokens. ``check=False`` skips the input
        checks (a model passing its own states)."""
        if check:
            self.check_state(x)
        if path not in ("fused", "reference"):
            raise ValueError(f"path must be 'fused' or 'reference', got {path!r}")
        if (return_attention or path == "reference") and cache is not None:
            raise ValueError("the reference path does not take a cache; use path='fused'")
        if x.shape[0] == 0 or x.shape[1] == 0:  # nothing to attend to: no step
            attn = x.new_zeros(x.shape[0], self.heads, x.shape[1], x.shape[1])
            return (x.clone(), attn) if return_attention else x.clone()
        if return_attention or path == "reference":
            new, _, _, attn = self._explicit(x)
            return (new, attn) if return_attention else new
        return self._fused(x, cache)
