"""Byte-level corpora (vocabulary 256) with fixed train/valid/test splits, memory-mapped.

Every split is a 1-D ``uint8`` numpy memmap (or a slice of one), so a 100 MB corpus costs no
Python objects and no RAM beyond the page cache; the training loop only ever indexes windows.

Corpora (``load_corpus(spec)``):

* ``enwik8`` -- the Hutter Prize file; standard split [0, 90e6) / [90e6, 95e6) / [95e6, 1e8).
* ``enwik7``, ``enwik6`` -- its first 10^7 / 10^6 bytes, split 90/5/5 in the same proportions.
  An enwik file may be a plain file, ``.xz`` or ``.zip``; a smaller one is derived as a prefix of a
  larger one when only the larger is present.
* ``pycode`` -- the PyPI Python-source JSONL; each split is its files' UTF-8 ``content`` in file order.
* ``stdlib`` -- this interpreter's standard-library ``.py`` sources: the corpus that always works offline.
* ``text:PATH`` -- any file, split 90/5/5 by bytes, mapped in place.

Separator: in ``pycode`` and ``stdlib`` consecutive files are joined by one NUL byte (``b"\\x00"``),
which practically never occurs in source text, so the model can learn "a new file starts here". It is
predicted and counted in bits-per-byte like any other byte (about 1 byte per 16 KB of code).

Cache (``cache_dir()``, env ``KURAMOTO_CACHE``): ``enwik8``/``enwik7``/``enwik6`` (unpacked archives),
``pycode/{train,valid,test}.bin``, ``stdlib-py3.X.bin`` and ``stamps/*.json``. A stamp records the
source's path, size and mtime plus the expected checksum, so verified 10-100 MB files are not
re-hashed on every run. All cache writes go to a temp file first and are published by ``os.replace``,
so an interrupted build never leaves a half-written file that looks valid.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import lzma
import os
import sys
import sysconfig
import tempfile
import urllib.request
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch

from kuramoto_attention.training.config import VALID_SPECS

# name -> (size in bytes, SHA-256 of those bytes). Module-level so tests can monkeypatch it.
CHECKSUMS: dict[str, tuple[int, str]] = {
    "enwik8": (100_000_000, "2b49720ec4d78c3c9fabaee6e4179a5e997302b3a70029f30f2d582218c024a8"),
    "enwik7": (10_000_000, "5985c81c39d927ae0e169625790ca4d9e7d1531270c8b09ad73176a375bb3d97"),
    "enwik6": (1_000_000, "369b688978f649681136198fb96db14c1616756260c55fb4b65e9bc049552cad"),
}
ENWIK_ORDER = ("enwik6", "enwik7", "enwik8")  # smallest first: a later file can stand in for an earlier one
ENWIK8_URL = "http://mattmahoney.net/dc/enwik8.zip"
ENWIK8_ZIP_SIZE = 36_445_475
CONNECT_TIMEOUT_S = 10.0
PYCODE_NAMES = ("pypi_python_code.jsonl.xz", "pypi_python_code.jsonl")
SEPARATOR = b"\x00"
SPLITS = ("train", "valid", "test")
STDLIB_SKIP = frozenset({"site-packages", "dist-packages", "test", "tests", "idlelib", "lib2to3", "__pycache__"})
_CHUNK = 1 << 20


class DataError(ValueError):
    """A data problem the user can fix; the message is one line naming the file and the fix."""


@dataclass
class Corpus:
    """A byte corpus: three read-only uint8 memmaps plus where they came from (for logs and reports)."""

    name: str
    splits: dict[str, np.ndarray]
    source: str

    def describe(self) -> str:
        """One line for logs: which corpus, from where, and how many bytes in each split."""
        sizes = " / ".join(f"{k} {len(v):,}" for k, v in self.splits.items())
        return f"{self.name} ({self.source}): {sizes} bytes"


def resolve_data_dir(data_dir: str | os.PathLike | None) -> Path | None:
    """The data folder: an explicit flag wins over env KURAMOTO_DATA; None when neither is set."""
    value = (os.fspath(data_dir) if data_dir is not None else "") or os.environ.get("KURAMOTO_DATA", "")
    return Path(value).expanduser() if value else None


def cache_dir() -> Path:
    """Where derived files live (env KURAMOTO_CACHE, else ~/.cache/kuramoto_attention); created on demand."""
    value = os.environ.get("KURAMOTO_CACHE", "")
    path = Path(value).expanduser() if value else Path.home() / ".cache" / "kuramoto_attention"
    path.mkdir(parents=True, exist_ok=True)
    return path


def sample_windows(
    data: np.ndarray, batch_size: int, context: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random next-byte windows: x = data[o:o+context], y = data[o+1:o+context+1], int64 (B, context).

    Offsets come from ``generator`` only, so a seeded generator reproduces the batches exactly.
    """
    if len(data) < context + 1:
        raise DataError(f"split of {len(data):,} bytes is too short for context {context}; use a smaller context")
    offsets = torch.randint(0, len(data) - context, (batch_size,), generator=generator)
    index = offsets.numpy()[:, None] + np.arange(context + 1)
    windows = torch.from_numpy(np.asarray(data)[index].astype(np.int64))
    return windows[:, :-1].contiguous(), windows[:, 1:].contiguous()


def load_corpus(spec: str, data_dir: str | os.PathLike | None = None) -> Corpus:
    """Open the corpus named by ``spec`` (see the module docstring), building cache files once if needed."""
    if spec.startswith("text:"):
        return _load_text(Path(spec[5:]).expanduser())
    if spec in CHECKSUMS:
        path, source = _enwik(spec, _data_root(data_dir, spec))
        return Corpus(spec, _split_90_5_5(_memmap(path, CHECKSUMS[spec][0])), source)
    if spec == "pycode":
        return _load_pycode(_data_root(data_dir, spec))
    if spec == "stdlib":
        return _load_stdlib()
    raise DataError(f"unknown corpus {spec!r}; valid corpora: {VALID_SPECS}")


def canonical_spec(spec: str) -> str:
    """``spec`` as a run records it: a ``text:PATH`` corpus by its absolute path (a relative one would be found
    only from the directory the run was started in)."""
    if spec.startswith("text:"):
        return "text:" + str(Path(spec[5:]).expanduser().resolve())
    return spec


def corpus_checksum(spec: str) -> str | None:
    """SHA-256 of a ``text:PATH`` corpus file, recorded with a run so that a changed file is noticed; None for
    the named corpora (their bytes are checked against known checksums or rebuilt from a stamped source).
    Hashed once per (path, size, mtime), remembered in a stamp."""
    if not spec.startswith("text:"):
        return None
    path = Path(spec[5:]).expanduser()
    if not path.is_file():
        raise DataError(f"text corpus {path} is not a file; give text:PATH with an existing file")
    ident = _file_ident(path)
    key = "text-" + hashlib.sha256(ident["path"].encode()).hexdigest()[:16]
    info = _stamp_get(key, ident)
    if info is None or "sha256" not in info:
        info = {"sha256": _sha256_file(path)}
        _stamp_put(key, ident, info)
    return info["sha256"]


def fetch(name: str, data_dir: str | os.PathLike | None, *, progress: bool = True) -> Path:
    """Download enwik8.zip into the data folder, check its size and the SHA-256 of its 10^8 bytes.

    Returns the path of the zip. Fails at once with a one-line DataError when offline.
    """
    if name != "enwik8":
        raise DataError(f"cannot fetch {name!r}: only 'enwik8' can be downloaded; place other data by hand")
    root = resolve_data_dir(data_dir)
    if root is None:
        raise DataError("set --data-dir or KURAMOTO_DATA to the folder where enwik8.zip should be saved")
    dest = root / "enwik8.zip"
    if not (dest.is_file() and dest.stat().st_size == ENWIK8_ZIP_SIZE):
        _download(ENWIK8_URL, dest, progress)
    _unpack("enwik8", dest, _enwik_hint("enwik8", root))
    return dest


# ---------------------------------------------------------------------------------------------- helpers


def _data_root(data_dir: str | os.PathLike | None, spec: str) -> Path:
    """The data folder for ``spec``, with a fix-it message when it is unset or missing."""
    root = resolve_data_dir(data_dir)
    if root is None:
        raise DataError(
            f"corpus {spec!r} needs a data folder: set --data-dir or KURAMOTO_DATA to the folder holding "
            "enwik7/ and pycode/ (or use the offline corpus 'stdlib')"
        )
    if not root.is_dir():
        raise DataError(f"data folder {root} does not exist: fix --data-dir or KURAMOTO_DATA")
    return root


def _split_90_5_5(data: np.ndarray) -> dict[str, np.ndarray]:
    """enwik8's 90/5/5 proportions; for enwik8 itself this is exactly 90M / 5M / 5M."""
    n = len(data)
    a, b = n * 90 // 100, n * 95 // 100
    return {"train": data[:a], "valid": data[a:b], "test": data[b:]}


def _memmap(path: Path, length: int | None = None) -> np.ndarray:
    """Read-only uint8 map of ``path`` (or of its first ``length`` bytes)."""
    return np.memmap(path, dtype=np.uint8, mode="r", shape=(length,) if length is not None else None)


@contextlib.contextmanager
def _atomic_write(dest: Path) -> Iterator[IO[bytes]]:
    """Write to a temp file beside ``dest``; publish it with os.replace only if the block succeeds."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
        os.chmod(tmp, 0o644)  # mkstemp makes 0600 files; cache files are meant to be shareable
        os.replace(tmp, dest)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _file_ident(path: Path, **extra: Any) -> dict[str, Any]:
    """What a stamp is keyed on: the source's absolute path, size and mtime, plus anything else relevant."""
    st = path.stat()
    return {"path": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns, **extra}


def _stamp_get(key: str, ident: dict[str, Any]) -> dict[str, Any] | None:
    """The info saved with a stamp whose identity matches ``ident``, else None (stale or absent)."""
    try:
        stamp = json.loads((cache_dir() / "stamps" / f"{key}.json").read_text())
    except (OSError, ValueError):
        return None
    return stamp.get("info", {}) if stamp.get("ident") == ident else None


def _stamp_put(key: str, ident: dict[str, Any], info: dict[str, Any] | None = None) -> None:
    with _atomic_write(cache_dir() / "stamps" / f"{key}.json") as f:
        f.write(json.dumps({"ident": ident, "info": info or {}}).encode())


def _enwik_hint(name: str, root: Path) -> str:
    if name == "enwik8":
        return f"run `kuramoto data fetch enwik8` or place enwik8.zip from {ENWIK8_URL} in {root}"
    return f"place {name}.xz (the first {CHECKSUMS[name][0]:,} bytes of enwik8) in {root / name}, or enwik8 in {root}"


def _check(name: str, where: Path, size: int, sha: str | None, hint: str) -> None:
    """Raise a one-line DataError when ``size``/``sha`` differ from the known values for ``name``."""
    want_size, want_sha = CHECKSUMS[name]
    if size != want_size:
        kind = "truncated" if size < want_size else "too large"
        raise DataError(f"{where}: {name} is {kind}: got {size:,} bytes, expected {want_size:,}; {hint}")
    if sha is not None and sha != want_sha:
        raise DataError(f"{where}: wrong SHA-256 for {name}: got {sha}, expected {want_sha}; {hint}")


def _sha256_file(path: Path, length: int | None = None) -> str:
    """SHA-256 of the first ``length`` bytes (default: all), read in 1 MiB chunks."""
    h, left = hashlib.sha256(), path.stat().st_size if length is None else length
    with path.open("rb") as f:
        while left > 0 and (chunk := f.read(min(_CHUNK, left))):
            h.update(chunk)
            left -= len(chunk)
    return h.hexdigest()


def _enwik(name: str, root: Path) -> tuple[Path, str]:
    """A verified file whose first CHECKSUMS[name][0] bytes are ``name``, and a description of its origin."""
    hint, size = _enwik_hint(name, root), CHECKSUMS[name][0]
    for candidate in ENWIK_ORDER[ENWIK_ORDER.index(name) :]:
        paths = [d / f"{candidate}{ext}" for d in (root, root / candidate) for ext in ("", ".xz", ".zip")]
        if (path := next((p for p in paths if p.is_file()), None)) is None:
            continue
        full = _verified_raw(candidate, path, hint) if path.name == candidate else _unpack(candidate, path, hint)
        if candidate == name:
            return full, str(path)
        _check(name, path, size, _sha256_file(full, size), hint)  # a prefix of a larger file: cheap to hash
        return full, f"first {size:,} bytes of {path}"
    looked = " or ".join(str(d / f"{name}{{,.xz,.zip}}") for d in (root, root / name))
    raise DataError(f"{name} not found (looked for {looked}); {hint}")


def _verified_raw(name: str, path: Path, hint: str) -> Path:
    """Check size at once and the SHA-256 once per (path, size, mtime), remembered in a stamp."""
    _check(name, path, path.stat().st_size, None, hint)
    ident = _file_ident(path, sha256=CHECKSUMS[name][1])
    if _stamp_get(f"{name}-raw", ident) is None:
        _check(name, path, path.stat().st_size, _sha256_file(path), hint)
        _stamp_put(f"{name}-raw", ident)
    return path


def _unpack(name: str, archive: Path, hint: str) -> Path:
    """Stream ``archive`` (.xz or .zip) into cache_dir()/name once, hashing as it goes."""
    size, sha = CHECKSUMS[name]
    out, key, ident = cache_dir() / name, f"{name}-{archive.suffix[1:]}", _file_ident(archive, sha256=sha)
    if out.is_file() and out.stat().st_size == size and _stamp_get(key, ident) is not None:
        return out
    h, n = hashlib.sha256(), 0
    try:
        with _open_archive(archive, name) as src, _atomic_write(out) as dst:
            while chunk := src.read(_CHUNK):
                h.update(chunk)
                dst.write(chunk)
                n += len(chunk)
            _check(name, archive, n, h.hexdigest(), hint)  # inside the block: a bad file is never published
    except (lzma.LZMAError, EOFError, zipfile.BadZipFile, zlib.error) as e:
        raise DataError(f"{archive} is corrupt ({type(e).__name__}: {e}); {hint}") from None
    _stamp_put(key, ident)
    return out


@contextlib.contextmanager
def _open_archive(archive: Path, member: str) -> Iterator[IO[bytes]]:
    """A binary stream of the decompressed bytes of a .xz file, or of ``member`` inside a .zip."""
    if archive.suffix != ".zip":
        with lzma.open(archive, "rb") as f:
            yield f
        return
    with zipfile.ZipFile(archive) as zf:
        if member not in zf.namelist():
            raise DataError(f"{archive} has no member {member!r}; re-download it")
        with zf.open(member) as f:
            yield f


def _download(url: str, dest: Path, progress: bool) -> None:
    """Stream ``url`` into ``dest`` atomically; any network failure becomes a one-line DataError."""
    bar = None
    try:
        with urllib.request.urlopen(url, timeout=CONNECT_TIMEOUT_S) as resp, _atomic_write(dest) as out:
            total = int(resp.headers.get("Content-Length") or ENWIK8_ZIP_SIZE)
            bar = _progress_bar(total, dest.name) if progress else None
            n = 0
            while chunk := resp.read(_CHUNK):
                out.write(chunk)
                n += len(chunk)
                if bar is not None:
                    bar.update(len(chunk))
            if n != ENWIK8_ZIP_SIZE:
                raise DataError(f"{url}: downloaded {n:,} bytes, expected {ENWIK8_ZIP_SIZE:,}; try again")
    except OSError as e:
        reason = str(getattr(e, "reason", e)).replace("\n", " ")
        raise DataError(
            f"could not download {url} ({reason}); download it elsewhere and place enwik8.zip in {dest.parent}"
        ) from None
    finally:
        if bar is not None:
            bar.close()


def _progress_bar(total: int, desc: str) -> Any:
    """A tqdm byte counter when tqdm is installed (it is optional), else None."""
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit="B", unit_scale=True, desc=desc)


def _load_text(path: Path) -> Corpus:
    """Map any file in place (no copy) and split it 90/5/5 by bytes."""
    if not path.is_file():
        raise DataError(f"text corpus {path} is not a file; give text:PATH with an existing file")
    size = path.stat().st_size
    if size < 20:  # below 20 bytes one of the 5% splits would be empty
        raise DataError(f"text corpus file {path} is too small to split: got {size} bytes, need at least 20")
    return Corpus(f"text:{path}", _split_90_5_5(_memmap(path)), f"file {path}")


def _load_pycode(root: Path) -> Corpus:
    """Build pycode/{train,valid,test}.bin once, streaming the JSONL a line at a time, then map them."""
    sources = [d / n for d in (root / "pycode", root) for n in PYCODE_NAMES]
    src = next((p for p in sources if p.is_file()), None)
    if src is None:
        raise DataError(f"pycode not found (looked for {sources[0]} and {sources[1]}); place it in {root / 'pycode'}")
    out = {s: cache_dir() / "pycode" / f"{s}.bin" for s in SPLITS}
    ident = _file_ident(src, separator=SEPARATOR.hex())
    info = _stamp_get("pycode", ident)
    if info is None or not all(p.is_file() for p in out.values()):
        info = _build_pycode(src, out)
        _stamp_put("pycode", ident, info)
    counts = ", ".join(f"{info[s]:,} {s}" for s in SPLITS)
    return Corpus("pycode", {s: _memmap(p) for s, p in out.items()}, f"{src} ({counts} files, NUL-separated)")


def _build_pycode(src: Path, out: dict[str, Path]) -> dict[str, int]:
    counts = dict.fromkeys(SPLITS, 0)
    try:
        with contextlib.ExitStack() as stack:
            files = {s: stack.enter_context(_atomic_write(p)) for s, p in out.items()}
            opener = lzma.open if src.suffix == ".xz" else open
            for lineno, line in enumerate(stack.enter_context(opener(src, "rb")), 1):
                if not line.strip():
                    continue
                rec = json.loads(line)
                split, content = rec.get("split"), rec.get("content")
                if split not in files or not isinstance(content, str):
                    raise DataError(f"{src} line {lineno}: need 'split' in {SPLITS} and a string 'content'")
                files[split].write((SEPARATOR if counts[split] else b"") + content.encode("utf-8"))
                counts[split] += 1
            if empty := [s for s in SPLITS if not counts[s]]:
                raise DataError(f"{src} has no records for split(s) {empty}; every split needs at least one file")
    except DataError:
        raise
    except (lzma.LZMAError, EOFError, ValueError) as e:  # ValueError: bad JSON or unencodable text
        raise DataError(f"{src} is corrupt ({type(e).__name__}: {e}); re-copy it") from None
    return counts


def _load_stdlib() -> Corpus:
    """The standard library's own .py files (no tests, idlelib, lib2to3), joined by NUL, split 90/5/5."""
    root = Path(sysconfig.get_paths()["stdlib"])
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    out = cache_dir() / f"stdlib-py{version}.bin"
    ident = {"path": str(root), "version": sys.version}
    info = _stamp_get(out.stem, ident)
    if info is None or not out.is_file():
        files = _stdlib_files(root)
        if not files:
            raise DataError(f"no .py files under {root}; use another corpus (e.g. text:PATH)")
        with _atomic_write(out) as f:
            for i, rel in enumerate(files):
                f.write((SEPARATOR if i else b"") + (root / rel).read_bytes())
        info = {"files": len(files)}
        _stamp_put(out.stem, ident, info)
    return Corpus("stdlib", _split_90_5_5(_memmap(out)), f"Python {version} stdlib at {root} ({info['files']} files)")


def _stdlib_files(root: Path) -> list[Path]:
    """Relative paths of the stdlib's .py files in sorted order, pruning STDLIB_SKIP directories."""
    files = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in STDLIB_SKIP]
        files += [(Path(folder) / n).relative_to(root) for n in names if n.endswith(".py")]
    return sorted(files)
