"""The wheel a user gets: built by ``python -m build`` from this checkout, installed into a clean venv with
the runtime dependencies only (pyproject's ``dependencies``; torch first, on its own, exactly as
scripts/setup.sh does, so the local CPU wheel is used and no CUDA build is pulled). There,
``gv.GraphWidget(loss)`` is built and exported to a page, which headless Chromium (from the dev venv, where
Playwright lives) opens to check the canvas draws the graph's labels.

Slow by nature (a venv plus torch: about 55 s of CPU, 1-3 min of wall time on two shared cores), so the
venv is made once per session and the tests are marked ``wheel``: ``pytest -m "not wheel"`` leaves them out.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pagekit
import pytest
import tomllib
from packaging.requirements import Requirement

pytestmark = pytest.mark.wheel
browser = pagekit.browser  # the module-scoped headless Chromium fixture

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
BUNDLE = ROOT / "gradviz_nb" / "static" / "widget.js"
REQUIREMENTS = ROOT / "requirements-dev.txt"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
# Installed in the dev venv (requirements-dev.txt, the dev extra), never needed at run time.
DEV_ONLY = {
    "pytest", "hypothesis", "jupyterlab", "notebook", "nbclient", "nbconvert", "ipykernel", "playwright",
    "transformers", "peft", "accelerate", "pandas", "ruff", "mypy", "torchview", "torchviz", "graphviz",
    "build", "hatchling", "lightning", "pytorch-lightning", "tensorboard", "marimo",
}
INSTALL_TIMEOUT = 1200  # seconds; a loaded 2-core machine takes minutes, not tens of minutes


def _norm(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(req: str) -> str:
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", req.strip())
    assert match, req
    return _norm(match.group(0))


def _torch_pin() -> str:
    """The torch pin scripts/setup.sh installs first (``torch==...`` in requirements-dev.txt)."""
    pins = [ln.strip() for ln in REQUIREMENTS.read_text().splitlines() if ln.strip().startswith("torch==")]
    assert len(pins) == 1, pins
    return pins[0]


def _env() -> dict[str, str]:
    """The environment for the clean venv: nothing from the dev venv leaks in (no PYTHONPATH, no
    VIRTUAL_ENV), pip never prompts."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(PIP_NO_INPUT="1", PIP_DISABLE_PIP_VERSION_CHECK="1", OMP_NUM_THREADS="1")
    return env


def _run(cmd: list[str], cwd: Path, timeout: float = INSTALL_TIMEOUT) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)
    tail = f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, f"{' '.join(cmd)} failed ({proc.returncode}):\n{tail}"
    return proc.stdout


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``python -m build --wheel`` from this checkout, without build isolation: the backend (hatchling) and
    ``build`` are pinned in requirements-dev.txt, so this needs no network and takes about a second."""
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(ROOT)], cwd=out)
    wheels = list(out.glob("gradviz_nb-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="session")
def clean_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding torch (the pin setup.sh installs, first and alone) and the wheel with its
    runtime dependencies. Returns its python. ``--no-compile`` skips byte-compiling torch's thousands of
    files (half the install time); ``-c requirements-dev.txt`` constrains the versions pip picks to the
    ones the dev env is tested with, and adds no package."""
    root = tmp_path_factory.mktemp("clean_venv")
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=root)
    python = venv / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "--quiet", "--no-compile", _torch_pin()], cwd=root)
    _run([str(python), "-m", "pip", "install", "--quiet", "--no-compile", "-c", str(REQUIREMENTS), str(wheel)],
         cwd=root)
    return python


def test_wheel_carries_the_package_and_nothing_else(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        shipped_bundle = zf.read("gradviz_nb/static/widget.js")
        shipped_loader = zf.read("gradviz_nb/static/loader.js")
        shipped_schema = zf.read("gradviz_nb/schema/verdicts.schema.json")
        metadata = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        entry_points = zf.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert shipped_bundle == BUNDLE.read_bytes()  # the committed bundle, byte for byte
    assert shipped_loader == BUNDLE.with_name("loader.js").read_bytes()  # each widget's `_esm`
    assert "gradviz_nb/py.typed" in names
    assert "gradviz = gradviz_nb.cli.main:main" in entry_points  # the gradviz command
    assert shipped_schema == (ROOT / "gradviz_nb" / "schema" / "verdicts.schema.json").read_bytes()  # the JSON Schema
    # Every module of the package is in it (a file left out by the build config would break an import).
    source = {p.relative_to(ROOT).as_posix() for p in (ROOT / "gradviz_nb").rglob("*.py")}
    assert source <= names, sorted(source - names)
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {"gradviz_nb", f"gradviz_nb-{PYPROJECT['project']['version']}.dist-info"}, tops  # no tests/, js/
    assert not any("node_modules" in n or "__pycache__" in n or n.endswith(".pyc") for n in names)
    # Requires-Dist: exactly pyproject's runtime dependencies, plus the extras' (marked with their extra).
    requires = [ln.split(":", 1)[1].strip() for ln in metadata.splitlines() if ln.startswith("Requires-Dist:")]
    runtime = sorted(_norm(str(Requirement(r))) for r in requires if "extra ==" not in r)
    # compared as requirements: the build writes a range's bounds in its own order (<2.16,>=2.13)
    assert runtime == sorted(_norm(str(Requirement(r))) for r in PYPROJECT["project"]["dependencies"])


def test_clean_venv_holds_the_runtime_dependencies_only(clean_venv: Path) -> None:
    listed = json.loads(_run([str(clean_venv), "-m", "pip", "list", "--format=json"], cwd=clean_venv.parent))
    installed = {_norm(p["name"]): p["version"] for p in listed}
    assert installed["gradviz-nb"] == PYPROJECT["project"]["version"]
    assert installed["torch"] == _torch_pin().split("==")[1] + "+cpu", installed["torch"]
    assert not [n for n in installed if n.startswith("nvidia-")], "a CUDA build was pulled"
    for req in PYPROJECT["project"]["dependencies"]:
        assert _requirement_name(req) in installed, req
    assert not DEV_ONLY & set(installed), sorted(DEV_ONLY & set(installed))
    _run([str(clean_venv), "-m", "pip", "check"], cwd=clean_venv.parent)


# Runs inside the clean venv (``python -I``: no dev paths, no user site): every module imports, a tiny
# model's loss becomes a GraphWidget and an exported page; prints what the test checks, as JSON.
CLEAN_SCRIPT = r"""
import base64, gzip, hashlib, importlib, json, pkgutil, sys
from pathlib import Path

import torch
import gradviz_nb as gv

out = {"gv_file": gv.__file__, "import_errors": {}}
for m in pkgutil.walk_packages(gv.__path__, "gradviz_nb."):
    if m.name.startswith("gradviz_nb.integrations."):
        continue  # each integration needs its own extra (transformers, lightning, tensorboard)
    try:
        importlib.import_module(m.name)
    except Exception as err:
        out["import_errors"][m.name] = f"{type(err).__name__}: {err}"

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
loss = model(torch.randn(5, 4)).pow(2).mean()
widget = gv.GraphWidget(loss)
bundle = widget._repr_mimebundle_()
data = bundle[0] if isinstance(bundle, tuple) else bundle
out["mime"] = sorted(data)
out["model_id"] = data.get("application/vnd.jupyter.widget-view+json", {}).get("model_id")
static = Path(gv.__file__).parent / "static"
out["esm_is_installed_loader"] = widget._esm == (static / "loader.js").read_text()
code = gzip.decompress(base64.b64decode(widget._runtime.code))  # the canvas, once per kernel
out["runtime_is_installed_bundle"] = code == (static / "widget.js").read_bytes()
out["runtime_sha256"] = hashlib.sha256(code).hexdigest()
out["labels"] = {n: d["label"] for n, d in widget.graph.nx.nodes(data=True)}
out["html"] = str(gv.export_html(widget, sys.argv[1], title="from the clean venv"))
# The charts too: Bokeh reaches the notebook through jupyter_bokeh (a runtime dependency).
loss.backward()
out["dashboard"] = type(gv.Dashboard(model, loss)).__name__
print(json.dumps(out))
"""


@pytest.fixture(scope="session")
def clean_run(clean_venv: Path) -> dict[str, Any]:
    work = clean_venv.parents[2]  # <tmp>/venv/bin/python -> <tmp>
    script = work / "clean_check.py"
    script.write_text(CLEAN_SCRIPT)
    stdout = _run([str(clean_venv), "-I", str(script), str(work / "graph.html")], cwd=work, timeout=300)
    result: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    return result


def test_graph_widget_builds_in_the_clean_venv(wheel: Path, clean_venv: Path, clean_run: dict[str, Any]) -> None:
    venv = clean_venv.parents[1]
    assert Path(clean_run["gv_file"]).is_relative_to(venv), clean_run["gv_file"]  # the wheel, not this checkout
    assert clean_run["import_errors"] == {}
    assert WIDGET_MIME in clean_run["mime"] and clean_run["model_id"]
    assert clean_run["esm_is_installed_loader"] and clean_run["runtime_is_installed_bundle"]
    with zipfile.ZipFile(wheel) as zf:  # the wheel's bundle (checked against this checkout's above)
        assert clean_run["runtime_sha256"] == hashlib.sha256(zf.read("gradviz_nb/static/widget.js")).hexdigest()
    assert clean_run["dashboard"] == "Dashboard"
    labels = set(clean_run["labels"].values())
    assert {"Addmm", "Tanh", "Pow", "Mean", "output"} <= labels, labels


@pytest.mark.browser
def test_page_from_the_clean_venv_draws_the_graph(browser: Any, clean_run: dict[str, Any], tmp_path: Path) -> None:
    page = browser.new_page(viewport={"width": 1000, "height": 800})
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(Path(clean_run["html"]).as_uri())
    page.wait_for_function("() => window.gradvizReady !== undefined", timeout=60_000)
    page.evaluate("() => window.gradvizReady")
    hook = "document.querySelector('.gradviz-root').__gradviz"
    # The whole graph in view (the page may open at a readable zoom showing only the top), then every graph
    # node is on the canvas under its label, inside the canvas.
    page.evaluate(
        f"""() => new Promise((resolve) => {{
          {hook}.cy.fit(undefined, 10);
          requestAnimationFrame(() => requestAnimationFrame(resolve));
        }})"""
    )
    drawn = page.evaluate(
        f"""() => {{
          const cy = {hook}.cy;
          const box = cy.container().getBoundingClientRect();
          return cy.nodes().map((n) => {{
            const b = n.renderedBoundingBox({{ includeNodes: false, includeLabels: true, includeOverlays: false }});
            return {{ id: n.id(), label: String(n.style('label')).split('\\n')[0], visible: n.visible(),
                      clip: {{ x: box.left + b.x1, y: box.top + b.y1, width: b.w, height: b.h }},
                      inside: b.x1 >= 0 && b.y1 >= 0 && b.x2 <= box.width && b.y2 <= box.height }};
          }});
        }}"""
    )
    expected = {f"n:{node}": label for node, label in clean_run["labels"].items()}
    assert {d["id"]: d["label"] for d in drawn} == expected
    assert all(d["visible"] and d["inside"] for d in drawn), drawn
    # The labels are pixels on the canvas: each label's area changes when text is hidden.
    with_text = [page.screenshot(clip=d["clip"]) for d in drawn]
    page.evaluate(
        f"""() => new Promise((resolve) => {{
          {hook}.cy.nodes().style('text-opacity', 0);
          requestAnimationFrame(() => requestAnimationFrame(resolve));
        }})"""
    )
    without_text = [page.screenshot(clip=d["clip"]) for d in drawn]
    unchanged = [d["label"] for d, a, b in zip(drawn, with_text, without_text, strict=True) if a == b]
    assert unchanged == [], f"labels not drawn on the canvas: {unchanged}"
    assert errors == []
    assert all(u.split(":", 1)[0] in ("file", "blob", "data") for u in requests), requests

