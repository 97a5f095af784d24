import math

import pytest
import torch

from kuramoto_attention import KuramotoConfig, KuramotoLM, TransformerConfig, TransformerLM
from kuramoto_attention.errors import ConfigError
from kuramoto_attention.models.config import apply_overrides
from kuramoto_attention.models.presets import NOMINAL, build_model, get_preset, preset_table
from kuramoto_attention.ops.torus import lift

TINY_KA = dict(dim=16, depth=2, heads=2, ff_hidden=24)
TINY_TF = dict(dim=16, depth=2, heads=2, ff_hidden=24)


def ka_cfg(**fields) -> KuramotoConfig:
    """A tiny Kuramoto config; fields by name, the attention layer's included (``models/config.py``)."""
    return apply_overrides("kuramoto", KuramotoConfig(), {**TINY_KA, **fields})


def tiny_models():
    yield "ka", KuramotoLM(ka_cfg()).double()
    for ff in ("lift", "none"):
        yield f"ka-ff-{ff}", KuramotoLM(ka_cfg(ff=ff)).double()
    yield "ka-shared", KuramotoLM(ka_cfg(shared_gates=True)).double()
    yield "ka-no-self", KuramotoLM(ka_cfg(self_coupling=False)).double()
    lag = KuramotoLM(ka_cfg(phase_lag=True)).double()
    with torch.no_grad():  # a nonzero lag, so the cached query features must carry it
        for block in lag.blocks:
            block.attn.extras.lag.uniform_(-torch.pi, torch.pi)
    yield "ka-lag", lag
    clock = KuramotoLM(ka_cfg(clock=2)).double()
    with torch.no_grad():  # nonzero clock weights, so the cache must carry the clock's key features
        for block in clock.blocks:
            block.attn.clock.weight.normal_()
    yield "ka-clock", clock
    yield "ka-gates-read-p", KuramotoLM(ka_cfg(ff_proj="shared", value_gate_input="ff-proj",
                                               gates_input="ff-proj")).double()
    yield "ka-tuned-shape", KuramotoLM(ka_cfg(ff_proj="shared", value_gate_input="ff-proj", gates_input="ff-proj",
                                              shared_gates=True, self_coupling=False, phase_lag=True, clock=2,
                                              clock_init=1.0)).double()
    yield "ka-value-projection", KuramotoLM(ka_cfg(value="projection")).double()
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
    model = KuramotoLM(ka_cfg())
    prompt = torch.randint(0, 256, (1, 5))
    a = model.generate(prompt, 8, temperature=0)
    b = model.generate(prompt, 8, temperature=0, use_cache=False)
    assert torch.equal(a, b) and a.shape == (1, 13)


@pytest.mark.parametrize("family", ["ka", "tf"])
def test_compiled_generation_follows_eager(family):
    """generate(compile=True): the cache's in-place updates survive torch.compile, and one dynamic-shape
    graph serves every later step (the caches are sized for the whole generation up front)."""
    torch.manual_seed(0)
    model = KuramotoLM(ka_cfg()) if family == "ka" else TransformerLM(TransformerConfig(**TINY_TF))
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
    models = [KuramotoLM(ka_cfg()), TransformerLM(TransformerConfig(**TINY_TF)),
              KuramotoLM(ka_cfg(heads=1))]
    prompt = torch.randint(0, 256, (1, 2))
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        for model in models:
            for use_cache in (True, False):
                out = model.generate(prompt, 5, temperature=0, use_cache=use_cache, compile=True)
                assert torch.equal(out, model.generate(prompt, 5, temperature=0, use_cache=use_cache))


@pytest.mark.parametrize("preset", ["ka-1m", "ka-1m-tuned", "ka-su2-1m", "ka-su2-1m-tuned", "ka-sphere-1m", "tf-1m"])
def test_a_training_forward_is_one_compiled_graph(preset, monkeypatch):
    """torch.compile traces a headline preset's training forward (bf16 autocast, gradients on) without a break:
    a break splits what inductor may fuse. The kernels not yet built (a fresh process) must not break it either."""
    import torch._dynamo

    from kuramoto_attention.ops import native

    monkeypatch.setattr(native, "_loaded", {})
    torch._dynamo.reset()
    model = build_model(*get_preset(preset)).train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        explanation = torch._dynamo.explain(model)(torch.randint(0, 256, (2, 8)))
    assert explanation.graph_break_count == 0, [str(b.reason)[:200] for b in explanation.break_reasons]


@pytest.mark.parametrize(("preset", "operators"), [("ka-1m", False), ("ka-1m-tuned", True)])
def test_compiled_torus_training_takes_the_faster_query_key(preset, operators):
    """Compiled training on the CPU runs the gated query and key as their custom operators where a head's d is not a
    multiple of 16 floats (40 in ka-1m-tuned), and leaves them to inductor where it is (32 in ka-1m)."""
    import torch._dynamo

    torch._dynamo.reset()
    model = build_model(*get_preset(preset)).train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        explanation = torch._dynamo.explain(model)(torch.randint(0, 256, (2, 8)))
    targets = [str(node.target) for gm in explanation.graphs for module in gm.modules()
               if isinstance(module, torch.fx.GraphModule) for node in module.graph.nodes if node.op == "call_function"]
    assert any("query_key_forward" in t for t in targets) == operators


@pytest.mark.parametrize("model", [KuramotoLM(ka_cfg()), TransformerLM(TransformerConfig(**TINY_TF))])
@pytest.mark.parametrize("bad", [256, -1])
def test_ids_outside_the_bytes_are_one_value_error(model, bad):
    # the embedding alone raised a bare IndexError on the CPU (a device-side assert on CUDA)
    with pytest.raises(ValueError, match=f"holds {bad}, outside the byte range 0..255"):
        model(torch.tensor([[0, bad, 3]]))


def test_generate_rejects_negative_length():
    with pytest.raises(ValueError, match="max_new_tokens"):
        KuramotoLM(ka_cfg()).generate(torch.zeros(1, 1, dtype=torch.long), -1)


def test_kuramoto_state_stays_finite_and_phase_embedding_not_decayed():
    model = KuramotoLM(ka_cfg())
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
    assert KuramotoLM(ka_cfg()).num_params() == expected


def test_save_and_load_pretrained(tmp_path):
    for model in (KuramotoLM(ka_cfg(ff="lift")), TransformerLM(TransformerConfig(**TINY_TF))):
        model.save_pretrained(tmp_path / type(model).__name__)
        loaded = type(model).from_pretrained(tmp_path / type(model).__name__)
        assert loaded.config == model.config
        idx = torch.randint(0, 256, (1, 6))
        assert torch.equal(loaded(idx), model(idx))


def test_config_errors():
    with pytest.raises(ConfigError, match="unknown preset"):
        get_preset("ka-7m")
    with pytest.raises(ConfigError, match="ff"):
        build_model("kuramoto", ka_cfg(ff="sideways"))
    with pytest.raises(ValueError, match="int64"):
        KuramotoLM(ka_cfg())(torch.zeros(1, 3))
    for bad, field in (({"heads": 0}, "heads"), ({"dim": -16}, "dim"), ({"depth": 0}, "depth"),
                       ({"tau_init": "inf"}, "tau_init"), ({"dim": 15}, "divisible")):
        with pytest.raises(ConfigError, match=field):  # every field checked where the config is built (issue 24.2)
            ka_cfg(**bad)
    with pytest.raises(ValueError, match="heads"):  # Python users get a ValueError naming the field
        KuramotoConfig(heads=0)
    with pytest.raises(ValueError, match="depth"):
        TransformerConfig(depth=0)
    with pytest.raises(ConfigError, match="retired after commit 7d67ce1"):  # a retired field in use: where it lives
        ka_cfg(readout_harmonics=2)
    assert ka_cfg(readout_harmonics=1) == ka_cfg()  # at its old default it is the same model
    with pytest.raises(ConfigError, match="retired after commit 4c98f00"):  # a dropped lead: its own commit
        ka_cfg(lag_from_state=True)
    assert ka_cfg(lag_from_state=False) == ka_cfg()


def test_old_flat_configs_load_and_retired_ones_name_their_commit():
    """A checkpoint's config.json of the flat layout (before the attention fields were nested) reads as today's."""
    from kuramoto_attention.models.presets import config_from_dict

    old = {"family": "kuramoto", **TINY_KA, "attn_radius_init": 3.0, "clock": 2, "self_coupling": False,
           "embed_spread": 1.0, "ff_wrap": False, "readout_gain": "none", "bound": "norm"}
    family, cfg = config_from_dict(old)
    assert family == "kuramoto" and cfg == ka_cfg(radius_init=3.0, clock=2, self_coupling=False)
    assert cfg.attention.radius_init == 3.0
    with pytest.raises(ConfigError, match="git checkout 7d67ce1"):
        config_from_dict({**old, "bound": "norm-soft"})
    with pytest.raises(ConfigError, match="no field 'sideways'"):
        config_from_dict({**old, "sideways": 1})


def test_feed_forward_input_projection():
    """ff_proj="shared": the SwiGLU reads P ψ(θ) (P: 2k -> k), so a hidden unit costs 3k weights, not 5k; one P
    registered once by the model and used by every block."""
    torch.manual_seed(0)
    k, h, depth = TINY_KA["dim"], TINY_KA["ff_hidden"], TINY_KA["depth"]
    model = KuramotoLM(ka_cfg(ff_proj="shared")).double()
    theta = torch.randn(2, 3, k, dtype=torch.float64) * 3
    proj = model.shared_ff_proj
    assert proj is not None and proj.weight.shape == (k, 2 * k)
    for block in model.blocks:
        assert block.ff.source.module is proj
        mlp = block.ff.mlp
        x = lift(theta) @ proj.weight.T
        literal = (torch.nn.functional.silu(x @ mlp.w_gate.weight.T) * (x @ mlp.w_up.weight.T)) @ mlp.w_out.weight.T
        assert torch.allclose(block.ff.update(theta), literal, atol=1e-12)
        assert torch.allclose(block.ff.update(theta + 2 * torch.pi), literal, atol=1e-10)  # still on the torus
    plain = KuramotoLM(ka_cfg()).num_params()
    assert model.num_params() - plain == 2 * k * k - depth * 2 * k * h  # w_gate, w_up read k inputs, not 2k
    names = [n for n, _ in model.named_parameters() if "proj" in n and "gates" not in n and "value" not in n]
    assert names == ["shared_ff_proj.weight"]
    with pytest.raises(ConfigError, match="ff_proj projects the lift"):
        ka_cfg(ff="angles", ff_proj="shared")
    with pytest.raises(ConfigError, match="ff_proj must be"):
        ka_cfg(ff_proj="global")


@pytest.mark.parametrize("shared_gates", [False, True])
def test_gates_read_the_shared_projection(shared_gates):
    """value_gate_input / gates_input = "ff-proj": every layer's value gate and metric gates read the feed-forward's
    one P (counted once), so a value gate costs rk + k weights, not 2k² + k, and W_q, W_k 2rk + 2k, not 4k² + 2k;
    both need a shared P."""
    k, depth, r = TINY_KA["dim"], TINY_KA["depth"], TINY_KA["dim"]
    base = dict(ff_proj="shared", shared_gates=shared_gates)
    model = KuramotoLM(ka_cfg(**base, value_gate_input="ff-proj", gates_input="ff-proj"))
    gates = [model.shared_gates] if shared_gates else [block.attn.gates for block in model.blocks]
    assert all(block.attn.value_source.module is model.shared_ff_proj for block in model.blocks)
    assert all(g.source.module is model.shared_ff_proj for g in gates)
    saved = depth * (2 * k - r) * k + len(gates) * (2 * k - r) * 2 * k
    assert KuramotoLM(ka_cfg(**base)).num_params() - model.num_params() == saved
    assert sum(n.endswith("ff_proj.weight") for n, _ in model.named_parameters()) == 1
    assert model(torch.zeros(1, 3, dtype=torch.long)).shape == (1, 3, 256)
    for name in ("value_gate_input", "gates_input"):
        with pytest.raises(ConfigError, match="needs ff_proj='shared'"):
            ka_cfg(**{name: "ff-proj"})
        with pytest.raises(ConfigError, match=f"{name} must be"):
            ka_cfg(**base, **{name: "proj"})


@pytest.mark.parametrize("ff", ["angles", "none"])
def test_shared_projection_stays_for_the_gates_without_the_lift_feed_forward(ff):
    """A P the gates read outlives a feed-forward that reads θ or is gone (ka-1m-tuned's ablations): the feed-forward
    then reads θ itself (k inputs, as P ψ(θ) is k wide, so at r = k the parameter count is unchanged), never P."""
    k, depth = TINY_KA["dim"], TINY_KA["depth"]
    base = dict(ff_proj="shared", value_gate_input="ff-proj")
    model = KuramotoLM(ka_cfg(**base, ff=ff)).double()
    assert model.shared_ff_proj is not None
    assert all(block.attn.value_source.module is model.shared_ff_proj for block in model.blocks)
    if ff == "angles":
        assert KuramotoLM(ka_cfg(**base)).num_params() == model.num_params()
        theta = torch.randn(2, 3, k, dtype=torch.float64) * 3
        for block in model.blocks:
            assert block.ff.source.module is None
            mlp = block.ff.mlp
            literal = (torch.nn.functional.silu(theta @ mlp.w_gate.weight.T) * (theta @ mlp.w_up.weight.T)
                       ) @ mlp.w_out.weight.T
            assert torch.allclose(block.ff.update(theta), literal, atol=1e-12)
    else:
        assert all(block.ff is None for block in model.blocks) and len(model.blocks) == depth
    assert model(torch.zeros(1, 3, dtype=torch.long)).shape == (1, 3, 256)
    with pytest.raises(ConfigError, match="ff_proj projects the lift"):  # no gate reads P: P would be unused
        ka_cfg(ff=ff, ff_proj="shared")
    with pytest.raises(ConfigError, match="ff_proj projects the lift"):  # nor do metric gates that are off
        ka_cfg(ff=ff, ff_proj="shared", gates=False, gates_input="ff-proj")


def test_initial_loss_near_uniform():
    for model in (KuramotoLM(ka_cfg()), TransformerLM(TransformerConfig(**TINY_TF))):
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
