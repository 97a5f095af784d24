"""Analytic model FLOPs per token, the one count the benchmark and the lab's equal-compute runs both use.

Training FLOPs per token = 6 × (parameters that multiply an activation, counted once per application) plus
6 × depth × context × (query/key width + value width) for the attention's two T×T matmuls (forward and
backward, averaged over the causal triangle as the usual 6N + 6·L·T·d count does).
"""

from __future__ import annotations

from torch import nn

from kuramoto_attention.models.transformer import TransformerLM


def model_flops(model: nn.Module, context: int) -> dict[str, int]:
    """Analytic training FLOPs per token, counted as ``FLOPS_METHOD`` states (it goes into the document)."""
    cfg = model.config
    n_mm = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    if isinstance(model, TransformerLM):
        n_mm += model.tok_embedding.weight.numel() if model.head is None else 0
        d_qk = d_v = cfg.dim
    else:
        n_mm += sum((uses - 1) * m.weight.numel() for m, uses in shared_uses(model))
        # a cross-coupling mix applies as a real (2d × 2d) map per head: 4d² multiplies per token from 2d² weights
        n_mm += sum(2 * m.delta.numel() for b in model.blocks if b.attn.extras is not None
                    for m in (getattr(b.attn.extras, "query_mix", None), getattr(b.attn.extras, "coupling_mix", None))
                    if m is not None)
        # the embedding is a lookup (then ψ or exp, elementwise), not a matmul; the readout is an nn.Linear of φ
        att, c = cfg.attention, model.geometry.components  # c real features per oscillator: torus 2, SU(2) 4
        d_qk = c * cfg.dim + 2 * att.clock * cfg.heads  # φ's features, then each head's clock features
        # the values' useful width (the kernel pads the narrower side with zeros: ops/attention.py sdpa): the c·n lift
        # for the Kuramoto step (M times over with M coupling harmonics), the n·tangent increment for the projection
        # ablation
        d_v = c * cfg.dim * att.harmonics if att.value == "circular" else cfg.dim * model.geometry.tangent
    attn = 6 * cfg.depth * context * (d_qk + d_v)
    return {"matmul_params": n_mm, "d_qk": d_qk, "d_v": d_v, "flops_per_token": 6 * n_mm + attn}


def shared_uses(model: nn.Module) -> list[tuple[nn.Linear, int]]:
    """The Kuramoto model's modules that several layers apply, each with how often one forward pass applies it,
    read off the built blocks: the shared gates once per layer that has gates; the shared P once per layer whose
    feed-forward reads it, and once more per layer whose metric gates or value gate read it (the two compute one
    P φ(x) when both read it: ``KuramotoAttention._mapped``)."""
    out = []
    if model.shared_gates is not None:
        layers = sum(b.attn.gate_module is model.shared_gates for b in model.blocks)
        out.append((model.shared_gates.proj, layers))
    p = model.shared_ff_proj
    if p is not None:
        by_ff = sum(b.ff is not None and b.ff.source.module is p for b in model.blocks)
        out.append((p, by_ff + sum(m is p for b in model.blocks for m in b.attn.input_maps())))
    return out
