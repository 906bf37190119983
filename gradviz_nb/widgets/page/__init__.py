"""The page contract's Python half: everything that turns results into what the canvas draws.

``js/src/payload.ts`` is the contract; :mod:`~gradviz_nb.widgets.page.contract` types it in Python (a
test compares the two). One name per kind of page data::

    from gradviz_nb.widgets import page
    page.graph(g)                 # GraphPayload (eager; big graphs go lazy: page.lazy)
    page.recording(rec)           # Recording, for the stepper
    page.diff(d)                  # GraphDiff, drawn over d.merged()
    page.overlay(mem)             # Overlay (also a GradientFlow with graph=, a GradCheck, a Diagnosis)
    page.findings(diagnosis)      # list[DoctorFinding]
    page.build(x)                 # all synced traits for anything GraphWidget(x) accepts

Modules: ``contract`` (TypedDicts), ``payload`` (graph records, fold groups), ``lazy`` (skeleton and
chunks), ``convert`` (results -> page data), ``traits`` (validating traits), ``state`` (one route to
the canvas), ``messages`` (the request/reply envelope), ``toggles``, ``finite_json``.
"""

from gradviz_nb.widgets.page.convert import diff, findings, overlay, recording
from gradviz_nb.widgets.page.payload import graph
from gradviz_nb.widgets.page.state import Built, Snapshot, build, page_snapshot, snapshot

__all__ = ["Built", "Snapshot", "build", "diff", "findings", "graph", "overlay", "page_snapshot", "recording",
           "snapshot"]
