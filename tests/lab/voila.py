"""A real Voilà server for end-to-end widget tests: `python -m voila NOTEBOOK` on a free port.

Voilà runs the notebook top to bottom in a kernel when its page is opened, and shows the outputs (widgets
included, live: the kernel stays up while the page is open) without the code. The server is isolated like
`JupyterLabServer` (its own config, data, runtime and IPython folders under a temp dir); the kernel is the
venv's own `python3` kernelspec, so it imports this checkout's gradviz_nb.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from .jupyterlab import JupyterLabServer, free_port

DENIED_EXTENSIONS = ("jupyterlab-jupytext", "@jupyter-notebook/lab-extension")


class VoilaServer:
    """`python -m voila <notebook>` on a free port; stop() kills its process group (kernels included)."""

    def __init__(self, base: Path, notebook: Path, python: str = sys.executable) -> None:
        self.base = base
        self.notebook = notebook
        self.python = python
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.log_path = base / "voila.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.startup_seconds = 0.0

    def start(self, timeout: float = 90.0) -> None:
        env = JupyterLabServer(self.base, python=self.python)._env()  # the same isolated folders
        cmd = [
            self.python, "-m", "voila", str(self.notebook),
            "--no-browser",
            "--Voila.ip=127.0.0.1",
            f"--Voila.port={self.port}",
            "--Voila.port_retries=0",
            "--VoilaConfiguration.show_tracebacks=True",  # a failing cell shows its traceback on the page
            # Two lab extensions of other packages in the venv fail to load in Voilà's page (each logs "The
            # getter for the shared module is not a function", for @jupyterlab/docmanager and docregistry,
            # which Voilà's page does not share); neither is needed to show widgets.
            *(f"--VoilaConfiguration.extension_denylist={name}" for name in DENIED_EXTENSIONS),
        ]
        t0 = time.monotonic()
        log = self.log_path.open("wb")
        self.proc = subprocess.Popen(cmd, env=env, cwd=self.notebook.parent, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"voila exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(f"{self.url}api/status", timeout=5):  # jupyter_server's own
                    self.startup_seconds = time.monotonic() - t0
                    return
            except urllib.error.HTTPError:  # answered: up (a status route Voilà may not expose)
                self.startup_seconds = time.monotonic() - t0
                return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"voila not ready after {timeout} s:\n{self.log()}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)
        except ProcessLookupError:
            pass

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
