"""What SU(2) and the sphere share (planes.py): cos and sinc of |w| from |w|²."""

import pytest
import torch

from kuramoto_attention.layers.groups.planes import cos_sinc


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
