"""Source locations in the user's words: a notebook cell is "cell [N], line L" (N the execution count IPython
gave it), a file under the working directory is relative to it; no kernel temp path reaches a user's text."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

import pytest
from ipykernel.compiler import XCachingCompiler
from IPython.core.interactiveshell import InteractiveShell

from gradviz_nb.tracing.places import source_file, source_line, split_line

TEMP = re.compile(r"ipykernel_\d+|/tmp/|\.py:\d+")


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    """A real IPython shell in this process with ipykernel's compiler (cells become temp files named by a hash
    of their code, ``.../ipykernel_<pid>/<hash>.py``, as in Jupyter), gone after the test."""
    before = InteractiveShell._instance if InteractiveShell.initialized() else None  # another test's shell
    InteractiveShell.clear_instance()
    sh = InteractiveShell.instance(compiler_class=XCachingCompiler)
    try:
        yield sh
    finally:
        InteractiveShell.clear_instance()
        if before is not None:
            InteractiveShell._instance = before


def _run(sh: InteractiveShell, code: str) -> None:
    result = sh.run_cell(code, store_history=True)
    assert result.success, result.error_in_exec or result.error_before_exec


def test_a_cell_reads_as_its_execution_count_and_line(shell: InteractiveShell) -> None:
    _run(shell, "x = 1")
    _run(shell, "import sys\n\ndef where():\n    f = sys._getframe()\n    return f.f_code.co_filename, f.f_lineno\n")
    _run(shell, "found = where()")
    filename, line = shell.user_ns["found"]
    assert re.search(r"ipykernel_\d+[/\\]\d+\.py$", filename), filename  # the path a kernel really uses
    # the cell that defined where() ran second: IPython's own traceback says "Cell In[2], line 5"
    assert shell.compile.format_code_name(filename) == ("Cell", "In[2]")
    assert source_line(filename, line) == "cell [2], line 5"
    assert split_line("cell [2], line 5") == ("cell [2]", 5)


def test_a_user_line_inside_a_cell_is_the_cell_not_the_temp_file(shell: InteractiveShell) -> None:
    _run(shell, "import gradviz_nb.tracing.ghosts as gh\n\ndef mine():\n    return gh.user_line()")
    _run(shell, "where = mine()")
    assert shell.user_ns["where"] == "cell [1], line 4"


def test_flags_from_a_cell_cite_the_cell(shell: InteractiveShell) -> None:
    """A detach written in a cell: gradient_flow's reason for the cut parameter names the cell and line where
    the detach is, and the parameter truly has no gradient in PyTorch."""
    _run(shell, "import torch\nfrom torch import nn\nimport gradviz_nb as gv\ntorch.manual_seed(0)")
    _run(shell, "class Cut(nn.Module):\n"
                "    def __init__(self):\n"
                "        super().__init__()\n"
                "        self.a, self.b = nn.Linear(3, 3), nn.Linear(3, 1)\n"
                "    def forward(self, x):\n"
                "        return self.b(self.a(x).detach())\n"
                "model = Cut()\n"
                "with gv.capture(model) as cap:\n"
                "    loss = model(torch.randn(4, 3)).sum()\n"
                "loss.backward()\n"
                "flow = gv.gradient_flow(model, capture=cap)")
    model = shell.user_ns["model"]
    assert model.a.weight.grad is None and model.b.weight.grad is not None  # PyTorch's truth
    flow = shell.user_ns["flow"]
    reasons = [f.reason for f in flow.flags if f.target == "a.weight"]
    assert reasons and "cell [2], line 6" in reasons[0], reasons
    assert not TEMP.search(flow.summary()), flow.summary()


def test_files_read_relative_to_the_working_directory(tmp_path: os.PathLike[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    inside = os.path.join(os.fspath(tmp_path), "src", "train.py")
    assert source_line(inside, 13) == os.path.join("src", "train.py") + ":13"
    outside = os.path.join(os.path.dirname(os.fspath(tmp_path)), "elsewhere.py")
    assert source_file(outside) == outside  # outside the working directory: the path, which the user can open
    assert split_line(source_line(inside, 13)) == (os.path.join("src", "train.py"), 13)


def test_a_kernel_temp_file_this_shell_never_ran_is_still_no_path() -> None:
    assert source_line("/tmp/ipykernel_21035/2955437752.py", 13) == "cell [?], line 13"
    assert source_line("<ipython-input-7-0a1b2c3d4e5f>", 2) == "cell [7], line 2"
