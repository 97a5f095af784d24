"""The report's shape, not its wording: RESULTS.md's length, and no paragraph of prose over 600 characters in what the
lab writes, RESULTS.md, docs/notebook.md and the README's marked sections (tables and code are data: left out)."""

import re
from pathlib import Path

import pytest

from lab.writers.summary import END, PRESETS_END, PRESETS_START, START

ROOT = Path(__file__).resolve().parents[3]
MAX_PARAGRAPH, MAX_RESULTS = 600, 12_000


def paragraphs(text: str) -> list[str]:
    """Prose blocks: blank-line separated, each list item on its own, tables, headings, images and code left out."""
    out = []
    for block in re.split(r"\n\s*\n", re.sub(r"^```.*?^```[^\n]*$", "", text, flags=re.S | re.M)):
        if block.lstrip().startswith(("|", "#", "![")):
            continue
        out += [b for b in re.split(r"\n(?=- )", block) if b.strip()]
    return out


def lab_written(page: str) -> str:
    """The page's text the lab writes: all of it, but of the README only its marked sections (its prose is people's)."""
    text = (ROOT / page).read_text()
    if page != "README.md":
        return text
    return "\n\n".join(text.split(start, 1)[1].split(end, 1)[0] for start, end in ((START, END),
                                                                                    (PRESETS_START, PRESETS_END)))


def test_paragraphs_splits_items_and_leaves_tables_and_code_out():
    text = "a\nb\n\n| x |\n|---|\n\n- one\n- two\n\n```\ncode\n\nmore code\n```\n\n# h"
    assert paragraphs(text) == ["a\nb", "- one", "- two"]


@pytest.mark.parametrize("page", ["RESULTS.md", "docs/notebook.md", "README.md"])
def test_no_paragraph_is_over_600_characters(page):
    long = [p[:80] for p in paragraphs(lab_written(page)) if len(p) > MAX_PARAGRAPH]
    assert not long, f"{page}: paragraphs over {MAX_PARAGRAPH} characters: {long}"


def test_results_md_fits_its_budget():
    assert len((ROOT / "RESULTS.md").read_text()) <= MAX_RESULTS
