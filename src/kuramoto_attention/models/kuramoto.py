"""The phase-state language model (paper §2–3, SPEC §3).

    θ^0_t = E[x_t]                                   byte → learned phases in T^k
    θ ← θ + bound(v(θ) ⊙ a(θ))                       KuramotoAttention (layer.py)
    θ ← θ + bound(SwiGLU(input(θ)))                  PhaseFeedForward (or bound(Im(conj(z) ⊙ y)), y = SwiGLU;
                                                     input ψ(θ), [P ψ(θ): ``ff_proj``], or θ)
    logits_c = Σ_j [g_j] α_{c,j} cos(θ_j − μ_{c,j}) + b_c  phase-alignment readout (g: ``readout_gain``;
                                                     [+ Σ_j β_{c,j} cos(2θ_j − ν_{c,j})]: ``readout_harmonics=2``;
                                                     μ_c = E_c, α = 1: ``readout_tied``)

No normalisation layers: the state lives on a compact manifold. Choices the paper leaves
open are fields of ``KuramotoConfig`` (documented there and in the README).
"""

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from kuramoto_attention.layers.bound import Bound, BoundKind
from kuramoto_attention.layers.kuramoto_attention import KuramotoAttention, PhaseGates
from kuramoto_attention.layers.swiglu import SwiGLU
from kuramoto_attention.models.lm import VOCAB_SIZE, ByteLM
from kuramoto_attention.ops.attention import KVCache, compute_dtype
from kuramoto_attention.ops.torus import lift, tangent_projection, wrap


@dataclass
class KuramotoConfig:
    dim: int = 128  # k, oscillators per token
    depth: int = 4
    heads: int = 4
    ff_hidden: int = 200
    # What the feed-forward step reads: "lift" ψ(θ) (default), "angles" θ (the paper's block), "none".
    # At 10M tokens the lift beat raw angles by 0.098 BPC at the same parameter count (RESULTS.md).
    ff: Literal["angles", "lift", "none"] = "lift"
    # ff="angles" only: True feeds the principal representative wrap(θ) ∈ [-π, π), False the raw θ (the
    # paper's reading). Raw θ trained far better in screen round 2 (RESULTS.md): wrap(θ) jumps by 2π where
    # a phase crosses ±π, so the feed-forward sees a discontinuous input.
    ff_wrap: bool = False
    # What the feed-forward emits: "increment", a per-coordinate angle increment (the SPEC's block), or
    # "tangent", a phasor y_j ∈ R² per coordinate that the oscillator moves toward along its tangent,
    # Im(conj(e^{iθ_j}) y_j) (a forcing field, the attention step's own form; 2k outputs, not k).
    ff_output: Literal["increment", "tangent"] = "increment"
    # ff="lift" only: "none", the SwiGLU reads ψ(θ) (2k inputs, so each hidden unit costs 5k weights against the
    # transformer's 3d); "layer" / "shared": it reads P ψ(θ), P a (2k -> r) map per layer / one for all layers, so a
    # hidden unit costs 2r + k and the same parameters buy more of them (a rank-r factorisation of its input matrices).
    # A shared P that a gate reads (below) may stay beside another ff, which then reads its own input, never P
    ff_proj: Literal["none", "layer", "shared"] = "none"
    ff_proj_dim: int = 0  # r, P's output width (0: k)
    # What the attention's value gate reads: "lift", ψ(θ) (the SPEC's v(θ) = W_v ψ(θ) + b, 2k² weights per layer, a
    # fifth of ka-1m's parameters at k = 160), or "ff-proj", the feed-forward's shared P ψ(θ) (needs ff_proj="shared";
    # rk weights per layer): under the norm bound the gate only sets the step's direction
    value_gate_input: Literal["lift", "ff-proj"] = "lift"
    # The same for the metric gates (W_q, W_k: 4k² weights per layer, or once with shared_gates): "ff-proj" reads P ψ(θ)
    gates_input: Literal["lift", "ff-proj"] = "lift"
    shared_gates: bool = False  # one W_q, W_k pair for all layers
    gates: bool = True
    omega: Literal["learned", "zero"] = "learned"
    value: Literal["circular", "projection"] = "circular"
    bound: BoundKind = "norm"
    tau: Literal["learned", "fixed"] = "learned"
    tau_init: float = 1.0
    # Radius 10 (norm over all k coordinates): at radius 1, 97-100% of increments sat on the bound and
    # training stalled; round 1 of the screen (RESULTS.md) measured 3 and 10 far better.
    attn_radius_init: float = 10.0
    ff_radius_init: float = 10.0
    value_init: float = 1.0
    omega_base: float = 10000.0
    self_coupling: bool = True  # False: attention couples t to earlier tokens only (not the SPEC's u ≤ t)
    # A learned phase lag β_j in the score, cos(θ_t − θ_u + ω_j (t − u) + β_j) (layer.py): outside the
    # SPEC's s; lets a head prefer an earlier offset by position alone. Spread: β's uniform init range / π.
    phase_lag: bool = False
    phase_lag_spread: float = 0.0
    content_lag: bool = False  # + a query-dependent lag W_β ψ(θ_t) (layer.py); 2k² + k parameters per layer
    # A learned lag γ_j in the increment, Σ_u A sin(θ_u − θ_t + γ_j) (Kuramoto–Sakaguchi; layer.py): outside the SPEC
    coupling_lag: bool = False
    # Values e^{i(θ_u + δ_u)}, δ_u = W_δ ψ(θ_u): u writes a phase other than its own (layer.py); 2k² per layer
    value_lag: bool = False
    # Clock oscillators per head: a content-free positional score term Σ_c w_c cos(ω_c (t − u) + β_c), outside the
    # SPEC's s (layer.py ``PositionalClock``); 0 = none
    clock: int = 0
    # The clock weights' initial value. At 0 they grew only to ~0.4-1.3 in 10M tokens (decayed, moved at about lr per
    # step): under τ/√d that is under a logit of positional preference, against ~√d for a token matching itself
    clock_init: float = 0.0
    # True: the clock weights as w = exp(log w), undecayed (as τ). The decayed w stayed near its start (4 ->
    # 1.7-4.2 in every head after 10M tokens); log w moves it by a factor. Needs clock_init > 0
    clock_log_weight: bool = False
    # A learned step size per token and head, 2σ(W_m ψ(θ) + b) ∈ (0, 2) (1 at init), on the attention's bounded
    # increment: under the norm bound almost every token moves by exactly r (layer.py); outside the SPEC
    step_gate: bool = False
    fp32_attention: bool = False  # under bf16 autocast, the attention itself in float32 (layer.py)
    # A learned gain on the readout's input, undecayed (as the transformer's final RMSNorm gain): "none" (the
    # paper's readout), "scalar" (one logit scale), "oscillator" (g_j per oscillator, on both cos θ_j and sin θ_j,
    # so the readout stays Σ_j g_j α_{c,j} cos(θ_j − μ_{c,j})). The prototypes are decayed; |ψ| is fixed.
    readout_gain: Literal["none", "scalar", "oscillator"] = "none"
    readout_gain_init: float = 1.0  # the gain's initial value (AdamW moves it by about lr per step)
    # Harmonics of each phase the readout aligns with prototypes: 1 (the paper's ψ(θ)) or 2, adding cos 2θ_j and
    # sin 2θ_j (2k more inputs per byte): a tuning curve per oscillator that can be narrower than one cosine, for
    # a state that has no amplitude to say how sure it is (the remaining gap is on predictable bytes: RESULTS.md)
    readout_harmonics: int = 1
    # True: the prototypes are the byte embeddings' own phases, μ_c = E_c, with one amplitude per oscillator (the
    # readout gain, so ``readout_gain`` must be "scalar" or "oscillator"): logits_c = Σ_j g_j cos(θ_j − E_{c,j}) + b_c,
    # the next byte is the one whose phases the state has synchronised to (as the transformer's tied output head; it
    # frees the 2k·256 prototype weights for the feed-forward). Start the gain small: at g the current byte scores g·k
    readout_tied: bool = False
    init_std: float = 0.02  # feed-forward, value-projection and readout weights (gates, value gate: 0.02)
    # Phase embedding drawn uniformly from [−π·s, π·s): 1 spreads every byte over the whole circle (tokens
    # start near-orthogonal in ψ, so the self pair dominates every score); small s starts all bytes near one
    # phase (nearly uniform attention), as a transformer's small embedding init does.
    embed_spread: float = 1.0
    context: int = 256  # training context; the model itself has no maximum length

    def layer_fields(self) -> dict:
        return dict(
            gates=self.gates, omega=self.omega, value=self.value, bound=self.bound,
            tau=self.tau, tau_init=self.tau_init, radius_init=self.attn_radius_init,
            value_init=self.value_init, omega_base=self.omega_base, self_coupling=self.self_coupling,
            phase_lag=self.phase_lag, phase_lag_spread=self.phase_lag_spread,
            content_lag=self.content_lag, coupling_lag=self.coupling_lag, value_lag=self.value_lag, clock=self.clock,
            clock_init=self.clock_init, clock_log_weight=self.clock_log_weight, step_gate=self.step_gate,
            fp32_attention=self.fp32_attention,
        )


def input_projection(cfg: KuramotoConfig) -> nn.Linear:
    """P (2k -> r, no bias) for ``ff_proj``, started so that each output of P ψ(θ) has unit variance."""
    proj = nn.Linear(2 * cfg.dim, cfg.ff_proj_dim or cfg.dim, bias=False)
    nn.init.normal_(proj.weight, std=cfg.dim**-0.5)  # Var(row · ψ) = 2k · σ² · 1/2 = 1
    return proj


class PhaseFeedForward(nn.Module):
    """θ ← θ + bound(SwiGLU(x)), x = ψ(θ) ("lift", default) or θ / wrap(θ) ("angles", the paper's).

    The one component not built from the geometry: on raw angles its output depends on
    the representative of θ (the one the residual updates carried it to); ``ff_wrap``
    fixes it to [-π, π) at the price of a jump at ±π; "lift" makes it periodic.
    """

    def __init__(self, cfg: KuramotoConfig, shared_proj: nn.Linear | None = None) -> None:
        super().__init__()
        if cfg.ff_output not in ("increment", "tangent"):
            raise ValueError(f"ff_output must be 'increment' or 'tangent', got {cfg.ff_output!r}")
        self.mode, self.wrap, self.tangent = cfg.ff, cfg.ff_wrap, cfg.ff_output == "tangent"
        # P ψ(θ): this layer's own, or the model's shared one (registered by its owner, as shared gates are; the
        # list keeps it out of this module's submodules)
        self.proj = input_projection(cfg) if cfg.ff_proj == "layer" else None
        proj = self.proj or shared_proj
        self._input_proj = [proj]
        dim_in = proj.out_features if proj is not None else 2 * cfg.dim if cfg.ff == "lift" else cfg.dim
        self.mlp = SwiGLU(dim_in, cfg.ff_hidden, 2 * cfg.dim if self.tangent else cfg.dim)
        self.bound = Bound(cfg.dim, cfg.bound, cfg.ff_radius_init)

    def forward(self, theta: Tensor) -> Tensor:
        return self.bound.step(theta, self._update(theta))

    def increment(self, theta: Tensor) -> Tensor:
        """bound(update): the step this block adds to θ (for diagnostics)."""
        return self.bound(self._update(theta))

    def _update(self, theta: Tensor) -> Tensor:
        """The unbounded update (B, T, k): SwiGLU(x), or its tangent component."""
        psi = lift(theta) if self.mode == "lift" or self.tangent else None
        if self.mode == "lift":
            x = psi
        else:
            x = wrap(theta) if self.wrap else theta
        x = x.to(compute_dtype(x))  # cast once for both input matmuls
        proj = self._input_proj[0]
        y = self.mlp(x if proj is None else proj(x))
        if self.tangent:  # move toward the phasor field y along the tangent (same form as the attention step)
            cos_t, sin_t = psi.chunk(2, dim=-1)
            re_y, im_y = y.to(theta.dtype).chunk(2, dim=-1)
            y = tangent_projection(cos_t, sin_t, re_y, im_y)
        return y


class KuramotoBlock(nn.Module):
    def __init__(self, cfg: KuramotoConfig, shared_gates: PhaseGates | None,
                 shared_ff_proj: nn.Linear | None = None) -> None:
        super().__init__()
        value_input = shared_ff_proj if cfg.value_gate_input == "ff-proj" else None
        gate_input = shared_ff_proj if cfg.gates_input == "ff-proj" else None
        self.attn = KuramotoAttention(cfg.dim, cfg.heads, shared_gates=shared_gates, gate_input=gate_input,
                                      value_input=value_input, **cfg.layer_fields())
        self.ff = PhaseFeedForward(cfg, shared_ff_proj if cfg.ff == "lift" else None) if cfg.ff != "none" else None

    def forward(self, theta: Tensor, cache: KVCache | None = None, skip: frozenset[str] = frozenset()) -> Tensor:
        """``skip`` ("attn", "ff"): steps replaced by the identity (the knockout diagnostic)."""
        if "attn" not in skip:
            theta = self.attn(theta, cache=cache)
        return self.ff(theta) if self.ff is not None and "ff" not in skip else theta


class KuramotoLM(ByteLM):
    """Byte-level LM whose hidden state is a bank of phase oscillators."""

    family = "kuramoto"

    def __init__(self, config: KuramotoConfig) -> None:
        super().__init__()
        if config.ff not in ("angles", "lift", "none"):
            raise ValueError(f"ff must be 'angles', 'lift' or 'none', got {config.ff!r}")
        self.config = config
        if not 0 < config.embed_spread <= 1:
            raise ValueError(f"embed_spread must be in (0, 1], got {config.embed_spread}")
        spread = torch.pi * config.embed_spread
        self.phase_embedding = nn.Parameter(torch.empty(VOCAB_SIZE, config.dim).uniform_(-spread, spread))
        if config.ff_proj not in ("none", "layer", "shared"):
            raise ValueError(f"ff_proj must be 'none', 'layer' or 'shared', got {config.ff_proj!r}")
        gates_read_p = config.value_gate_input == "ff-proj" or (config.gates and config.gates_input == "ff-proj")
        # a shared P the gates read stays when the feed-forward reads something else (or is gone: the ablations)
        if config.ff_proj != "none" and config.ff != "lift" and not (config.ff_proj == "shared" and gates_read_p):
            raise ValueError(f"ff_proj projects the lift ψ(θ): it needs ff='lift' (or, shared, a gate that reads it), "
                             f"got ff={config.ff!r}")
        if config.ff_proj_dim < 0 or (config.ff_proj_dim and config.ff_proj == "none"):
            raise ValueError(f"ff_proj_dim must be >= 0 (0: k) and needs ff_proj set, got {config.ff_proj_dim} "
                             f"with ff_proj={config.ff_proj!r}")
        for name in ("value_gate_input", "gates_input"):
            where = getattr(config, name)
            if where not in ("lift", "ff-proj"):
                raise ValueError(f"{name} must be 'lift' or 'ff-proj', got {where!r}")
            if where == "ff-proj" and config.ff_proj != "shared":
                raise ValueError(f"{name}='ff-proj' reads the feed-forward's shared P: it needs ff_proj='shared', "
                                 f"got ff_proj={config.ff_proj!r}")
        # the shared gates are built before P, as before P could feed them, so that every config draws the same init
        metric_read_p = config.gates_input == "ff-proj"
        gates_in = (config.ff_proj_dim or config.dim) if metric_read_p else 0  # 0: ψ(θ)
        self.shared_gates = (PhaseGates(config.dim, config.heads, gates_in) if config.shared_gates and config.gates
                             else None)
        self.shared_ff_proj = input_projection(config) if config.ff_proj == "shared" else None
        if self.shared_gates is not None and self.shared_ff_proj is not None and metric_read_p:
            self.shared_gates.read_through(self.shared_ff_proj)
        self.blocks = nn.ModuleList(KuramotoBlock(config, self.shared_gates, self.shared_ff_proj)
                                    for _ in range(config.depth))
        # Readout of ψ(θ): row c is (α_c cos μ_c, α_c sin μ_c), i.e. prototype phases μ_c
        # with per-coordinate amplitudes α_c; a linear map of the lift is the same family.
        if config.readout_harmonics not in (1, 2):
            raise ValueError(f"readout_harmonics must be 1 or 2, got {config.readout_harmonics}")
        gains = {"none": 0, "scalar": 1, "oscillator": config.dim}
        if config.readout_gain not in gains:
            raise ValueError(f"readout_gain must be one of {tuple(gains)}, got {config.readout_gain!r}")
        self.prototypes: nn.Linear | None = None
        if config.readout_tied:
            if config.readout_gain == "none" or config.readout_harmonics != 1:
                raise ValueError("readout_tied needs readout_gain='scalar' or 'oscillator' (its amplitudes) and "
                                 f"readout_harmonics=1, got {config.readout_gain!r} and {config.readout_harmonics}")
            self.readout_bias = nn.Parameter(torch.zeros(VOCAB_SIZE))
        else:
            self.prototypes = nn.Linear(2 * config.dim * config.readout_harmonics, VOCAB_SIZE)
        self.readout_gain = (nn.Parameter(torch.full((gains[config.readout_gain],), config.readout_gain_init))
                            if gains[config.readout_gain] else None)
        self._init_weights()

    def _init_weights(self) -> None:
        std = self.config.init_std
        for block in self.blocks:
            if block.ff is not None:
                for lin in (block.ff.mlp.w_gate, block.ff.mlp.w_up):
                    nn.init.normal_(lin.weight, std=std)
                nn.init.normal_(block.ff.mlp.w_out.weight, std=std / (2 * self.config.depth) ** 0.5)
            if block.attn.value_proj is not None:
                nn.init.normal_(block.attn.value_proj.weight, std=std)
        if self.prototypes is not None:
            nn.init.normal_(self.prototypes.weight, std=std)
            nn.init.zeros_(self.prototypes.bias)

    def no_weight_decay(self) -> set[str]:
        # angles: shrinking them toward 0 has no meaning on T^k; log-weights: decay would pull w toward 1
        return {"phase_embedding"} | {n for n, _ in self.named_parameters() if n.endswith(".clock.log_weight")}

    def phase_parameter_names(self) -> set[str]:
        angles = (".omega", ".lag", ".coupling_lag")  # learned angles: the phase learning rate
        return {"phase_embedding"} | {n for n, _ in self.named_parameters() if n.endswith(angles)}

    def embed(self, idx: Tensor) -> Tensor:
        return F.embedding(idx, self.phase_embedding)  # = phase_embedding[idx]; its backward is 2× faster on CPU

    def readout(self, theta: Tensor) -> Tensor:
        psi = lift(theta)
        if self.config.readout_harmonics == 2:
            psi = torch.cat((psi, lift(2 * theta)), dim=-1)  # [cos θ, sin θ, cos 2θ, sin 2θ]
        if self.readout_gain is not None:  # the same g_j on every feature of θ_j: the features as (2 or 4, k)
            psi = (psi.unflatten(-1, (-1, self.config.dim)) * self.readout_gain.to(psi.dtype)).flatten(-2)
        if self.prototypes is None:  # tied: row c is ψ(E_c)
            return F.linear(psi, lift(self.phase_embedding).to(psi.dtype), self.readout_bias.to(psi.dtype))
        return self.prototypes(psi)

    def phases(self, idx: Tensor, skip: frozenset[tuple[str, int]] = frozenset()) -> list[Tensor]:
        """The phase state before and after every block: depth + 1 tensors (B, T, k).

        ``skip``: (step, layer) pairs, step "attn" or "ff", that are replaced by the identity.
        """
        theta = self.embed(idx)
        states = [theta]
        for i, block in enumerate(self.blocks):
            theta = block(theta, skip=frozenset(step for step, layer in skip if layer == i))
            states.append(theta)
        return states
