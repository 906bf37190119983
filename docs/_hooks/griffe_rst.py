"""Griffe extension: read the package's reStructuredText-flavoured docstrings as the Markdown mkdocstrings renders.

The docstrings are written for ``help()`` and editors: ``:class:`X``` roles and ``Example::`` literal blocks.
Without touching the sources, this turns roles into code spans and each ``::`` block into a fenced Python block,
so the API reference shows them as a reader expects (mkdocs.yml: ``extensions`` of the python handler).
"""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension, Object

_ROLE = re.compile(r":(?:class|func|meth|attr|mod|data|exc|obj|py:\w+):`~?([^`]+)`")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def markdown_of(text: str) -> str:
    text = _ROLE.sub(lambda m: f"`{m.group(1)}`", text)
    lines, out, i = text.splitlines(), [], 0
    while i < len(lines):
        line = lines[i]
        if not line.rstrip().endswith("::"):
            out.append(line)
            i += 1
            continue
        base = _indent(line)
        head = line.rstrip()[:-2].rstrip()
        if head.strip():  # "Example:" followed by a blank line stays text for the Google-style parser
            out.append(head + ":")
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        k = j
        while k < len(lines) and (not lines[k].strip() or _indent(lines[k]) > base):
            k += 1
        block = lines[j:k]
        while block and not block[-1].strip():
            block.pop()
        if not block:  # a "::" with nothing indented after it: just the colon
            i += 1
            continue
        cut = min(_indent(b) for b in block if b.strip())
        pad = " " * base
        out += ["", pad + "```python", *[pad + b[cut:] if b.strip() else "" for b in block], pad + "```", ""]
        i = k
    return "\n".join(out)


class RstToMarkdown(Extension):
    def on_instance(self, *, obj: Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown_of(obj.docstring.value)
