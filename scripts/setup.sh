#!/usr/bin/env bash
# One command from a fresh checkout to a working install, then the demo:
#   bash scripts/setup.sh
# Idempotent and non-interactive (safe under CI=true with no stdin). Does NOT install a browser:
# the browser tests need /usr/bin/chromium, which .ci/run installs with apt.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
export PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1

# Timings in milliseconds with bash integer arithmetic (no bc on a fresh machine).
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
fmt_ms() { printf '%d.%d s' $(( $1 / 1000 )) $(( ($1 % 1000) / 100 )); }
step_start=0
step() { step_start=$(now_ms); printf '\n==> %s\n' "$*"; }
done_step() { echo "    ($(fmt_ms $(( $(now_ms) - step_start ))))"; }
total_start=$(now_ms)

# --- 1. virtual environment -------------------------------------------------------------------
step "virtual environment .venv"
if [ -x .venv/bin/python ] && .venv/bin/python -c 'import sys' 2>/dev/null; then
  echo "    exists: $(.venv/bin/python --version)"
else
  PY=""
  for cand in python3.11 python3; do
    if command -v "$cand" >/dev/null 2>&1; then PY="$cand"; break; fi
  done
  [ -n "$PY" ] || { echo "error: need python3.11 (or python3) on PATH" >&2; exit 1; }
  rm -rf .venv
  "$PY" -m venv .venv
  echo "    created with $("$PY" --version)"
fi
VPY="$ROOT/.venv/bin/python"
done_step

# --- 2. torch first: the CPU wheel, so nothing later pulls a CUDA build -----------------------
step "pip install torch==2.13.0 (first, on its own)"
"$VPY" -m pip install --quiet torch==2.13.0
"$VPY" -W ignore -c 'import torch; print("    torch", torch.__version__)'
done_step

# --- 3. pinned dev requirements, then the package itself ---------------------------------------
step "pip install -r requirements-dev.txt"
"$VPY" -m pip install --quiet -r requirements-dev.txt
done_step

step "pip install -e .[dev]"
"$VPY" -m pip install --quiet -e ".[dev]"
"$VPY" -c 'import gradviz_nb; print("    gradviz_nb from", gradviz_nb.__file__)'
done_step

# --- 3b. a second venv with the newest torch: the quick tier runs there too (scripts/test.sh) ---------
# PyPI's only Linux x86_64 build of torch 2.15 is a CUDA build (about 3 GB downloaded; the venv: 6.6 GB);
# it runs on the CPU. Where the machine caps pip at an older torch with a constraints file
# (/etc/xdg/pip: `torch<=2.14.1`), PIP_CONSTRAINT (pip reads the environment before its config files)
# replaces that cap for these installs only, with requirements-torch-newest.txt's own pin. Nothing
# outside the venv changes. Skipped (quickly) when the venv already holds that torch, and left out entirely
# with GRADVIZ_NO_NEWEST_TORCH=1 (scripts/test.sh then skips that tier, except under CI).
NEW_REQ=requirements-torch-newest.txt
NEW_VENV=.venv-torch-newest
NEW_TORCH=$(sed -n 's/^torch==//p' "$NEW_REQ")
if [ "${GRADVIZ_NO_NEWEST_TORCH:-}" = "1" ]; then
  echo
  echo "==> GRADVIZ_NO_NEWEST_TORCH=1: $NEW_VENV (torch $NEW_TORCH) not made"
else
  step "virtual environment $NEW_VENV (torch $NEW_TORCH for the quick tier)"
  NPY="$ROOT/$NEW_VENV/bin/python"
  if [ -x "$NPY" ] && "$NPY" -c 'import sys' 2>/dev/null; then
    echo "    exists: $("$NPY" --version)"
  else
    rm -rf "$NEW_VENV"
    "$("$VPY" -c 'import sys; print(sys.base_prefix)')/bin/python3" -m venv "$NEW_VENV"
    echo "    created"
  fi
  if [ "$("$NPY" -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null)" = "$NEW_TORCH" ]; then
    echo "    torch $NEW_TORCH already there"
  else
    PIP_CONSTRAINT="$ROOT/$NEW_REQ" "$NPY" -m pip install --quiet -r "$NEW_REQ"
  fi
  # The same pinned set as .venv but its torch line; then the package, without resolving again.
  grep -v '^torch==' requirements-dev.txt > "$NEW_VENV/requirements-dev-but-torch.txt"
  PIP_CONSTRAINT="$ROOT/$NEW_REQ" "$NPY" -m pip install --quiet -r "$NEW_VENV/requirements-dev-but-torch.txt"
  PIP_CONSTRAINT="$ROOT/$NEW_REQ" "$NPY" -m pip install --quiet --no-deps -e .
  "$NPY" -W ignore -c 'import torch; print("    torch", torch.__version__, "cuda build" if torch.version.cuda else "cpu build",
        "(runs on the CPU here)" if not torch.cuda.is_available() else "")'
  echo "    $(du -sh "$NEW_VENV" | cut -f1) in $NEW_VENV"
  done_step
fi

# --- 4. front-end bundle -------------------------------------------------------------------------
if [ -f js/package.json ] && command -v npm >/dev/null 2>&1; then
  step "npm --prefix js ci"
  npm --prefix js ci --no-audit --no-fund --loglevel=error
  done_step
  step "npm --prefix js run build  (-> gradviz_nb/static/widget.js)"
  npm --prefix js run build
  done_step
else
  echo
  echo "==> npm not found (or no js/package.json): using the committed bundle gradviz_nb/static/widget.js"
fi

# --- 5. demo: run the tour notebook ------------------------------------------------------------
NB=notebooks/01_tour.ipynb
if [ -f "$NB" ]; then
  step "demo: execute $NB -> build/01_tour.executed.ipynb"
  mkdir -p build
  "$VPY" - "$NB" build/01_tour.executed.ipynb <<'PYEOF'
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

src, dst = Path(sys.argv[1]), Path(sys.argv[2])
nb = nbformat.read(src, as_version=4)
NotebookClient(
    nb,
    timeout=600,
    kernel_name="python3",
    store_widget_state=True,
    resources={"metadata": {"path": str(src.parent)}},
).execute()
nbformat.write(nb, dst)
print(f"    wrote {dst}")
PYEOF
  done_step
  echo
  echo "Open the tour in JupyterLab:"
  echo "    .venv/bin/jupyter lab notebooks/01_tour.ipynb"
  echo "(or look at the executed copy, widget state included: build/01_tour.executed.ipynb)"
else
  echo
  echo "==> demo skipped: $NB does not exist yet"
fi

echo
echo "setup done in $(fmt_ms $(( $(now_ms) - total_start ))). Run every test with: bash scripts/test.sh"
