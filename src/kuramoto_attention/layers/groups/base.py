"""What a compact group provides to Kuramoto attention: the one interface between the layer and its states.

The layer (``kuramoto_attention.py``) is the same on every group: gates read a lift of the state, a score compares
drifted states, the softmax gives the coupling matrix A, the attended states' mean gives a tangent increment, and a
bounded, value-gated step moves each state along the manifold. A group says what each of these is:

    lift(x)                  φ(x), the real features the gates, the value gate and the feed-forward read   (B, T, n·c)
    drifted(x, pos, drift)   the drifted query and key features whose dot product is the kernel    (B, T, H, c, d) each
    values(x, lifted)        what A averages (the state's own coordinates)                          (B, H, T, c·d)
    increment(x, lifted, G)  the tangent increment from the attention output G                     (B, T, n·tangent)
    move(x, w)               x moved along the manifold by an already-bounded step w
    init_embedding, embed    the byte embedding's parameters and the states they give
    init_drift               the drift's initial value (RoPE's geometric rates)

n oscillators per token, H heads of d = n/H contiguous oscillators, c = ``components`` real numbers per oscillator in
the lift, ``tangent`` numbers per oscillator in an increment. One geometry object serves every layer of a model (it
holds no parameters); a group whose layers need parameters of their own (the torus's phase lag) builds them in
``extras`` and receives them back in each call.

Three methods have defaults built from the ones above and exist so that a group may fuse them: ``gated_query_key``
(gates and τ applied to the drifted features), ``norm_move`` and ``norm_step`` (the move by the norm bound of a step,
and of the value-gated increment). The literal T × T references (``naive*.py``) and the diagnostics' helpers are not
part of the interface.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from kuramoto_attention.layers.bound import NormBound
from kuramoto_attention.layers.gates import gated_features
from kuramoto_attention.ops.attention import with_extra


class Geometry:
    name: ClassVar[str]
    components: int  # real coordinates per oscillator in the lift (torus: cos, sin)
    tangent: int  # coordinates per oscillator of an increment (torus: 1)
    # AttentionConfig options beyond the common ones that this group defines: a field name (any value), or
    # "field=value" for one value of a field (the config's field metadata says which fields are group options)
    options: ClassVar[frozenset[str]] = frozenset()

    # ------------------------------------------------------------------ states
    def state_shape(self, oscillators: int) -> tuple[int, ...]:
        """A token's state shape: (n,) on the torus, (n, c) for vector-valued oscillators."""
        raise NotImplementedError

    def init_embedding(self, vocab: int, oscillators: int) -> Tensor:
        """The byte embedding's initial parameters (one state per byte); they are angles (the optimiser's phase
        group)."""
        raise NotImplementedError

    def embed(self, table: Tensor, idx: Tensor) -> Tensor:
        """The states of bytes idx (B, T): (B, T, *state_shape)."""
        raise NotImplementedError

    def lift(self, x: Tensor) -> Tensor:
        """φ(x): (B, T, *state_shape) -> (B, T, n·c) real features."""
        raise NotImplementedError

    def lift_as(self, x: Tensor, dtype: torch.dtype) -> Tensor:
        """φ(x) in ``dtype`` (the matmuls'): the lift, then one cast; a group may do both in one pass."""
        return self.lift(x).to(dtype)

    steps_read_lift: ClassVar[bool] = True  # whether ``increment``/``norm_step`` read φ(x) (in the state's dtype)

    def init_drift(self, oscillators: int, heads: int, base: float) -> Tensor:
        """The drift's initial value (RoPE's geometric rates within each head); zeros of its shape are no drift."""
        raise NotImplementedError

    # ------------------------------------------------------------------ the step
    def drifted(self, x: Tensor, pos: Tensor, drift: Tensor, heads: int,
                extras: nn.Module | None = None) -> tuple[Tensor, Tensor]:
        """The query's and the key's drifted features, (B, T, H, c, d) each (the same tensor when they agree), whose
        dot product over (c, d) is the kernel Σ_j ⟨drift_t x_{t,j}, drift_u x_{u,j}⟩; pos (T,) positions."""
        raise NotImplementedError

    def values(self, x: Tensor, lifted: Tensor, heads: int, extras: nn.Module | None = None) -> Tensor:
        """What A averages, per head: (B, H, T, c·d) in ``lifted``'s dtype."""
        raise NotImplementedError

    def increment(self, x: Tensor, lifted: Tensor, mean: Tensor, extras: nn.Module | None = None) -> Tensor:
        """The tangent increment (B, T, n·tangent), oscillator-major, from the attention output (B, H, T, c·d)."""
        raise NotImplementedError

    def move(self, x: Tensor, step: Tensor) -> Tensor:
        """x moved along the manifold by ``step`` (B, T, n·tangent), already bounded."""
        raise NotImplementedError

    # ------------------------------------------------------------------ what a group may fuse
    def gated_query_key(self, x: Tensor, pos: Tensor, drift: Tensor, logits: Tensor | None, heads: int, tau: Tensor,
                        dtype: torch.dtype, extras: nn.Module | None = None,
                        extra: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        """q = τ g^q ⊙ drifted query, k = g^k ⊙ drifted key, (B, H, T, c·d) each in ``dtype``; ``logits`` the gates'
        (B, T, 2n) before ρ, or None (every gate 1). ``extra``: query and key features (1, H, T, e) of the layer's
        own (its clocks), appended to each head's (a group that writes its features itself writes these beside)."""
        query, key = self.drifted(x, pos, drift, heads, extras)
        return with_extra(*gated_features(key, logits, heads, tau, dtype, query=None if query is key else query),
                          extra)

    def norm_move(self, x: Tensor, step: Tensor, bound: NormBound) -> Tensor:
        """x moved by the norm bound of ``step`` (B, T, n·tangent)."""
        return self.move(x, step * bound.factor(torch.linalg.vecdot(step, step).unsqueeze(-1)).to(step.dtype))

    def norm_step(self, x: Tensor, lifted: Tensor, mean: Tensor, value: Tensor, bound: NormBound,
                  extras: nn.Module | None = None) -> Tensor:
        """The attention's move: x moved by the norm bound of v ⊙ increment; ``value`` (B, T, n), one signed gate per
        oscillator."""
        inc = self.increment(x, lifted, mean, extras)
        return self.norm_move(x, self.tangent_gate(value.to(inc.dtype)) * inc, bound)

    # ------------------------------------------------------------------ derived from the members above
    def extras(self, config: Any, oscillators: int, heads: int) -> nn.Module | None:
        """The parameters a layer of this group needs beyond the common ones (None: none)."""
        return None

    def check(self, config: Any) -> None:
        """Refuse an AttentionConfig that sets a group option (a field whose metadata names it one) this group does
        not define."""
        for f in fields(config):
            kind: Any = f.metadata.get("group_option")
            value = getattr(config, f.name)
            if kind is True and value != f.default and f.name not in self.options:
                raise ValueError(f"{f.name}={value!r} is not defined on the {self.name} group")
            if isinstance(kind, tuple) and value in kind and f"{f.name}={value}" not in self.options:
                raise ValueError(f"{f.name}={value!r} is not defined on the {self.name} group")

    def check_state(self, x: Tensor, oscillators: int) -> None:
        """Raise ValueError, naming the expected shape and dtype, when x is not a (B, T, *state_shape) float batch."""
        shape = self.state_shape(oscillators)
        if x.dim() != 2 + len(shape) or tuple(x.shape[2:]) != shape or not x.is_floating_point():
            raise ValueError(f"expected {self.state_name} of shape (B, T, {', '.join(map(str, shape))}) (float), "
                             f"got {x.dtype} {tuple(x.shape)}")

    state_name: ClassVar[str] = "states"  # what a state is called in error messages

    def tangent_gate(self, value: Tensor) -> Tensor:
        """One gate per oscillator (B, T, n) spread over its tangent coordinates: (B, T, n·tangent), oscillator-major.
        A scalar per oscillator commutes with every rotation of its tangent space, so on a non-abelian group the step
        stays equivariant under the right action (a per-axis gate would not)."""
        return value if self.tangent == 1 else value.repeat_interleave(self.tangent, dim=-1)

    def tangent_view(self, increment: Tensor) -> Tensor:
        """An increment (B, T, n·tangent) as the API shows it: (B, T, n) on the torus, (B, T, n, tangent) otherwise."""
        return increment if self.tangent == 1 else increment.unflatten(-1, (-1, self.tangent))

    # ------------------------------------------------------------------ for diagnostics
    def coordinates(self, x: Tensor) -> tuple[Tensor, ...]:
        """Each oscillator as a unit vector of R^c, one (B, T, n) tensor per coordinate: the order parameters
        |Σ_u A_{t,u} x_u| and |mean_t x_t| are norms of means of these points on every group."""
        return x.unbind(-1)

    def drift_rate(self, drift: Tensor) -> Tensor:
        """The drift's angle per token for each oscillator, (n,)."""
        return drift
