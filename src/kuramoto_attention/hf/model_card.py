"""The README.md (the Hub's model card) of an exported directory: what the model is and how to load it."""

from __future__ import annotations

from kuramoto_attention.models.lm import ByteLM

LOAD_KURAMOTO = """\
```python
from transformers import AutoModelForCausalLM, AutoTokenizer  # pip install 'kuramoto-attention[hf]'

model = AutoModelForCausalLM.from_pretrained("{path}", trust_remote_code=True)
tokenizer = AutoTokenizer.from_pretrained("{path}", trust_remote_code=True)
ids = model.generate(**tokenizer("Hello", return_tensors="pt"), max_new_tokens=40, do_sample=False)
print(tokenizer.decode(ids[0]))
```
`trust_remote_code=True` runs `kuramoto_remote.py`, which only imports the installed package's classes; after
`import kuramoto_attention.hf` (which registers the architecture) the flag is not needed."""

LOAD_LLAMA = """\
```python
from transformers import AutoModelForCausalLM, AutoTokenizer

model = AutoModelForCausalLM.from_pretrained("{path}")  # LlamaForCausalLM: no code of ours needed
tokenizer = AutoTokenizer.from_pretrained("{path}")
ids = model.generate(**tokenizer("Hello", return_tensors="pt"), max_new_tokens=40, do_sample=False)
print(tokenizer.decode(ids[0]))
```"""


def model_card(model: ByteLM, architecture: str, path: str = "PATH") -> str:
    what = ("a RoPE + SwiGLU transformer, stored as Llama" if model.family == "transformer"
            else "Kuramoto attention: self-attention whose hidden state is a bank of oscillators "
                 f"(group: {model.config.attention.group})")
    load = (LOAD_LLAMA if model.family == "transformer" else LOAD_KURAMOTO).format(path=path)
    return f"""---
library_name: transformers
tags: [kuramoto-attention, byte-level]
---

# {architecture}: a byte-level language model from kuramoto-attention

{what}; {model.num_params():,} parameters, trained with `kuramoto train` and exported with `kuramoto export`.

{load}

Tokens are bytes: id i is byte i (0-255), with no special tokens. The tokenizer encodes text as UTF-8 (invalid bytes
as Python's surrogate escapes) and decodes the same way; it is not ByT5's, which shifts every byte by 3.
"""
