"""End-to-end in a real JupyterLab: gv.doctor on a broken loop, a real click on a finding reveals its node."""

from __future__ import annotations

import shutil
from pathlib import Path

from playwright.sync_api import Page

from .jupyterlab import JupyterLabServer, LabNotebook
from .test_jupyterlab_widget import _assert_clean_console

DOCTOR_CELLS = [
    """\
import json, torch
import gradviz_nb as gv
from gradviz_nb.demo_models import GPT2, GPT2Config, gpt2_loss
torch.manual_seed(0)
model = GPT2(GPT2Config.small_test())
mlp = model.blocks[1].mlp
def forward(h):  # the bug: the MLP reads its weight through .data
    x = torch.nn.functional.linear(h, mlp.c_fc.weight.data, mlp.c_fc.bias)
    return mlp.c_proj(torch.nn.functional.gelu(x))
mlp.forward = forward
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
def step():
    opt.zero_grad(); gpt2_loss(model, batch=2).backward(); opt.step()
dx = gv.doctor(step, model, opt)
w = gv.GraphWidget(dx, height=480)
w.expanded = []
f = dx.of_kind("data-access")[0]
print("FINDING", json.dumps({"node": f.node, "index": dx.findings.index(f)}))
w""",
    "print('STATE', json.dumps({'selected': w.selected, 'expanded': w.expanded}))",
]


def test_doctor_finding_click_reveals_its_node(
    jupyterlab: JupyterLabServer, lab_page: Page, tmp_path: Path, screenshot_dir: Path
) -> None:
    nb = LabNotebook(jupyterlab, lab_page, jupyterlab.write_notebook("doctor.ipynb", DOCTOR_CELLS)).open()
    finding = nb.run_cell_json(0, "FINDING")
    root = nb.wait_in_output(0, ".gradviz-root")
    nb.wait_in_output(0, ".gradviz-canvas canvas")
    root.evaluate("async (r) => r.__gradviz.idle()")
    nb.activate_cell(0)
    node = finding["node"]  # type: ignore[index]
    assert root.evaluate("(r, id) => r.__gradviz.cy.$id('n:' + id).length", node) == 0  # hidden in a closed box
    root.locator(f"[data-testid=gradviz-finding-{finding['index']}]").click()  # type: ignore[index]
    nb.poll(lambda: root.evaluate("(r, id) => r.__gradviz.cy.$id('n:' + id).length", node) == 1, 15.0,
            "the finding's node drawn")
    state = nb.run_cell_json(1, "STATE")
    assert state["selected"] == node and "blocks.1.mlp" in state["expanded"], state  # type: ignore[index]
    evidence = root.locator(".gradviz-finding-active .gradviz-finding-evidence").inner_text()
    assert ".data" in evidence
    lab_page.screenshot(path=str(tmp_path / "doctor.png"))
    shutil.copy(tmp_path / "doctor.png", screenshot_dir / "jupyterlab_doctor.png")
    _assert_clean_console(lab_page)
