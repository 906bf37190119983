"""The one registry of verdict kinds (gradviz_nb/kinds.py): complete, proved by the zoo, and the only source.

Every kind has a bug-zoo case (a zoo group of that name) or names the test that proves it where a zoo case
cannot run (two torchrun ranks); every kind a tool's source can emit is in the registry.
"""

from __future__ import annotations

import re
from pathlib import Path

from gradviz_nb.bugzoo import all_cases
from gradviz_nb.doctor.findings import KINDS as DOCTOR_KINDS
from gradviz_nb.kinds import KINDS, as_kind, kinds_of, rank
from gradviz_nb.probes.flow import FLAG_KINDS
from gradviz_nb.probes.monitor import MONITOR_KINDS

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
