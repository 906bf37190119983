"""Everything a user's clone cites is in the clone: no issue numbers, no design notes outside the repository.

Code comments and docs that cite an issue number or point at a file the clone lacks send a reader nowhere; the
reasons belong in the text itself, in CONTRIBUTING.md or in docs/.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ["gradviz_nb", "js/src", "tests", "benchmarks", "notebooks", "examples", "docs"]
DOCS = ["README.md", "CONTRIBUTING.md", "js/README.md"]
SUFFIXES = {".py", ".ts", ".md", ".mjs", ".ipynb", ".css"}
OUTSIDE = re.compile(r"\b[Ii]ssues? #?\d+|\.\./shared|\bDESIGN\.md|\bNOTES\.md|\bSTYLE\.md")


def _files() -> list[Path]:
    found = [ROOT / d for d in DOCS]
    for d in SCANNED:
        found += [p for p in (ROOT / d).rglob("*") if p.suffix in SUFFIXES and "node_modules" not in p.parts]
    return [p for p in found if p.is_file() and p != Path(__file__).resolve()]


def test_no_file_cites_an_issue_number_or_a_file_outside_the_repository() -> None:
    hits = [
        f"{p.relative_to(ROOT)}:{i}: {line.strip()[:120]}"
        for p in _files()
        for i, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not hits, "say the reason in the text instead:\n" + "\n".join(hits)


def test_the_pattern_catches_what_it_is_for() -> None:
    assert OUTSIDE.search("(issue 14, point 9)") and OUTSIDE.search("see ../shared/NOTES.md")
    assert not OUTSIDE.search("an issue with 14 nodes")
