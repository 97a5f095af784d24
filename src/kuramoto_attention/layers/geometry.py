"""What a compact group must provide for Kuramoto attention: the one interface between the layer and its geometry.

The layer (``kuramoto_attention.py``) is the same on every group: gates read a lift of the state, a score compares
drifted states, the softmax gives the coupling matrix A, an on-manifold mean of the attended states gives an
increment in the tangent space, and a bounded, value-gated step moves each state along the manifold. A group says
what each of these is:

    lift(x)            φ(x), the real features the gates, the value gate and the feed-forward read  (B, T, n·c)
    query_key(...)     the gated, drifted query and key features whose dot product is the score  (B, H, T, d·c)
    values(x)          what A averages (the state's own coordinates)                             (B, H, T, d·c)
    step(x, G, v, b)   the move: increment from the mean G, value gate, bound, on-manifold update
    reference_*(...)   the same score and increment written out literally (the T × T kernel), for tests and
                       diagnostics

n oscillators per token, H heads of d = n/H contiguous oscillators, c = ``components`` real numbers per oscillator
in the lift, ``tangent`` numbers per oscillator in an increment. The torus (``torus.py``) is the first
implementation; a second group is a new module implementing this class, not a switch in the layer.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
from torch import Tensor

from kuramoto_attention.layers.bound import Bound
from kuramoto_attention.layers.cross_coupling import OscillatorMix


class Geometry(ABC):
    name: str
    components: int  # real coordinates per oscillator in the lift (torus: cos, sin)
    tangent: int  # coordinates per oscillator of an increment (torus: 1)
    angle_embedding: bool  # whether the byte embedding's parameters are angles (the optimizer's phase group)

    @abstractmethod
    def init_embedding(self, vocab: int, oscillators: int) -> Tensor:
        """The byte embedding's initial parameters (one state per byte)."""

    @abstractmethod
    def embed(self, table: Tensor, idx: Tensor) -> Tensor:
        """The states of bytes idx (B, T): (B, T, …)."""

    @abstractmethod
    def state_shape(self, oscillators: int) -> tuple[int, ...]:
        """A token's state shape: (n,) on the torus."""

    @abstractmethod
    def check_state(self, x: Tensor, oscillators: int) -> None:
        """Raise ValueError, naming the expected shape, when x is not a (B, T, …) batch of states."""

    @abstractmethod
    def lift(self, x: Tensor) -> Tensor:
        """φ(x): (B, T, …) states -> (B, T, n·c) real features."""

    @abstractmethod
    def init_drift(self, oscillators: int, heads: int, base: float) -> Tensor:
        """The drift's initial value (RoPE's geometric frequencies within each head)."""

    @abstractmethod
    def zero_drift(self, oscillators: int) -> Tensor:
        """No drift: the scores carry no position (the ω ≡ 0 ablation)."""

    @abstractmethod
    def query_key(self, x: Tensor, pos: Tensor, drift: Tensor, logits: Tensor | None, heads: int, tau: Tensor,
                  dtype: torch.dtype, lag: Tensor | None = None,
                  cross: OscillatorMix | None = None) -> tuple[Tensor, Tensor]:
        """q_t = τ g^q_t ⊙ feat(drift_t x_t), k_u = g^k_u ⊙ feat(drift_u x_u) per head, (B, H, T, d·c) in ``dtype``.

        pos (T,) positions; ``logits`` the gates' (B, T, 2n) logits before ρ, or None (all gates 1); tau (H,);
        ``lag`` a learned per-oscillator offset of the query, ``cross`` a learned mix of the query's oscillators
        (groups that have them; None otherwise).
        """

    @abstractmethod
    def values(self, x: Tensor, lifted: Tensor, heads: int) -> Tensor:
        """What A averages, per head: (B, H, T, d·c) in ``lifted``'s dtype."""

    @abstractmethod
    def increment(self, x: Tensor, lifted: Tensor, mean: Tensor) -> Tensor:
        """The tangent increment (B, T, n·tangent) from the attention output ``mean`` (B, H, T, d·c)."""

    @abstractmethod
    def move(self, x: Tensor, step: Tensor, bound: Bound) -> Tensor:
        """x moved by bound(step) along the manifold; step (B, T, n·tangent)."""

    def step(self, x: Tensor, lifted: Tensor, mean: Tensor, value: Tensor, bound: Bound) -> Tensor:
        """The attention step's move: bound(v ⊙ increment), applied on the manifold. ``value`` (B, T, n), one signed
        gate per oscillator (shared by its tangent coordinates)."""
        inc = self.increment(x, lifted, mean)
        return self.move(x, self.tangent_gate(value.to(inc.dtype)) * inc, bound)

    def tangent_gate(self, value: Tensor) -> Tensor:
        """One gate per oscillator (B, T, n) spread over its tangent coordinates: (B, T, n·tangent), oscillator-major.
        A scalar per oscillator commutes with every rotation of its tangent space, so on a non-abelian group the
        step stays equivariant under the right action (a per-axis gate would not)."""
        return value if self.tangent == 1 else value.repeat_interleave(self.tangent, dim=-1)

    def tangent_view(self, increment: Tensor) -> Tensor:
        """An increment (B, T, n·tangent) as the API shows it: (B, T, n) on the torus, (B, T, n, tangent) otherwise."""
        return increment if self.tangent == 1 else increment.unflatten(-1, (-1, self.tangent))

    # ------------------------------------------------------------------ for diagnostics
    def coordinates(self, x: Tensor) -> tuple[Tensor, ...]:
        """Each oscillator as a unit vector of R^c, one (B, T, n) tensor per coordinate (torus: cos θ, sin θ): the
        order parameters |Σ_u A_{t,u} x_u| and |mean_t x_t| are norms of means of these points on every group.
        This default reads a component-major lift (the torus's [cos θ, sin θ]); a group whose lift is laid out
        otherwise overrides it."""
        return self.lift(x).unflatten(-1, (self.components, -1)).unbind(-2)

    def drift_rate(self, drift: Tensor) -> Tensor:
        """The drift's angle per token for each oscillator, (n,): the drift itself when it is one rate per oscillator
        (the torus's signed ω); a group whose drift is a vector per oscillator overrides it (SU(2): |Ω_j|)."""
        return drift

    # ------------------------------------------------------------------ the literal reference
    @abstractmethod
    def reference_kernel(self, x: Tensor, drift: Tensor, heads: int, lag: Tensor | None = None,
                         cross: OscillatorMix | None = None) -> Tensor:
        """The per-oscillator similarity of every pair, with the drift written out: (B, H, T, T, d)."""

    @abstractmethod
    def reference_increment(self, x: Tensor, attn: Tensor) -> Tensor:
        """Σ_u A_{t,u} (the pair's tangent term), summed term by term: (B, T, n·tangent); attn (B, H, T, T)."""


def torus_only(lag: Tensor | None, cross: OscillatorMix | None) -> None:
    """Refuse the score's options that need a scalar phase per oscillator (a group other than the torus calls it)."""
    for name, given in (("phase_lag", lag), ("cross_score", cross)):
        if given is not None:
            raise ValueError(f"{name} is defined on the torus only")
