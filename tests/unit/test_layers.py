"""The one-way layers and the no-cycle rule of CONTRIBUTING.md ("Layers"), checked the way CI checks them.

``lint-imports`` reads the contracts in pyproject.toml ``[tool.importlinter]``; grimp (import-linter's graph
library) gives every import between gradviz_nb's files, lazy ones inside functions included. Each check is
also run on a small throwaway package with a known violation, so a check that cannot fail would show here.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import grimp
import networkx as nx
import tomllib

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(cwd: Path, config: Path) -> subprocess.CompletedProcess[str]:
    # cwd goes on sys.path (lint-imports adds it), so the package under cwd is the one checked
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--config", str(config)], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def declared_exceptions(pyproject: Path) -> set[tuple[str, str]]:
    """Every ``importer -> imported`` listed in any contract's ``ignore_imports`` (facades, pending moves)."""
    config = tomllib.loads(pyproject.read_text())["tool"]["importlinter"]
    out = set()
    for contract in config["contracts"]:
        for expression in contract.get("ignore_imports", []):
            importer, _, imported = (part.strip() for part in expression.partition("->"))
            assert "*" not in expression and imported, f"list exact imports here, got {expression!r}"
            out.add((importer, imported))
    return out


def import_cycles(package: str, ignored: set[tuple[str, str]]) -> list[list[str]]:
    """Groups of modules that import each other (directly or round a loop), declared exceptions left out.

    Imports under ``if TYPE_CHECKING:`` are left out too: they never run, so they make no import-time cycle
    (``tracing.ghosts`` names capture's call record in an annotation while ``tracing.capture`` imports ghosts).
    """
    graph = grimp.build_graph(package, cache_dir=None, exclude_type_checking_imports=True)
    edges = nx.DiGraph()
    for module in graph.modules:
        edges.add_node(module)
        edges.add_edges_from((module, imported) for imported in graph.find_modules_directly_imported_by(module)
                             if (module, imported) not in ignored)
    return sorted(sorted(c) for c in nx.strongly_connected_components(edges) if len(c) > 1)


def test_contracts_hold() -> None:
    run = lint_imports(ROOT, ROOT / "pyproject.toml")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 broken" in run.stdout


def test_no_import_cycle_between_files() -> None:
    cycles = import_cycles("gradviz_nb", declared_exceptions(ROOT / "pyproject.toml"))
    assert not cycles, f"these modules import each other: {cycles}"


def _throwaway(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / "toypkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path


def test_a_lazy_import_up_a_layer_breaks_the_contract(tmp_path: Path) -> None:
    # The import sits inside a function, as a "harmless" lazy import would: it still counts.
    pkg = _throwaway(tmp_path, {
        "__init__.py": "",
        "low.py": "def up():\n    from toypkg import high\n    return high\n",
        "high.py": "from toypkg import low\n",
    })
    config = tmp_path / "layers.toml"
    config.write_text(textwrap.dedent("""\
        [tool.importlinter]
        root_package = "toypkg"
        [[tool.importlinter.contracts]]
        name = "high over low"
        type = "layers"
        layers = ["toypkg.high", "toypkg.low"]
    """))
    run = lint_imports(pkg, config)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "toypkg.low -> toypkg.high" in run.stdout and "1 broken" in run.stdout
    # Declared as a facade, the same import passes; the declaration is what makes it allowed.
    config.write_text(config.read_text() + 'ignore_imports = ["toypkg.low -> toypkg.high"]\n')
    assert lint_imports(pkg, config).returncode == 0


def test_cycle_check_finds_a_cycle_and_honours_declared_exceptions(tmp_path: Path) -> None:
    _throwaway(tmp_path, {
        "__init__.py": "",
        "a.py": "from toypkg import b\n",
        "b.py": "def f():\n    from toypkg import c\n",
        "c.py": "from toypkg import a\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from toypkg import d\n",
        "d.py": "from toypkg import a\n",
    })
    sys.path.insert(0, str(tmp_path))
    try:
        assert import_cycles("toypkg", set()) == [["toypkg.a", "toypkg.b", "toypkg.c"]]
        assert import_cycles("toypkg", {("toypkg.b", "toypkg.c")}) == []
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m == "toypkg" or m.startswith("toypkg.")]:
            del sys.modules[name]


PROBES = ROOT / "gradviz_nb" / "probes"


def family_of(path: Path, probes: Path) -> str | None:
    """The probe family a file belongs to (``backward`` for ``probes/backward/stats.py``), else None."""
    try:
        parts = path.relative_to(probes).parts
    except ValueError:
        return None
    return parts[0] if len(parts) > 1 else parts[0].removesuffix(".py")


def private_imports_across_families(package: Path) -> list[str]:
    """``from gradviz_nb.probes.<family>... import _name`` written outside that family, anywhere in the package."""
    probes = package / "probes"
    found = []
    for path in sorted(package.rglob("*.py")):
        mine = family_of(path, probes)
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith("gradviz_nb.probes."):
                continue
            family = node.module.split(".")[2]
            private = [a.name for a in node.names if a.name.startswith("_")]
            if family != mine and private:
                found.append(f"{path.relative_to(package.parent)}:{node.lineno} imports {private} from {node.module}")
    return found


def test_no_private_name_crosses_a_probe_family() -> None:
    assert private_imports_across_families(ROOT / "gradviz_nb") == []


def test_the_private_name_check_can_fail(tmp_path: Path) -> None:
    pkg = tmp_path / "gradviz_nb"
    (pkg / "probes" / "flow").mkdir(parents=True)
    (pkg / "probes" / "flow" / "stats.py").write_text("from gradviz_nb.probes.flow.checks import _ok\n")
    (pkg / "doctor.py").write_text("from gradviz_nb.probes.flow.stats import _secret, public\n")
    assert private_imports_across_families(pkg) == [
        "gradviz_nb/doctor.py:1 imports ['_secret'] from gradviz_nb.probes.flow.stats"]
