"""The phase-state language model (the paper's sections 2-3).

    x^0_t = E[b_t]                                  byte -> a learned state (phases on the torus)
    x ← KuramotoAttention(x)                        one Kuramoto step per layer (layers/kuramoto_attention.py)
    x ← move(x, bound(SwiGLU(input(x))))            PhaseFeedForward; input φ(x), P φ(x) (``ff_proj``) or raw θ
    logits = W φ(x) + b                             prototype alignment (torus: Σ_j α_{c,j} cos(θ_j − μ_{c,j}) + b_c)

No normalisation layers: the state lives on a compact manifold. The choices the paper leaves open are fields here and
in ``AttentionConfig`` (docs/choices.md says why each default is what it is).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from torch import Tensor, nn

from kuramoto_attention.layers.bound import Bound
from kuramoto_attention.layers.gates import Borrowed, PhaseGates
from kuramoto_attention.layers.groups import build_geometry
from kuramoto_attention.layers.groups.base import Geometry
from kuramoto_attention.layers.kuramoto_attention import AttentionConfig, KuramotoAttention
from kuramoto_attention.layers.swiglu import SwiGLU
from kuramoto_attention.models.lm import VOCAB_SIZE, ByteLM
from kuramoto_attention.ops.attention import KVCache, compute_dtype

_TORUS_EXTRAS = re.compile(r"\.attn\.(lag$|query_mix\.|coupling_mix\.|harmonics\.)")


@dataclass
class KuramotoConfig:
    dim: int = 128  # n, oscillators per token
    depth: int = 4
    heads: int = 4
    ff_hidden: int = 200
    # What the feed-forward reads: "lift" φ(x) (ψ(θ) on the torus), "angles" the raw θ (the paper's block; the torus
    # only), or "none" (no feed-forward; ablation). docs/choices.md says why the lift is the default
    ff: Literal["lift", "angles", "none"] = "lift"
    # "shared": the feed-forward reads P φ(x), one P (c·n -> n) for all layers, so a hidden unit costs 3n weights as in
    # the transformer (on φ itself, (2c+1)n); "none": it reads φ(x). A shared P that a gate reads may stay beside
    # another ff, which then reads its own input
    ff_proj: Literal["none", "shared"] = "none"
    # What the value gate / the metric gates read: "lift" φ(x) (the paper's), or "ff-proj" the shared P φ(x)
    # (needs ff_proj="shared"): n wide instead of c·n, so the gates cost a c-th of their weights (ka-1m-tuned)
    value_gate_input: Literal["lift", "ff-proj"] = "lift"
    gates_input: Literal["lift", "ff-proj"] = "lift"
    shared_gates: bool = False  # one W_q, W_k pair for all layers
    ff_radius_init: float = 10.0  # the feed-forward bound's radius at init (its kind and scale are the attention's)
    init_std: float = 0.02  # feed-forward, value-projection and readout weights (gates, value gate: 0.02)
    context: int = 256  # training context; the model itself has no maximum length
    attention: AttentionConfig = field(default_factory=AttentionConfig)

    def __post_init__(self) -> None:
        if isinstance(self.attention, dict):  # read from JSON
            self.attention = AttentionConfig(**self.attention)
        for name in ("dim", "depth", "heads", "ff_hidden", "context"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.dim % self.heads:
            raise ValueError(f"dim={self.dim} must be divisible by heads={self.heads}")
        for name, allowed in (("ff", ("lift", "angles", "none")), ("ff_proj", ("none", "shared")),
                              ("value_gate_input", ("lift", "ff-proj")), ("gates_input", ("lift", "ff-proj"))):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        for name in ("ff_radius_init", "init_std"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not 0 < value < float("inf"):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        reads_p = self.value_gate_input == "ff-proj" or (self.attention.gates and self.gates_input == "ff-proj")
        if self.ff_proj == "shared" and self.ff != "lift" and not reads_p:
            raise ValueError(f"ff_proj projects the lift: it needs ff='lift' (or a gate that reads P), "
                             f"got ff={self.ff!r}")
        if self.ff == "angles" and "ff=angles" not in build_geometry(self.attention.group).options:
            raise ValueError(f"ff='angles' reads raw angles, which the {self.attention.group} group does not have")
        for name in ("value_gate_input", "gates_input"):
            if getattr(self, name) == "ff-proj" and self.ff_proj != "shared":
                raise ValueError(f"{name}='ff-proj' reads the feed-forward's shared P: it needs ff_proj='shared', "
                                 f"got ff_proj={self.ff_proj!r}")


def input_projection(cfg: KuramotoConfig, geometry: Geometry) -> nn.Linear:
    """P (c·n -> n, no bias), started so that each output of P φ(x) has unit variance (|φ| = √n per token)."""
    proj = nn.Linear(geometry.components * cfg.dim, cfg.dim, bias=False)
    nn.init.normal_(proj.weight, std=cfg.dim**-0.5)  # torus: Var(row · ψ) = 2n · σ² · 1/2 = 1
    return proj


class PhaseFeedForward(nn.Module):
    """x ← move(x, bound(SwiGLU(input))): input φ(x) ("lift"), P φ(x) with a borrowed shared P, or raw θ ("angles",
    the paper's block: then the output depends on the representative of θ that the residual updates carried it to).
    The SwiGLU emits a tangent increment, applied on the manifold as the attention's is."""

    def __init__(self, cfg: KuramotoConfig, geometry: Geometry, shared_proj: nn.Linear | None = None) -> None:
        super().__init__()
        self.geometry, self.mode, self.source = geometry, cfg.ff, Borrowed(shared_proj)
        lift_dim = geometry.components * cfg.dim
        dim_in = shared_proj.out_features if shared_proj is not None else lift_dim if cfg.ff == "lift" else cfg.dim
        self.mlp = SwiGLU(dim_in, cfg.ff_hidden, cfg.dim * geometry.tangent)
        self.bound = Bound(cfg.dim * geometry.tangent, cfg.attention.bound, cfg.ff_radius_init)

    def forward(self, x: Tensor) -> Tensor:
        return self.bound.move(self.geometry, x, self.update(x))

    def update(self, x: Tensor) -> Tensor:
        """The unbounded update (B, T, n·tangent), before the bound."""
        # cast once for both input matmuls (the lift and the cast in one pass where the group can)
        h = self.geometry.lift_as(x, compute_dtype(x)) if self.mode == "lift" else x.to(compute_dtype(x))
        return self.mlp(h if self.source.module is None else self.source(h))


class KuramotoBlock(nn.Module):
    def __init__(self, cfg: KuramotoConfig, geometry: Geometry, shared_gates: PhaseGates | None,
                 shared_proj: nn.Linear | None) -> None:
        super().__init__()
        self.attn = KuramotoAttention(
            cfg.dim, cfg.heads, cfg.attention, geometry=geometry, shared_gates=shared_gates,
            gate_input=shared_proj if cfg.gates_input == "ff-proj" else None,
            value_input=shared_proj if cfg.value_gate_input == "ff-proj" else None)
        self.ff = PhaseFeedForward(cfg, geometry, shared_proj if cfg.ff == "lift" else None) \
            if cfg.ff != "none" else None

    def forward(self, x: Tensor, cache: KVCache | None = None, skip: frozenset[str] = frozenset()) -> Tensor:
        """``skip`` ("attn", "ff"): steps replaced by the identity (the knockout diagnostic)."""
        if "attn" not in skip:
            x = self.attn(x, cache=cache, check=False)  # the model's own states
        return self.ff(x) if self.ff is not None and "ff" not in skip else x


class KuramotoLM(ByteLM):
    """Byte-level LM whose hidden state is a bank of oscillators (phases on the torus)."""

    family = "kuramoto"
    config_class = KuramotoConfig

    def __init__(self, config: KuramotoConfig) -> None:
        super().__init__()
        self.config = config
        self.geometry = geometry = build_geometry(config.attention.group)  # one for every layer
        self.phase_embedding = nn.Parameter(geometry.init_embedding(VOCAB_SIZE, config.dim))
        lift_dim = geometry.components * config.dim
        # drawn in this order (the shared gates' weights before P) so that every config draws the same initial numbers
        gates_read_p = config.gates_input == "ff-proj"
        shared = config.shared_gates and config.attention.gates
        gates_proj = PhaseGates.projection(config.dim if gates_read_p else lift_dim, config.dim) if shared else None
        proj = input_projection(config, geometry) if config.ff_proj == "shared" else None
        self.shared_gates = None if gates_proj is None else PhaseGates(gates_proj, proj if gates_read_p else None)
        self.shared_ff_proj = proj
        self.blocks = nn.ModuleList(KuramotoBlock(config, geometry, self.shared_gates, self.shared_ff_proj)
                                    for _ in range(config.depth))
        # readout of φ(x): on the torus row c is (α_c cos μ_c, α_c sin μ_c), prototype phases μ_c with amplitudes α_c
        self.prototypes = nn.Linear(lift_dim, VOCAB_SIZE)
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
        nn.init.normal_(self.prototypes.weight, std=std)
        nn.init.zeros_(self.prototypes.bias)

    @classmethod
    def upgrade_state(cls, state: dict[str, Tensor]) -> dict[str, Tensor]:
        # the torus's own parameters of a layer (phase lag, mixes, harmonics) moved into its ``extras`` after e3658eb
        return {_TORUS_EXTRAS.sub(r".attn.extras.\1", k): v for k, v in state.items()}

    def angle_parameters(self) -> list[nn.Parameter]:
        """Learned angles (the embedding's phases, ω, β, the clocks'): their own learning rate, never decayed."""
        return [self.phase_embedding] + [p for block in self.blocks for p in block.attn.angles()]

    def drift_parameters(self) -> list[nn.Parameter]:
        """The drift rates ω of the state and of the clocks (``omega_lr_mult``, when set, is their own)."""
        return [p for block in self.blocks for p in block.attn.drift_parameters()]

    def no_weight_decay(self) -> set[str]:
        # the embedding: decaying angles toward 0 has no meaning on the torus (nor shrinking a state's coordinates)
        return {"phase_embedding"}

    def phase_parameter_names(self) -> set[str]:
        return self._names(self.angle_parameters())

    def omega_parameter_names(self) -> set[str]:
        return self._names(self.drift_parameters())

    def _names(self, params: list[nn.Parameter]) -> set[str]:
        ids = {id(p) for p in params}
        return {name for name, p in self.named_parameters() if id(p) in ids}

    def embed(self, idx: Tensor) -> Tensor:
        return self.geometry.embed(self.phase_embedding, idx)

    def readout(self, x: Tensor) -> Tensor:
        return self.prototypes(self.geometry.lift_as(x, compute_dtype(x)))

    def phases(self, idx: Tensor, skip: frozenset[tuple[str, int]] = frozenset()) -> list[Tensor]:
        """The state before and after every block: depth + 1 tensors (B, T, n).

        ``skip``: (step, layer) pairs, step "attn" or "ff", that are replaced by the identity.
        """
        x = self.embed(idx)
        states = [x]
        for i, block in enumerate(self.blocks):
            x = block(x, skip=frozenset(step for step, layer in skip if layer == i))
            states.append(x)
        return states
