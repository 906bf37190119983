"""mkdocs hook: copy generated blocks and shared sections of README.md into the pages that ask for them.

README.md keeps the one copy of what a test compares or what several engineers add to: the generated bug-zoo
table (``python -m gradviz_nb.bugzoo --readme`` rewrites it and the zoo's test compares it) and the section
"What gradviz_nb never does" (each promise linked to its test). A page shows them by a placeholder instead of a
second copy that could go stale. A missing block fails the build.

Links in a copied section are rewritten for the site: ``docs/...`` targets become links relative to the page,
other repository files (tests, sources), which the site does not carry, become code spans.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

# placeholder -> (start marker, end marker, keep the markers); an end of None means "up to the next ## heading"
BLOCKS: dict[str, tuple[str, str | None, bool]] = {
    "<!-- readme: bug-zoo table -->": ("<!-- bug-zoo table:", "<!-- end of the bug-zoo table -->", True),
    "<!-- readme: never-does section -->": ("## What gradviz_nb never does\n", None, False),
}
_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")


def _block(readme: str, start: str, end: str | None, keep: bool) -> str | None:
    i = readme.find(start)
    if i < 0:
        return None
    if end is None:
        j = readme.find("\n## ", i + len(start))
        j = len(readme) if j < 0 else j
        return readme[i + len(start) : j].strip("\n")
    j = readme.find(end, i)
    if j < 0:
        return None
    return readme[i : j + len(end)] if keep else readme[i + len(start) : j]


def _relink(text: str, page_path: str) -> str:
    here = posixpath.dirname(page_path)

    def fix(m: re.Match[str]) -> str:
        label, target = m.group(1), m.group(2)
        if "://" in target or target.startswith(("#", "mailto:")):
            return m.group(0)
        path, _, anchor = target.partition("#")
        if path.startswith("docs/"):
            rel = posixpath.relpath(path[len("docs/") :], here or ".")
            return f"[{label}]({rel}{'#' + anchor if anchor else ''})"
        return f"`{path}`" if label.strip("`") == path else f"{label} (`{path}`)"

    return _LINK.sub(fix, text)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    readme: str | None = None
    for placeholder, (start, end, keep) in BLOCKS.items():
        if placeholder not in markdown:
            continue
        if readme is None:
            readme = (Path(config.config_file_path).parent / "README.md").read_text(encoding="utf-8")
        block = _block(readme, start, end, keep)
        if block is None:
            raise ValueError(f"README.md has no block starting {start!r} for {page.file.src_path}")
        block = _relink(block, page.file.src_path).replace("<details>", '<details markdown="1">')
        markdown = markdown.replace(placeholder, block)
    return markdown
