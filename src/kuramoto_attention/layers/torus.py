"""The torus T^n: the abelian case, where the score and the mean have closed forms (the paper's layer).

State θ (B, T, n) angles; lift ψ(θ) = (cos θ, sin θ) (B, T, 2n); drift φ_t = θ_t + ω t (ω (n,), RoPE's frequencies
within each head at init). With cos(x − y) = cos x cos y + sin x sin y the score is the dot product of
q_t = τ g^q_t ⊙ ψ(φ_t + β) and k_u = g^k_u ⊙ ψ(φ_u), and G is the attention output for values ψ(θ_u); the
increment a = Im(e^{−iθ} G) and the move θ + bound(v ⊙ a). In eager training the elementwise work around the
attention runs hand-fused (``ops/fused.py``); under torch.compile and without autograd, the plain expressions here.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from kuramoto_attention.layers import naive
from kuramoto_attention.layers.bound import Bound
from kuramoto_attention.layers.cross_coupling import OscillatorMix
from kuramoto_attention.layers.geometry import Geometry
from kuramoto_attention.layers.planes import gated_features
from kuramoto_attention.ops.attention import rotary_angles
from kuramoto_attention.ops.fused import fused_applies, gated_step, query_key
from kuramoto_attention.ops.torus import lift, tangent_projection


class Torus(Geometry):
    name = "torus"
    components = 2
    tangent = 1
    angle_embedding = True

    def init_embedding(self, vocab: int, oscillators: int) -> Tensor:
        return torch.empty(vocab, oscillators).uniform_(-torch.pi, torch.pi)  # every byte spread over the circle

    def embed(self, table: Tensor, idx: Tensor) -> Tensor:
        return F.embedding(idx, table)  # = table[idx]; its backward is 2× faster on the CPU

    def state_shape(self, oscillators: int) -> tuple[int, ...]:
        return (oscillators,)

    def check_state(self, x: Tensor, oscillators: int) -> None:
        if x.dim() != 3 or x.shape[-1] != oscillators or not x.is_floating_point():
            raise ValueError(f"expected phases θ of shape (B, T, {oscillators}) (float), got {x.dtype} "
                             f"{tuple(x.shape)}")

    def lift(self, x: Tensor) -> Tensor:
        return lift(x)

    def init_drift(self, oscillators: int, heads: int, base: float) -> Tensor:
        return rotary_angles(oscillators // heads, base).float().repeat(heads)

    def zero_drift(self, oscillators: int) -> Tensor:
        return torch.zeros(oscillators)

    def query_key(self, x: Tensor, pos: Tensor, drift: Tensor, logits: Tensor | None, heads: int, tau: Tensor,
                  dtype: torch.dtype, lag: Tensor | None = None,
                  cross: OscillatorMix | None = None) -> tuple[Tensor, Tensor]:
        lag = None if lag is None else lag.to(x.dtype)
        if logits is not None and cross is None and fused_applies():
            return query_key(x, drift, pos, lag, logits, tau, dtype)
        b, t, n = x.shape
        d = n // heads
        # token-major, (B, T, H, ·), the heads split by a view at the end: compiled, a kernel that writes each token's
        # features in place runs faster than one that transposes them to (B, H, T, ·) as it writes
        theta = x.view(b, t, heads, d)
        drifted = drift.view(heads, d).to(x.dtype) * pos[:, None, None]  # ω t: (T, H, d)
        phi = theta + drifted  # φ_t = θ_t + ω t
        trig = lift(phi).to(dtype)  # ψ(φ) per head: (B, T, H, 2d)
        lag = None if lag is None else lag.view(heads, d)  # β (n,) per head
        if cross is not None:  # e^{i(ωt + β)} ⊙ C e^{iθ_t}
            trig_q = cross.query(theta, drifted if lag is None else drifted + lag).to(dtype)
        else:
            trig_q = trig if lag is None else lift(phi + lag).to(dtype)  # ψ(φ + β)
        return gated_features(trig.unflatten(-1, (2, d)), logits, heads, tau, dtype,
                              query=trig_q.unflatten(-1, (2, d)))  # cos, sin halves alike

    def values(self, x: Tensor, lifted: Tensor, heads: int) -> Tensor:
        b, t, _ = lifted.shape  # ψ(θ_u) per head: [cos θ_h, sin θ_h]
        return lifted.view(b, t, 2, heads, -1).permute(0, 3, 1, 2, 4).reshape(b, heads, t, -1)

    def increment(self, x: Tensor, lifted: Tensor, mean: Tensor) -> Tensor:
        b, t, n = x.shape
        heads = mean.shape[1]
        out = mean.transpose(1, 2)  # (B, T, H, 2d)
        cos_t, sin_t = (c.view(b, t, heads, n // heads) for c in lifted.chunk(2, dim=-1))
        re_g, im_g = out.to(x.dtype).chunk(2, dim=-1)
        return tangent_projection(cos_t, sin_t, re_g, im_g).reshape(b, t, n)

    def move(self, x: Tensor, step: Tensor, bound: Bound) -> Tensor:
        return bound.step(x, step)  # θ + bound(step): hand-fused in eager training

    def step(self, x: Tensor, lifted: Tensor, mean: Tensor, value: Tensor, bound: Bound) -> Tensor:
        if bound.fusable:  # increment, value gate, bound and residual in one pass
            return gated_step(x, lifted, mean, value, bound.log_radius)
        return super().step(x, lifted, mean, value, bound)

    def reference_kernel(self, x: Tensor, drift: Tensor, heads: int, lag: Tensor | None = None,
                         cross: OscillatorMix | None = None) -> Tensor:
        d = x.shape[-1] // heads
        beta = None if lag is None else lag.view(heads, d).to(x.dtype)
        mix = None if cross is None else cross.matrix(x.dtype)
        return naive.kernel(naive.heads(x, heads), drift.view(heads, d).to(x.dtype), beta, mix)

    def reference_increment(self, x: Tensor, attn: Tensor) -> Tensor:
        return naive.merge(naive.kuramoto_sum(attn, naive.heads(x, attn.shape[1])))
