"""gradviz mcp: the SDK's own client talks to the real server process over stdio, and a scripted session answers
the LoRA-without-gradient case and the backward-born NaN case from the JSON alone."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest

from gradviz_nb import schema

mcp = pytest.importorskip("mcp")
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "cli"


def _record(result: Any) -> dict[str, Any]:
    assert not result.is_error, result
    record: dict[str, Any] = json.loads(result.content[0].text)
    if record["type"] in schema.TYPES:
        jsonschema.validate(record, schema.load_schema())
    return record


async def _session(tmp: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    params = StdioServerParameters(command=sys.executable, args=["-m", "gradviz_nb", "mcp"], env=env, cwd=str(ROOT))
    out: dict[str, Any] = {}
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        out["tools"] = sorted(t.name for t in (await session.list_tools()).tools)
        # an agent's session: is the adapter training? why not? does the fix work? where is the NaN born?
        out["doctor"] = _record(await session.call_tool("doctor", {"script": "examples/cli/plain_loop.py",
                                                                   "args": ["--bug"]}))
        dead = next(f["target"] for f in out["doctor"]["findings"] if "lora" in f["target"])
        out["why"] = _record(await session.call_tool("why", {"script": "examples/cli/plain_loop.py", "args": ["--bug"],
                                                             "param": dead}))
        out["prove"] = _record(await session.call_tool("prove", {"script": "examples/cli/plain_loop.py",
                                                                 "args": ["--bug"], "param": dead}))
        out["nan"] = _record(await session.call_tool("nan", {"script": "examples/cli/nan_backward.py"}))
        graph = str(tmp / "step.json")
        out["graph"] = _record(await session.call_tool("graph", {"script": "examples/cli/plain_loop.py",
                                                                 "out": graph}))
        out["plan"] = _record(await session.call_tool("checkpoint_plan", {"graph": graph, "marks": {"0": "reentrant"}}))
        out["healthy"] = _record(await session.call_tool("doctor", {"script": "examples/cli/plain_loop.py"}))
        out["missing"] = _record(await session.call_tool("doctor", {"script": "examples/cli/no_such.py"}))
    return out


def test_a_scripted_agent_session_answers_from_json_alone(tmp_path: Path) -> None:
    got = anyio.run(_session, tmp_path)
    assert got["tools"] == sorted(["doctor", "why", "prove", "nan", "graph", "checkpoint_plan"])
    dx = got["doctor"]
    assert dx["type"] == "diagnosis" and not dx["ok"]
    assert [f["target"] for f in dx["findings"]] == ["0.lora_A.weight"]  # lora_B still gets its gradient
    why = got["why"]
    assert (why["status"], why["kind"]) == ("none", "detached")
    assert "plain_loop.py:28" in why["cause"] and why["fix"]  # the line of the detach()
    proof = got["prove"]
    assert proof["proven"] and proof["before"] is None and proof["after"] > 0
    nan = got["nan"]
    assert (nan["phase"], nan["op"], nan["node"], nan["cause"]) == ("backward", "aten.div", "LogBackward0", "0/0")
    assert nan["line"].endswith("nan_backward.py:17") and nan["fix"]
    assert got["graph"]["nodes"] > 0 and got["plan"]["type"] == "checkpoint_plan" and got["plan"]["before"] > 0
    assert got["healthy"]["ok"] and got["healthy"]["findings"] == []
    assert got["missing"]["type"] == "error" and "no such script" in got["missing"]["message"]
