"""Small files: no module under gradviz_nb/ over 600 lines, no function over 80 lines (CONTRIBUTING.md).

Measured with ``ast`` on the source as committed: a function's length runs from its ``def`` (decorators
included) to its last line, nested functions counted inside their parent and on their own.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "gradviz_nb"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int]]:
    """(qualified name, lines) of every function or method in ``source`` longer than ``limit`` lines."""
    out: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                lines = (child.end_lineno or child.lineno) - first + 1
                if lines > limit:
                    out.append((prefix + child.name, lines))
                visit(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return out


def test_no_module_over_600_lines() -> None:
    sizes = {str(p.relative_to(PACKAGE.parent)): len(p.read_text(encoding="utf-8").splitlines())
             for p in sorted(PACKAGE.rglob("*.py"))}
    assert len(sizes) > 20, f"found too few modules to be reading the package: {sorted(sizes)}"
    big = {path: n for path, n in sizes.items() if n > MAX_MODULE_LINES}
    assert not big, f"modules over {MAX_MODULE_LINES} lines (split them by what they do): {big}"


def test_no_function_over_80_lines() -> None:
    long = {f"{p.relative_to(PACKAGE.parent)}:{name}": n for p in sorted(PACKAGE.rglob("*.py"))
            for name, n in long_functions(p.read_text(encoding="utf-8"))}
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_the_measure_finds_long_functions_methods_and_nested_ones() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(80))
    source = textwrap.dedent("""\
        def short():
            return 1

        class Box:
            @staticmethod
            def method():
        {body}

        def outer():
            def inner():
        {inner}
            return inner
        """).format(body=textwrap.indent(body, "    "), inner=textwrap.indent(body, "        "))
    found = dict(long_functions(source))
    assert found == {"Box.method": 82, "outer": 83, "outer.inner": 81}, found
    assert long_functions("def f():\n" + "\n".join(f"    x = {i}" for i in range(79))) == []
