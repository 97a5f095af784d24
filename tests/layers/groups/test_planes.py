"""What SU(2) and the sphere share (planes.py): cos and sinc of |w| from |w|², the embedding."""

import pytest
import torch

from kuramoto_attention.layers.groups.planes import cos_sinc
from kuramoto_attention.layers.groups.sphere import Sphere
from kuramoto_attention.layers.groups.su2 import SU2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("low", [1e-2, 0.0])  # every |w|² past the series' range; some inside it (and 0)
def test_cos_sinc_without_gradient_gives_the_same_numbers(low, dtype):
    """Without a gradient to guard, cos_sinc skips the series when no |w|² needs it: the numbers are the guarded
    path's, bit for bit, either way."""
    a2 = torch.cat((torch.tensor([low]), torch.rand(999) * 20 + low)).to(dtype)
    guarded = [c.detach() for c in cos_sinc(a2.clone().requires_grad_())]
    with torch.no_grad():
        fast = cos_sinc(a2)
    for got, want in zip(fast, guarded, strict=True):
        assert torch.equal(got, want)
    assert torch.isfinite(fast[1]).all()


@pytest.mark.parametrize("group", [SU2, Sphere])
def test_the_embedding_of_many_tokens_reads_the_exponential_of_each_row(group):
    """With at least as many tokens as rows the embedding takes each row's exponential once, then reads it: the
    states are the per-token exponential's to the bit (stored component-major), the table's gradient the same sum."""
    geo = group()
    table = geo.init_embedding(256, 6).double().requires_grad_()
    idx = torch.randint(0, 256, (3, 100), generator=torch.Generator().manual_seed(0))
    many = geo.embed(table, idx)  # 300 tokens: the rows' exponential
    few = torch.cat([geo.embed(table, row[None]) for row in idx])  # 100 tokens each: each token's exponential
    assert torch.equal(many, few)
    assert many.movedim(-1, 0).is_contiguous()
    weight = torch.randn_like(many)
    grads = [torch.autograd.grad((states * weight).sum(), table)[0] for states in (many, few)]
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-12, atol=1e-12)
