"""The committed notebooks are what notebooks/make_notebooks.py writes, and the code in its cells is linted.

The generator is rerun into a temporary folder (so the committed files are not touched) and each notebook is
compared cell by cell: type and source (outputs, execution counts and metadata are not compared). The code
cells are linted by ruff's own notebook support on those regenerated notebooks: ruff reads a notebook's cells
as one module, so a name defined in an earlier cell counts, exactly as when the notebook runs.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
RUFF = Path(sys.executable).parent / "ruff"
# A story's first cell lists its imports compactly and in reading order ("import json, pathlib"), not in
# isort sections; every other rule of pyproject.toml [tool.ruff] applies to the cells.
NOTEBOOK_IGNORE = "I001,E401"


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("notebooks")
    shutil.copy(NOTEBOOKS / "make_notebooks.py", out)  # it writes beside itself
    subprocess.run([sys.executable, "make_notebooks.py"], cwd=out, check=True, timeout=120)
    return out


def _cells(path: Path) -> list[tuple[str, str]]:
    return [(c.cell_type, c.source) for c in nbformat.read(path, as_version=4).cells]


def test_committed_notebooks_match_the_generator(regenerated: Path) -> None:
    made = sorted(p.name for p in regenerated.glob("*.ipynb"))
    committed = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
    assert made == committed, "run `.venv/bin/python notebooks/make_notebooks.py` and commit the notebooks"
    for name in made:
        assert _cells(NOTEBOOKS / name) == _cells(regenerated / name), (
            f"notebooks/{name} differs from make_notebooks.py: rerun it and commit both"
        )


def test_generator_and_notebook_cells_pass_ruff(regenerated: Path) -> None:
    config = ["--config", str(ROOT / "pyproject.toml"), "--output-format", "concise"]
    generator = subprocess.run([str(RUFF), "check", *config, str(NOTEBOOKS / "make_notebooks.py")],
                               capture_output=True, text=True, timeout=60)
    assert generator.returncode == 0, generator.stdout + generator.stderr
    cells = subprocess.run([str(RUFF), "check", *config, "--extend-ignore", NOTEBOOK_IGNORE,
                            *sorted(map(str, regenerated.glob("*.ipynb")))], capture_output=True, text=True, timeout=60)
    assert cells.returncode == 0, "code in make_notebooks.py's cells:\n" + cells.stdout + cells.stderr


def test_ruff_sees_an_error_inside_a_cell(tmp_path: Path) -> None:
    # The lint step reads cell code, not only the generator's Python: a bug in a cell string fails it.
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import os\nx = 1", id="a"),
                                         nbformat.v4.new_code_cell("print(y)", id="b")])
    nbformat.write(nb, tmp_path / "bad.ipynb")
    run = subprocess.run([str(RUFF), "check", "--config", str(ROOT / "pyproject.toml"), "--output-format",
                          "concise", str(tmp_path / "bad.ipynb")], capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and "F401" in run.stdout and "F821" in run.stdout, run.stdout
