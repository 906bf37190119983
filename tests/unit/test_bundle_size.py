"""The shipped canvas stays small: `gradviz_nb/static/widget.js` is at most 1 MB and carries no ELK.

The layout is our own layered layout (`js/src/view/layered/`), chosen over elkjs by measurement
(`benchmarks/bench_layout.mjs`: the same screenshot-suite checks pass, faster); elkjs's worker alone was
1.6 MB of the 2.26 MB bundle. The runtime model holds the bundle gzip-compressed and base64-encoded,
so that is what a saved notebook and an exported page carry once.
"""

from __future__ import annotations

import base64
import gzip
from pathlib import Path

BUNDLE = Path(__file__).resolve().parents[2] / "gradviz_nb" / "static" / "widget.js"
MB = 1_000_000


def test_widget_js_is_at_most_1_mb_and_holds_no_elk() -> None:
    code = BUNDLE.read_bytes()
    carried = len(base64.b64encode(gzip.compress(code, 9)))
    print(f"\nwidget.js {len(code) / MB:.2f} MB, {carried / MB:.2f} MB as the runtime model holds it")
    assert len(code) <= MB, f"{len(code) / MB:.2f} MB"
    assert b"org.eclipse.elk" not in code, "elkjs is in the bundle"
