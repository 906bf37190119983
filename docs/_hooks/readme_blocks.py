"""mkdocs hook: copy generated blocks of README.md into the pages that ask for them.

README.md keeps the one generated copy of the bug-zoo table (``python -m gradviz_nb.bugzoo --readme`` rewrites it
and the zoo's test compares it), so a page shows it by a placeholder instead of a second copy that could go
stale. A missing block fails the build.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

BLOCKS = {
    "<!-- readme: bug-zoo table -->": ("<!-- bug-zoo table:", "<!-- end of the bug-zoo table -->"),
}


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    for placeholder, (start, end) in BLOCKS.items():
        if placeholder not in markdown:
            continue
        readme = (Path(config.config_file_path).parent / "README.md").read_text(encoding="utf-8")
        i, j = readme.find(start), readme.find(end)
        if i < 0 or j < i:
            raise ValueError(f"README.md has no block between {start!r} and {end!r} for {page.file.src_path}")
        block = readme[i : j + len(end)].replace("<details>", '<details markdown="1">')
        markdown = markdown.replace(placeholder, block)
    return markdown
