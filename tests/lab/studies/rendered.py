"""Reading the report's tables back in the studies' tests: a row's cells by its first cell."""

import re


def rows(text: str, first: str) -> list[list[str]]:
    """The cells of every table row of ``text`` whose first cell is ``first`` (escaped pipes stay in their cell)."""
    out = []
    for line in text.splitlines():
        parts = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if line.startswith("|") and parts and parts[0] == first:
            out.append(parts)
    return out


def cells(text: str, first: str) -> list[str]:
    """The cells of the first table row of ``text`` whose first cell is ``first`` (AssertionError: no such row)."""
    found = rows(text, first)
    assert found, f"no row {first!r}"
    return found[0]
