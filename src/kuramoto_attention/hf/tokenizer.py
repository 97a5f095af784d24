"""The byte tokenizer every export carries: token id i is the byte i (0-255), nothing else.

Text is encoded as UTF-8 with Python's ``surrogateescape`` (as ``kuramoto sample`` encodes a prompt, through
``os.fsencode``), and decoded the same way, so that every byte sequence survives ``decode`` then ``encode``: invalid
UTF-8 comes back as the lone surrogates U+DC80-U+DCFF that stand for its bytes
(``text.encode("utf-8", "surrogateescape")`` recovers them; ``errors="replace"`` shows them as U+FFFD).

Each id has a printable token string, GPT-2's byte-to-character table (which the tokenizers library's ``ByteLevel``
uses), so that the same vocabulary also exists as a ``tokenizer.json``: a transformers without our package loads that
one (``TokenizersBackend``), which encodes text to the same ids and decodes invalid UTF-8 as U+FFFD.

ByT5's tokenizer, by contrast, shifts every byte by 3 (ids 0-2 are pad, </s> and unk; 125 sentinels follow the
bytes), appends </s> to every encoding and drops invalid bytes when decoding: its ids are not ours.
"""

from __future__ import annotations

import json
import os
from typing import Any, ClassVar

from transformers import PreTrainedTokenizer

from kuramoto_attention.models.lm import VOCAB_SIZE

TOKENIZER_FILE = "tokenizer.json"


def byte_symbols() -> list[str]:
    """The token string of each byte: printable Latin-1 bytes stand for themselves, the 68 others (controls, space,
    DEL, NBSP, soft hyphen) for U+0100 onward in byte order (GPT-2's ``bytes_to_unicode``)."""
    printable = {*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)}
    symbols, shifted = [], 0
    for b in range(VOCAB_SIZE):
        if b in printable:
            symbols.append(chr(b))
        else:
            symbols.append(chr(VOCAB_SIZE + shifted))
            shifted += 1
    return symbols


SYMBOLS = byte_symbols()
IDS = {s: i for i, s in enumerate(SYMBOLS)}


def encode_bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def decode_bytes(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


class KuramotoByteTokenizer(PreTrainedTokenizer):
    """ids 0-255 = bytes; no special tokens (none is added to an encoding, and padding has no id of its own)."""

    model_input_names: ClassVar[list[str]] = ["input_ids", "attention_mask"]

    def __init__(self, **kwargs: Any) -> None:
        kwargs["clean_up_tokenization_spaces"] = False  # decoding is exact: no space clean-up
        kwargs["special_tokens_pattern"] = "none"  # nothing added around an encoding (5.0's default added CLS/SEP)
        super().__init__(**kwargs)

    @property
    def vocab_size(self) -> int:
        return VOCAB_SIZE

    def get_vocab(self) -> dict[str, int]:
        return dict(IDS)

    def _tokenize(self, text: str, **kwargs: Any) -> list[str]:
        return [SYMBOLS[b] for b in encode_bytes(text)]

    def _convert_token_to_id(self, token: str) -> int:
        if token not in IDS:
            raise ValueError(f"{token!r} is not a byte token (the vocabulary is the 256 bytes)")
        return IDS[token]

    def _convert_id_to_token(self, index: int) -> str:
        if not 0 <= index < VOCAB_SIZE:
            raise ValueError(f"token id {index} is not a byte (0-255)")
        return SYMBOLS[index]

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        return decode_bytes(bytes(IDS[t] for t in tokens))

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple[str, ...]:
        """The vocabulary as a ``tokenizer.json`` (the tokenizers library's format), for loaders without our code."""
        name = (filename_prefix + "-" if filename_prefix else "") + TOKENIZER_FILE
        path = os.path.join(save_directory, name)
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(fast_tokenizer_spec(), fh, ensure_ascii=False, indent=1)
        return (path,)


def fast_tokenizer_spec() -> dict[str, Any]:
    """This vocabulary as the tokenizers library builds it: byte-level characters, one BPE token each, no merges."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(models.BPE(vocab=dict(IDS), merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return json.loads(tok.to_str())
