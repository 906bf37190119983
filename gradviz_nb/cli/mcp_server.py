"""``gradviz mcp``: gradviz_nb's answers as MCP tools (the official SDK's ``MCPServer``, over stdio).

Each tool answers with one versioned JSON record (:mod:`gradviz_nb.schema`), so an agent reads verdicts, never
prose. Tools over a script run it in a fresh ``python -m gradviz_nb <command> --json`` process: the user's
script never shares this process (its prints cannot corrupt the protocol on stdout, its state cannot leak into
the next call). ``checkpoint_plan`` and ``why`` also take a saved graph (``gv.to_json`` / ``g.to_json()`` file).

Tools: ``doctor``, ``why``, ``prove``, ``nan``, ``graph``, ``checkpoint_plan``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from gradviz_nb import schema
from gradviz_nb.errors import GradvizError

__all__ = ["TOOLS", "build_server", "run_command", "serve"]

TOOLS = ("doctor", "why", "prove", "nan", "graph", "checkpoint_plan")
TIMEOUT = 1800.0  # seconds one script run may take
TAIL = 2000  # characters of a failed run's stderr kept in the answer


def _error(message: str, **extra: Any) -> str:
    return schema.dumps({"schema_version": schema.SCHEMA_VERSION, "type": "error", "message": message, **extra})


def run_command(command: str, script: str, args: list[str] | None = None, options: list[str] | None = None,
                cwd: str | None = None) -> str:
    """``python -m gradviz_nb COMMAND --json --quiet OPTIONS SCRIPT ARGS`` in a new process; its JSON record, or an
    ``error`` record with the exit code and the end of stderr (the script's own traceback) when it gave none."""
    path = Path(cwd or os.getcwd(), script)
    if not path.is_file():
        return _error(f"no such script: {script!r} (relative to {cwd or os.getcwd()})")
    cmd = [sys.executable, "-m", "gradviz_nb", command, "--json", "--quiet", *(options or []), str(path),
           *(args or [])]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, cwd=cwd, check=False,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return _error(f"the script ran over {TIMEOUT:.0f} s", command=command)
    out = proc.stdout.strip()
    if out.startswith("{"):
        try:
            json.loads(out)
            return out
        except ValueError:
            pass
    return _error(f"gradviz {command} gave no answer: the script exited with {proc.returncode}",
                  exit_code=proc.returncode, stderr=proc.stderr[-TAIL:])


def _graph_from(path: str) -> Any:
    from gradviz_nb.export.data import from_json

    file = Path(path)
    if not file.is_file():
        raise GradvizError(f"no such graph file: {path!r} (save one with g.to_json() or gradviz graph)")
    return from_json(file.read_text(encoding="utf-8"))


def build_server() -> Any:
    """The ``MCPServer`` with the six tools."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("gradviz", instructions=(
        "Answers about a PyTorch training script's gradients, as versioned JSON records (schema_version, type). "
        "doctor: what is wrong in its first optimizer steps. why: why one parameter has no/zero/tiny gradient. "
        "prove: the fix applied in a re-run, the gradient measured. nan: where the first NaN/Inf was born "
        "(forward or backward, op, line, module). graph: the first step's graph as an HTML page. "
        "checkpoint_plan: memory saved by checkpointing module calls of a saved graph."))

    @server.tool()
    def doctor(script: str, args: list[str] | None = None, steps: int = 2, cwd: str | None = None) -> str:
        """Run the training script (unmodified, with its args) for `steps` optimizer steps under gv.doctor; the
        diagnosis: findings with kind, target, evidence and fix (ok: true when nothing is wrong)."""
        return run_command("doctor", script, args, ["--steps", str(steps)], cwd)

    @server.tool()
    def why(param: str, script: str | None = None, args: list[str] | None = None, graph: str | None = None,
            cwd: str | None = None) -> str:
        """Why parameter `param` gets no (or a zero, tiny) gradient in the script's first step (or in a saved
        graph file): status, kind, cause with op/line/module, evidence, fix."""
        if graph is not None:
            from gradviz_nb.doctor.why import why as why_of

            try:
                return schema.dumps(schema.why(why_of(_graph_from(graph), param)))
            except GradvizError as err:
                return _error(str(err))
        if script is None:
            return _error("give script (a training script) or graph (a saved graph file)")
        return run_command("why", script, args, ["--param", param], cwd)

    @server.tool()
    def prove(param: str, script: str, args: list[str] | None = None, cwd: str | None = None) -> str:
        """Re-run the script's first step with the fix `why` names applied; the parameter's gradient norm
        before and after (proven: true when the gradient appears)."""
        return run_command("prove", script, args, ["--param", param], cwd)

    @server.tool()
    def nan(script: str, args: list[str] | None = None, steps: int = 2, cwd: str | None = None) -> str:
        """The first NaN/Inf that reached the loss or the gradients in the script's first `steps` optimizer
        steps: phase (forward/backward), op, autograd node, line, module, its inputs, the fix."""
        return run_command("nan", script, args, ["--steps", str(steps)], cwd)

    @server.tool()
    def graph(script: str, out: str, args: list[str] | None = None, cwd: str | None = None) -> str:
        """Write the first step's autograd graph of the script as one offline HTML page at `out`."""
        return run_command("graph", script, args, ["--out", out], cwd)

    @server.tool()
    def checkpoint_plan(marks: dict[str, str], graph: str | None = None, script: str | None = None,
                        args: list[str] | None = None, cwd: str | None = None) -> str:
        """Bytes saved for backward before and after checkpointing the marked module calls
        ({"blocks.0": "non_reentrant" or "reentrant"}), the recompute share, leaves that lose their gradient: for
        a saved graph file, or for the first step of a script."""
        from gradviz_nb.analysis.checkpointing import checkpoint_what_if

        if graph is None:
            if script is None:
                return _error("give graph (a saved graph file) or script (a training script)")
            with tempfile.TemporaryDirectory() as tmp:
                graph = str(Path(tmp, "graph.json"))
                made = json.loads(run_command("graph", script, args, ["--out", graph], cwd))
                if made.get("type") == "error":
                    return schema.dumps(made)
                return checkpoint_plan(marks, graph)
        try:
            return schema.dumps(schema.checkpoint_plan(checkpoint_what_if(_graph_from(graph), marks)))
        except GradvizError as err:
            return _error(str(err))

    return server


def serve() -> int:
    """Run the server on stdio until the client closes it."""
    try:
        server = build_server()
    except ImportError:
        print("gradviz mcp needs the MCP SDK: pip install 'gradviz_nb[mcp]'", file=sys.stderr)
        return 2
    server.run("stdio")
    return 0
