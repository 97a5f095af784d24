"""The byte tokenizer of the transformers integration: ids are bytes, text round-trips exactly (invalid UTF-8 too),
and the tokenizer.json saved beside it encodes the same ids without our code."""

import random

import pytest

pytest.importorskip("transformers")

from tokenizers import pre_tokenizers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

import kuramoto_attention.hf  # noqa: F401  (registers the tokenizer)
from kuramoto_attention.hf.tokenizer import SYMBOLS, KuramotoByteTokenizer

TEXTS = ["", "a", "Hello, world!\n", "  leading and trailing  ", "tab\tcr\r\nnul\x00del\x7f",
         "héllo wörld", "日本語のテキスト", "emoji 🙂🚀 and ZWJ 👩‍💻", "ſ ﬁ Å Å (NFC and NFD stay apart)",
         "<s></s><pad><unk> look like special tokens", " ."]


def random_text(rng: random.Random, n: int) -> str:
    """Code points from every UTF-8 length (1-4 bytes), surrogates excluded."""
    ranges = [(0, 0x7F), (0x80, 0x7FF), (0x800, 0xD7FF), (0xE000, 0xFFFF), (0x10000, 0x10FFFF)]
    return "".join(chr(rng.randint(*rng.choice(ranges))) for _ in range(n))


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    """Saved and loaded back through AutoTokenizer, as an export's is."""
    path = tmp_path_factory.mktemp("tok")
    KuramotoByteTokenizer().save_pretrained(path)
    tok = AutoTokenizer.from_pretrained(path)
    assert isinstance(tok, KuramotoByteTokenizer)
    return tok, path


def test_ids_are_bytes_and_symbols_are_the_byte_level_alphabet():
    assert len(set(SYMBOLS)) == 256
    assert set(SYMBOLS) == set(pre_tokenizers.ByteLevel.alphabet())
    tok = KuramotoByteTokenizer()
    assert tok.vocab_size == len(tok) == 256
    assert tok.convert_tokens_to_ids(tok.convert_ids_to_tokens(list(range(256)))) == list(range(256))


def test_utf8_text_round_trips(tokenizer):
    tok, _ = tokenizer
    rng = random.Random(0)
    for text in [*TEXTS, *(random_text(rng, rng.randint(1, 60)) for _ in range(50))]:
        ids = tok(text)["input_ids"]
        assert ids == list(text.encode("utf-8"))  # nothing added: no special tokens
        assert tok.decode(ids) == text


def test_any_byte_sequence_round_trips(tokenizer):
    tok, _ = tokenizer
    rng = random.Random(1)
    cases = [bytes(range(256)), b"\xff\xfe", b"\xc3(", b"\xe2\x82", b"ok\x80ok", b"\xed\xa0\x80 (a UTF-8 surrogate)"]
    cases += [bytes(rng.randrange(256) for _ in range(rng.randint(1, 80))) for _ in range(50)]
    for data in cases:
        text = tok.decode(list(data))
        assert text == data.decode("utf-8", "surrogateescape")
        assert tok(text)["input_ids"] == list(data)


def test_tokenizer_json_encodes_the_same_ids_without_our_class(tokenizer):
    tok, path = tokenizer
    fast = PreTrainedTokenizerFast(tokenizer_file=str(path / "tokenizer.json"))
    assert fast.get_vocab() == tok.get_vocab()
    rng = random.Random(2)
    for text in [*TEXTS, *(random_text(rng, 30) for _ in range(20))]:
        assert fast(text)["input_ids"] == list(text.encode("utf-8"))
        assert fast.decode(list(text.encode("utf-8"))) == text
    invalid = b"a\xffb\xc3"
    assert fast.decode(list(invalid)) == invalid.decode("utf-8", "replace")  # no surrogates in Rust strings


def test_unknown_ids_and_tokens_are_refused():
    tok = KuramotoByteTokenizer()
    with pytest.raises(ValueError):
        tok.convert_ids_to_tokens([256])
    with pytest.raises(ValueError):
        tok.convert_tokens_to_ids(["<pad>"])
