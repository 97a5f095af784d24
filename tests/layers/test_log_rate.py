"""omega="log": the drift rates learned as log ω (layers/log_rate.py). The same layer at init, the same paths, a
gradient that is ω times ω's, and an optimiser step that moves every rate by the same relative amount."""

import pytest
import torch
from conftest import assert_paths_agree, random_phases

from kuramoto_attention import AttentionConfig, KuramotoConfig, KuramotoLM
from kuramoto_attention.layers.kuramoto_attention import KuramotoAttention
from kuramoto_attention.layers.log_rate import raw
from kuramoto_attention.training.config import TrainConfig
from kuramoto_attention.training.optim import make_optimizer

B, T, K, H = 2, 7, 8, 2


def tiny(**fields) -> KuramotoLM:
    torch.manual_seed(0)
    return KuramotoLM(KuramotoConfig(dim=K, depth=2, heads=H, ff_hidden=8, context=16,
                                     attention=AttentionConfig(**fields))).double()


def pair(**fields) -> tuple[KuramotoLM, KuramotoLM]:
    """The same model with ω learned as itself and as log ω: the same draws, and the same ω exactly (the layer is
    built in float32, so log ω's rounding is given to both)."""
    linear, log = tiny(**fields), tiny(omega="log", **fields)
    with torch.no_grad():
        for a, b in zip(linear.blocks, log.blocks, strict=True):
            for owner_a, owner_b in ((a.attn, b.attn), *([(a.attn.clock, b.attn.clock)] if a.attn.clock else [])):
                owner_a.omega.copy_(owner_b.omega)
    return linear, log


@pytest.mark.parametrize("fields", [{}, {"clock": 2, "self_coupling": False, "phase_lag": True}])
def test_log_rates_fused_equal_reference(fields):
    layer = KuramotoAttention(K, H, omega="log", **fields).double()
    with torch.no_grad():  # away from the symmetric init, as test_layer does (here ℓ moves, so ω by a factor)
        for p in layer.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    assert_paths_agree(layer, random_phases(B, T, K))


@pytest.mark.parametrize("fields", [{}, {"clock": 2}])
def test_at_init_the_model_is_the_learned_rates_one(fields):
    start = tiny(**fields)  # as built: log ω's float32 rounding moves ω by no more than that
    for a, b in zip(start.blocks, tiny(omega="log", **fields).blocks, strict=True):
        torch.testing.assert_close(b.attn.omega, a.attn.omega, rtol=1e-6, atol=0)
    linear, log = pair(**fields)
    idx = torch.randint(0, 256, (B, T))
    torch.testing.assert_close(log(idx), linear(idx), rtol=0, atol=1e-12)
    assert log.num_params() == linear.num_params()


def test_the_log_rate_gradient_is_omega_times_the_rate_gradient():
    linear, log = pair(clock=2)
    idx = torch.randint(0, 256, (B, T))
    linear(idx).square().mean().backward()
    log(idx).square().mean().backward()
    for a, b in zip(linear.blocks, log.blocks, strict=True):
        for owner_a, owner_b in ((a.attn, b.attn), (a.attn.clock, b.attn.clock)):
            rate = owner_a.omega.detach()
            torch.testing.assert_close(raw(owner_b, "omega").grad, rate * owner_a.omega.grad, rtol=1e-9, atol=1e-14)


def test_an_adam_step_moves_every_rate_by_the_same_factor():
    """The reason for the field: Adam's first step is lr·sign(g) per element (where |g| is far above its eps), so
    learned as itself every rate moves by the same absolute amount, RoPE's slowest by many times its size; learned as
    log ω every rate moves by at most the same factor, and none crosses zero."""
    lr, mult = 1e-3, 20.0
    for omega in ("learned", "log"):
        model = tiny(omega=omega)
        opt = make_optimizer(model, TrainConfig(steps=1, lr=lr, weight_decay=0.0, phase_lr_mult=mult))
        old = torch.cat([b.attn.omega.detach().clone() for b in model.blocks])
        model(torch.randint(0, 256, (B, T))).square().mean().backward()
        clear = torch.cat([raw(b.attn, "omega").grad for b in model.blocks]).abs() > 1e-5
        for g in opt.param_groups:
            g["lr"] = lr * g["lr_mult"]
        opt.step()
        new = torch.cat([b.attn.omega.detach() for b in model.blocks])
        step = (new - old).abs() if omega == "learned" else (new.log() - old.log()).abs()
        assert clear.any()
        torch.testing.assert_close(step[clear], torch.full_like(step[clear], lr * mult), rtol=1e-3, atol=0)
        if omega == "learned":
            slow = clear & (old < lr * mult)  # RoPE's slow end, below one absolute step
            assert slow.any() and ((new - old).abs()[slow] / old[slow] >= 1).all()
        else:
            assert (step <= lr * mult * (1 + 1e-3)).all() and (new > 0).all()


def test_log_rates_are_the_omega_group_and_angles():
    model = tiny(omega="log", clock=2)
    # a multiplier no other group has: ℓ must be in ω's own group, not merely undecayed
    groups = make_optimizer(model, TrainConfig(steps=1, phase_lr_mult=20.0, omega_lr_mult=5.0)).param_groups
    by_id = {id(p): g for g in groups for p in g["params"]}
    attn = model.blocks[0].attn
    for owner, name in ((attn, "blocks.0.attn.parametrizations.omega.original"),
                        (attn.clock, "blocks.0.attn.clock.parametrizations.omega.original")):
        ell = raw(owner, "omega")
        assert isinstance(ell, torch.nn.Parameter) and by_id[id(ell)]["lr_mult"] == 5.0
        assert by_id[id(ell)]["weight_decay"] == 0
        assert name in model.omega_parameter_names() and name in model.phase_parameter_names()
        torch.testing.assert_close(owner.omega, ell.exp())
    assert by_id[id(attn.clock.lag)]["lr_mult"] == 20.0


def test_log_rates_survive_a_save_and_load(tmp_path):
    model = tiny(omega="log", clock=2)
    with torch.no_grad():
        raw(model.blocks[0].attn, "omega").add_(0.5)
    model.save_pretrained(tmp_path / "ckpt")
    loaded = KuramotoLM.from_pretrained(tmp_path / "ckpt").double()
    idx = torch.randint(0, 256, (B, T))
    torch.testing.assert_close(loaded(idx), model(idx))


def test_cached_generation_matches_recomputation_with_log_rates():
    model = tiny(omega="log", clock=2).float().eval()
    prompt = torch.randint(0, 256, (1, 5))
    assert torch.equal(model.generate(prompt, 8, temperature=0),
                       model.generate(prompt, 8, temperature=0, use_cache=False))


def test_a_rate_assigned_below_zero_is_refused_and_nothing_changes():
    layer = KuramotoAttention(K, H, omega="log")
    before = layer.omega.detach().clone()
    with torch.no_grad(), pytest.raises(ValueError, match="rates learned as log ω must be > 0, got a minimum of -1"):
        layer.omega = torch.full_like(before, -1.0)
    torch.testing.assert_close(layer.omega, before)
    with torch.no_grad():  # a positive assignment is stored as its log
        layer.omega = before * 2
    torch.testing.assert_close(raw(layer, "omega"), (before * 2).log())


def test_log_rates_off_the_torus_are_refused():
    with pytest.raises(ValueError, match="omega='log' is not defined on the su2 group"):
        KuramotoAttention(4, 2, group="su2", omega="log")
    with pytest.raises(ValueError, match="omega must be 'learned', 'log' or 'zero'"):
        AttentionConfig(omega="exp")
