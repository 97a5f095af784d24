import math

import pytest
import torch

from kuramoto_attention import KuramotoConfig, KuramotoLM, TransformerConfig, TransformerLM
from kuramoto_attention.errors import ConfigError
from kuramoto_attention.models.presets import NOMINAL, build_model, get_preset, preset_table
from kuramoto_attention.ops.torus import lift

TINY_KA = dict(dim=16, depth=2, heads=2, ff_hidden=24)
TINY_TF = dict(dim=16, depth=2, heads=2, ff_hidden=24)


def tiny_models():
    yield "ka", KuramotoLM(KuramotoConfig(**TINY_KA)).double()
    for ff in ("lift", "none"):
        yield f"ka-ff-{ff}", KuramotoLM(KuramotoConfig(**TINY_KA, ff=ff)).double()
    yield "ka-shared", KuramotoLM(KuramotoConfig(**TINY_KA, shared_gates=True)).double()
    yield "ka-no-self", KuramotoLM(KuramotoConfig(**TINY_KA, self_coupling=False)).double()
    yield "ka-lag", KuramotoLM(KuramotoConfig(**TINY_KA, phase_lag=True, phase_lag_spread=1.0)).double()
    yield "ka-content-lag", KuramotoLM(KuramotoConfig(**TINY_KA, content_lag=True)).double()
    clock = KuramotoLM(KuramotoConfig(**TINY_KA, clock=2)).double()
    with torch.no_grad():  # nonzero clock weights, so the cache must carry the clock's key features
        for block in clock.blocks:
            block.attn.clock.weight.normal_()
    yield "ka-clock", clock
    step = KuramotoLM(KuramotoConfig(**TINY_KA, step_gate=True)).double()
    with torch.no_grad():  # a step size that depends on the token, so the cached path must compute it per token
        for block in step.blocks:
            block.attn.step_gate.weight.normal_()
    yield "ka-step-gate", step
    yield "ka-gates-read-p", KuramotoLM(KuramotoConfig(**TINY_KA, ff_proj="shared", ff_proj_dim=6,
                                                      value_gate_input="ff-proj", gates_input="ff-proj")).double()
    for ff in ("lift", "angles"):
        yield f"ka-ff-{ff}-tangent", KuramotoLM(KuramotoConfig(**TINY_KA, ff=ff, ff_output="tangent")).double()
    yield "tf", TransformerLM(TransformerConfig(**TINY_TF)).double()
    yield "tf-untied", TransformerLM(TransformerConfig(**TINY_TF, tied=False)).double()


@pytest.mark.parametrize("name,model", list(tiny_models()))
def test_forward_shape_and_causality(name, model):
    idx = torch.randint(0, 256, (2, 12))
    logits = model(idx)
    assert logits.shape == (2, 12, 256)
    changed = idx.clone()
    changed[:, 7:] = torch.randint(0, 256, (2, 5))
    assert torch.allclose(model(changed)[:, :7], logits[:, :7], atol=1e-12)
    assert not torch.allclose(model(changed)[:, 7:], logits[:, 7:])


@pytest.mark.parametrize("name,model", list(tiny_models()))
def test_cached_generation_matches_recomputation(name, model):
    idx = torch.randint(0, 256, (2, 10))
    full = model(idx)
    caches = model.new_caches(capacity=2)  # too small: the buffers grow twice on the way
    pieces = [model(idx[:, :4], caches=caches)]  # a prompt, then one token at a time
    pieces += [model(idx[:, t:t + 1], caches=caches) for t in range(4, 10)]
    assert torch.allclose(torch.cat(pieces, dim=1), full, atol=1e-10)
    caches = model.new_caches()
    chunked = torch.cat([model(idx[:, :3], caches=caches), model(idx[:, 3:], caches=caches)], dim=1)
    assert torch.allclose(chunked, full, atol=1e-10)


def test_generate_greedy_same_with_and_without_cache():
    model = KuramotoLM(KuramotoConfig(**TINY_KA))
    prompt = torch.randint(0, 256, (1, 5))
    a = model.generate(prompt, 8, temperature=0)
    b = model.generate(prompt, 8, temperature=0, use_cache=False)
    assert torch.equal(a, b) and a.shape == (1, 13)


@pytest.mark.parametrize("family", ["ka", "tf"])
def test_compiled_generation_follows_eager(family):
    """generate(compile=True): the cache's in-place updates survive torch.compile, and one dynamic-shape
    graph serves every later step (the caches are sized for the whole generation up front)."""
    torch.manual_seed(0)
    model = KuramotoLM(KuramotoConfig(**TINY_KA)) if family == "ka" else TransformerLM(TransformerConfig(**TINY_TF))
    prompt = torch.randint(0, 256, (1, 3))
    eager = model.generate(prompt, 20, temperature=0)
    assert torch.equal(model.generate(prompt, 20, temperature=0, compile=True), eager)
    assert torch.equal(model.generate(prompt, 6, temperature=0, use_cache=False, compile=True), eager[:, :9])
    # warm: a longer run (larger caches, new lengths) reuses the graphs; a recompile would be an error,
    # so the compiled code cannot have fallen back to eager unnoticed
    with torch._dynamo.config.patch(error_on_recompile=True):
        longer = model.generate(prompt, 40, temperature=0, compile=True)
        model.generate(prompt, 12, temperature=0, use_cache=False, compile=True)
    assert torch.equal(longer[:, :23], eager)


def test_compiled_generation_of_several_models_stays_compiled():
    """Every ByteLM shares one code object (``ByteLM.forward``), and dynamo's recompile limit (8) counts per code
    object: three models' generations (4 graphs each) must not hit it and fall back to eager."""
    torch.manual_seed(0)
    models = [KuramotoLM(KuramotoConfig(**TINY_KA)), TransformerLM(TransformerConfig(**TINY_TF)),
              KuramotoLM(KuramotoConfig(**{**TINY_KA, "heads": 1}))]
    prompt = torch.randint(0, 256, (1, 2))
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        for model in models:
            for use_cache in (True, False):
                out = model.generate(prompt, 5, temperature=0, use_cache=use_cache, compile=True)
                assert torch.equal(out, model.generate(prompt, 5, temperature=0, use_cache=use_cache))


def test_generate_rejects_negative_length():
    with pytest.raises(ValueError, match="max_new_tokens"):
        KuramotoLM(KuramotoConfig(**TINY_KA)).generate(torch.zeros(1, 1, dtype=torch.long), -1)


def test_kuramoto_state_stays_finite_and_phase_embedding_not_decayed():
    model = KuramotoLM(KuramotoConfig(**TINY_KA))
    states = model.phases(torch.randint(0, 256, (1, 9)))
    assert len(states) == 3 and all(torch.isfinite(s).all() for s in states)
    assert "phase_embedding" in model.no_weight_decay()
    # no normalisation layers anywhere in the phase model
    assert not any("norm" in type(m).__name__.lower() for m in model.modules())


@pytest.mark.parametrize("name", list(NOMINAL))
def test_presets_within_three_percent(name):
    row = next(r for r in preset_table() if r["name"] == name)
    assert abs(row["params"] / NOMINAL[name] - 1) <= 0.03
    family, cfg = get_preset(name)
    with torch.device("meta"):
        model = build_model(family, cfg)
    assert model.num_params() == row["params"] == sum(p.numel() for p in model.parameters())


def test_parameter_count_by_hand():
    """ka: embedding 256k, per layer gates 2k·2k+2k, value gate 2k·k+k, ω k, τ H, radius 1,
    SwiGLU on ψ(θ) 2k·h + 2k·h + h·k + radius 1; readout 2k·256+256."""
    k, h, heads, depth = 16, 24, 2, 2
    per_layer = (4 * k * k + 2 * k) + (2 * k * k + k) + k + heads + 1 + 5 * k * h + 1
    expected = 256 * k + depth * per_layer + 2 * k * 256 + 256
    assert KuramotoLM(KuramotoConfig(**TINY_KA)).num_params() == expected


def test_save_and_load_pretrained(tmp_path):
    for model in (KuramotoLM(KuramotoConfig(**TINY_KA, ff="lift")), TransformerLM(TransformerConfig(**TINY_TF))):
        model.save_pretrained(tmp_path / type(model).__name__)
        loaded = type(model).from_pretrained(tmp_path / type(model).__name__)
        assert loaded.config == model.config
        idx = torch.randint(0, 256, (1, 6))
        assert torch.equal(loaded(idx), model(idx))


def test_config_errors():
    with pytest.raises(ConfigError, match="unknown preset"):
        get_preset("ka-7m")
    with pytest.raises(ConfigError, match="ff"):
        build_model("kuramoto", KuramotoConfig(**TINY_KA, ff="sideways"))
    with pytest.raises(ValueError, match="int64"):
        KuramotoLM(KuramotoConfig(**TINY_KA))(torch.zeros(1, 3))
    with pytest.raises(ConfigError, match="ff_output"):
        build_model("kuramoto", KuramotoConfig(**TINY_KA, ff_output="angle"))
    with pytest.raises(ConfigError, match="embed_spread"):
        build_model("kuramoto", KuramotoConfig(**TINY_KA, embed_spread=0.0))
    with pytest.raises(ConfigError, match="readout_gain"):
        build_model("kuramoto", KuramotoConfig(**TINY_KA, readout_gain="vector"))
    with pytest.raises(ConfigError, match="readout_harmonics"):
        build_model("kuramoto", KuramotoConfig(**TINY_KA, readout_harmonics=3))


@pytest.mark.parametrize("gain", ["none", "oscillator"])
def test_second_harmonic_readout(gain):
    """readout_harmonics=2: logits_c = Σ_j α_{c,j} cos(θ_j − μ_{c,j}) + Σ_j β_{c,j} cos(2θ_j − ν_{c,j}) + b_c, still a
    function on the torus (2π-periodic in every θ_j); with β = 0 the paper's readout."""
    torch.manual_seed(0)
    cfg = KuramotoConfig(**TINY_KA, readout_harmonics=2, readout_gain=gain)
    model = KuramotoLM(cfg).double()
    k = cfg.dim
    theta = torch.randn(2, 3, k, dtype=torch.float64) * 3
    w = model.prototypes.weight  # (256, 4k): cos θ, sin θ, cos 2θ, sin 2θ
    gain_j = model.readout_gain if model.readout_gain is not None else torch.ones(k, dtype=torch.float64)
    feats = [torch.cos(theta), torch.sin(theta), torch.cos(2 * theta), torch.sin(2 * theta)]
    literal = model.prototypes.bias + sum((gain_j * f) @ w[:, i * k:(i + 1) * k].T for i, f in enumerate(feats))
    assert torch.allclose(model.readout(theta), literal, atol=1e-12)
    assert torch.allclose(model.readout(theta + 2 * torch.pi), model.readout(theta), atol=1e-10)
    assert model.num_params() - KuramotoLM(KuramotoConfig(**TINY_KA)).num_params() == 256 * 2 * k + (
        k if gain == "oscillator" else 0)
    with torch.no_grad():
        w[:, 2 * k:] = 0
    plain = KuramotoLM(KuramotoConfig(**TINY_KA, readout_gain=gain)).double()
    with torch.no_grad():
        plain.prototypes.weight.copy_(w[:, :2 * k])
        plain.prototypes.bias.copy_(model.prototypes.bias)
        if gain != "none":
            plain.readout_gain.copy_(model.readout_gain)
    assert torch.allclose(model.readout(theta), plain.readout(theta), atol=1e-12)


@pytest.mark.parametrize("gain", ["scalar", "oscillator"])
def test_readout_gain_scales_each_oscillators_alignment(gain):
    """g_j multiplies oscillator j's term α_{c,j} cos(θ_j − μ_{c,j}): the same logits as prototypes whose
    cos and sin columns of j are scaled by g_j; at init (g = 1) the paper's readout. Undecayed, like a norm gain."""
    torch.manual_seed(0)
    model = KuramotoLM(KuramotoConfig(**TINY_KA, readout_gain=gain)).double()
    plain = KuramotoLM(KuramotoConfig(**TINY_KA)).double()
    plain.load_state_dict({k: v for k, v in model.state_dict().items() if k != "readout_gain"})
    theta = torch.randn(2, 5, TINY_KA["dim"], dtype=torch.float64)
    assert torch.allclose(model.readout(theta), plain.readout(theta), atol=1e-12)
    with torch.no_grad():
        model.readout_gain.copy_(torch.rand_like(model.readout_gain) + 0.5)
        g = model.readout_gain.expand(TINY_KA["dim"])
        plain.prototypes.weight.mul_(torch.cat((g, g)))
    assert torch.allclose(model.readout(theta), plain.readout(theta), atol=1e-12)
    assert "readout_gain" in {n for n, p in model.named_parameters() if p.dim() < 2}  # the no-decay group


@pytest.mark.parametrize("gain", ["scalar", "oscillator"])
def test_tied_readout_aligns_the_state_with_the_embedding(gain):
    """readout_tied: logits_c = Σ_j g_j cos(θ_j − E_{c,j}) + b_c with E the phase embedding, so the 2k·256 prototype
    weights are gone, the embedding learns from the readout too, and a state at E_c scores c by Σ_j g_j."""
    torch.manual_seed(0)
    k = TINY_KA["dim"]
    model = KuramotoLM(KuramotoConfig(**TINY_KA, readout_tied=True, readout_gain=gain, readout_gain_init=0.5)).double()
    with torch.no_grad():
        model.readout_bias.uniform_(-1, 1)
    theta = torch.randn(2, 3, k, dtype=torch.float64) * 3
    g = model.readout_gain.expand(k)
    literal = (g * torch.cos(theta[..., None, :] - model.phase_embedding)).sum(-1) + model.readout_bias
    assert torch.allclose(model.readout(theta), literal, atol=1e-12)
    aligned = model.readout(model.phase_embedding.detach()[None, :4]) - model.readout_bias
    assert torch.allclose(aligned.diagonal(dim1=-2, dim2=-1), g.sum().expand(4), atol=1e-12)
    untied = KuramotoLM(KuramotoConfig(**TINY_KA, readout_gain=gain)).num_params()
    assert untied - model.num_params() == 2 * k * 256  # the prototype weights (the bias stays)
    model.readout(theta).sum().backward()
    assert model.phase_embedding.grad is not None and model.phase_embedding.grad.abs().sum() > 0
    assert {"readout_bias", "readout_gain"} <= {n for n, p in model.named_parameters() if p.dim() < 2}  # undecayed
    with pytest.raises(ConfigError, match="readout_tied needs readout_gain"):
        build_model("kuramoto", KuramotoConfig(**TINY_KA, readout_tied=True))
    with pytest.raises(ConfigError, match="readout_harmonics=1"):
        build_model("kuramoto", KuramotoConfig(**TINY_KA, readout_tied=True, readout_gain=gain, readout_harmonics=2))


@pytest.mark.parametrize("where", ["layer", "shared"])
def test_feed_forward_input_projection(where):
    """ff_proj: the SwiGLU reads P ψ(θ) (P: 2k -> k), so a hidden unit costs 3k weights, not 5k; "shared" is one P
    registered once by the model and used by every block, "layer" one per block."""
    torch.manual_seed(0)
    k, h, depth = TINY_KA["dim"], TINY_KA["ff_hidden"], TINY_KA["depth"]
    model = KuramotoLM(KuramotoConfig(**TINY_KA, ff_proj=where)).double()
    theta = torch.randn(2, 3, k, dtype=torch.float64) * 3
    for block in model.blocks:
        proj = model.shared_ff_proj if where == "shared" else block.ff.proj
        assert proj is not None and proj.weight.shape == (k, 2 * k)
        mlp = block.ff.mlp
        x = lift(theta) @ proj.weight.T
        literal = (torch.nn.functional.silu(x @ mlp.w_gate.weight.T) * (x @ mlp.w_up.weight.T)) @ mlp.w_out.weight.T
        assert torch.allclose(block.ff._update(theta), literal, atol=1e-12)
        assert torch.allclose(block.ff._update(theta + 2 * torch.pi), literal, atol=1e-10)  # still on the torus
    plain = KuramotoLM(KuramotoConfig(**TINY_KA)).num_params()
    n_proj = 2 * k * k * (1 if where == "shared" else depth)
    assert model.num_params() - plain == n_proj - depth * 2 * k * h  # w_gate, w_up read k inputs, not 2k
    names = [n for n, _ in model.named_parameters() if "proj" in n and "gates" not in n and "value" not in n]
    assert names == (["shared_ff_proj.weight"] if where == "shared" else
                     [f"blocks.{i}.ff.proj.weight" for i in range(depth)])
    with pytest.raises(ConfigError, match="ff_proj projects the lift"):
        build_model("kuramoto", KuramotoConfig(**TINY_KA, ff="angles", ff_proj=where))
    with pytest.raises(ConfigError, match="ff_proj must be"):
        build_model("kuramoto", KuramotoConfig(**TINY_KA, ff_proj="global"))
    with pytest.raises(ConfigError, match="ff_proj_dim must be"):
        build_model("kuramoto", KuramotoConfig(**TINY_KA, ff_proj_dim=8))
    narrow = KuramotoLM(KuramotoConfig(**TINY_KA, ff_proj=where, ff_proj_dim=8))  # r = 8: w_gate, w_up read 8
    assert narrow.num_params() - plain == 2 * k * 8 * (1 if where == "shared" else depth) - depth * 2 * (2 * k - 8) * h
    assert narrow(torch.zeros(1, 3, dtype=torch.long)).shape == (1, 3, 256)


@pytest.mark.parametrize("shared_gates", [False, True])
def test_gates_read_the_shared_projection(shared_gates):
    """value_gate_input / gates_input = "ff-proj": every layer's value gate and metric gates read the feed-forward's
    one P (counted once), so a value gate costs rk + k weights, not 2k² + k, and W_q, W_k 2rk + 2k, not 4k² + 2k;
    both need a shared P."""
    k, depth, r = TINY_KA["dim"], TINY_KA["depth"], 6
    base = dict(TINY_KA, ff_proj="shared", ff_proj_dim=r, shared_gates=shared_gates)
    model = KuramotoLM(KuramotoConfig(**base, value_gate_input="ff-proj", gates_input="ff-proj"))
    gates = [model.shared_gates] if shared_gates else [block.attn.gates for block in model.blocks]
    assert all(block.attn._value_input[0] is model.shared_ff_proj for block in model.blocks)
    assert all(g._input[0] is model.shared_ff_proj for g in gates)
    saved = depth * (2 * k - r) * k + len(gates) * (2 * k - r) * 2 * k
    assert KuramotoLM(KuramotoConfig(**base)).num_params() - model.num_params() == saved
    assert sum(n.endswith("ff_proj.weight") for n, _ in model.named_parameters()) == 1
    assert model(torch.zeros(1, 3, dtype=torch.long)).shape == (1, 3, 256)
    for name in ("value_gate_input", "gates_input"):
        with pytest.raises(ConfigError, match="needs ff_proj='shared'"):
            build_model("kuramoto", KuramotoConfig(**TINY_KA, ff_proj="layer", **{name: "ff-proj"}))
        with pytest.raises(ConfigError, match=f"{name} must be"):
            build_model("kuramoto", KuramotoConfig(**base, **{name: "proj"}))


@pytest.mark.parametrize("ff", ["angles", "none"])
def test_shared_projection_stays_for_the_gates_without_the_lift_feed_forward(ff):
    """A P the gates read outlives a feed-forward that reads θ or is gone (ka-1m-tuned's ablations): the feed-forward
    then reads θ itself (k inputs, as P ψ(θ) is k wide, so at r = k the parameter count is unchanged), never P."""
    k, depth = TINY_KA["dim"], TINY_KA["depth"]
    base = dict(TINY_KA, ff_proj="shared", value_gate_input="ff-proj")
    model = KuramotoLM(KuramotoConfig(**base, ff=ff, ff_wrap=False)).double()
    assert model.shared_ff_proj is not None
    assert all(block.attn._value_input[0] is model.shared_ff_proj for block in model.blocks)
    if ff == "angles":
        assert KuramotoLM(KuramotoConfig(**base)).num_params() == model.num_params()
        theta = torch.randn(2, 3, k, dtype=torch.float64) * 3
        for block in model.blocks:
            assert block.ff._input_proj == [None]
            mlp = block.ff.mlp
            literal = (torch.nn.functional.silu(theta @ mlp.w_gate.weight.T) * (theta @ mlp.w_up.weight.T)
                       ) @ mlp.w_out.weight.T
            assert torch.allclose(block.ff._update(theta), literal, atol=1e-12)
    else:
        assert all(block.ff is None for block in model.blocks) and len(model.blocks) == depth
    assert model(torch.zeros(1, 3, dtype=torch.long)).shape == (1, 3, 256)
    with pytest.raises(ConfigError, match="ff_proj projects the lift"):  # no gate reads P: P would be unused
        build_model("kuramoto", KuramotoConfig(**TINY_KA, ff=ff, ff_proj="shared"))
    with pytest.raises(ConfigError, match="ff_proj projects the lift"):  # nor do metric gates that are off
        build_model("kuramoto", KuramotoConfig(**TINY_KA, ff=ff, ff_proj="shared", gates=False, gates_input="ff-proj"))
    with pytest.raises(ConfigError, match="ff_proj projects the lift"):  # a per-layer P is the feed-forward's alone
        build_model("kuramoto", KuramotoConfig(**TINY_KA, ff=ff, ff_proj="layer"))


def test_tangent_feed_forward_moves_toward_its_phasor_field():
    """ff_output="tangent": the increment is Im(conj(e^{iθ}) y) = |y| sin(arg y − θ), y = SwiGLU(ψ(θ)), so it
    is 2π-periodic in θ, vanishes where θ = arg y and pulls θ toward arg y (positive below, negative above)."""
    from kuramoto_attention.models.kuramoto import PhaseFeedForward

    cfg = KuramotoConfig(**TINY_KA, ff_output="tangent", bound="none")
    ff = PhaseFeedForward(cfg).double()
    theta = torch.rand(3, 5, cfg.dim, dtype=torch.float64) * 6 - 3
    y = ff.mlp(lift(theta))
    target = torch.atan2(y[..., cfg.dim:], y[..., : cfg.dim])
    expected = y.unflatten(-1, (2, cfg.dim)).norm(dim=-2) * torch.sin(target - theta)
    assert torch.allclose(ff(theta) - theta, expected, atol=1e-12)
    assert torch.allclose(ff(theta + 2 * torch.pi) - (theta + 2 * torch.pi), expected, atol=1e-12)


def test_embed_spread_bounds_the_initial_phases():
    for spread in (1.0, 0.1):
        phases = KuramotoLM(KuramotoConfig(**TINY_KA, embed_spread=spread)).phase_embedding
        assert phases.abs().max() <= torch.pi * spread and phases.abs().max() > 0.9 * torch.pi * spread


def test_initial_loss_near_uniform():
    for model in (KuramotoLM(KuramotoConfig(**TINY_KA)), TransformerLM(TransformerConfig(**TINY_TF))):
        idx = torch.randint(0, 256, (4, 16))
        targets = torch.randint(0, 256, (4, 16))
        loss = torch.nn.functional.cross_entropy(model(idx).flatten(0, 1), targets.flatten())
        assert abs(loss.item() - math.log(256)) < 0.3


def test_config_dict_names_the_registered_family():
    from kuramoto_attention.models.presets import FAMILIES, build_model, config_from_dict, get_preset

    for preset in ("ka-tiny", "tf-tiny"):
        model = build_model(*get_preset(preset))
        assert FAMILIES[model.family][1] is type(model)
        family, cfg = config_from_dict(model.config_dict())
        assert family == model.family and cfg == model.config
