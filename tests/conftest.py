"""Test tiers, told apart by folder (and marker, so `-m` can pick them):

- ``tests/unit``: Python only (torch, NetworkX, nbclient kernels); marker ``unit``.
- ``tests/page``: the built bundle in a blank page in headless Chromium, driven through the same fake
  anywidget model that exported HTML pages embed (``tests/pagekit.py``); markers ``page`` and ``browser``.
- ``tests/lab``: a real JupyterLab (or Notebook 7, marimo) in headless Chromium; markers ``lab`` and ``browser``.

Shared helpers (``graphs.py``: traced models; ``pagekit.py``: the page mount) and ``fixtures/`` live here,
and this directory is put on ``sys.path`` so every tier imports them by plain name.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Generator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import budget  # noqa: E402  (a helper of this folder, importable once HERE is on sys.path)

_TIERS = {"unit": ("unit",), "page": ("page", "browser"), "lab": ("lab", "browser")}

# The one list of what the quick loop (`pytest -m "not slow"`) leaves out: every browser tier, and the unit
# files that build a wheel, run notebooks, launch torchrun or compile with inductor.
SLOW_TIERS = {"page", "lab"}
SLOW_FILES = {
    "test_wheel.py",
    "test_notebooks.py",
    "test_saved_size.py",
    "test_ddp.py",
    "test_fsdp2.py",
    "test_distributed.py",
    "test_meshes.py",  # HSDP, TP and TP x FSDP2: three torchrun launches (4, 2, 4 ranks), about 60 s of CPU
    "test_compile.py",
    "test_deep_graphs.py",  # a 100k-node chain traced and freed in a subprocess: 1-2 min on two busy cores
    "test_bench.py",  # python -m gradviz_nb.bench --quick: about 40 s on two busy cores
    "test_docs.py",  # mkdocs build --strict: 30-70 s on two busy cores
    "test_cli.py",  # the gradviz command over example scripts in subprocesses (Trainer, Lightning, torchrun): minutes
    "test_mcp.py",  # the MCP server process and the SDK's client, six script runs: about 3 min on two busy cores
}


# Single tests of the quick tiers that cost over ~8 s of CPU (real GPT-2 checkpointing, 60-step training
# loops, a Trainer run): they run in the full suite only.
SLOW_TESTS = {
    "test_memory.py::test_checkpointed_gpt2_within_2_percent_of_what_pytorch_keeps",
    "test_memory.py::test_recompute_cost_matches_what_backward_reruns",
    "test_monitor.py::test_healthy_loops_have_no_flag",
    "test_integrations_transformers.py::test_dead_adapter_fires_only_when_an_adapter_is_cut",
    "test_mutants.py::test_doctor_names_mutants",  # 240 mutants, each run twice and doctored: 10-20 min
    "test_mutants.py::test_every_family_plants_a_bug_pytorch_sees",  # up to 12 truths per family: 1-3 min
    "test_mutants.py::test_why_and_prove_on_a_planted_detach_are_right_against_pytorch",  # a mutant doctored, 6 proofs
    "test_checkpointing.py::test_gpt2_random_marks_mixed_modes_and_nested_calls",  # 4 x 2 checkpointed re-runs
    "test_checkpointing.py::test_hf_gpt2_peft_lora_both_modes",  # HF GPT-2 + peft, checkpointed re-runs
    "test_checkpointing_agreement.py::test_gpt2_124m_answers_within_50_ms",  # traces GPT-2 124M
    "test_checkpointing_nested.py::test_every_nesting_of_the_two_modes_as_pytorch_runs_it",  # HF GPT-2 re-runs
    "test_checkpointing_nested.py::test_verify_applies_the_inner_marks_and_agrees",  # 4 x 2 checkpointed re-runs
    "test_state_fingerprint.py::test_two_threads_leave_process_state_as_it_began",  # 2 threads: 10 s
    "test_crafted_files.py::test_crafted_files_stay_under_100_mb_of_resident_memory",  # a fresh interpreter
}


# Quick-tier tests moved to the slow tier to hold the quick tier to its CPU budget (tests/budget.py), with the
# CPU each used when measured: FILE::NAME or FILE::NAME[PARAMS], one per line.
MOVED_FOR_BUDGET = budget.moved(HERE / "slow_tests.txt")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.fspath)).resolve().relative_to(HERE).parts
        for marker in _TIERS.get(parts[0], ()) if parts else ():
            item.add_marker(getattr(pytest.mark, marker))
        test = f"{parts[-1]}::{item.name.split('[')[0]}" if parts else ""
        exact = f"{parts[-1]}::{item.name}" if parts else ""
        if parts and (parts[0] in SLOW_TIERS or parts[-1] in SLOW_FILES or test in SLOW_TESTS
                      or test in MOVED_FOR_BUDGET or exact in MOVED_FOR_BUDGET):
            item.add_marker(pytest.mark.slow)


# The quick tier's CPU budget (tests/budget.py): every test's process CPU, and the verdict on the whole run.
_COSTS: dict[str, float] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    start = budget.cpu_seconds()
    yield
    _COSTS[item.nodeid] = budget.cpu_seconds() - start


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    total = budget.cpu_seconds()
    cache = getattr(config, "cache", None)  # absent under -p no:cacheprovider
    if cache is not None and _COSTS:
        costs = {test: round(cost, 3) for test, cost in _COSTS.items()}
        cache.set("gradviz/cpu", {"total_s": round(total, 2), "tests": costs})
    if not budget.whole_quick_tier(config.option.markexpr, config.option.keyword, config.args, HERE):
        return
    if os.environ.get("GRADVIZ_CPU_BUDGET") == "off":  # scripts/test.sh's second torch: judged on the pinned one
        return
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    message = budget.over_budget(total, _COSTS)
    if reporter is not None:
        reporter.write_sep("=", f"quick tier: {total:.1f} s of process CPU (budget {budget.BUDGET_S:.0f} s)")
        if message is not None:
            reporter.write_line(message, red=True)
    if message is not None:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
