"""mkdocs hook: copy generated blocks and shared sections of README.md into the pages that ask for them, and
write the kind tables from the registry of kinds.

README.md keeps the one copy of what a test compares or what several engineers add to: the generated bug-zoo
table (``python -m gradviz_nb.bugzoo --readme`` rewrites it and the zoo's test compares it) and the section
"What gradviz_nb never does" (each promise linked to its test). A page shows them by a placeholder instead of a
second copy that could go stale. A missing block fails the build.

Links in a copied section are rewritten for the site: ``docs/...`` targets become links relative to the page,
other repository files (tests, sources), which the site does not carry, become code spans.

A page asks for a table of verdict kinds with ``<!-- kinds: TOOL -->`` (``doctor``, ``flow``, ``monitor``, or
``all``); the table is written from ``gradviz_nb.kinds.KINDS`` when the page is built (label, where it applies,
fix, tools, proof), so a new kind is in the docs without a line of prose.
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
KINDS_PLACEHOLDER = re.compile(r"<!-- kinds: (all|doctor|flow|monitor) -->")


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


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("_", "\\_").replace("*", "\\*").replace("\n", " ")


def kinds_table(tool: str = "all") -> str:
    """The Markdown table of the verdict kinds ``tool`` emits (every kind for ``"all"``), in rank order, read
    from the registry when called."""
    from gradviz_nb.kinds import KINDS

    rows = ["| kind | what it says | applies to | fix | emitted by | proven by |", "|---|---|---|---|---|---|"]
    for kind, info in sorted(KINDS.items(), key=lambda kv: kv[1].rank):
        if tool != "all" and tool not in info.produced_by:
            continue
        scope = info.scope or "the parameter, module or op it names"
        proof = f"`{info.case.split()[0]}`" if info.case else f"bug-zoo group `{kind}`"
        tools = ", ".join(f"`{t}`" for t in sorted(info.produced_by))
        rows.append(f"| `{kind}` | {_cell(info.label)} | {_cell(scope)} | {_cell(info.fix)} | {tools} | {proof} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    markdown = KINDS_PLACEHOLDER.sub(lambda m: kinds_table(m.group(1)), markdown)
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
