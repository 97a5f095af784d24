"""Hugging Face transformers integration (the ``hf`` extra: ``pip install 'kuramoto-attention[hf]'``).

Importing this package registers the Kuramoto family with transformers' Auto classes, so that
``AutoConfig``, ``AutoModelForCausalLM`` and ``AutoTokenizer`` load what ``kuramoto export`` writes:

    import kuramoto_attention.hf  # noqa: F401  (the registration)
    from transformers import AutoModelForCausalLM, AutoTokenizer

The transformer family needs no import at all: it exports to stock ``LlamaForCausalLM``. The core package never
imports this one (nor transformers); docs/huggingface.md has the whole story.
"""

from kuramoto_attention.hf.requirements import check_transformers

check_transformers()  # one line naming the fix when transformers is missing or of an unsupported version

from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from kuramoto_attention.hf.configuration import KuramotoLMConfig  # noqa: E402
from kuramoto_attention.hf.modeling import KuramotoForCausalLM  # noqa: E402
from kuramoto_attention.hf.optim import make_optimizer, optimizer_groups  # noqa: E402
from kuramoto_attention.hf.tokenizer import KuramotoByteTokenizer  # noqa: E402

AutoConfig.register(KuramotoLMConfig.model_type, KuramotoLMConfig, exist_ok=True)
AutoModelForCausalLM.register(KuramotoLMConfig, KuramotoForCausalLM, exist_ok=True)
AutoTokenizer.register(KuramotoLMConfig, tokenizer_class=KuramotoByteTokenizer, exist_ok=True)

__all__ = ["KuramotoByteTokenizer", "KuramotoForCausalLM", "KuramotoLMConfig", "make_optimizer", "optimizer_groups"]
