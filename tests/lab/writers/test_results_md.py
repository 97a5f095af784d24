"""The report's shape, not its wording: RESULTS.md's length, and no paragraph of prose over 600 characters in it (tables
are data, and are left out)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
MAX_PARAGRAPH, MAX_RESULTS = 600, 12_000


def paragraphs(text: str) -> list[str]:
    """Prose blocks: blank-line separated, each list item on its own, tables, headings and images left out."""
    out = []
    for block in re.split(r"\n\s*\n", text):
        if block.lstrip().startswith(("|", "#", "![")):
            continue
        out += [b for b in re.split(r"\n(?=- )", block) if b.strip()]
    return out


def test_paragraphs_splits_items_and_leaves_tables_out():
    assert paragraphs("a\nb\n\n| x |\n|---|\n\n- one\n- two\n\n# h") == ["a\nb", "- one", "- two"]


@pytest.mark.parametrize("page", ["RESULTS.md"])
def test_no_paragraph_is_over_600_characters(page):
    text = (ROOT / page).read_text()
    long = [p[:80] for p in paragraphs(text) if len(p) > MAX_PARAGRAPH]
    assert not long, f"{page}: paragraphs over {MAX_PARAGRAPH} characters: {long}"


def test_results_md_fits_its_budget():
    assert len((ROOT / "RESULTS.md").read_text()) <= MAX_RESULTS
