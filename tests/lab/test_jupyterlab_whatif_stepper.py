"""End-to-end in a real JupyterLab: what-if toggles and the backward stepper."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from playwright.sync_api import Page

from .jupyterlab import JupyterLabServer, LabNotebook
from .test_jupyterlab_widget import _assert_clean_console

WHAT_IF_CELLS = [
    """\
import json, torch
import gradviz_nb as gv
torch.manual_seed(0)
x = torch.randn(5, 4)
W1 = torch.randn(4, 8, requires_grad=True)
W2 = torch.randn(8, 3, requires_grad=True)
w = gv.GraphWidget.from_fn(lambda: (torch.relu(x @ W1) @ W2).sum(), names={"W1": W1, "W2": W2}, height=420)
relu = next(n for n, d in w.graph.nx.nodes(data=True) if d["op"] == "ReluBackward0")
mm = next(v for v in w.graph.nx.successors(relu))
print("EDGE", json.dumps(["n:" + relu, "n:" + mm]))
w""",
    "print('STATE', json.dumps({'toggles': w.toggles, 'lost': w.what_if().lost, 'verified': w.verified}))",
]

STEPPER_CELLS = [
    """\
import json, torch
import gradviz_nb as gv
a = torch.tensor(2.0, requires_grad=True)
b = torch.tensor(-3.0, requires_grad=True)
with gv.capture() as cap:
    L = torch.tanh(a * b + a)
s = gv.GraphWidget(gv.record_backward(L, capture=cap, names={"a": a, "b": b}), height=420)
s""",
    "print('STEP', s.step)",
]

WI_JS = "(root) => ({lost: root.dataset.whatifLost, mode: root.dataset.whatifMode, runs: root.dataset.whatifRuns})"


def test_whatif_detach_marks_lost_leaf_and_verifies(
    jupyterlab: JupyterLabServer, lab_page: Page, tmp_path: Path, screenshot_dir: Path
) -> None:
    nb = LabNotebook(jupyterlab, lab_page, jupyterlab.write_notebook("whatif.ipynb", WHAT_IF_CELLS)).open()
    out = nb.run_cell(0)
    source, target = json.loads(next(ln for ln in out.splitlines() if ln.startswith("EDGE"))[4:])
    root = nb.wait_in_output(0, ".gradviz-root")
    nb.wait_in_output(0, ".gradviz-canvas canvas")
    root.evaluate("async (r) => r.__gradviz.idle()")
    nb.activate_cell(0)
    root.locator("[data-testid=gradviz-whatif-toggle]").click()
    nb.poll(lambda: root.evaluate(WI_JS)["mode"] == "true", 5.0, "what-if mode on")

    # A real click on the tensor relu -> mm: W1 loses its gradient, W2 keeps it.
    edge = root.evaluate("(r, ends) => r.__gradviz.edgeBetween(ends[0], ends[1])", [source, target])
    assert edge, "the relu -> mm edge is not drawn"
    root.scroll_into_view_if_needed()
    nb.click(root.evaluate("(r, e) => r.__gradviz.edgePoint(e)", edge))
    nb.poll(lambda: root.evaluate(WI_JS)["lost"] == "1", 5.0, "one leaf lost after the click")
    state = nb.run_cell_json(1, "STATE")
    assert state["lost"] == ["W1"] and len(state["toggles"]["detach"]) == 1, state  # type: ignore[index]
    w1 = root.evaluate("(r) => r.__gradviz.whatIf().lost_ids")
    assert len(w1) == 1

    # Verify by re-running PyTorch from the page's button: the kernel answers, the banner shows it.
    root.locator("[data-testid=gradviz-verify]").click()
    banner = root.locator("[data-testid=gradviz-verified]")
    nb.poll(lambda: "Verified" in (banner.text_content() or ""), 30.0, "verification banner")
    assert nb.run_cell_json(1, "STATE")["verified"]["agree"] is True  # type: ignore[index]
    lab_page.screenshot(path=str(tmp_path / "whatif.png"))
    shutil.copy(tmp_path / "whatif.png", screenshot_dir / "jupyterlab_whatif.png")

    # Toggle it back: nothing lost.
    nb.activate_cell(0)
    root.scroll_into_view_if_needed()
    nb.click(root.evaluate("(r, e) => r.__gradviz.edgePoint(e)", edge))
    nb.poll(lambda: root.evaluate(WI_JS)["lost"] == "0", 5.0, "toggled back")
    assert nb.run_cell_json(1, "STATE")["toggles"]["detach"] == []  # type: ignore[index]
    _assert_clean_console(lab_page)


def test_stepper_moves_the_highlight_and_the_values(
    jupyterlab: JupyterLabServer, lab_page: Page, tmp_path: Path, screenshot_dir: Path
) -> None:
    nb = LabNotebook(jupyterlab, lab_page, jupyterlab.write_notebook("stepper.ipynb", STEPPER_CELLS)).open()
    nb.run_cell(0)
    root = nb.wait_in_output(0, ".gradviz-root")
    nb.wait_in_output(0, ".gradviz-canvas canvas")
    root.evaluate("async (r) => r.__gradviz.idle()")
    step_button = root.locator("[data-testid=gradviz-step-forward]")
    details = root.locator("[data-testid=gradviz-step-details]")
    seen = []
    for i in range(3):
        nb.activate_cell(0)
        step_button.click()
        nb.poll(lambda i=i: root.evaluate("(r) => r.__gradviz.currentStep()") == i, 5.0, f"cursor at {i}")
        info = root.evaluate("(r) => r.__gradviz.stepInfo()")
        seen.append((info["node"], details.text_content()))
    assert len({node for node, _ in seen}) == 3, seen  # the highlight moved to a new node each step
    assert len({text for _, text in seen}) == 3, seen  # and the shown gradients changed
    assert "grad_a = grad_out" in "".join(text or "" for _, text in seen)  # the rule with numbers
    assert "STEP 2" in nb.run_cell(1)  # the cursor reached the kernel
    lab_page.screenshot(path=str(tmp_path / "stepper.png"))
    shutil.copy(tmp_path / "stepper.png", screenshot_dir / "jupyterlab_stepper.png")
    _assert_clean_console(lab_page)
