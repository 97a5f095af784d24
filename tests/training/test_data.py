"""Fast tests of the byte corpora: tiny generated files, a private cache, never the network."""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from kuramoto_attention.training import data
from kuramoto_attention.training.data import DataError, load_corpus, sample_windows

REAL_DATA = os.environ.get("KURAMOTO_DATA", "")  # read at import, before the fixture below hides it


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own cache and no inherited data folder, so tests cannot see each other's files."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("KURAMOTO_CACHE", str(cache))
    monkeypatch.delenv("KURAMOTO_DATA", raising=False)
    return cache


def fake_enwik(monkeypatch: pytest.MonkeyPatch, name: str, size: int, seed: int = 0) -> bytes:
    """Random bytes registered as the 'known' content of ``name`` for this test."""
    payload = np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()
    monkeypatch.setitem(data.CHECKSUMS, name, (size, hashlib.sha256(payload).hexdigest()))
    return payload


def test_text_split_proportions_and_dtype(tmp_path: Path) -> None:
    path = tmp_path / "book.txt"
    path.write_bytes(bytes(range(256)) * 4)  # 1024 bytes
    corpus = load_corpus(f"text:{path}")
    sizes = {k: len(v) for k, v in corpus.splits.items()}
    assert sizes == {"train": 921, "valid": 51, "test": 52}
    assert all(v.dtype == np.uint8 and v.ndim == 1 for v in corpus.splits.values())
    assert isinstance(corpus.splits["train"], np.memmap)
    assert bytes(corpus.splits["valid"][:3]) == (bytes(range(256)) * 4)[921:924]
    assert "train 921" in corpus.describe() and "\n" not in corpus.describe()


@pytest.mark.parametrize("content", [b"", b"tiny"])
def test_text_too_small_or_empty(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "small.txt"
    path.write_bytes(content)
    with pytest.raises(DataError, match="too small"):
        load_corpus(f"text:{path}")


def test_sample_windows_deterministic_and_shifted() -> None:
    arr = np.arange(1000, dtype=np.int64).astype(np.uint8)
    batches = []
    for _ in range(2):
        gen = torch.Generator().manual_seed(123)
        batches.append([sample_windows(arr, 8, 16, gen) for _ in range(3)])
    for (x1, y1), (x2, y2) in zip(batches[0], batches[1], strict=True):
        assert torch.equal(x1, x2) and torch.equal(y1, y2)
    x, y = batches[0][0]
    assert x.shape == y.shape == (8, 16) and x.dtype == y.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])
    assert torch.equal((x[:, :1] + 1) % 256, y[:, :1])
    with pytest.raises(DataError, match="too short"):
        sample_windows(arr[:10], 2, 16, torch.Generator().manual_seed(0))


def test_xz_decompressed_once_and_verified(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    payload = fake_enwik(monkeypatch, "enwik6", 2000)
    (tmp_path / "enwik6").mkdir()
    (tmp_path / "enwik6" / "enwik6.xz").write_bytes(lzma.compress(payload))
    corpus = load_corpus("enwik6", tmp_path)
    assert [len(v) for v in corpus.splits.values()] == [1800, 100, 100]
    assert bytes(corpus.splits["test"]) == payload[1900:]
    cached = data.cache_dir() / "enwik6"
    assert cached.read_bytes() == payload
    # A second load trusts the stamp and does not rewrite the cache file.
    before = cached.stat().st_mtime_ns
    time.sleep(0.01)
    load_corpus("enwik6", tmp_path)
    assert cached.stat().st_mtime_ns == before


def test_enwik6_derived_from_enwik7(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big = fake_enwik(monkeypatch, "enwik7", 4000)
    monkeypatch.setitem(data.CHECKSUMS, "enwik6", (400, hashlib.sha256(big[:400]).hexdigest()))
    (tmp_path / "enwik7").write_bytes(big)  # a plain file: mapped in place
    corpus = load_corpus("enwik6", tmp_path)
    assert sum(len(v) for v in corpus.splits.values()) == 400
    assert "first 400 bytes" in corpus.source


def test_enwik8_zip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    payload = fake_enwik(monkeypatch, "enwik8", 1000)
    with zipfile.ZipFile(tmp_path / "enwik8.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("enwik8", payload)
    corpus = load_corpus("enwik8", tmp_path)
    assert [len(v) for v in corpus.splits.values()] == [900, 50, 50]


def test_wrong_checksum(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    payload = fake_enwik(monkeypatch, "enwik6", 1000)
    (tmp_path / "enwik6.xz").write_bytes(lzma.compress(payload[::-1]))
    with pytest.raises(DataError, match=r"wrong SHA-256.*expected") as err:
        load_corpus("enwik6", tmp_path)
    assert "\n" not in str(err.value)
    assert not (data.cache_dir() / "enwik6").exists()  # a bad file is never published to the cache


def test_truncated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    payload = fake_enwik(monkeypatch, "enwik6", 1000)
    (tmp_path / "enwik6.xz").write_bytes(lzma.compress(payload[:900]))
    with pytest.raises(DataError, match="truncated: got 900 bytes, expected 1,000"):
        load_corpus("enwik6", tmp_path)
    (tmp_path / "enwik6.xz").unlink()
    (tmp_path / "enwik6").write_bytes(payload[:10])
    with pytest.raises(DataError, match="truncated: got 10 bytes"):
        load_corpus("enwik6", tmp_path)


def test_corrupt_xz(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    payload = fake_enwik(monkeypatch, "enwik6", 1000)
    (tmp_path / "enwik6.xz").write_bytes(lzma.compress(payload)[:-40])
    with pytest.raises(DataError, match="corrupt"):
        load_corpus("enwik6", tmp_path)


def test_missing_file_and_missing_data_dir(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="KURAMOTO_DATA"):
        load_corpus("enwik7")
    with pytest.raises(DataError) as err:
        load_corpus("enwik7", tmp_path)
    assert str(tmp_path / "enwik7") in str(err.value) and "enwik7.xz" in str(err.value)
    with pytest.raises(DataError, match=r"enwik8\.zip"):
        load_corpus("enwik8", tmp_path)
    with pytest.raises(DataError, match="valid corpora"):
        load_corpus("nonsense", tmp_path)


def test_pycode_from_jsonl_xz(tmp_path: Path) -> None:
    records = [
        {"repo_name": "a-1", "path": "a.py", "split": "train", "content": "x = 1\n"},
        {"repo_name": "a-1", "path": "b.py", "split": "valid", "content": "y = 'é'\n"},
        {"repo_name": "a-1", "path": "c.py", "split": "train", "content": "z = 3\n"},
        {"repo_name": "a-1", "path": "d.py", "split": "test", "content": "pass\n"},
    ]
    (tmp_path / "pycode").mkdir()
    text = "".join(json.dumps(r) + "\n" for r in records).encode()
    (tmp_path / "pycode" / "pypi_python_code.jsonl.xz").write_bytes(lzma.compress(text))
    corpus = load_corpus("pycode", tmp_path)
    assert bytes(corpus.splits["train"]) == b"x = 1\n\x00z = 3\n"
    assert bytes(corpus.splits["valid"]) == "y = 'é'\n".encode()
    assert bytes(corpus.splits["test"]) == b"pass\n"
    assert corpus.splits["train"].dtype == np.uint8
    assert load_corpus("pycode", tmp_path).describe() == corpus.describe()  # second load from the cache


def test_pycode_bad_record(tmp_path: Path) -> None:
    (tmp_path / "pycode").mkdir()
    (tmp_path / "pycode" / "pypi_python_code.jsonl").write_text('{"split": "dev", "content": "x"}\n')
    with pytest.raises(DataError, match="line 1"):
        load_corpus("pycode", tmp_path)


def test_stdlib_builds() -> None:
    corpus = load_corpus("stdlib")
    assert all(len(v) > 0 for v in corpus.splits.values())
    assert len(corpus.splits["train"]) > 1_000_000
    assert b"import" in bytes(corpus.splits["train"][:100_000])
    assert "stdlib" in corpus.source and "\n" not in corpus.describe()


def test_fetch_offline_fails_fast(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(data, "ENWIK8_URL", "http://127.0.0.1:9/enwik8.zip")
    start = time.monotonic()
    with pytest.raises(DataError, match=r"place enwik8\.zip in") as err:
        data.fetch("enwik8", tmp_path, progress=False)
    assert time.monotonic() - start < 5 and "\n" not in str(err.value)
    assert not list(tmp_path.glob("*enwik8.zip*"))  # no partial download left behind
    with pytest.raises(DataError, match="only 'enwik8'"):
        data.fetch("enwik7", tmp_path)


def test_data_dir_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert data.resolve_data_dir(None) is None
    monkeypatch.setenv("KURAMOTO_DATA", str(tmp_path / "env"))
    assert data.resolve_data_dir(None) == tmp_path / "env"
    assert data.resolve_data_dir(tmp_path / "flag") == tmp_path / "flag"
    assert data.resolve_data_dir(str(tmp_path / "flag")) == tmp_path / "flag"


def test_cache_dir_env(private_cache: Path) -> None:
    assert data.cache_dir() == private_cache and private_cache.is_dir()


def test_real_enwik7() -> None:
    """The real shared enwik7, only when KURAMOTO_DATA (as set outside pytest) holds it; decompresses ~10 MB."""
    root = Path(REAL_DATA) if REAL_DATA else None
    names = ("enwik7", "enwik7.xz", "enwik7/enwik7", "enwik7/enwik7.xz")
    if root is None or not any((root / n).is_file() for n in names):
        pytest.skip("set KURAMOTO_DATA to the folder holding enwik7/enwik7.xz to run this test")
    corpus = load_corpus("enwik7", root)
    assert [len(v) for v in corpus.splits.values()] == [9_000_000, 500_000, 500_000]
    assert bytes(corpus.splits["train"][:10]) == b"<mediawiki"


def test_text_spec_recorded_absolute_and_checksummed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 24: a run records ``text:PATH`` by its absolute path and the file's SHA-256 (a changed file is noticed)."""
    path = tmp_path / "book.txt"
    path.write_bytes(b"abc" * 20)
    monkeypatch.chdir(tmp_path)
    assert data.canonical_spec("text:book.txt") == f"text:{path}"
    assert data.canonical_spec("enwik8") == "enwik8" and data.corpus_checksum("stdlib") is None
    first = data.corpus_checksum("text:book.txt")
    assert first == hashlib.sha256(b"abc" * 20).hexdigest()
    path.write_bytes(b"abd" * 20)
    os.utime(path, ns=(1, 1))  # an edit the stamp's (path, size, mtime) still tells apart
    assert data.corpus_checksum(f"text:{path}") == hashlib.sha256(b"abd" * 20).hexdigest() != first
    with pytest.raises(DataError, match="not a file"):
        data.corpus_checksum("text:missing.txt")
