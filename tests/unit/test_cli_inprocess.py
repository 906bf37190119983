"""The gradviz command in this process on tiny scripts (the quick tier's check; tests/unit/test_cli.py runs the
example scripts as subprocesses): the bug named, the healthy run silent, every hook and patch gone afterwards, the
script's own errors passed through as Python gives them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.optim.optimizer as optimizer_globals

from gradviz_nb import schema
from gradviz_nb.cli.main import main

SCRIPT = '''
import sys
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(16, 4), torch.randn(16, 1)
for _ in range(10):
    opt.zero_grad()
    h = model[1](model[0](x))
    if "--bug" in sys.argv:
        h = h.detach()
    nn.functional.mse_loss(model[2](h), y).backward()
    opt.step()
print("DONE")
'''


def test_doctor_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    init, backward = torch.optim.Optimizer.__init__, torch.autograd.backward
    assert main(["doctor", "--json", str(script), "--bug"]) == 1
    out = capsys.readouterr()
    record = json.loads(out.out)  # the script's own prints went to stderr under --json
    assert {(f["kind"], f["target"]) for f in record["findings"]} == {("detached", "0.weight"), ("detached", "0.bias")}
    assert record["steps"] == 2 and "DONE" not in out.out + out.err  # stopped after two steps
    assert main(["doctor", "--continue", str(script)]) == 0
    out = capsys.readouterr()
    assert "ok, nothing found" in out.out and "DONE" in out.out
    # nothing of the command is left in torch
    assert torch.optim.Optimizer.__init__ is init and torch.autograd.backward is backward
    assert not optimizer_globals._global_optimizer_pre_hooks and not optimizer_globals._global_optimizer_post_hooks
    assert schema.load_schema()  # the records above are the schema's (validated in test_schema / test_cli)


def test_bad_command_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", str(tmp_path / "missing.py")]) == 2
    assert "no such script" in capsys.readouterr().err
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    assert main(["doctor", str(empty)]) == 1
    assert "built no optimizer" in capsys.readouterr().err


def test_the_scripts_own_errors_pass_through(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    crash = tmp_path / "crash.py"
    crash.write_text("def build():\n    raise ValueError('bad config: lr')\n\n\nbuild()\n")
    direct = subprocess.run([sys.executable, str(crash)], capture_output=True, text=True, check=False)
    assert main(["doctor", str(crash)]) == direct.returncode == 1
    err = capsys.readouterr().err
    assert err.strip().splitlines() == direct.stderr.strip().splitlines()  # the same traceback, only its frames
    leave = tmp_path / "leave.py"
    leave.write_text("import sys\nsys.exit(3)\n")
    assert main(["doctor", str(leave)]) == 3
    in_step = tmp_path / "in_step.py"
    in_step.write_text("import torch\nm = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
                       "m(torch.ones(1, 2)).sum().backward()\nraise RuntimeError('out of data')\n")
    assert main(["doctor", str(in_step)]) == 1  # it failed inside its first step: its error, not a verdict
    err = capsys.readouterr().err
    assert err.rstrip().endswith("RuntimeError: out of data") and 'in_step.py", line 5' in err
    assert "gradviz_nb" not in err.split("Traceback")[-1]
    assert main(["doctor", "--steps", "0", str(leave)]) == 2
    assert "--steps must be between 1 and 1000" in capsys.readouterr().err
