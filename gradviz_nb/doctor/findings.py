"""What the doctor found: one :class:`Finding` per bug, and the :class:`Diagnosis` holding them."""

from __future__ import annotations

import html
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from gradviz_nb import schema
from gradviz_nb.kinds import Kind, kinds_of, rank

if TYPE_CHECKING:
    from gradviz_nb.tracing import AutogradGraph

__all__ = ["KINDS", "Diagnosis", "Finding"]

# The kinds the doctor reports, in the order a reader should fix them (the registry is gradviz_nb/kinds.py).
KINDS = kinds_of("doctor")


@dataclass(frozen=True)
class Finding:
    """One bug: ``kind`` (of :data:`KINDS`), the exact ``target`` (parameter, module path or op), a
    ``message`` saying what is wrong, the ``evidence`` that was observed, and a one-line ``fix``.

    ``step``: the step (1-based) at which it was seen. ``node``: the traced graph's node or box
    (``"call:<id>"``) to show it on, when it has one.
    """

    kind: Kind
    target: str
    message: str
    evidence: str
    fix: str
    step: int = 1
    node: str = ""

    def to_json(self, indent: int | None = None) -> str:
        """This result as a versioned JSON record (:mod:`gradviz_nb.schema`; the schema's ``finding`` type)."""
        return schema.dumps(schema.finding(self), indent)


@dataclass
class Diagnosis:
    """The doctor's answer: ``findings`` (worst first), ``ok`` when there are none.

    ``graph`` is the autograd graph of the first observed step (None when no backward ran);
    ``steps`` how many steps were run; ``restored`` whether the model and optimizer were put back;
    ``moved`` the parameters whose value changed during the observed steps; ``used`` the gradient norm each
    parameter's first optimizer step used (None: ``.grad`` was None then; ``doctor.steps.used_grads``);
    ``grad_norms`` each parameter's gradient norm as the first step's optimizer saw it (None: no gradient).
    """

    findings: list[Finding]
    steps: int
    restored: bool
    graph: AutogradGraph | None = field(default=None, repr=False)
    notes: list[str] = field(default_factory=list)
    moved: frozenset[str] = field(default=frozenset(), repr=False)  # parameters whose value changed in a step
    grad_norms: dict[str, float | None] = field(default_factory=dict, repr=False)  # first step's, None: no grad
    used: dict[str, float | None] = field(default_factory=dict, repr=False)  # as each first optimizer step used it

    @property
    def ok(self) -> bool:
        """True when the doctor found nothing."""
        return not self.findings

    def of_kind(self, kind: str) -> list[Finding]:
        """The findings of one kind (``dx.of_kind("stale-grad")``), worst first."""
        return [f for f in self.findings if f.kind == kind]

    def why(self, name: str) -> Any:
        """Why parameter ``name``'s gradient is missing, zero or tiny, as the doctor saw it (a
        :class:`gradviz_nb.doctor.why.Why`; the same as ``gv.why(diagnosis, name)``)."""
        from gradviz_nb.doctor.why import why

        return why(self, name)

    def summary(self) -> str:
        """The diagnosis as text: what was observed, then each finding's kind, target, message, evidence and fix."""
        head = (f"doctor: {self.steps} step{'s' if self.steps != 1 else ''} observed"
                f"{', state restored' if self.restored else ''}: ")
        if self.ok:
            lines = [head + "ok, nothing found"]
        else:
            kinds = sorted({f.kind for f in self.findings}, key=rank)
            n = len(self.findings)
            lines = [head + f"{n} finding{'s' if n != 1 else ''} ({', '.join(kinds)})"]
            for f in self.findings:
                lines += [f"  [{f.kind}] {f.target}: {f.message}", f"      seen: {f.evidence}", f"      fix: {f.fix}"]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """The diagnosis as plain data: ok, steps, restored, notes, and the findings as dicts."""
        return {"ok": self.ok, "steps": self.steps, "restored": self.restored, "notes": list(self.notes),
                "findings": [asdict(f) for f in self.findings]}

    def to_json(self, indent: int | None = None) -> str:
        """This result as a versioned JSON record (:mod:`gradviz_nb.schema`; the schema's ``diagnosis`` type)."""
        return schema.dumps(schema.diagnosis(self), indent)

    def __repr__(self) -> str:
        return self.summary().splitlines()[0]

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.summary())

    def _repr_html_(self) -> str:
        esc = html.escape
        status = ("<b style='color:#2e7d32'>ok</b>: nothing found" if self.ok
                  else f"<b style='color:#c62828'>{len(self.findings)} findings</b>")
        rows = "".join(
            f"<tr><td><code>{esc(f.kind)}</code></td><td><code>{esc(f.target)}</code></td><td>{esc(f.message)}"
            f"<br><small>seen: {esc(f.evidence)}</small></td><td><code>{esc(f.fix)}</code></td>"
            f"<td>{f.step}</td></tr>"
            for f in self.findings)
        table = ("<table><thead><tr><th>kind</th><th>target</th><th>what is wrong</th><th>fix</th><th>step</th>"
                 f"</tr></thead><tbody>{rows}</tbody></table>") if self.findings else ""
        notes = "".join(f"<div><small>note: {esc(n)}</small></div>" for n in self.notes)
        return (f"<div class='gradviz-diagnosis'><div>doctor, {self.steps} steps observed"
                f"{', state restored' if self.restored else ''}: {status}</div>{table}{notes}</div>")
