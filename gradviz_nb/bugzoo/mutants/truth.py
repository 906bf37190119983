"""The truth about a mutant, from PyTorch alone: run it and its unmutated host from the same seed.

Both runs build the host from the same torch seed, apply the family's ``prepare`` alike, run two real
steps from the same RNG state, and record each parameter's ``.grad`` and value after each step (the
parameter *object* the host built, found by its name there, so a re-created or unregistered parameter
is still followed). Each parameter then gets a status against the host:

``none`` (the host had a gradient, the mutant ``None``), ``zero`` (exactly zero where the host's was
not), ``vanished`` (under 1e-6 of the host's norm), ``scaled`` (the host's gradient times a factor),
``stuck`` (same gradient, the host's moved and the mutant's did not), ``update`` (same gradient, moved
differently), ``changed`` (any other difference) or ``same``. A parameter the host does not have (a
module the mutant added) is ``none`` when it got no gradient.

The mutation's source lines are measured too: the lines of this package's files (``plan.py``, the operators)
that the mutant's steps ran and the host's did not, with the ``def`` line of each function that ran (a
``sys.settrace`` over the steps, these files only). A
mutation made before the steps (a parameter frozen, an optimizer built without one) has none.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from random import Random
from types import FrameType
from typing import Any

import torch
from torch import Tensor, nn

from gradviz_nb.bugzoo.mutants.family import Family
from gradviz_nb.bugzoo.mutants.hosts import HOSTS
from gradviz_nb.bugzoo.mutants.plan import Plan, Recipe, Setup, Site, build, probe_sites

__all__ = ["Built", "Truth", "make", "measure"]

TORCH_SEED = 0
_SITES: dict[str, list[Site]] = {}


@dataclass
class Built:
    """A built run: its setup, the host's name of every original parameter, what the mutation did."""

    setup: Setup
    names: dict[str, nn.Parameter]
    aliases: dict[str, str]
    site: str
    recipe: Recipe


def _sites(host_name: str) -> list[Site]:
    if host_name not in _SITES:
        torch.manual_seed(TORCH_SEED)
        _SITES[host_name] = probe_sites(HOSTS[host_name]())
    return _SITES[host_name]


def make(fam: Family | None, host_name: str, seed: int, mutate: bool) -> Built | None:
    """The host (``mutate=False``) or the mutant; ``None`` when the family has no site on this host."""
    sites = _sites(host_name)
    torch.manual_seed(TORCH_SEED)
    host = HOSTS[host_name]()
    plan = Plan(host, list(host.model.parameters()))
    names = dict(host.model.named_parameters())
    aliases = {alias: n for alias, p in host.model.named_parameters(remove_duplicate=False)
               for n, q in names.items() if p is q}
    if fam is not None and fam.prepare is not None:
        fam.prepare(plan, Random(seed))
    site = ""
    if mutate and fam is not None:
        done = fam.apply(plan, Random(seed), sites)
        if done is None:
            return None
        site = done
    return Built(build(plan), names, aliases, site, plan.recipe)


Record = dict[str, tuple[Tensor | None, Tensor]]
_HERE = os.path.dirname(os.path.abspath(__file__))


@contextmanager
def _lines_run(into: set[str] | None) -> Iterator[None]:
    """``file.py:LINE`` of every line of this package's files run inside the block (this thread), into ``into``."""
    if into is None:
        yield
        return

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            into.add(f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}")
        return local

    def calls(frame: FrameType, event: str, arg: Any) -> Any:
        code = frame.f_code
        if not code.co_filename.startswith(_HERE):
            return None
        into.add(f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}")  # the def line of what ran
        return local

    old = sys.gettrace()
    sys.settrace(calls)
    try:
        yield
    finally:
        sys.settrace(old)


def _run(built: Built, steps: int, lines: set[str] | None = None) -> tuple[Record, list[Record]]:
    def record(params: dict[str, nn.Parameter]) -> Record:
        return {n: (None if p.grad is None else p.grad.detach().clone(), p.detach().clone())
                for n, p in params.items()}

    params = dict(built.names)
    known = {id(p) for p in params.values()}
    params.update({n: p for n, p in built.setup.model.named_parameters() if id(p) not in known})
    start = record(params)
    out = []
    torch.manual_seed(TORCH_SEED + 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(steps):
            with _lines_run(lines):
                built.setup.step()
            out.append(record(params))
    return start, out


def _close(a: Tensor, b: Tensor) -> bool:
    return a.shape == b.shape and bool(torch.allclose(a, b, rtol=1e-4, atol=1e-7 * float(b.abs().max()) + 1e-12))


def status(mut: tuple[Tensor | None, Tensor], host: tuple[Tensor | None, Tensor] | None,
           start_m: Tensor, start_h: Tensor | None) -> str:
    """One parameter's status after one step (see the module's docstring)."""
    g_m, v_m = mut
    if host is None:
        return "none" if g_m is None else "same"
    g_h, v_h = host
    if g_h is None:
        return "same" if g_m is None else "changed"
    if g_m is None:
        return "none"
    if not bool(g_h.eq(0).all()) and bool(g_m.eq(0).all()):
        return "zero"
    norm_h, norm_m = float(g_h.double().norm()), float(g_m.double().norm())
    if norm_h > 0 and norm_m <= 1e-6 * norm_h:
        return "vanished"
    if _close(g_m, g_h):
        moved_h = start_h is not None and not torch.equal(v_h, start_h)
        if moved_h and torch.equal(v_m, start_m):
            return "stuck"
        return "same" if _close(v_m, v_h) else "update"
    c = float((g_m.double() * g_h.double()).sum()) / (norm_h**2) if norm_h > 0 else 0.0
    if abs(c - 1) > 1e-2 and _close(g_m, (c * g_h.double()).to(g_m.dtype)):
        return "scaled"
    return "changed"


@dataclass
class Truth:
    """``statuses``: each parameter's status (after step 2 for a late family, else step 1);
    ``affected``: those whose status is one of the family's effects; ``unknown``: not affected, but their
    gradient in the plain host is exactly zero at step 1 (LoRA's A while B is zero), so step 1 cannot
    show what the mutation does to them; ``error``: the mutant's step raised."""

    site: str
    statuses: dict[str, str] = field(default_factory=dict)
    affected: set[str] = field(default_factory=set)
    universe: set[str] = field(default_factory=set)
    unknown: set[str] = field(default_factory=set)
    aliases: dict[str, str] = field(default_factory=dict)
    error: str = ""
    lines: set[str] = field(default_factory=set)
    host_norms: dict[str, float | None] = field(default_factory=dict)


_REFERENCES: dict[tuple[str, str], tuple[Record, list[Record]]] = {}
_REFERENCE_LINES: dict[tuple[str, str], set[str]] = {}


def _reference(fam: Family, host_name: str, seed: int) -> tuple[Record, list[Record], set[str]]:
    """The unmutated host's run and the lines it ran; hosts prepared alike (same recipe) run alike, so it is
    kept per recipe."""
    reference = make(fam, host_name, seed, False)
    assert reference is not None
    key = (host_name, repr(reference.recipe))
    if key not in _REFERENCES:
        lines: set[str] = set()
        _REFERENCES[key] = _run(reference, 2, lines)
        _REFERENCE_LINES[key] = lines
    return (*_REFERENCES[key], _REFERENCE_LINES[key])


def _zero_in_plain_host(host_name: str) -> set[str]:
    plain = make(None, host_name, 0, False)
    assert plain is not None
    key = (host_name, "plain")
    if key not in _REFERENCES:
        _REFERENCES[key] = _run(plain, 1)
    return {n for n, (g, _) in _REFERENCES[key][1][0].items() if g is not None and bool(g.eq(0).all())}


def measure(fam: Family, host_name: str, seed: int) -> Truth | None:
    """The mutant's truth against its host, or ``None`` when the family has no site on this host."""
    mutant = make(fam, host_name, seed, True)
    if mutant is None:
        return None
    truth = Truth(mutant.site, aliases=mutant.aliases)
    start_h, host, host_lines = _reference(fam, host_name, seed)
    lines: set[str] = set()
    try:
        start_m, mut = _run(mutant, 2, lines)
    except Exception as err:  # a loud bug (the step raises) is not a silent one: discarded, with the reason
        truth.error = f"{type(err).__name__}: {str(err).splitlines()[0][:120]}"
        return truth
    at = 1 if fam.late else 0
    truth.lines = lines - host_lines
    truth.host_norms = {n: None if g is None else float(g.double().norm()) for n, (g, _) in host[at].items()}
    blind = _zero_in_plain_host(host_name)
    for name in mut[at]:
        s = status(mut[at][name], host[at].get(name), start_m[name][1], start_h[name][1] if name in start_h else None)
        truth.statuses[name] = s
        truth.universe.add(name)
        if s in fam.effects:
            truth.affected.add(name)
        elif name in blind:
            truth.unknown.add(name)
    return truth
