"""NaN and Inf reach the page: JSON cannot carry them, so they travel as names and are revived there."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pagekit
import pytest
import torch
from pagekit import MountedPage

import gradviz_nb as gv
from gradviz_nb.export.html import exported_state
from gradviz_nb.widgets.page.finite_json import finite_json


def test_finite_json_names_non_finite_numbers_only() -> None:
    data = {"a": [1.0, math.nan, math.inf, -math.inf], "b": "NaN", "c": {"d": 2}}
    out = finite_json(data)
    assert out == {"a": [1.0, "NaN", "Infinity", "-Infinity"], "b": "NaN", "c": {"d": 2}}
    assert finite_json(data["c"]) is data["c"]  # nothing to change: not copied
    json.dumps(out, allow_nan=False)


def _nan_widget() -> gv.GraphWidget:
    x = torch.tensor([0.0, 1.0, 4.0], requires_grad=True)
    with gv.capture() as cap:
        loss = (torch.log(x) * torch.sqrt(x)).sum()  # -inf * 0 = NaN in the forward values
    return gv.GraphWidget(gv.record_backward(loss, capture=cap, names={"x": x}))


def test_widget_state_with_nan_is_plain_json() -> None:
    state = exported_state(_nan_widget())  # raises on NaN (allow_nan=False), as a comm message would fail
    text = json.dumps(state, allow_nan=False)
    assert '"NaN"' in text or '"-Infinity"' in text


browser = pagekit.browser  # the module-scoped headless Chromium fixture


@pytest.mark.browser
def test_page_revives_the_numbers(browser: Any, tmp_path: Path) -> None:
    state = exported_state(_nan_widget())
    p = MountedPage(browser, tmp_path, state)
    button = p.page.locator("[data-testid=gradviz-step-nonfinite]")
    assert button.is_visible()  # the recording's "NaN" norms were read back as numbers
    button.click()
    details = p.page.locator("[data-testid=gradviz-step-details]").inner_text()
    assert "NaN" in details or "inf" in details.lower()
    assert p.errors == []


def test_finite_nodes_touches_only_non_finite_values() -> None:
    from gradviz_nb.widgets.page.finite_json import finite_nodes

    payload = {"nodes": [{"id": "a", "value": [1.0, 2.0]}, {"id": "b", "value": [math.nan, -math.inf]},
                         {"id": "c", "value": None}], "edges": []}
    out = finite_nodes(payload)
    assert out["nodes"][0] is payload["nodes"][0] and out["nodes"][2] is payload["nodes"][2]
    assert out["nodes"][1]["value"] == ["NaN", "-Infinity"] and payload["nodes"][1]["value"][1] == -math.inf
    clean = {"nodes": [{"id": "a", "value": [1e308, 1e308]}], "edges": []}  # sums to inf, yet finite
    assert finite_nodes(clean)["nodes"][0]["value"] == [1e308, 1e308]
