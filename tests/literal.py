"""A layer's step computed from the literal T × T references (``layers/naive.py``, ``naive_variants.py`` and each
group's ``naive_*.py``), fed the layer's parameters: the ground truth both of the layer's paths are tested against.
Nothing here runs the layer's own feature or attention code."""

import torch
import torch.nn.functional as F
from torch import Tensor

from kuramoto_attention.layers import naive, naive_variants
from kuramoto_attention.layers.groups import naive_sphere, naive_su2
from kuramoto_attention.layers.kuramoto_attention import KuramotoAttention


def literal_gates(layer: KuramotoAttention, x: Tensor) -> tuple[Tensor, Tensor]:
    """g^q, g^k (B, H, T, d): ρ of the layer's gate logits (ones with gates off)."""
    module, b, t = layer.gate_module, x.shape[0], x.shape[1]
    if module is None:
        ones = torch.ones(b, layer.heads, t, layer.head_dim, dtype=x.dtype)
        return ones, ones
    inputs = layer.geometry.lift(x)
    if module.source.module is not None:
        inputs = module.source.module(inputs)
    z_q, z_k = module.proj(inputs).chunk(2, dim=-1)
    return naive.rho(naive.heads(z_q, layer.heads)), naive.rho(naive.heads(z_k, layer.heads))


def literal_kernel(layer: KuramotoAttention, x: Tensor) -> Tensor:
    """The per-oscillator similarity of every pair with the drift written out: (B, H, T, T, d)."""
    h, d, omega, extras = layer.heads, layer.head_dim, layer.omega, layer.extras
    group = layer.geometry.name
    if group == "torus":
        beta = None if extras is None or extras.lag is None else extras.lag.view(h, d)
        mix = None if extras is None or extras.query_mix is None else extras.query_mix.matrix(x.dtype)
        return naive_variants.kernel(naive.heads(x, h), omega.view(h, d), beta, mix)
    if group == "su2":
        return naive_su2.kernel(naive_su2.heads(x, h), omega.view(h, d, 3))
    if group == "sphere":
        return naive_sphere.kernel(naive_sphere.heads(x, h), omega.view(h, d, -1))
    raise AssertionError(f"no literal reference for group {group!r}")


def literal_scores(layer: KuramotoAttention, x: Tensor) -> Tensor:
    """s_{t,u} (B, H, T, T) before masking (clock term included)."""
    gq, gk = literal_gates(layer, x)
    tau = layer.log_tau.exp()
    s = naive.score(literal_kernel(layer, x), gq, gk, tau)
    if layer.clock is not None:
        c = layer.clock
        s = s + naive_variants.clock_score(c.weight, c.omega, c.lag, x.shape[1], tau, layer.head_dim)
    return s


def literal_attention(layer: KuramotoAttention, x: Tensor) -> Tensor:
    """A (B, H, T, T): the causal softmax of the literal scores."""
    return naive_variants.coupling_matrix(literal_scores(layer, x), layer.config.self_coupling)


def _successor_rows(per_head: Tensor, succ: int) -> Tensor:
    """The states each key brings in successor heads: θ_{u+1} (head-major per_head (B, H, T, …))."""
    if not succ:
        return per_head
    shifted = torch.cat((per_head[:, :, 1:], per_head[:, :, -1:]), dim=2)
    return torch.cat((per_head[:, :-succ], shifted[:, -succ:]), dim=1)


def literal_increment(layer: KuramotoAttention, x: Tensor, attn: Tensor) -> Tensor:
    """Σ_u A_{t,u} (the pair's tangent term), term by term: (B, T, n·tangent); for the projection ablation
    A · W_v φ(x)."""
    h, group, succ, extras = layer.heads, layer.geometry.name, layer.config.successor_heads, layer.extras
    if layer.value_proj is not None:
        values = naive.heads(layer.value_proj(layer.geometry.lift(x)), h)
        out = attn @ _successor_rows(values, succ)
        if succ:
            out[:, -succ:, 0] = values[:, -succ:, 0]  # token 0 reads its own value
        return naive.merge(out)
    if group == "torus":
        theta = naive.heads(x, h)
        if succ:  # the successor heads' sums written out: Σ_u A_{t,u} Σ_m c_m sin(m(θ_{u+1} − θ_t)), c_1 = 1
            assert extras is None or extras.coupling_mix is None, "no literal form of K with successor values here"
            diff = _successor_rows(theta, succ)[..., None, :, :] - theta[..., :, None, :]  # [t, u]
            weights = [torch.ones(x.shape[-1], dtype=x.dtype)]
            if extras is not None and extras.harmonics is not None:
                weights += list(extras.harmonics.weight)
            terms = sum(c.view(h, 1, 1, -1) * torch.sin(m * diff) for m, c in enumerate(weights, start=1))
            inc = (attn[..., None] * terms).sum(dim=-2)
            inc[:, -succ:, 0] = 0.0  # token 0 reads its own state in a successor head
            return naive.merge(inc)
        if extras is not None and extras.coupling_mix is not None:
            inc = extras.coupling_mix.reference_increment(x, attn)
        else:
            inc = naive.merge(naive.kuramoto_sum(attn, theta))
        if extras is not None and extras.harmonics is not None:
            inc = inc + extras.harmonics.reference_increment(x, attn)
        return inc
    ref = naive_su2 if group == "su2" else naive_sphere
    states = ref.heads(x, h)
    pair_sum = ref.lohe_sum if group == "su2" else ref.tangent_sum
    if not succ:
        return ref.merge(pair_sum(attn, states))
    # successor heads: key u brings x_{u+1}; token 0 reads its own state (a zero increment)
    plain = pair_sum(attn, states)
    sources = _successor_rows(states, succ)
    x_t, x_u = states[..., :, None, :, :], sources[..., None, :, :, :]
    if group == "su2":
        pair = naive_su2.product(naive_su2.conjugate(x_t), x_u)[..., 1:]  # Im(conj(q_t) q_{u+1})
    else:
        pair = x_u - (x_u * x_t).sum(-1, keepdim=True) * x_t
    shifted = (attn[..., None, None] * pair).sum(dim=-3)
    shifted[:, :, 0] = 0.0
    return ref.merge(torch.cat((plain[:, :-succ], shifted[:, -succ:]), dim=1))


def literal_step(layer: KuramotoAttention, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(new states, the raw increment, A) from the literal references."""
    attn = literal_attention(layer, x)
    inc = literal_increment(layer, x, attn)
    v = layer.value(layer.geometry.lift(x))
    group, kind, bound = layer.geometry.name, layer.config.bound, layer.bound
    radius = bound.radius

    def bounded(w: Tensor) -> Tensor:
        if kind == "norm":
            return naive.bound_norm(w, radius)
        return naive.bound_elementwise(w, radius)

    if group == "torus":
        return x + bounded(v * inc), inc, attn
    ref = naive_su2 if group == "su2" else naive_sphere
    if layer.value_proj is not None:  # the ablation's increment is not tangent: the geometry's own move
        new = layer.geometry.move(x, bounded(layer.geometry.tangent_gate(v) * inc))
        return new, inc, attn
    # the layer divides each moved state by its norm (which undoes rounding only, but orients the gradient)
    return F.normalize(ref.step(x, inc, v, bounded), dim=-1), inc, attn
