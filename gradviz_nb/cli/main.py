"""gradviz: the doctor, NaN origins, why, proofs and the graph over an unmodified training script.

    gradviz doctor train.py [script args...]   # its first 2 optimizer steps observed, findings, exit 1 if any
    gradviz doctor --steps 3 --json train.py --lr 3e-4
    gradviz nan train.py                       # the first NaN/Inf: forward or backward, op, line, module
    gradviz why --param lora_A.weight train.py # gradviz prove --param ...: the fix re-run, the gradient measured
    gradviz graph -o step.html train.py        # the first step's graph (.json: gv.to_json)
    gradviz mcp                                # the same as MCP tools on stdio (extra: gradviz_nb[mcp])

Options go before the script's path; everything after it is the script's own arguments. Text by default, with
progress on stderr while the script runs; ``--json`` prints one versioned record (:mod:`gradviz_nb.schema`).
Exit codes: 0 nothing found, 1 findings (or the script's own exit code when it fails first), 2 bad usage.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from gradviz_nb import schema
from gradviz_nb.cli.observer import ScriptObserver, first_optimizer, progress
from gradviz_nb.cli.script import Outcome, StopScript, rank, run_script
from gradviz_nb.doctor import Diagnosis
from gradviz_nb.errors import GradvizError
from gradviz_nb.kinds import fix_for

__all__ = ["main"]

FINDINGS = 1  # exit code when the doctor found something (a script's own failure passes its code through)
USAGE = 2


def _parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="gradviz", description=(__doc__ or "").split("\n")[0],
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = top.add_subparsers(dest="command", required=True, metavar="{doctor,nan,why,prove,graph,mcp}")

    def script_command(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--steps", type=int, default=2, help="optimizer steps to observe (default 2)")
        p.add_argument("--json", action="store_true", help="print one JSON record instead of text")
        p.add_argument("--continue", dest="keep_going", action="store_true",
                       help="let the script run to its end after the observed steps")
        p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
        p.add_argument("script", help="the training script, run unmodified")
        p.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
        return p

    script_command("doctor", "observe the script's first optimizer steps and name what is wrong")
    script_command("nan", "the first NaN/Inf of the script's first optimizer steps that reached the loss or the "
                          "gradients: forward or backward, op, line, module")
    why = script_command("why", "why one parameter gets no (or a zero, tiny) gradient in the script's first step")
    why.add_argument("--param", required=True, help="the parameter's name, as model.named_parameters() gives it")
    prove = script_command("prove", "re-run the script's first step with the fix of `why` applied and measure the "
                                    "gradient")
    prove.add_argument("--param", required=True, help="the parameter's name, as model.named_parameters() gives it")
    graph = script_command("graph", "write the exported page of the first step's loss graph")
    graph.add_argument("-o", "--out", required=True, help="the file to write: .html (the page) or .json (gv.to_json)")
    sub.add_parser("mcp", help="serve these commands as MCP tools on stdio (extra: pip install 'gradviz_nb[mcp]')")
    return top


def _run(opts: argparse.Namespace) -> Outcome:
    """The script, with its stdout sent to stderr under ``--json`` (stdout then holds only the record)."""
    if not opts.json:
        return run_script(opts.script, list(opts.args))
    with contextlib.redirect_stdout(sys.stderr):
        return run_script(opts.script, list(opts.args))


def _steps(steps: int) -> int:
    if not 1 <= steps <= 1000:
        raise GradvizError(f"--steps must be between 1 and 1000, got {steps}: 2 lets stale gradients show.")
    return steps


def _observe(opts: argparse.Namespace, steps: int) -> tuple[Diagnosis | None, Outcome]:
    got: list[Diagnosis] = []
    observer = ScriptObserver(_steps(steps), opts.keep_going, got.append, progress(opts.quiet))
    with observer.installed():
        outcome = _run(opts)
    return (got[0] if got else observer.diagnosis), outcome


def _emit(opts: argparse.Namespace, record: dict[str, Any], text: str) -> None:
    """Rank 0 prints; under torchrun every rank then waits for it, so a rank exiting with findings (which makes
    torchrun stop the others) never cuts rank 0's report short."""
    if rank() == 0:
        print(schema.dumps(record, indent=1) if opts.json else text, flush=True)
    _barrier()


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def _no_steps(opts: argparse.Namespace, outcome: Outcome) -> int:
    if outcome.exit_code:
        return outcome.exit_code
    message = (f"{opts.script} built no optimizer and ran no optimizer step: nothing to observe (gradviz follows "
               "the first torch.optim optimizer the script creates)")
    print(f"gradviz: {message}", file=sys.stderr)
    return FINDINGS


def doctor_command(opts: argparse.Namespace) -> int:
    """``gradviz doctor SCRIPT``: observe the script's first steps and report the doctor's findings (exit 1 on
    findings)."""
    dx, outcome = _observe(opts, opts.steps)
    if dx is None:
        return _no_steps(opts, outcome)
    if outcome.exit_code and not dx.findings:
        return outcome.exit_code
    _emit(opts, schema.diagnosis(dx), dx.summary())
    return FINDINGS if dx.findings else (outcome.exit_code or 0)


def nan_command(opts: argparse.Namespace) -> int:
    """``gradviz nan SCRIPT``: run the script's steps under ``find_nonfinite`` and report where a NaN/Inf is born."""
    from gradviz_nb.probes.nonfinite import find_nonfinite, name_by

    steps, say = _steps(opts.steps), progress(opts.quiet)
    done: list[int] = []
    outcome: list[Outcome] = []

    def created(opt: torch.optim.Optimizer, model: nn.Module) -> None:
        name_by(model)  # parameters and modules by their names in the script's model, not by shape
        say(f"watching every op of {type(model).__name__} and its {type(opt).__name__} for NaN/Inf")

    def stepped() -> None:
        done.append(1)
        say(f"step {len(done)}/{steps} watched")
        if len(done) >= steps and not opts.keep_going:
            raise StopScript

    def script() -> None:
        with first_optimizer(created, stepped):
            outcome.append(_run(opts))

    found = find_nonfinite(script)
    code = outcome[0].exit_code if outcome else 0
    if found is None:
        _emit(opts, {"schema_version": schema.SCHEMA_VERSION, "type": "nonfinite_none", "steps": len(done)},
              f"no NaN/Inf reached the loss or the gradients in {len(done)} optimizer step{'s' * (len(done) != 1)}")
        return code
    _emit(opts, schema.nonfinite(found), f"{found.summary()}\n  fix: {fix_for('nan-origin')}")
    return FINDINGS


def why_command(opts: argparse.Namespace) -> int:
    """``gradviz why SCRIPT PARAM``: why that parameter's gradient is missing, zero or tiny in the script's first
    step."""
    from gradviz_nb.doctor.why import why

    dx, outcome = _observe(opts, 1)
    if dx is None:
        return _no_steps(opts, outcome)
    if dx.graph is None:
        raise GradvizError("the script's first step ran no backward: there is no gradient to explain.")
    answer = why(dx, opts.param)
    _emit(opts, schema.why(answer), answer.text())
    return FINDINGS if answer.kind is not None else 0


def prove_command(opts: argparse.Namespace) -> int:
    """Why, then the script run again with the mechanical fix applied in its first step: the gradient measured."""
    from gradviz_nb.doctor.why import why
    from gradviz_nb.doctor.why_prove import MECHANICAL, Proof, fix_context

    dx, outcome = _observe(opts, 1)
    if dx is None:
        return _no_steps(opts, outcome)
    answer = why(dx, opts.param)
    if answer.kind not in MECHANICAL:
        what = "nothing is wrong" if answer.kind is None else f"this cause ({answer.kind}) has no mechanical fix"
        proof = Proof(answer.name, answer.fix, False, message=f"{what}; the fix is yours to make: {answer.fix}")
    else:
        before = dx.grad_norms.get(answer.name)
        after: list[float | None] = []
        words: list[str] = []
        fixes = contextlib.ExitStack()
        say = progress(opts.quiet)

        def created(opt: torch.optim.Optimizer, model: nn.Module) -> None:
            p = dict(model.named_parameters(remove_duplicate=False)).get(answer.name)
            if p is None:
                raise GradvizError(f"the re-run's model has no parameter {answer.name!r}")
            fix, text = fix_context(answer, model, p)
            words.append(text)
            fixes.enter_context(fix)
            say(f"re-running the first step with the fix ({text})")
            after.append(None)
            params.append(p)

        params: list[torch.Tensor] = []

        def stepped() -> None:
            fixes.close()
            g = params[0].grad if params else None
            after[0] = None if g is None else float(_local(g).detach().double().norm())
            raise StopScript

        with first_optimizer(created, stepped):
            _run(opts)
        fixes.close()
        applied = bool(after)
        proof = Proof(answer.name, words[0] if words else answer.fix, applied, before, after[0] if after else None,
                      "" if applied else "the re-run built no optimizer: nothing measured")
    _emit(opts, schema.proof(proof), f"{answer.text()}\n{proof.text()}".replace("re-run in the sandbox; the model "
                                                                             "is unchanged", "the script re-run"))
    return 0 if proof.proven else FINDINGS


def _local(t: torch.Tensor) -> torch.Tensor:
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t


def graph_command(opts: argparse.Namespace) -> int:
    """``gradviz graph SCRIPT``: the first step's autograd graph as an offline HTML page (or JSON, for an
    ``--out`` ending in .json)."""
    from gradviz_nb.export.html import export_html

    dx, outcome = _observe(opts, 1)
    if dx is None:
        return _no_steps(opts, outcome)
    if dx.graph is None:
        raise GradvizError("the script's first step ran no backward: there is no loss graph to draw.")
    if str(opts.out).endswith(".json"):
        from gradviz_nb.export.data import to_json
        from gradviz_nb.files import target, write_atomic

        path = write_atomic(target("--out", opts.out, (".json",), "gradviz graph"), to_json(dx.graph), "gradviz graph")
    else:
        path = export_html(dx.graph, opts.out, title=f"{opts.script}: the first step's loss")
    _emit(opts, {"schema_version": schema.SCHEMA_VERSION, "type": "graph", "path": str(path),
                 "nodes": dx.graph.nx.number_of_nodes()}, f"wrote {path} ({dx.graph.nx.number_of_nodes()} nodes)")
    return 0


COMMANDS = {"doctor": doctor_command, "nan": nan_command, "why": why_command, "prove": prove_command,
            "graph": graph_command}


def main(argv: Sequence[str] | None = None) -> int:
    """The ``gradviz`` command; returns the exit code."""
    opts = _parser().parse_args(argv)
    if opts.command == "mcp":
        from gradviz_nb.cli.mcp_server import serve

        return serve()
    try:
        return COMMANDS[opts.command](opts)
    except GradvizError as err:
        print(f"gradviz: {err}", file=sys.stderr)
        if getattr(opts, "json", False):
            print(json.dumps({"schema_version": schema.SCHEMA_VERSION, "type": "error", "message": str(err)}))
        return USAGE
