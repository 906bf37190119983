"""Bug-zoo cases: monitor."""

from __future__ import annotations

from gradviz_nb.bugzoo.case import Case

CASES: list[Case] = []
