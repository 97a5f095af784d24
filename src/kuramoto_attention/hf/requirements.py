"""Which transformers this integration supports, checked once at import: outside the range, the failure is one
line naming the fix, not an AttributeError deep inside a load."""

from importlib import metadata

# the range the ``hf`` extra declares (pyproject.toml); tested at both ends (docs/huggingface.md)
MIN_VERSION, BELOW_VERSION = (5, 6), (6, 0)
INSTALL_HINT = "pip install 'kuramoto-attention[hf]'"


def _release(version: str) -> tuple[int, ...]:
    """(major, minor) of a version string such as '5.25.0' or '5.1.0.dev0'."""
    parts = []
    for piece in version.split(".")[:2]:
        digits = "".join(c for c in piece if c.isdigit()) if piece[:1].isdigit() else ""
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def check_transformers() -> None:
    """Raise ImportError (one line, naming the fix) unless a supported transformers is installed."""
    try:
        found = metadata.version("transformers")
    except metadata.PackageNotFoundError:
        raise ImportError(f"kuramoto_attention.hf needs transformers: {INSTALL_HINT}") from None
    if not MIN_VERSION <= _release(found) < BELOW_VERSION:
        low, high = ".".join(map(str, MIN_VERSION)), ".".join(map(str, BELOW_VERSION))
        raise ImportError(f"kuramoto_attention.hf supports transformers >={low},<{high}, found {found}: "
                          f"{INSTALL_HINT}")
