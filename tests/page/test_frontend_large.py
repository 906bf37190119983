"""A graph too big for ELK (5,000+ nodes, no module capture) is still drawn, and the page stays usable."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pagekit
import pytest
import torch
from pagekit import MountedPage

import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, GPT2Config, gpt2_loss
from gradviz_nb.widgets.page import graph as graph_payload

pytestmark = pytest.mark.browser
browser = pagekit.browser


def test_flat_5000_node_graph_gets_the_plain_layout(browser: Any, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = GPT2(GPT2Config(n_layer=120, n_head=2, d_model=32, vocab=50, block_size=16))
    graph = gv.trace(gpt2_loss(model, seq=8), model=model)  # no capture: nothing to collapse
    assert len(graph) > 5000
    page = MountedPage(browser, tmp_path, {"graph_data": graph_payload(graph), "height": 500})
    root = ".gradviz-root"
    assert page.js(f"document.querySelector('{root}').dataset.layout") == "idle"
    assert page.js(f"document.querySelector('{root}').dataset.simpleLayout") == "true"
    # Every node is drawn; past 2,500 items the big view keeps only those near the viewport in Cytoscape.
    assert int(page.js(f"document.querySelector('{root}').dataset.visibleNodes")) > 5000
    assert page.js(f"document.querySelector('{root}').dataset.bigView") == "true"
    message = page.js("document.querySelector('[data-testid=gradviz-message]').textContent")
    assert "plain layered layout" in message and "gv.capture" in message
    page.page.screenshot(path=str(tmp_path / "large.png"))
    assert page.errors == []
