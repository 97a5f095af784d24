"""SU(2), the unit quaternions S³: the smallest non-abelian compact group, with closed forms for everything the layer
needs (docs/su2.md says why each choice below is what it is).

State q (B, T, n, 4): n unit quaternions per token, real part first (w, x, y, z), kept in memory as four contiguous
planes of n (``join``), so that the layer's arithmetic runs on whole planes (``Parts``). With ⟨p, q⟩ the Euclidean
dot product of quaternions as 4-vectors, conj the conjugate, Im the vector part and exp(w) = cos|w| + (w/|w|) sin|w|
for a pure quaternion w ∈ su(2) ≅ R³:

    φ(q)       = the 4n real components, oscillator-major (q_0.w, q_0.x, q_0.y, q_0.z, q_1.w, …)   the lift
    s_{t,u}    = τ/√d Σ_j g^q_{t,j} g^k_{u,j} ⟨exp(tΩ_j) q_{t,j}, exp(uΩ_j) q_{u,j}⟩                   the score
               = τ/√d Σ_j g^q g^k ⟨q_{t,j}, exp((u − t)Ω_j) q_{u,j}⟩     (left multiplication is orthogonal)
    G_{t,j}    = Σ_u A_{t,u} q_{u,j}                                    the attention output for values q_u
    ξ_{t,j}    = Im(conj(q_{t,j}) G_{t,j}) = Σ_u A_{t,u} Im(conj(q_{t,j}) q_{u,j})     the Lohe coupling, in R³
    q_t       ← q_t exp(bound(v(q_t) ⊙ ξ_t))                            v one signed gate per oscillator

For q = cos θ + i sin θ (the U(1) subgroup) every line is the torus layer's: ⟨·,·⟩ = cos(θ_t − θ_u + ω(t − u)) when
Ω = ω i, ξ = sin(θ_u − θ_t) i, and q exp(a i) = e^{i(θ + a)}. The literal T × T reference is ``naive_su2.py``.

Why one value gate per oscillator (not per axis): under the right action q ↦ q h every increment rotates,
ξ ↦ conj(h) ξ h; a scalar gate and the norm bound commute with that rotation, a per-axis gate would not, so the step
stays right-equivariant whenever what the gates read is invariant (``Geometry.tangent_gate`` shares the gate over
the axes).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from kuramoto_attention.layers.groups.planes import Parts, VectorGeometry, dot, exp_parts
from kuramoto_attention.ops.attention import rotary_angles
from kuramoto_attention.ops.vectors import quaternion_move, quaternion_query_key, quaternion_step


# --------------------------------------------------------------------------- quaternion primitives (on planes.Parts)
def cross(a: Parts, b: Parts) -> Parts:
    """a × b of vectors given as their 3 components."""
    a1, a2, a3 = a
    b1, b2, b3 = b
    return a2 * b3 - a3 * b2, a3 * b1 - a1 * b3, a1 * b2 - a2 * b1


def mul(p: Parts, q: Parts) -> Parts:
    """The Hamilton product pq, real part first: (p₀q₀ − p⃗·q⃗, p₀q⃗ + q₀p⃗ + p⃗ × q⃗)."""
    p0, pv = p[0], p[1:]
    q0, qv = q[0], q[1:]
    real = p0 * q0 - pv[0] * qv[0] - pv[1] * qv[1] - pv[2] * qv[2]
    return (real, *(p0 * b + q0 * a + c for a, b, c in zip(pv, qv, cross(pv, qv), strict=True)))


def im_conj_mul(q: Parts, g: Parts) -> Parts:
    """Im(conj(q) g) = q₀ g⃗ − g₀ q⃗ − q⃗ × g⃗: the vector part of conj(q) g without forming its real part."""
    q0, qv = q[0], q[1:]
    g0, gv = g[0], g[1:]
    return tuple(q0 * b - g0 * a - c for a, b, c in zip(qv, gv, cross(qv, gv), strict=True))


# --------------------------------------------------------------------------- the same, stacked (..., 4), for decoding
# p q = L(p) q with L(p)'s rows signed permutations of p. Eager decoding (no autograd, batch 1) pays a launch per
# operator: these forms take about 20 operators where the plane forms take about 80 (a move) and 75 (the drift)
_ROWS = torch.tensor([[0, 1, 2, 3], [1, 0, 3, 2], [2, 3, 0, 1], [3, 2, 1, 0]])
_SIGNS = torch.tensor([[1.0, -1, -1, -1], [1, 1, -1, 1], [1, 1, 1, -1], [1, -1, 1, 1]])


def stacked_mul(p: Tensor, q: Tensor) -> Tensor:
    """``mul`` on quaternions stacked in the last axis: (..., 4) × (..., 4) -> (..., 4)."""
    left = p[..., _ROWS.to(p.device)] * _SIGNS.to(p)  # (..., 4, 4)
    return (left * q.unsqueeze(-2)).sum(-1)  # not a matmul: autocast would round it to bf16


def stacked_exp(w: Tensor) -> Tensor:
    """``exp_parts`` on pure quaternions stacked (..., 3) -> (..., 4), for use without a gradient: the closed form,
    sin|w|/|w| = 1 at w = 0 (float rounding apart, the Taylor series' values)."""
    a2 = (w * w).sum(-1, keepdim=True)
    a = a2.sqrt()
    return torch.cat((a.cos(), torch.where(a2 > 0, a.sin() / a, 1.0) * w), dim=-1)


def _decoding() -> bool:
    """Eager without autograd (generation, evaluation): the stacked forms. Training and torch.compile keep the plane
    forms (inductor fuses those; autograd needs the series' guarded gradients)."""
    return not torch.is_grad_enabled() and not torch.compiler.is_compiling()


def spread_axes(count: int) -> Tensor:
    """``count`` unit vectors (count, 3) spread evenly over the sphere (the golden-angle spiral): deterministic, so
    that building the drift draws no random numbers, and no direction of su(2) is preferred by every oscillator."""
    i = torch.arange(count, dtype=torch.float64) + 0.5
    z = 1 - 2 * i / count
    r = torch.sqrt(1 - z * z)
    phi = math.pi * (3 - math.sqrt(5)) * i
    return torch.stack((r * torch.cos(phi), r * torch.sin(phi), z), dim=-1)


# --------------------------------------------------------------------------- the geometry
class SU2(VectorGeometry):
    """SU(2) ≅ S³ through the layer's interface: states (B, T, n, 4), increments (B, T, 3n) oscillator-major.

    Drift Ω (n, 3): a pure quaternion per oscillator, acting by left multiplication exp(tΩ_j) q_{t,j}; |Ω_j| is the
    angle per token (⟨exp(tΩ)q, exp(uΩ)q⟩ = cos(|Ω|(t − u)), as cos(ω(t − u)) on the torus), initialised to RoPE's
    geometric magnitudes within each head (as the torus's ω) along axes spread over the sphere. Embedding: a rotation
    vector w per byte and oscillator (256, n, 3), read as exp(w): the exact analogue of the torus's angles (θ i ↦
    e^{iθ}), so it joins the optimiser's phase group as they do; drawn so that exp(w) is uniform (Haar) on S³.
    """

    name = "su2"
    components = 4
    tangent = 3
    state_name = "unit quaternions q (real part first)"
    fused_move, fused_step = staticmethod(quaternion_move), staticmethod(quaternion_step)  # exp_move's and norm_step's
    fused_query_key = staticmethod(quaternion_query_key)  # gated_query_key's

    def init_drift(self, oscillators: int, heads: int, base: float) -> Tensor:
        d = oscillators // heads
        rates = rotary_angles(d, base).repeat(heads)  # (n,): RoPE's magnitudes within each head
        return (rates[:, None] * spread_axes(d).repeat(heads, 1)).float()  # (n, 3)

    def rotated(self, x: Parts, pos: Tensor, drift: Tensor) -> Parts:
        """exp(tΩ_j) q_{t,j}; drift (n, 3)."""
        if _decoding():
            return stacked_mul(stacked_exp(pos[:, None, None] * drift), torch.stack(x, dim=-1)).unbind(-1)
        rot = exp_parts(tuple(pos[:, None] * c for c in drift.unbind(-1)))  # 4 × (T, n)
        return mul(rot, x)

    def tangent_part(self, x: Parts, mean: Parts) -> Parts:
        """ξ = Im(conj(q) G): the Lohe coupling."""
        return im_conj_mul(x, mean)

    def exp_move(self, x: Parts, w: Parts) -> Parts:
        """q exp(w). The product of unit quaternions is a unit quaternion: the division only undoes rounding
        (tests/layers/groups/test_su2.py checks it stays at that level), so that many layers in low precision never
        drift off S³."""
        if _decoding():
            new = stacked_mul(torch.stack(x, dim=-1), stacked_exp(torch.stack(w, dim=-1)))
            return (new / (new * new).sum(-1, keepdim=True).sqrt()).unbind(-1)
        new = mul(x, exp_parts(w))
        norm = torch.sqrt(dot(new, new))
        return tuple(c / norm for c in new)

    def drift_rate(self, drift: Tensor) -> Tensor:
        return torch.linalg.vector_norm(drift, dim=-1)
