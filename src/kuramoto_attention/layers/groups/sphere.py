"""The sphere S^{D−1} ⊂ R^D: AKOrN's oscillators, unit vectors with a rotation drift (docs/sphere.md says why each
choice below is what it is). D = 4 for ``group="sphere"`` (``AMBIENT``), so that the lift is as wide as SU(2)'s.

State x (B, T, n, D): n unit vectors per token, stored component-major (``planes.py``). With ⟨·,·⟩ the Euclidean
dot product, P_x w = w − ⟨w, x⟩ x the projection onto the tangent space at x, and R(tΩ_j) the rotation of each
coordinate plane (x_{2p}, x_{2p+1}) by the angle tΩ_{j,p} (Ω_j ∈ R^{D/2}, one rate per plane):

    φ(x)       = the D·n real components, oscillator-major (x_0[0], …, x_0[D−1], x_1[0], …)       the lift
    s_{t,u}    = τ/√d Σ_j g^q_{t,j} g^k_{u,j} ⟨R(tΩ_j) x_{t,j}, R(uΩ_j) x_{u,j}⟩                  the score
               = τ/√d Σ_j g^q g^k ⟨x_{t,j}, R((u − t)Ω_j) x_{u,j}⟩    (the plane rotations commute)
    G_{t,j}    = Σ_u A_{t,u} x_{u,j}                                    the attention output for values x_u
    ξ_{t,j}    = P_{x_{t,j}} G_{t,j} = Σ_u A_{t,u} (x_{u,j} − ⟨x_{u,j}, x_{t,j}⟩ x_{t,j})     tangent, in R^D
    x_t       ← exp_{x_t}(w) = cos|w| x_t + sin|w| w/|w|,   w = P_{x_t} bound(v(x_t) ⊙ ξ_t)     the geodesic step

The increment has D coordinates in the ambient space (``tangent = D``) although the tangent space has D − 1
dimensions: a smooth frame of the tangent spaces exists only for D = 2, 4, 8 (for D = 4 it is SU(2)'s, which would make
this SU(2) again), while ambient coordinates serve every D and keep every map linear; the move projects its step onto
the tangent space, so a radial part is dropped, never applied.

For x = (cos θ, sin θ, 0, …) and Ω_{j,0} = ω_j every line is the torus layer's: the score's kernel is
cos(θ_t − θ_u + ω(t − u)), ξ = sin(θ_u − θ_t) (−sin θ_t, cos θ_t, 0, …) and the move turns θ by the bounded step.
D = 2 is the torus itself. The literal T × T reference is ``naive_sphere.py``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from kuramoto_attention.layers.groups.planes import Parts, VectorGeometry, cos_sinc, dot
from kuramoto_attention.ops.attention import rotary_angles
from kuramoto_attention.ops.vectors import sphere_move, sphere_query_key, sphere_step

AMBIENT = 4  # D for group="sphere": the lift 4n wide, as SU(2)'s; an AttentionConfig field would be needed for more


# --------------------------------------------------------------------------- sphere primitives (on planes.Parts)
def project(x: Parts, w: Parts) -> Parts:
    """P_x w = w − ⟨w, x⟩ x: w's part in the tangent space at the unit vector x."""
    along = dot(w, x)
    return tuple(c - along * e for c, e in zip(w, x, strict=True))


def exp_map(x: Parts, w: Parts) -> Parts:
    """exp_x(w) = cos|w| x + sinc|w| w for w tangent at x, then divided by its norm (which only undoes rounding).
    cos and sinc are ``planes.cos_sinc``'s: smooth at w = 0 with exact gradients."""
    cos, sinc = cos_sinc(dot(w, w))
    new = tuple(cos * e + sinc * c for e, c in zip(x, w, strict=True))
    norm = torch.sqrt(dot(new, new))
    return tuple(c / norm for c in new)


def rotate_planes(x: Parts, angle: Parts) -> Parts:
    """R(angle) x: each pair (x_{2p}, x_{2p+1}) of x turned by angle_p (D/2 parts, broadcasting)."""
    out: list[Tensor] = []
    for p, turn in enumerate(angle):
        a, b = x[2 * p], x[2 * p + 1]
        cos, sin = torch.cos(turn), torch.sin(turn)
        out += (a * cos - b * sin, a * sin + b * cos)
    return tuple(out)


# --------------------------------------------------------------------------- the geometry
class Sphere(VectorGeometry):
    """S^{D−1} through the layer's interface: states (B, T, n, D), increments (B, T, D·n) oscillator-major.

    Drift Ω (n, D/2): one rate per coordinate plane and oscillator, initialised to RoPE's geometric frequencies over
    the head's d·D/2 planes (RoPE on a head of width d·D; for D = 2 the torus's ω exactly). Embedding: a vector
    w ∈ R^{D−1} per byte and oscillator (256, n, D − 1), read as exp_{e₀}((0, w)) = (cos|w|, sinc|w| w) from the base
    point e₀ = (1, 0, …, 0): angles, as the torus's (D = 2: (cos θ, sin θ)) and SU(2)'s rotation vectors (D = 4: the
    same map), so it joins the optimiser's phase group; drawn so that the initial states are uniform on S^{D−1}.
    """

    name = "sphere"
    state_name = "unit vectors x"
    fused_move, fused_step = staticmethod(sphere_move), staticmethod(sphere_step)  # exp_move's and norm_step's
    fused_query_key = staticmethod(sphere_query_key)  # gated_query_key's

    def __init__(self, ambient: int = AMBIENT) -> None:
        if not isinstance(ambient, int) or ambient < 2 or ambient % 2:
            raise ValueError(f"the sphere's ambient dimension D must be an even integer >= 2 (the drift rotates "
                             f"coordinate pairs), got {ambient!r}")
        self.components = ambient  # the lift: each oscillator's D coordinates
        self.tangent = ambient  # the increment in ambient coordinates (the tangent space has D − 1 dimensions)
        self.planes = ambient // 2

    def init_drift(self, oscillators: int, heads: int, base: float) -> Tensor:
        d = oscillators // heads  # oscillator j's planes take neighbouring rates: j·D/2 … (j+1)·D/2 − 1
        return rotary_angles(d * self.planes, base).view(d, self.planes).repeat(heads, 1).float()  # (n, D/2)

    def rotated(self, x: Parts, pos: Tensor, drift: Tensor) -> Parts:
        """R(tΩ_j) x_{t,j}; drift (n, D/2)."""
        return rotate_planes(x, tuple(pos[:, None] * c for c in drift.unbind(-1)))

    def tangent_part(self, x: Parts, mean: Parts) -> Parts:
        """ξ = P_x G."""
        return project(x, mean)

    def exp_move(self, x: Parts, w: Parts) -> Parts:
        """exp_x(P_x w). The projection makes the move exact when the bounded step is not tangent: the elementwise
        bound, the feed-forward's and the value projection's increments (for the Kuramoto increment with the norm
        bound it only undoes rounding)."""
        return exp_map(x, project(x, w))

    def drift_rate(self, drift: Tensor) -> Tensor:
        """√(mean_p Ω_{j,p}²): the root-mean-square speed (radians per token) of a state uniform on S^{D−1} under
        R(tΩ_j), E|d/dt R(tΩ)x|² = Σ_p Ω_p² E[x_{2p}² + x_{2p+1}²] = (2/D) Σ_p Ω_p²; |ω| for D = 2."""
        return drift.square().mean(-1).sqrt()
