"""The documentation site (mkdocs.yml, docs/) builds offline in strict mode and documents every public name.

One strict build per run (about 30-70 s on two busy cores, so the file is in ``SLOW_FILES``), into a temporary
directory so it never races a ``mkdocs serve`` or a build into ``build/site``. Strict mode turns every warning
(a broken link or anchor, a page missing from the nav, a docstring mkdocstrings cannot parse, a missing
snippet) into a failed build; the test also fails on any WARNING line in its output.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

import gradviz_nb as gv

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
REFERENCE = DOCS / "reference"
_DIRECTIVE = re.compile(r"^::: (gradviz_nb[\w.]*)\s*$", re.M)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    log = proc.stdout + proc.stderr
    warnings = [line for line in log.splitlines() if re.match(r"\s*(\x1b\[[\d;]*m)?(WARNING|ERROR)\b", line)]
    assert proc.returncode == 0 and not warnings, f"mkdocs build --strict failed:\n{log[-6000:]}"
    return out


def test_every_public_name_has_a_reference_directive() -> None:
    documented = {
        ident.rsplit(".", 1)[-1] for p in REFERENCE.glob("*.md") for ident in _DIRECTIVE.findall(p.read_text())
    }
    missing = sorted(set(gv.__all__) - documented)
    assert not missing, f"names in gv.__all__ with no ::: directive in docs/reference/: {missing}"


class _Headings(HTMLParser):
    """Collects the mkdocstrings headings of a page: their id and symbol kind (function, class, module)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: dict[str, str] = {}
        self._open: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag in {"h2", "h3"} and "doc-heading" in (a.get("class") or ""):
            self._open = a.get("id")
        elif self._open and tag == "code" and "doc-symbol-" in (a.get("class") or ""):
            kinds = [c[len("doc-symbol-") :] for c in (a.get("class") or "").split() if c.startswith("doc-symbol-")]
            kinds = [k for k in kinds if k != "heading"]
            if kinds:
                self.found[self._open] = kinds[0]
                self._open = None


def test_every_public_name_is_rendered_as_what_it_is(site: Path) -> None:
    headings: dict[str, str] = {}
    for page in (site / "reference").glob("*.html"):
        parser = _Headings()
        parser.feed(page.read_text(encoding="utf-8"))
        headings.update(parser.found)
    problems = []
    for name in gv.__all__:
        obj = getattr(gv, name)
        want = "class" if isinstance(obj, type) else "function"
        kinds = {kind for ident, kind in headings.items() if ident.rsplit(".", 1)[-1] == name}
        if want not in kinds:  # e.g. gv.doctor resolved to the package gradviz_nb.doctor instead of the function
            problems.append(f"{name}: want a {want}, rendered as {sorted(kinds) or 'nothing'}")
    assert not problems, "API reference:\n" + "\n".join(problems)


def test_every_notebook_is_rendered(site: Path) -> None:
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        page = site / "notebooks" / f"{nb.stem}.html"
        assert page.is_file(), f"{nb.name} is not in the site (add it to nav in mkdocs.yml)"
        first_code = next(c for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code")
        first_line = "".join(first_code["source"]).splitlines()[0].split()[0]
        assert first_line in page.read_text(encoding="utf-8"), f"{nb.name}: its first code cell is not on the page"


_EXTERNAL = re.compile(
    r"""<(?:script|img|iframe|source)\b[^>]*\bsrc=["']?(?:https?:)?//"""
    r"""|<link\b[^>]*\bhref=["']?(?:https?:)?//|@import\s+(?:url\()?["']?(?:https?:)?//|url\(["']?(?:https?:)?//"""
)


def test_the_site_loads_nothing_from_the_network(site: Path) -> None:
    hits = [
        f"{p.relative_to(site)}: {m.group(0)[:100]}"
        for p in site.rglob("*")
        if p.suffix in {".html", ".css"}
        for m in _EXTERNAL.finditer(p.read_text(encoding="utf-8", errors="replace"))
    ]
    assert not hits, "the site must work offline (no web fonts, no CDN):\n" + "\n".join(hits[:20])


def test_readme_links_resolve() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    broken = [t for t in links if "://" not in t and not t.startswith("mailto:") and not (ROOT / t).exists()]
    assert not broken, f"README.md links to files that do not exist: {broken}"


def test_the_never_does_page_is_the_readme_section(site: Path) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## What gradviz_nb never does\n", 1)[1].split("\n## ", 1)[0]
    tests = set(re.findall(r"\]\((tests/[^)#\s]+)", section))
    assert tests, "README's 'What gradviz_nb never does' links each promise to its test"
    page = (site / "guides" / "never.html").read_text(encoding="utf-8")
    missing = sorted(t for t in tests if t not in page)
    assert not missing, f"docs/guides/never.md (copied from README.md when built) lacks {missing}"
