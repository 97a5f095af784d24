import math

import pytest
import torch

from kuramoto_attention.layers import naive
from kuramoto_attention.layers.naive import circular_mean
from kuramoto_attention.ops import torus
from kuramoto_attention.ops.torus import bound_elementwise, bound_norm, lift, tangent_projection, wrap


def test_lift_is_on_unit_circle_and_periodic():
    theta = torch.randn(5, 7, dtype=torch.float64) * 10
    psi = lift(theta)
    assert psi.shape == (5, 14)
    assert torch.allclose(psi[:, :7] ** 2 + psi[:, 7:] ** 2, torch.ones(5, 7, dtype=torch.float64))
    assert torch.allclose(lift(theta + 2 * math.pi), psi, atol=1e-12)


def test_wrap_principal_representative():
    theta = torch.randn(100, dtype=torch.float64) * 20
    w = wrap(theta)
    assert (w >= -math.pi).all() and (w < math.pi).all()
    assert torch.allclose(lift(w), lift(theta), atol=1e-12)


def test_circular_mean_modulus_at_most_one_and_tangent_bounded():
    theta = torch.randn(6, 4, dtype=torch.float64) * 3
    weights = torch.softmax(torch.randn(3, 6, dtype=torch.float64), dim=-1)
    re, im = circular_mean(weights, theta)
    mod = torch.sqrt(re**2 + im**2)
    assert (mod <= 1 + 1e-12).all()
    th = torch.randn(3, 4, dtype=torch.float64)
    a = tangent_projection(th.cos(), th.sin(), re, im)
    assert (a.abs() <= mod + 1e-12).all()  # |a| ≤ |G| ≤ 1


def test_bound_norm_never_exceeds_radius_and_keeps_direction():
    r = torch.tensor(0.7, dtype=torch.float64)
    x = torch.randn(50, 8, dtype=torch.float64) * torch.logspace(-6, 3, 50, dtype=torch.float64)[:, None]
    y = bound_norm(x, r)
    assert (y.norm(dim=-1) <= r * (1 + 1e-12)).all()  # = r only where tanh rounds to 1
    cos = torch.nn.functional.cosine_similarity(x, y, dim=-1)
    assert torch.allclose(cos, torch.ones_like(cos))
    # small increments are scaled by r and keep their proportions
    small = x[:3]
    assert torch.allclose(bound_norm(small, r), r * small, rtol=1e-8)


def test_bound_norm_finite_gradient_at_zero():
    x = torch.zeros(3, 4, dtype=torch.float64, requires_grad=True)
    r = torch.tensor(2.0, dtype=torch.float64)
    bound_norm(x, r).sum().backward()
    assert torch.isfinite(x.grad).all()
    assert torch.allclose(x.grad, torch.full_like(x, 2.0))  # d/dx (r x) at 0
    assert torch.autograd.gradcheck(
        lambda z: bound_norm(z, r), (torch.randn(2, 5, dtype=torch.float64, requires_grad=True),)
    )
    tiny = (torch.randn(2, 5, dtype=torch.float64) * 1e-4).requires_grad_()
    assert torch.autograd.gradcheck(lambda z: bound_norm(z, r), (tiny,))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_bound_norm_of_a_zero_increment_is_zero_in_every_dtype(dtype):
    # the first token attends only to itself: its increment is exactly 0, and must stay 0 (not 0/0)
    x = torch.zeros(2, 8, dtype=dtype)
    assert torch.equal(bound_norm(x, torch.tensor(3.0, dtype=dtype)), x)


def test_bound_elementwise():
    r = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64)
    x = torch.randn(20, 3, dtype=torch.float64) * 100
    y = bound_elementwise(x, r)
    assert (y.abs() <= r).all()
    assert (torch.sign(y) == torch.sign(x)).all()


def test_lift_hand_fused_gradient():
    """The hand-written backward of ψ equals autograd's through cos and sin, any leading shape."""
    theta = (torch.rand(3, 5, 7, dtype=torch.float64) * 20 - 10).requires_grad_()
    assert torch.autograd.gradcheck(lift, (theta,))
    weights = torch.randn(3, 5, 14, dtype=torch.float64)
    (grad,) = torch.autograd.grad((lift(theta) * weights).sum(), theta)
    (expected,) = torch.autograd.grad((torch.cat((theta.cos(), theta.sin()), -1) * weights).sum(), theta)
    torch.testing.assert_close(grad, expected, rtol=1e-12, atol=1e-12)
    assert lift(theta.detach()[0, 0]).shape == (14,)
    t = theta.detach().transpose(0, 1)  # non-contiguous input
    torch.testing.assert_close(lift(t), torch.cat((t.cos(), t.sin()), -1), rtol=0, atol=0)
    b = theta.detach().bfloat16()
    assert lift(b).dtype == torch.bfloat16
    torch.testing.assert_close(lift(torch.arange(3)), lift(torch.arange(3.0)))  # integer angles: floats out


def test_lift_without_graph_is_the_same_for_small_and_large_inputs():
    """Without autograd, small inputs (a decoding step) take torch.cat and large ones the halves: same values."""
    theta = torch.rand(2, 300, 129) * 20 - 10  # above the small-input size; rows not a multiple of the vector width
    assert theta.numel() > torus._SMALL
    large = lift(theta)
    small = torch.cat([lift(row) for row in theta.split(1, dim=1)], dim=1)  # one position at a time
    torch.testing.assert_close(large, small, rtol=0, atol=0)
    torch.testing.assert_close(large, torch.cat((theta.cos(), theta.sin()), -1), rtol=0, atol=0)


def test_lift_does_not_break_a_compiled_graph():
    import torch._dynamo

    explanation = torch._dynamo.explain(lambda x: lift(x) * 2)(torch.randn(4, 6))
    assert explanation.graph_break_count == 0


def test_fast_primitives_equal_the_paper_in_one_file():
    """Each fast primitive is the literal formula of ``naive.py``: lift, tangent projection, both bounds."""
    theta = torch.randn(3, 5, 8, dtype=torch.float64) * 4
    torch.testing.assert_close(lift(theta), naive.psi(theta), rtol=0, atol=0)
    re, im = torch.randn(2, 3, 5, 8, dtype=torch.float64)
    torch.testing.assert_close(tangent_projection(theta.cos(), theta.sin(), re, im),
                               naive.tangent_increment(theta, re, im), rtol=0, atol=1e-15)
    x, r = torch.randn(3, 5, 8, dtype=torch.float64) * 3, torch.tensor(2.5, dtype=torch.float64)
    torch.testing.assert_close(bound_norm(x, r), naive.bound_norm(x, r), rtol=1e-13, atol=1e-14)
    torch.testing.assert_close(bound_elementwise(x, r), naive.bound_elementwise(x, r), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_norm_factor_backward_is_autograds_to_the_bit(dtype):
    """The written-out backward of the bound's factor (what the fused steps use) runs autograd's operations: the same
    numbers, at s = 0, at and below the floor, and across magnitudes; dL/dlog r for a radius of either dtype."""
    from kuramoto_attention.ops.torus import norm_factor, norm_factor_backward

    gen = torch.Generator().manual_seed(0)
    sq = (10 ** (torch.rand(6, 40, 1, generator=gen, dtype=torch.float64) * 18 - 14)).to(dtype)
    sq[0, :3] = 0.0
    sq[1, :2] = 1e-12
    along = torch.randn(6, 40, 1, generator=gen, dtype=dtype)
    for log_radius in (torch.randn(1, generator=gen), torch.randn(1, generator=gen, dtype=dtype)):
        s, lr = sq.clone().requires_grad_(), log_radius.clone().requires_grad_()
        want = torch.autograd.grad(norm_factor(s, lr.exp().to(dtype)), (s, lr), grad_outputs=along)
        got = norm_factor_backward(along, sq, log_radius, need_radius=True)
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
        assert torch.equal(norm_factor_backward(along, sq, log_radius, need_radius=False)[0], want[0])
