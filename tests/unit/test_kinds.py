"""The one registry of verdict kinds (gradviz_nb/kinds.py): complete, proved by the zoo, and the only source.

Every kind has a bug-zoo case (a zoo group of that name) or names the test that proves it where a zoo case
cannot run (two torchrun ranks); every kind a tool's source can emit is in the registry.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import cast

import pytest

from gradviz_nb.bugzoo import all_cases
from gradviz_nb.doctor.findings import KINDS as DOCTOR_KINDS
from gradviz_nb.doctor.findings import Diagnosis, Finding
from gradviz_nb.kinds import KINDS, NAN_FIX, Kind, KindInfo, as_kind, fix_for, kinds_of, nan_fix, rank
from gradviz_nb.probes.flow import FLAG_KINDS
from gradviz_nb.probes.monitor import MONITOR_KINDS
from gradviz_nb.widgets import page
from gradviz_nb.widgets.page import traits
from gradviz_nb.widgets.page.contract import DoctorFinding

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "gradviz_nb"
# Where a kind is written as a literal: Finding("kind", ...), Flag("kind", ...), self._event("kind", ...),
# LayerVerdict("kind", ...), and optimizer_flags' (kind, target, ...) tuples.
EMITTED = re.compile(r"""\b(?:Finding|Flag|_event|LayerVerdict)\(\s*"([a-z-]+)"|out\.append\(\(\s*"([a-z-]+)",""")


def test_every_kind_has_a_zoo_case_or_names_the_test_that_proves_it() -> None:
    groups = {c.group for c in all_cases()}
    for kind, info in KINDS.items():
        if info.case:
            assert (ROOT / info.case.split()[0]).is_file(), f"{kind}: {info.case} does not exist"
        else:
            assert kind in groups, f"{kind} has no bug-zoo case (a Case whose group is {kind!r})"


def test_every_kind_the_source_emits_is_registered() -> None:
    emitted: dict[str, str] = {}
    for path in PACKAGE.rglob("*.py"):
        for m in EMITTED.finditer(path.read_text(encoding="utf-8")):
            emitted.setdefault(m.group(1) or m.group(2), str(path.relative_to(ROOT)))
    assert len(emitted) >= 15, f"the scan found too few kinds to be reading the source: {sorted(emitted)}"
    unknown = {k: where for k, where in emitted.items() if k not in KINDS}
    assert not unknown, f"kinds emitted but not in gradviz_nb/kinds.py: {unknown}"


def test_each_tools_list_is_the_registrys_view() -> None:
    assert kinds_of("doctor") == DOCTOR_KINDS and kinds_of("flow") == FLAG_KINDS
    assert kinds_of("monitor") == MONITOR_KINDS
    assert [rank(k) for k in DOCTOR_KINDS] == sorted(rank(k) for k in DOCTOR_KINDS)
    assert rank("no-such-kind") == len(KINDS)


def test_every_kind_has_a_label_and_a_fix() -> None:
    for kind, info in KINDS.items():
        assert info.label and info.fix and info.produced_by, kind
    assert as_kind("spike") == "spike"
    try:
        as_kind("spikes")
    except ValueError as e:
        assert "spikes" in str(e)
    else:
        raise AssertionError("as_kind accepted an unknown kind")


def test_no_check_pastes_a_registry_fix_as_a_literal() -> None:
    """A check says the registry's fix through fix_for / nan_fix; a literal copy would drift from it."""
    fixes = {info.fix: kind for kind, info in KINDS.items()} | {fix: "nan-origin" for fix in NAN_FIX.values()}
    pasted = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "kinds.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in fixes:
                pasted.append(f"{path.relative_to(ROOT)}:{node.lineno} ({fixes[node.value]})")
    assert not pasted, f"fix texts pasted instead of fix_for(kind): {pasted}"


def test_a_nan_origin_fix_by_cause_or_the_kinds_own() -> None:
    assert nan_fix("log(0)") == NAN_FIX["log(0)"] and nan_fix("a cause nobody named") == KINDS["nan-origin"].fix


def _docs_hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("readme_blocks", ROOT / "docs" / "_hooks" / "readme_blocks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_new_kind_reaches_the_page_and_the_docs_from_the_registry_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kind added to the registry only (a temporary row): the page's finding record carries its scope and
    the docs' kind tables list it, with no other file touched."""
    new = KindInfo("schedule never stepped", len(KINDS), "call scheduler.step() once per optimizer step",
                   frozenset({"doctor"}), scope="the learning-rate schedule", case="tests/unit/test_kinds.py")
    monkeypatch.setitem(KINDS, cast(Kind, "lr-schedule-idle"), new)
    finding = Finding(cast(Kind, "lr-schedule-idle"), "StepLR", "the schedule never moved", "lr 0.1 at every step",
                      new.fix)
    record = page.findings(Diagnosis([finding], steps=2, restored=True))[0]
    assert record["scope"] == "the learning-rate schedule" and record["kind"] == "lr-schedule-idle"
    # a record written by hand gets its scope from the registry too
    by_hand = {k: v for k, v in record.items() if k != "scope"}
    assert traits.findings([by_hand], None)[0]["scope"] == "the learning-rate schedule"

    hook = _docs_hook()
    page_md = hook.on_page_markdown("# Kinds\n\n<!-- kinds: doctor -->\n", SimpleNamespace(), None, None)
    rows = {line.split(" | ")[0].strip("| `"): line for line in page_md.splitlines() if line.startswith("| `")}
    assert set(rows) == set(kinds_of("doctor")) | {"lr-schedule-idle"}, "the doctor's table is the registry's view"
    assert "the learning-rate schedule" in rows["lr-schedule-idle"] and "scheduler.step()" in rows["lr-schedule-idle"]
    assert "lr-schedule-idle" not in hook.kinds_table("monitor")


def test_every_kind_has_a_scope_and_the_page_is_told_it() -> None:
    """A kind about the training loop says where it applies; a kind about a tensor applies to its target."""
    loop = {k for k, info in KINDS.items() if info.scope}
    assert {"stale-grad", "double-backward", "mode", "not-a-parameter", "replica-mismatch"} <= loop
    assert not loop & {"no-grad", "detached", "nan-origin", "exploding"}
    records = page.findings(Diagnosis([Finding("mode", "(model)", "m", "e", fix_for("mode"))], 1, True))
    assert set(records[0]) == set(DoctorFinding.__annotations__) and records[0]["scope"] == KINDS["mode"].scope
