"""The transformer family as stock LlamaForCausalLM: the same logits and greedy tokens as ours, and a directory an
unmodified transformers loads in a process where our package cannot be imported."""

import json
import os
import subprocess
import sys

import pytest

transformers = pytest.importorskip("transformers")

import torch  # noqa: E402
from transformers import LlamaForCausalLM  # noqa: E402

from kuramoto_attention import build_model, get_preset  # noqa: E402
from kuramoto_attention.hf.llama import llama_config, to_llama  # noqa: E402
from kuramoto_attention.hf.tokenizer import KuramotoByteTokenizer  # noqa: E402
from kuramoto_attention.ops.attention import rotary_angles  # noqa: E402


def tiny_transformer(tied: bool = True, seed: int = 0):
    family, cfg = get_preset("tf-tiny")
    cfg.tied = tied
    torch.manual_seed(seed)
    model = build_model(family, cfg)
    with torch.no_grad():  # away from the initialisation (norm gains too), so that the logits are not all near zero
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return model.eval()


@pytest.mark.parametrize("tied", [True, False])
def test_llama_logits_equal_ours(tied):
    ours = tiny_transformer(tied)
    llama = to_llama(ours)
    idx = torch.randint(0, 256, (2, 100))  # positions far past the training context: RoPE's convention shows
    with torch.no_grad():
        expected, got = ours(idx), llama(idx).logits
    assert expected.std() > 0.1
    assert torch.allclose(got, expected, atol=1e-5, rtol=0)
    assert llama.config.tie_word_embeddings == tied


def test_config_carries_our_constants():
    ours = tiny_transformer()
    cfg = llama_config(ours)
    assert cfg.rms_norm_eps == ours.norm.eps == ours.blocks[0].attn_norm.eps
    assert cfg.rope_parameters["rope_theta"] == ours.config.rope_base
    assert (cfg.vocab_size, cfg.num_key_value_heads, cfg.attention_bias, cfg.mlp_bias) == (256, ours.config.heads,
                                                                                           False, False)
    # Llama's inverse frequencies are ours: base^(-i/(d/2)), i = 0 .. d/2 - 1, on the pairs (x_i, x_{i + d/2})
    rotary = LlamaForCausalLM(cfg).model.rotary_emb
    assert torch.allclose(rotary.inv_freq.double(), rotary_angles(ours.config.dim // ours.config.heads // 2,
                                                                  ours.config.rope_base), rtol=1e-6)


def test_greedy_generate_equals_ours():
    ours = tiny_transformer(seed=1)
    prompt = torch.tensor([list(b"Hello there"), list(b"byte models")])
    out = to_llama(ours).generate(prompt, max_new_tokens=30, do_sample=False)
    assert torch.equal(out, ours.generate(prompt, 30, temperature=0))


FRESH = """
import json, sys
sys.modules["kuramoto_attention"] = None  # our package cannot be imported, whatever the installation
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
out, data = sys.argv[1], torch.load(sys.argv[2])
model, tok = AutoModelForCausalLM.from_pretrained(out), AutoTokenizer.from_pretrained(out)
with torch.no_grad():
    diff = (model(data["idx"]).logits - data["logits"]).abs().max().item()
ids = tok(data["text"], return_tensors="pt")["input_ids"]
gen = model.generate(ids, max_new_tokens=20, do_sample=False)
ours = [name for name, module in sys.modules.items() if name.startswith("kuramoto") and module is not None]
print(json.dumps({"model": type(model).__name__, "diff": diff, "ids": ids[0].tolist(), "gen": gen[0].tolist(),
                  "decoded": tok.decode(gen[0]), "ours": ours}))
"""


def test_a_transformers_without_our_package_loads_and_generates(tmp_path):
    ours = tiny_transformer(seed=2)
    out = tmp_path / "llama"
    to_llama(ours).save_pretrained(out)
    KuramotoByteTokenizer().save_pretrained(out)
    idx, text = torch.randint(0, 256, (2, 40)), "naïve café ☕"
    with torch.no_grad():
        torch.save({"idx": idx, "logits": ours(idx), "text": text}, tmp_path / "expected.pt")
    # a Python without site-packages processing (no editable install of ours), given only the folders of
    # transformers and torch (and of ours, were it installed there: the probe blocks that import)
    folders = {os.path.dirname(os.path.dirname(m.__file__)) for m in (transformers, torch)}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sorted(folders)), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-S", "-c", FRESH, str(out), str(tmp_path / "expected.pt")], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["model"] == "LlamaForCausalLM" and result["ours"] == []
    assert result["diff"] < 1e-5
    assert result["ids"] == list(text.encode("utf-8"))
    prompt = torch.tensor([result["ids"]])
    assert result["gen"] == ours.generate(prompt, 20, temperature=0)[0].tolist()
    assert result["decoded"] == bytes(result["gen"]).decode("utf-8", "replace")
