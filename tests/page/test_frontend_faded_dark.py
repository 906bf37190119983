"""What-if's faded nodes (no longer on a path to the loss) stay legible after a live switch to the dark
theme, in the built bundle (headless Chromium, fake anywidget model, as test_frontend_whatif.py): their
text's WCAG contrast, as the eye gets it (text over fill, both faded over the canvas), measured by the lab
suite's own check (tests/lab/canvas_checks.py). At opacity 0.3 on a dark canvas it was about 1.6:1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pagekit
import pytest
from lab.canvas_checks import CONTRAST_JS
from pagekit import SCREENSHOTS
from test_frontend_status import DARK, SET_THEME_JS
from test_frontend_whatif import Page, fixture_payload

pytestmark = pytest.mark.browser
browser = pagekit.browser

LEGIBLE = 2.5  # faded on purpose, still readable (WCAG asks 4.5 of body text; the live nodes are checked at that)


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_pruned_nodes_stay_legible_in_both_themes(browser: Any, tmp_path: Path, theme: str) -> None:
    payload = fixture_payload()
    every_box = [c["id"] for c in payload["calls"]]
    p = Page(browser, tmp_path, payload, expanded=every_box, toggles={"detach": ["n11:0"], "freeze": []})
    p.js("async () => { await gv.hook.idle(); }")
    if theme == "dark":  # a live switch, as JupyterLab's theme command does it
        p.js(SET_THEME_JS, DARK)
        p.page.wait_for_function("() => document.querySelector('.gradviz-root').dataset.theme === 'dark'", timeout=5000)
        p.page.wait_for_timeout(300)
    seen = p.page.locator(".gradviz-root").evaluate(CONTRAST_JS)
    pruned = [n for n in seen["nodes"] if n["inactive"]]
    assert len(pruned) >= 3, seen
    worst = min(pruned, key=lambda n: n["ratio"])
    p.page.locator("[data-testid=gradviz-root]").screenshot(path=str(SCREENSHOTS / f"whatif-pruned-{theme}.png"))
    print(f"{theme}: the faintest faded node reads at {worst['ratio']}:1")
    assert worst["ratio"] >= LEGIBLE, f"{theme}: faded {worst['label']!r} reads at {worst['ratio']}:1 ({worst})"
    assert p.errors == []
