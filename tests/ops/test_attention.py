"""``ops.attention``'s no-self-coupling attention on the CPU's flash kernel (``no_self_flash``) against the plain path
it replaces in training (``causal_attention`` without autograd's help: SDPA on the shifted views, then the first
row): the same operator on the same numbers, so the same values and gradients to the bit."""

import pytest
import torch
import torch.nn.functional as F

from kuramoto_attention.ops.attention import keyed_values, no_self_flash, sdpa


def plain(q, k, v, scale, successor_heads):
    rest = sdpa(q[..., 1:, :], k[..., :-1, :], keyed_values(v, successor_heads), is_causal=True, scale=scale)
    return torch.cat((v[..., :1, :], rest), dim=-2)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("successor_heads", [0, 1, 3])
@pytest.mark.parametrize("value_width", [6, 4])  # as wide as the features, and narrower (padded: the clocks)
def test_values_and_gradients_are_the_plain_paths_to_the_bit(dtype, successor_heads, value_width):
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(2, 3, 7, 6, generator=gen, dtype=torch.float64).to(dtype).requires_grad_() for _ in "qk")
    v = torch.randn(2, 3, 7, value_width, generator=gen, dtype=torch.float64).to(dtype).requires_grad_()
    w = torch.randn(2, 3, 7, value_width, generator=gen, dtype=torch.float64).to(dtype)
    outs = []
    for fn in (no_self_flash, plain):
        out = fn(q, k, v, 0.4, successor_heads)
        outs.append((out, torch.autograd.grad((out * w).sum(), (q, k, v))))
    (got, got_grads), (want, want_grads) = outs
    assert torch.equal(got, want)
    for a, b in zip(got_grads, want_grads, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)


def test_is_the_masked_softmax_in_float64():
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 9, 4, generator=gen, dtype=torch.float64) for _ in range(3))
    mask = torch.ones(9, 9, dtype=torch.bool).tril(-1)
    mask[0, 0] = True  # token 0 reads itself
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.5)
    torch.testing.assert_close(no_self_flash(q, k, v, 0.5, 0), want, rtol=0, atol=1e-12)


def test_the_flash_path_steps_aside_where_sdpa_itself_would_not_take_flash(monkeypatch):
    """The math backend asked for, or float32 inputs under bf16 autocast (SDPA casts them): the plain path."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from kuramoto_attention.ops import attention

    def refuse(*args):
        raise AssertionError("no_self_flash ran")

    q, k, v = (torch.randn(1, 2, 5, 4, requires_grad=True) for _ in range(3))
    monkeypatch.setattr(attention, "no_self_flash", refuse)
    with sdpa_kernel(SDPBackend.MATH):
        attention.causal_attention(q, k, v, scale=0.5, exclude_self=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        attention.causal_attention(q, k, v, scale=0.5, exclude_self=True)
    with pytest.raises(AssertionError, match="ran"):  # and otherwise it is what runs
        attention.causal_attention(q, k, v, scale=0.5, exclude_self=True)


def _clones_in_flash_backward(run) -> int:
    """How many copies ``run`` makes inside the CPU flash kernel's backward."""
    from torch.profiler import ProfilerActivity, profile

    def inside(e) -> bool:
        while (e := e.cpu_parent) is not None:
            if "flash_attention_for_cpu_backward" in e.name:
                return True
        return False

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run()
    return sum(e.name == "aten::clone" and inside(e) for e in prof.events())


@pytest.mark.parametrize("value_width", [8, 6])  # as wide as the features, and narrower (padded)
def test_the_backward_hands_the_kernel_its_gradient_in_the_kernels_layout(value_width):
    """The flash backward copies a gradient given (B, H, T, d) into (B, T, H, d); ours is written there once."""
    from kuramoto_attention.ops.attention import _FLASH, _FLASH_BACKWARD

    q, k, v = (torch.randn(2, 3, 9, 8, dtype=torch.bfloat16) for _ in range(3))
    out, lse = _FLASH(q, k, v, 0.0, True, scale=0.3)
    plain = torch.ones(out.shape, dtype=out.dtype)  # (B, H, T, d) contiguous, whatever layout ``out`` has
    if not _clones_in_flash_backward(lambda: _FLASH_BACKWARD(plain, q, k, v, out, lse, 0.0, True, scale=0.3)):
        pytest.skip("this torch's flash backward takes (B, H, T, d) gradients as they are")
    q, k = (x.requires_grad_() for x in (q, k))
    v = v[..., :value_width].clone().requires_grad_()
    mean = no_self_flash(q, k, v, 0.3, 1)
    assert _clones_in_flash_backward(lambda: mean.sum().backward()) == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compiled_runs_the_same_operators_whole(dtype):
    """Under torch.compile (one graph, no break) the no-self path runs as its two custom operators: the eager path's
    values and gradients to the bit, and none of the plain path's slices, pads or concatenations left to inductor."""
    from kuramoto_attention.ops.attention import causal_attention

    def run(q, k, v):
        return causal_attention(q, k, v, scale=0.3, exclude_self=True, successor_heads=1)

    gen = torch.Generator().manual_seed(2)
    q, k = (torch.randn(2, 3, 9, 8, generator=gen).to(dtype).requires_grad_() for _ in "qk")
    v = torch.randn(2, 3, 9, 6, generator=gen).to(dtype).requires_grad_()
    w = torch.randn(2, 3, 9, 6, generator=gen)
    torch._dynamo.reset()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm

    results = []
    for fn in (run, torch.compile(run, backend=backend, fullgraph=True)):
        out = fn(q, k, v)
        results.append((out, torch.autograd.grad((out.float() * w).sum(), (q, k, v))))
    (want, want_grads), (got, got_grads) = results
    assert torch.equal(got, want)
    assert all(torch.equal(a, b) for a, b in zip(got_grads, want_grads, strict=True))
    targets = [str(node.target) for gm in graphs for module in gm.modules() if isinstance(module, torch.fx.GraphModule)
               for node in module.graph.nodes if node.op == "call_function"]
    assert any("no_self_forward" in t for t in targets) and any("no_self_backward" in t for t in targets)
    assert not any(name in t for t in targets for name in ("pad", "cat", "scaled_dot_product"))


@pytest.mark.parametrize("successor_heads", [0, 1])
def test_the_custom_operators_pass_torch_library_opcheck(successor_heads):
    """Schema, fake tensors (shapes and strides as the real kernels give them), autograd registration and
    torch.compile's dispatch of both operators, as ``torch.library.opcheck`` checks them."""
    from kuramoto_attention.ops.attention import no_self_backward, no_self_forward

    gen = torch.Generator().manual_seed(3)
    q, k = (torch.randn(2, 3, 7, 8, generator=gen, dtype=torch.bfloat16) for _ in "qk")
    v = torch.randn(2, 3, 7, 6, generator=gen, dtype=torch.bfloat16)
    torch.library.opcheck(no_self_forward, (q, k, v, 0.3, successor_heads))
    mean, keyed, out, lse = no_self_forward(q, k, v, 0.3, successor_heads)
    grad = torch.randn(mean.shape, generator=gen, dtype=torch.bfloat16)
    torch.library.opcheck(no_self_backward, (grad, q, k, keyed, out, lse, 0.3, successor_heads))
