"""Kuramoto attention: one adaptive Kuramoto synchronisation step (paper §2, SPEC §2).

    g^q_t = ρ(W_q ψ(θ_t) + b_q),  g^k_t = ρ(W_k ψ(θ_t) + b_k)          gates (PhaseGates)
    s_{t,u} = τ/√d · Σ_j g^q_{t,j} g^k_{u,j} cos(θ_{t,j} − θ_{u,j} + ω_j (t − u) [+ β_j])
                       per head: j runs over the head's d = k/H coordinates, τ is the head's
    A_{t,·} = softmax_{u ≤ t} s_{t,·}                  (u < t with ``self_coupling=False``)
    G_{t,j} = Σ_u A_{t,u} e^{iθ_{u,j}},   a_{t,j} = Im(e^{−iθ_{t,j}} G_{t,j})
    θ_t ← θ_t + bound(v(θ_t) ⊙ a_t)                    [⊙ m_t with ``step_gate``]

Two paths with identical parameters compute the same thing:

* ``fused`` (default): with φ_t = θ_t + ω t the score is the dot product of
  q_t = τ g^q_t ⊙ ψ(φ_t) and k_u = g^k_u ⊙ ψ(φ_u) (cos(x−y) = cos x cos y + sin x sin y)
  and G is the attention output for values ψ(θ_u): one causal SDPA call, memory linear in T.
  When training in eager mode, the elementwise work around that call runs as hand-written
  forward/backward pairs (``fused.py``).
* ``reference``: the literal formulas above, with the T×T×k kernel and the sum
  Σ_u A_{t,u} sin(θ_u − θ_t) written out. For tests and diagnostics only.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from kuramoto_attention.layers.bound import Bound, BoundKind
from kuramoto_attention.ops.attention import (
    KVCache,
    causal_attention,
    causal_mask,
    compute_dtype,
    merge_heads,
    rotary_angles,
    split_heads,
)
from kuramoto_attention.ops.fused import fused_applies, gated_step, query_key
from kuramoto_attention.ops.torus import lift, tangent_projection

Path = Literal["fused", "reference"]


def _read_through(source: nn.Linear | None, psi: Tensor, p_psi: Tensor | None) -> Tensor:
    """What a gate reads: ψ(θ) itself (no ``source``), or P ψ(θ), computed here unless the caller passes it."""
    if source is None:
        if p_psi is not None:
            raise ValueError("got P ψ(θ) for a gate that reads ψ(θ) itself")
        return psi
    return source(psi) if p_psi is None else p_psi


class PhaseGates(nn.Module):
    """ρ(W ψ(θ)) for the query and key gates: softplus, then divide by the mean over
    each head's coordinates, so the gates are a positive diagonal metric of mean 1.

    One instance per layer (default) or one shared by all layers (``shared_gates``). With ``input_dim`` r and
    ``read_through(P)``, P (2k -> r) a map its owner holds (the feed-forward's shared P), the gates read P ψ(θ):
    W_q, W_k are r -> k.
    psi: (B, T, 2k)  ->  g^q, g^k stacked: (2, B, H, T, k/H) (one tensor, so that the query's and the key's
    features are gated in one product). ``q_scale`` (H,) multiplies g^q in the
    same pass (the fused path folds the temperature τ in here). ``p_psi``: P ψ(θ) (B, T, r), when the caller
    has computed it already (the layer's value gate reads the same P).
    """

    def __init__(self, dim: int, heads: int, input_dim: int = 0) -> None:
        super().__init__()
        self.heads = heads
        self._input: list[nn.Linear] = []  # a list: P is not this module's submodule
        self.proj = nn.Linear(input_dim or 2 * dim, 2 * dim)  # W_q and W_k stacked
        nn.init.normal_(self.proj.weight, std=0.02)
        nn.init.zeros_(self.proj.bias)

    def read_through(self, input: nn.Linear) -> None:
        """Read P ψ(θ) from now on (P built after these gates, so that building them draws the same numbers)."""
        if input.out_features != self.proj.in_features:
            raise ValueError(f"the gates read {self.proj.in_features} inputs, P gives {input.out_features}")
        self._input = [input]

    @property
    def source(self) -> nn.Linear | None:
        """The P these gates read through, or None (they read ψ(θ))."""
        return self._input[0] if self._input else None

    def logits(self, psi: Tensor, p_psi: Tensor | None = None) -> Tensor:
        """W ψ(θ) + b (or W P ψ(θ) + b), before ρ: (B, T, 2k). ``p_psi``: P ψ(θ), when the caller has it already."""
        return self.proj(_read_through(self.source, psi, p_psi))

    def forward(self, psi: Tensor, q_scale: Tensor | None = None, p_psi: Tensor | None = None) -> Tensor:
        b, t, _ = psi.shape
        g = F.softplus(self.logits(psi, p_psi)).view(b, t, 2, self.heads, -1)
        scale = g.mean(dim=-1, keepdim=True).reciprocal()  # (B, T, 2, H, 1): cheap
        if q_scale is not None:
            scale = scale * torch.stack((q_scale, torch.ones_like(q_scale))).view(2, self.heads, 1)
        g = (g * scale.to(g.dtype)).to(psi.dtype)  # in psi's dtype (autocast may have changed it)
        return g.permute(2, 0, 3, 1, 4)  # (2, B, H, T, k/H)


class PositionalClock(nn.Module):
    """``count`` clock oscillators per head whose phase is the position alone (outside the SPEC's s).

    They add Σ_c w_c cos(ω_c (t − u) + β_c) to each head's score (inside τ/√d, as the coupling term): a
    content-free positional preference that can peak at any offset, without spending state oscillators
    whose phase would have to be the same for every byte. As features: the query gets
    τ w_c (cos(ω_c t + β_c), sin(ω_c t + β_c)), the key (cos ω_c u, sin ω_c u), per head. ω: RoPE's
    geometric frequencies; β: spread over the circle (clocks start peaked at different offsets); w = ``init``
    (0: the score is the SPEC's at init). ω and β are angles (the phase learning rate). w is a (H, count) matrix
    (decayed, as every matrix), or with ``log_weight`` w = exp(log w), undecayed (as τ): AdamW moves a parameter by
    about lr per step, so a decayed w started at 4 stayed within 1.7-4.2 after 10M tokens in every head (the 8-clock
    variant's checkpoints), where log w moves w by a factor, and w ≥ 0 loses nothing (β can turn a clock by π).
    """

    def __init__(self, heads: int, count: int, base: float, init: float = 0.0, log_weight: bool = False) -> None:
        super().__init__()
        self.omega = nn.Parameter(rotary_angles(count, base).float().repeat(heads, 1))  # (H, c)
        self.lag = nn.Parameter(torch.empty(heads, count).uniform_(-torch.pi, torch.pi))
        if log_weight and init <= 0:
            raise ValueError(f"clock_log_weight needs clock_init > 0 (w = exp(log w)), got {init}")
        self.log_scale = log_weight
        if log_weight:
            self.log_weight = nn.Parameter(torch.full((heads, count), math.log(init)))
        else:
            self.weight = nn.Parameter(torch.full((heads, count), float(init)))

    def amplitude(self) -> Tensor:
        """w (H, c): the clocks' weights in the score."""
        return self.log_weight.exp() if self.log_scale else self.weight

    def features(self, pos: Tensor, tau: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """(query, key) features (1, H, T, 2c) for positions pos (T,); tau (H,) the heads' temperatures."""
        angle = self.omega[:, None, :] * pos[:, None].to(self.omega.dtype)  # (H, T, c): ω_c t
        q_angle = angle + self.lag[:, None, :]
        amp = (tau[:, None] * self.amplitude())[:, None, :]  # (H, 1, c)
        q = torch.cat((amp * torch.cos(q_angle), amp * torch.sin(q_angle)), dim=-1)
        k = torch.cat((torch.cos(angle), torch.sin(angle)), dim=-1)
        return q.unsqueeze(0).to(dtype), k.unsqueeze(0).to(dtype)

    def score(self, offset: Tensor) -> Tensor:
        """Σ_c w_c cos(ω_c Δ + β_c) for offsets Δ (T, T)  ->  (H, T, T) (the reference path's term)."""
        angle = self.omega[:, None, None, :] * offset[..., None].to(self.omega.dtype) + self.lag[:, None, None, :]
        return (self.amplitude()[:, None, None, :] * torch.cos(angle)).sum(-1)


class KuramotoAttention(nn.Module):
    """The attention step of SPEC §2 on phases θ of shape (B, T, dim).

    Fields (every variant of the SPEC is a switch of this one code path):
      gates:       True: learned metric gates; False: all gates 1 (bare cosine kernel).
      omega:       "learned" per-coordinate drift rates ω (init: RoPE's geometric
                   frequencies, per head) or "zero" (ω ≡ 0, no position information).
      value:       "circular": the raw-phase circular mean and tangent increment (the
                   Kuramoto step); "projection": ablation, values W_v ψ(θ_u) averaged by A.
      bound:       "norm" | "norm-soft" | "elementwise" | "none", with learned radius ``radius_init``
                   (default 10: smaller radii saturate and stall training, RESULTS.md).
      tau:         "learned" (per head, log-parametrised) or "fixed" at ``tau_init``.
      value_init:  initial bias of the signed value gate v(θ) (>0 starts synchronising).
      omega_base:  base of the geometric ω initialisation (as RoPE's base).
      self_coupling: True (the SPEC): A couples t to every u ≤ t. False: to u < t only (the first token
                   keeps its self-coupling, so its circular increment is 0). The self term adds nothing to a
                   (sin 0 = 0), so dropping it rescales a by 1/(1 − A_tt): the softmax then spends all
                   of its mass on earlier tokens instead of on "stay where you are" (a departure from
                   the SPEC, for the near no-op first layer; RESULTS.md).
      phase_lag:   False (the SPEC): no β. True: a learned per-coordinate phase lag β_j in the score (a
                   departure from the SPEC's s, as in the Kuramoto–Sakaguchi model, but only in the
                   selection: a stays Σ_u A_{t,u} sin(θ_u − θ_t)). Without β, a coordinate whose phase is
                   the same for all tokens scores Σ_j w_j cos(ω_j (t − u)) with w ≥ 0, which peaks at
                   u = t: no head can prefer u = t − 2 to u = t − 1 by position alone (RoPE can, since
                   its q and k phases differ); β_j moves that peak to ω_j (t − u) = −β_j.
      phase_lag_spread: β's initialisation, uniform in [−π·s, π·s) (0: β = 0, the SPEC's score at init).
      coupling_lag: False (the SPEC). True: a learned per-coordinate lag γ_j in the increment, the
                   Kuramoto–Sakaguchi coupling a = Σ_u A_{t,u} sin(θ_u − θ_t + γ_j) = cos γ · Im(conj z_t G) +
                   sin γ · Re(conj z_t G) (init 0: the SPEC's a). The radial part Re(conj z_t G) = Σ_u A cos(θ_u − θ_t)
                   is how well t agrees with what it attends to: γ lets a coordinate turn by that agreement,
                   not only toward the attended phases (a departure from the SPEC; k parameters per layer).
      value_lag:   False (the SPEC: raw phases as values). True: token u offers its phase shifted by a learned
                   function of its content, e^{i(θ_u + δ_u)} with δ_u = W_δ ψ(θ_u) (weights init 0.02, so ≈ 0
                   at init), and a = Σ_u A_{t,u} sin(θ_u + δ_u − θ_t): still a circular mean of unit phasors and
                   a tangent increment, but u can now write a phase other than its own into t, as a
                   transformer's W_v writes content other than the key's (2k² parameters per layer).
      content_lag: adds a query-dependent lag β(θ_t) = W_β ψ(θ_t) (weights init 0.02, so ≈ 0 at init): the
                   query looks for phases θ_u = θ_t + β(θ_t) rather than for its own, as a transformer's
                   W_q ≠ W_k lets a query seek content unlike its own (2k² + k parameters per layer).
      clock:       0 (the SPEC). c > 0: c ``PositionalClock`` oscillators per head add a content-free positional
                   term Σ_c w_c cos(ω_c (t − u) + β_c) to the score (outside the SPEC's s; 3c parameters per head).
      clock_init:  the clock weights' initial value w (0: the SPEC's score at init).
      clock_log_weight: False: w a decayed matrix. True: w = exp(log w), undecayed (``PositionalClock``).
      step_gate:   False (the SPEC). True: a learned step size per token and head, m_{t,h} = 2σ(W_m ψ(θ_t) + b_m)_h
                   ∈ (0, 2), multiplies the bounded increment (weights and bias init 0: m = 1, the SPEC's step).
                   Under the norm bound ‖v ⊙ a‖ ≫ 1 almost always (99.6% of increments on the bound in the
                   no-self-coupling variants), so every token moves by the same distance r and tanh leaves the
                   step size no gradient: m gives each token and head its own (2k·H + H parameters per layer).
      gate_input:  a map P (2k -> r) for this layer's own metric gates to read (``PhaseGates``), as value_input.
      value_input: a map P (2k -> r) for the value gate to read, v(θ) = W_v P ψ(θ) + b (W_v: r -> k) instead of
                   W_v ψ(θ) + b: the feed-forward's shared P (``KuramotoConfig.value_gate_input``), so the 2k² weights
                   of a layer's value gate become rk. Not registered here (its owner registers it), as shared_gates.
      fp32_attention: under bf16 autocast, keep the attention (q, k, values ψ(θ_u), G) in float32; the
                   gate matmuls stay in bf16 (and so do the projection ablation's values). a = Im(conj z_t G)
                   cancels the self term A_tt z_t exactly only in exact arithmetic; with G in bf16 its
                   rounding (~0.4% of |G|) is a large part of a where A_tt ≈ 1 (``tests/test_layer.py``).
      shared_gates: a ``PhaseGates`` module to use instead of this layer's own. It is not registered
                   as this layer's submodule (the owner, e.g. ``KuramotoLM``, registers it once), so a
                   standalone layer's ``parameters()``, ``state_dict()`` and ``.to()`` do not include it.
    """

    def __init__(
        self,
        dim: int,
        heads: int = 1,
        *,
        gates: bool = True,
        omega: Literal["learned", "zero"] = "learned",
        value: Literal["circular", "projection"] = "circular",
        bound: BoundKind = "norm",
        tau: Literal["learned", "fixed"] = "learned",
        tau_init: float = 1.0,
        radius_init: float = 10.0,
        value_init: float = 1.0,
        omega_base: float = 10000.0,
        self_coupling: bool = True,
        phase_lag: bool = False,
        phase_lag_spread: float = 0.0,
        content_lag: bool = False,
        coupling_lag: bool = False,
        value_lag: bool = False,
        clock: int = 0,
        clock_init: float = 0.0,
        clock_log_weight: bool = False,
        step_gate: bool = False,
        fp32_attention: bool = False,
        shared_gates: PhaseGates | None = None,
        gate_input: nn.Linear | None = None,
        value_input: nn.Linear | None = None,
    ) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim={dim} must be divisible by heads={heads}")
        for name, val, allowed in (
            ("omega", omega, ("learned", "zero")),
            ("value", value, ("circular", "projection")),
            ("tau", tau, ("learned", "fixed")),
        ):
            if val not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {val!r}")
        self.dim, self.heads, self.head_dim = dim, heads, dim // heads
        self.self_coupling, self.fp32_attention = self_coupling, fp32_attention

        self.gates: PhaseGates | None = None
        if gates and shared_gates is None:
            self.gates = PhaseGates(dim, heads, gate_input.out_features if gate_input is not None else 0)
            if gate_input is not None:
                self.gates.read_through(gate_input)
        self._shared_gates = [shared_gates] if gates and shared_gates is not None else []

        if omega == "learned":
            self.omega = nn.Parameter(rotary_angles(self.head_dim, omega_base).float().repeat(heads))
        else:
            self.register_buffer("omega", torch.zeros(dim), persistent=False)
        if not 0 <= phase_lag_spread <= 1:
            raise ValueError(f"phase_lag_spread must be in [0, 1], got {phase_lag_spread}")
        self.lag: nn.Parameter | None = None
        if phase_lag:
            spread = torch.pi * phase_lag_spread
            self.lag = nn.Parameter(torch.empty(dim).uniform_(-spread, spread) if spread else torch.zeros(dim))
        self.coupling_lag = nn.Parameter(torch.zeros(dim)) if coupling_lag else None
        self.value_lag: nn.Linear | None = None
        if value_lag:
            if value != "circular":
                raise ValueError("value_lag shifts the circular values; it needs value='circular'")
            self.value_lag = nn.Linear(2 * dim, dim, bias=False)
            nn.init.normal_(self.value_lag.weight, std=0.02)
        if clock < 0:
            raise ValueError(f"clock must be >= 0 (oscillators per head), got {clock}")
        self.clock = PositionalClock(heads, clock, omega_base, clock_init, clock_log_weight) if clock else None
        self.lag_proj: nn.Linear | None = None
        if content_lag:
            self.lag_proj = nn.Linear(2 * dim, dim, bias=False)
            nn.init.normal_(self.lag_proj.weight, std=0.02)

        log_tau = torch.full((heads,), math.log(tau_init))
        if tau == "learned":
            self.log_tau = nn.Parameter(log_tau)
        else:
            self.register_buffer("log_tau", log_tau)

        self._value_input = [value_input] if value_input is not None else []
        self.value_gate = nn.Linear(value_input.out_features if value_input is not None else 2 * dim, dim)  # signed
        nn.init.normal_(self.value_gate.weight, std=0.02)
        nn.init.constant_(self.value_gate.bias, value_init)
        self.value_proj: nn.Linear | None = None
        if value == "projection":
            self.value_proj = nn.Linear(2 * dim, dim, bias=False)
        self.bound = Bound(dim, bound, radius_init)
        self.step_gate: nn.Linear | None = None
        if step_gate:
            self.step_gate = nn.Linear(2 * dim, heads)
            nn.init.zeros_(self.step_gate.weight)
            nn.init.zeros_(self.step_gate.bias)

    # ----------------------------------------------------------------- pieces
    def _gate_module(self) -> PhaseGates | None:
        return self.gates if self.gates is not None else (self._shared_gates or [None])[0]

    def _gates(self, psi: Tensor) -> tuple[Tensor, Tensor]:
        """(B, T, 2k) -> g^q, g^k (B, H, T, k/H); all ones when gates are off."""
        module = self._gate_module()
        if module is None:
            ones = psi.new_ones(psi.shape[0], self.heads, psi.shape[1], self.head_dim)
            return ones, ones
        gq, gk = module(psi).unbind(0)
        return gq, gk

    @property
    def value_source(self) -> nn.Linear | None:
        """The P the value gate reads through, or None (it reads ψ(θ))."""
        return self._value_input[0] if self._value_input else None

    def _shared_read(self, psi: Tensor, module: PhaseGates | None) -> Tensor | None:
        """P ψ(θ) (B, T, r) when the metric gates ``module`` and the value gate read the same P (``ka-1m-tuned``):
        computed once here, not once by each. None otherwise (each reads its own input)."""
        source = self.value_source
        if source is not None and module is not None and module.source is source:
            return source(psi)
        return None

    def input_maps(self) -> list[nn.Linear]:
        """The maps P owned elsewhere that one forward pass applies, once per application (FLOP counting)."""
        module = self._gate_module()
        maps = [module.source] if module is not None and module.source is not None else []
        source = self.value_source
        if source is not None and not (maps and maps[0] is source):  # one P ψ(θ) serves both
            maps.append(source)
        return maps

    def _heads(self, x: Tensor) -> Tensor:
        """(B, T, k) -> (B, H, T, k/H)."""
        return split_heads(x, self.heads)

    def _values(self, psi: Tensor, theta: Tensor) -> Tensor:
        """What A averages, per head (B, H, T, 2k/H) in ψ's dtype: ψ(θ_u) = [cos θ_h, sin θ_h], or ψ(θ_u + δ_u)
        with ``value_lag``, or the projection ablation's W_v ψ(θ_u)."""
        if self.value_proj is not None:
            return self._heads(self.value_proj(psi))
        if self.value_lag is not None:
            psi = lift(theta + self.value_lag(psi).to(theta.dtype)).to(psi.dtype)
        b, t, _ = psi.shape
        return psi.view(b, t, 2, self.heads, self.head_dim).permute(0, 3, 1, 2, 4).reshape(b, self.heads, t, -1)

    def _omega(self) -> Tensor:
        return self.omega.view(self.heads, 1, self.head_dim)  # (H, 1, k/H)

    def _lag_flat(self, psi: Tensor, dtype: torch.dtype) -> Tensor | None:
        """The query's phase lag as (k,) or (B, T, k) (the layout of θ), or None."""
        lag = None if self.lag is None else self.lag.to(dtype)
        if self.lag_proj is not None:
            content = self.lag_proj(psi).to(dtype)
            lag = content if lag is None else content + lag
        return lag

    def _lag(self, psi: Tensor, dtype: torch.dtype) -> Tensor | None:
        """The same lag per head: (H, 1, k/H) or (B, H, T, k/H)."""
        lag = self._lag_flat(psi, dtype)
        if lag is None:
            return None
        return lag.view(self.heads, 1, self.head_dim) if lag.dim() == 1 else self._heads(lag)

    def _tau(self) -> Tensor:
        return self.log_tau.exp().view(self.heads, 1, 1)

    def value(self, psi: Tensor, p_psi: Tensor | None = None) -> Tensor:
        """v(θ) = W_v ψ(θ) + b, or W_v P ψ(θ) + b with ``value_input``: (B, T, 2k) -> (B, T, k).
        ``p_psi``: P ψ(θ), when the caller has it already."""
        return self.value_gate(_read_through(self.value_source, psi, p_psi))

    def _step(self, theta: Tensor, psi: Tensor, value: Tensor, a: Tensor) -> Tensor:
        """θ ← θ + bound(v(θ) ⊙ a) [⊙ m(θ)]: the bounded, value-gated move along the circle (in θ's dtype)."""
        x = value.to(theta.dtype) * a
        if self.step_gate is None:
            return self.bound.step(theta, x)
        size = 2 * torch.sigmoid(self.step_gate(psi).to(theta.dtype))  # m: (B, T, H)
        step = self.bound(x).unflatten(-1, (self.heads, self.head_dim)) * size.unsqueeze(-1)
        return theta + step.flatten(-2)

    # ----------------------------------------------------------------- paths
    def _fused(self, theta: Tensor, cache: KVCache | None) -> Tensor:
        """The new θ (B, T, k) via one causal SDPA call (SPEC §4.5).

        With φ_t = θ_t + ω t the score is the dot product of q_t = τ g^q_t ⊙ ψ(φ_t [+ β]) and
        k_u = g^k_u ⊙ ψ(φ_u), and G is the attention output for values ψ(θ_u). ψ(θ) is cast once
        to the matmul dtype (``psi_mm``) for the gates, the values and the value gate. In eager mode
        training, the elementwise work around the attention runs hand-fused (``fused.py``); under
        torch.compile, without autograd, and for the variants it does not cover, the plain expressions of
        ``_query_key_plain`` and ``_increment_plain``.
        """
        psi = lift(theta)
        psi_mm = psi.to(compute_dtype(psi))
        offset = cache.length if cache is not None else 0
        pos = torch.arange(offset, offset + theta.shape[1], device=theta.device, dtype=theta.dtype)
        att_dtype = psi.dtype if self.fp32_attention else psi_mm.dtype
        hand = fused_applies()
        module = self._gate_module()
        p_psi = self._shared_read(psi_mm, module)
        if hand and module is not None:
            lag = self._lag_flat(psi_mm, theta.dtype)
            q, k = query_key(theta, self.omega, pos, lag, module.logits(psi_mm, p_psi), self.log_tau.exp(), att_dtype)
        else:
            q, k = self._query_key_plain(theta, psi_mm, pos, att_dtype, p_psi)
        if self.clock is not None:  # 2c more query/key features per head (the values keep their width)
            cq, ck = self.clock.features(pos, self.log_tau.exp(), att_dtype)
            q = torch.cat((q, cq.expand(q.shape[0], -1, -1, -1)), dim=-1)
            k = torch.cat((k, ck.expand(k.shape[0], -1, -1, -1)), dim=-1)
        v = self._values(psi if self.fp32_attention else psi_mm, theta).to(att_dtype)
        if cache is not None:
            k, v = cache.update(k, v)
        no_autocast = torch.autocast(theta.device.type, enabled=False) if self.fp32_attention else nullcontext()
        with no_autocast:
            out = causal_attention(q, k, v, scale=1.0 / math.sqrt(self.head_dim), exclude_self=not self.self_coupling)
        value = self.value(psi_mm, p_psi)
        if (hand and self.value_proj is None and self.bound.kind == "norm" and self.coupling_lag is None
                and self.step_gate is None):
            return gated_step(theta, psi, out, value, self.bound.log_radius)
        return self._step(theta, psi_mm, value, self._increment_plain(theta, psi, out))

    def _query_key_plain(
        self, theta: Tensor, psi_mm: Tensor, pos: Tensor, att_dtype: torch.dtype, p_psi: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """q, k (B, H, T, 2d) as plain expressions: τ is folded into the query gate; ψ(φ) is computed in
        θ's dtype and cast once, so the gate products see one dtype. ``p_psi``: ``_shared_read``'s P ψ(θ)."""
        d = self.head_dim
        phi = self._heads(theta) + self._omega().to(theta.dtype) * pos[:, None]  # φ_t = θ_t + ω t
        trig = lift(phi).to(att_dtype)  # ψ(φ) per head: (B, H, T, 2d)
        lag = self._lag(psi_mm, phi.dtype)
        trig_q = trig if lag is None else lift(phi + lag).to(att_dtype)  # ψ(φ + β)
        tau = self.log_tau.exp()
        module = self._gate_module()
        if module is None:
            return trig_q * tau.to(trig.dtype).view(self.heads, 1, 1), trig
        g = module(psi_mm, q_scale=tau, p_psi=p_psi).to(att_dtype)  # (2, B, H, T, d): g^q, g^k
        trig_qk = trig if lag is None else torch.stack((trig_q, trig))  # (B, H, T, 2d) or (2, B, H, T, 2d)
        q, k = (trig_qk.unflatten(-1, (2, d)) * g.unsqueeze(-2)).flatten(-2).unbind(0)  # cos, sin halves alike
        return q, k

    def _increment_plain(self, theta: Tensor, psi: Tensor, out: Tensor) -> Tensor:
        """a (B, T, k) from the attention output (B, H, T, 2d): the tangent projection in θ's dtype,
        reading cos θ, sin θ from ψ(θ) in the (B, T, H, d) layout (or A·W_v ψ(θ) for the ablation)."""
        b, t, _ = theta.shape
        out = out.transpose(1, 2)  # (B, T, H, 2d)
        if self.value_proj is not None:
            return out.reshape(b, t, self.dim).to(theta.dtype)
        cos_t, sin_t = (c.view(b, t, self.heads, self.head_dim) for c in psi.chunk(2, dim=-1))
        re_g, im_g = out.to(theta.dtype).chunk(2, dim=-1)
        a = tangent_projection(cos_t, sin_t, re_g, im_g).reshape(b, t, self.dim)
        if self.coupling_lag is None:
            return a
        radial = torch.addcmul(cos_t * re_g, sin_t, im_g).reshape(b, t, self.dim)  # Re(conj z_t G)
        gamma = self.coupling_lag.to(theta.dtype)
        return torch.addcmul(torch.cos(gamma) * a, torch.sin(gamma), radial)

    def _scores_reference(self, theta: Tensor, psi: Tensor) -> Tensor:
        """s_{t,u} written out with the T×T×(k/H) cosine kernel; (B, H, T, T), causal −inf."""
        t_len = theta.shape[1]
        th = self._heads(theta)
        pos = torch.arange(t_len, device=theta.device, dtype=theta.dtype)
        offset = (pos[:, None] - pos[None, :])[..., None]  # (T, T, 1): t − u
        diff = th[:, :, :, None, :] - th[:, :, None, :, :]  # θ_t − θ_u: (B, H, T, T, k/H)
        drift = self._omega().to(theta.dtype)[:, None] * offset  # ω_j (t − u): (H, T, T, k/H)
        beta = self._lag(psi, theta.dtype)
        if beta is not None:
            drift = drift + beta.unsqueeze(-2)  # + β_j: (H, 1, 1, k/H) or (B, H, T, 1, k/H)
        gq, gk = self._gates(psi)
        kernel = gq[:, :, :, None, :] * gk[:, :, None, :, :] * torch.cos(diff + drift)
        coupling = kernel.sum(-1)
        if self.clock is not None:
            coupling = coupling + self.clock.score(offset[..., 0]).to(theta.dtype)
        s = self._tau().to(theta.dtype) / math.sqrt(self.head_dim) * coupling
        return s.masked_fill(~causal_mask(t_len, t_len, theta.device, not self.self_coupling), float("-inf"))

    def _coupling_reference(self, theta: Tensor, psi: Tensor) -> tuple[Tensor, Tensor]:
        """(a, A) from the literal sums: a_{t,j} = Σ_u A_{t,u} sin(θ_{u,j} [+ δ_{u,j}] − θ_{t,j} [+ γ_j])."""
        attn = torch.softmax(self._scores_reference(theta, psi), dim=-1)  # (B, H, T, T)
        if self.value_proj is not None:
            return merge_heads(attn @ self._values(psi, theta)), attn
        th = self._heads(theta)
        th_u = th if self.value_lag is None else th + self._heads(self.value_lag(psi).to(theta.dtype))  # θ_u + δ_u
        diff = th_u[:, :, None, :, :] - th[:, :, :, None, :]  # [t, u] = θ_u (+ δ_u) − θ_t
        if self.coupling_lag is not None:
            diff = diff + self.coupling_lag.view(self.heads, 1, 1, self.head_dim).to(theta.dtype)  # + γ_j
        sin_diff = torch.sin(diff)
        a = (attn[..., None] * sin_diff).sum(dim=-2)
        return merge_heads(a), attn

    # ----------------------------------------------------------------- API
    def coupling(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        """The raw increment a (B, T, k) of SPEC §2 (before value gate and bound) and the
        coupling matrix A (B, H, T, T), both from the reference path. With ``value="projection"``
        (the ablation) the first output is A·W_v ψ(θ) instead: there is no tangent increment."""
        return self._coupling_reference(theta, lift(theta))

    def forward(
        self,
        theta: Tensor,
        *,
        return_attention: bool = False,
        path: Path = "fused",
        cache: KVCache | None = None,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """θ (B, T, k) -> new θ (B, T, k); with ``return_attention`` also A (B, H, T, T)
        (computed on the reference path). ``cache`` (fused path only) holds earlier tokens."""
        if return_attention or path == "reference":
            if cache is not None:
                raise ValueError("the reference path does not take a cache; use path='fused'")
            psi = lift(theta)
            a, attn = self._coupling_reference(theta, psi)
            new = self._step(theta, psi, self.value(psi), a)
            return (new, attn) if return_attention else new
        if path != "fused":
            raise ValueError(f"path must be 'fused' or 'reference', got {path!r}")
        return self._fused(theta, cache)
