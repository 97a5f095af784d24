"""The Kuramoto family under transformers: the Auto classes load it with our numbers on every geometry, generate
decodes incrementally on transformers' cache with our greedy tokens, and a directory of the other family is refused."""

import pytest

pytest.importorskip("transformers")

import torch
from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache

import kuramoto_attention.hf  # noqa: F401  (the registration under test)
from kuramoto_attention import build_model, get_preset
from kuramoto_attention.errors import ConfigError
from kuramoto_attention.hf import KuramotoForCausalLM, KuramotoLMConfig
from kuramoto_attention.hf.llama import to_llama
from kuramoto_attention.models.presets import apply_overrides

VARIANTS = {
    "torus": {},
    "su2": {"group": "su2"},
    "sphere": {"group": "sphere"},
    # a non-persistent buffer (ω = 0), which transformers' meta-device load leaves unset unless it is refilled
    "omega-zero": {"omega": "zero"},
    # the tuned recipe's parts: shared gates and P, clocks, phase lag, ω learned in log space
    "tuned": {"omega": "log", "clock": 2, "phase_lag": True, "self_coupling": False, "shared_gates": True,
              "ff_proj": "shared", "gates_input": "ff-proj", "value_gate_input": "ff-proj"},
}


def tiny_kuramoto(overrides: dict, seed: int = 0):
    family, cfg = get_preset("ka-tiny")
    torch.manual_seed(seed)
    model = build_model(family, apply_overrides(family, cfg, overrides))
    with torch.no_grad():  # away from the initialisation, so that the logits are not all near zero
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return model.eval()


def saved_and_loaded(model, path):
    KuramotoForCausalLM.from_byte_lm(model).save_pretrained(path)
    return AutoModelForCausalLM.from_pretrained(path).eval()


@pytest.mark.parametrize("variant", VARIANTS)
def test_auto_class_load_gives_our_logits(variant, tmp_path):
    ours = tiny_kuramoto(VARIANTS[variant])
    hf = saved_and_loaded(ours, tmp_path)
    assert isinstance(hf, KuramotoForCausalLM)
    idx = torch.randint(0, 256, (2, 70))  # past the training context (32)
    with torch.no_grad():
        expected, got = ours(idx), hf(idx).logits
    assert expected.std() > 0.1  # a comparison of numbers that are not all alike
    assert torch.allclose(got, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("variant", ["torus", "su2", "sphere"])
def test_greedy_generate_decodes_incrementally_with_our_tokens(variant, tmp_path):
    ours = tiny_kuramoto(VARIANTS[variant], seed=1)
    hf = saved_and_loaded(ours, tmp_path)
    prompt = torch.tensor([list(b"The cat sat"), list(b"Oscillators")])
    widths = []  # the tokens each forward of our model receives
    hook = hf.model.register_forward_pre_hook(lambda module, args, kwargs: widths.append(args[0].shape[1]),
                                              with_kwargs=True)
    out = hf.generate(prompt, max_new_tokens=20, do_sample=False, return_dict_in_generate=True)
    hook.remove()
    assert torch.equal(out.sequences, ours.generate(prompt, 20, temperature=0))
    assert widths == [prompt.shape[1]] + [1] * 19  # the prompt once, then one token per step: no recomputation
    cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
    assert isinstance(cache, DynamicCache) and cache.get_seq_length() == prompt.shape[1] + 19


def chunked_logits(forward, idx, cache, sizes=(10, 7, 7)):
    """Logits of ``idx`` fed in chunks through one cache (as a prompt and then assisted decoding's drafts are)."""
    out, start = [], 0
    for size in sizes:
        out.append(forward(idx[:, start:start + size], cache))
        start += size
    return torch.cat(out, dim=1)


def test_cached_chunks_equal_the_full_forward():
    """The cache adapter adds nothing: in float64 the chunked pass is the full one; in float32 it is our own
    KVCache's chunked pass (which differs from the full one by its kernels' rounding)."""
    ours = tiny_kuramoto({}, seed=2)
    idx = torch.randint(0, 256, (2, 24))

    def hf_step(hf):
        return lambda chunk, cache: hf(chunk, cache=cache, use_cache=True).logits

    with torch.no_grad():
        hf = KuramotoForCausalLM.from_byte_lm(ours)
        ours_cached = chunked_logits(lambda chunk, caches: ours(chunk, caches=caches), idx, ours.new_caches())
        assert torch.allclose(chunked_logits(hf_step(hf), idx, DynamicCache()), ours_cached, atol=1e-5, rtol=0)
        hf = hf.double()
        full = hf(idx, use_cache=False).logits
        assert torch.allclose(chunked_logits(hf_step(hf), idx, DynamicCache()), full, atol=1e-10, rtol=0)


def test_beam_search_runs_on_the_cache():
    hf = KuramotoForCausalLM.from_byte_lm(tiny_kuramoto({}, seed=3))
    out = hf.generate(torch.tensor([list(b"abc")]), max_new_tokens=6, num_beams=3, do_sample=False)
    assert out.shape == (1, 9) and torch.equal(out[:, :3], torch.tensor([list(b"abc")]))


def test_loss_is_the_mean_next_byte_cross_entropy():
    ours = tiny_kuramoto({}, seed=4)
    hf = KuramotoForCausalLM.from_byte_lm(ours)
    idx = torch.randint(0, 256, (3, 16))
    with torch.no_grad():
        loss = hf(idx, labels=idx).loss
        expected = torch.nn.functional.cross_entropy(ours(idx)[:, :-1].reshape(-1, 256), idx[:, 1:].reshape(-1))
    assert torch.allclose(loss, expected, atol=1e-6)


def test_padding_is_refused():
    hf = KuramotoForCausalLM.from_byte_lm(tiny_kuramoto({}))
    with pytest.raises(ValueError):
        hf(torch.randint(0, 256, (2, 5)), attention_mask=torch.tensor([[0, 1, 1, 1, 1], [1, 1, 1, 1, 1]]))


def test_config_round_trips_and_derives_the_standard_names(tmp_path):
    family, cfg = get_preset("ka-su2-1m-tuned")
    model_cfg = KuramotoLMConfig(kuramoto=build_model(family, cfg).config_dict())
    model_cfg.save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(loaded, KuramotoLMConfig)
    assert loaded.model_config() == cfg
    assert (loaded.vocab_size, loaded.hidden_size, loaded.num_hidden_layers, loaded.num_attention_heads) == \
        (256, cfg.dim, cfg.depth, cfg.heads)


def test_unknown_fields_and_another_family_are_refused(tmp_path):
    with pytest.raises(ConfigError):
        KuramotoLMConfig(kuramoto={"dim": 16, "no_such_field": 1})
    family, cfg = get_preset("tf-tiny")
    to_llama(build_model(family, cfg)).save_pretrained(tmp_path)
    with pytest.raises(ConfigError):
        KuramotoForCausalLM.from_pretrained(tmp_path)
