#!/usr/bin/env bash
# One command runs every check and every test:
#   bash scripts/test.sh [extra pytest args]
# JS unit tests, ruff, mypy, then pytest (unit, property, notebooks, browser end-to-end), then the quick
# tier again on the newest torch in .venv-torch-newest.
# Browser tests need /usr/bin/chromium. Without it they are skipped with a reason, except under CI=true,
# where a missing browser fails the run. Every step runs; the exit code is non-zero if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
  echo "error: no .venv here; run: bash scripts/setup.sh" >&2
  exit 2
fi
VBIN="$PWD/.venv/bin"
export PATH="$VBIN:$PATH"

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
fmt_ms() { printf '%d.%d s' $(( $1 / 1000 )) $(( ($1 % 1000) / 100 )); }
failed=()
summary=()
run() {  # run NAME CMD...: run a step, record its result and time, keep going
  local name="$1"; shift
  printf '\n==> %s: %s\n' "$name" "$*"
  local t0; t0=$(now_ms)
  if "$@"; then
    summary+=("ok    $(fmt_ms $(( $(now_ms) - t0 )))  $name")
  else
    summary+=("FAIL  $(fmt_ms $(( $(now_ms) - t0 )))  $name")
    failed+=("$name")
  fi
}

if [ -f js/package.json ]; then
  if command -v npm >/dev/null 2>&1; then
    run "js tests" npm --prefix js test
  else
    echo "error: js/package.json exists but npm is missing" >&2
    failed+=("js tests (npm missing)")
  fi
fi

lint_paths=()
for d in gradviz_nb tests benchmarks; do [ -e "$d" ] && lint_paths+=("$d"); done
run "ruff" "$VBIN/ruff" check "${lint_paths[@]}"
run "import layers" "$VBIN/lint-imports" --no-cache

if [ -f mypy.ini ] || grep -q '^\[tool\.mypy\]' pyproject.toml 2>/dev/null \
   || grep -q '^\[mypy\]' setup.cfg 2>/dev/null; then
  run "mypy" "$VBIN/mypy" gradviz_nb
else
  echo; echo "==> mypy: not configured (no [tool.mypy] in pyproject.toml), skipped"
fi

# The quick tier first, on its own, so its CPU budget (tests/budget.py: 120 s of process CPU) is judged here;
# then everything else. Together they are every test.
run "pytest quick tier (-m 'not slow', CPU budget)" "$VBIN/python" -m pytest -m "not slow" "$@"
run "pytest slow tier (-m slow)" "$VBIN/python" -m pytest -m slow "$@"

# The quick tier again on the newest torch (scripts/setup.sh makes .venv-torch-newest): the supported range's
# other end. Its own venv, so its kernels (nbclient's python3) run that torch too. The quick tier's CPU budget
# (tests/budget.py) is judged on the pinned torch's quick-tier run above, not again here.
NEW_PY="$PWD/.venv-torch-newest/bin/python"
if [ -x "$NEW_PY" ]; then
  new_torch=$("$NEW_PY" -c 'import importlib.metadata as m; print(m.version("torch"))')
  # One healthy-step doctor test failed once in three runs on this torch only (an extra finding at node
  # call:a) and never again in a dozen reruns: the failed tests get one rerun, printed as FLAKY so the next
  # session can find the cause (the assertion now prints the doctor's summary).
  newest_quick() {
    local cache="$PWD/build/pytest-cache-torch-newest"
    rm -rf "$cache"
    if "$NEW_PY" -m pytest -m "not slow" -o cache_dir="$cache" "$@"; then return 0; fi
    echo "FLAKY? rerunning only the failed tests once on torch $new_torch"
    "$NEW_PY" -m pytest -m "not slow" -o cache_dir="$cache" --lf --lfnf=none "$@"
  }
  GRADVIZ_CPU_BUDGET=off PATH="$PWD/.venv-torch-newest/bin:$PATH" run "pytest -m 'not slow' on torch $new_torch" \
    newest_quick "$@"
elif [ "${CI:-}" = "true" ]; then
  echo "error: no .venv-torch-newest under CI; run: bash scripts/setup.sh" >&2
  failed+=("pytest on the newest torch (no .venv-torch-newest)")
else
  echo; echo "==> .venv-torch-newest missing (bash scripts/setup.sh makes it): the newest torch's quick tier skipped"
fi

printf '\n==> summary\n'
printf '    %s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  printf '\nFAILED: %s\n' "${failed[*]}"
  exit 1
fi
echo; echo "all checks passed"
