"""The public boundary, generated: bad values (NaN, inf, negatives, wrong types, huge numbers, strings, None,
nested junk) thrown at every argument of every public function and constructor of ``gv.__all__``, at the
integration callbacks and at every synced widget trait.

Each argument has a rule (``valid``) written from its docstring. A value the rule rules out must end in a
:class:`gv.GradvizError` naming the argument (a trait's ``PageTraitError`` is one), never a ``TypeError`` /
``KeyError`` / ``ValueError`` from deep inside and never silent acceptance; a value the rule allows must be
accepted. :data:`TABLE` lists the checked callables by public name; :data:`EXEMPT` the public names that take no
user input worth checking, each with its reason; ``test_every_public_name_is_in_the_table`` fails when a new
public name is in neither.

The page message dispatcher (``widgets/page/messages.py``) is fed arbitrary JSON as the message and as the
body: it never raises, and answers every message that has an integer id with a reply (``ok`` False and an
error when refused).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

import gradviz_nb as gv
from gradviz_nb.widgets.page import contract
from gradviz_nb.widgets.page.messages import dispatch
from gradviz_nb.widgets.page.traits import CONVERTERS, PageTraitError

EXAMPLES = settings(max_examples=6, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

# --- bad values -----------------------------------------------------------------------------------------
JSON_LEAF = (st.none() | st.booleans() | st.integers(-3, 5) | st.sampled_from([10**12, -(10**12), 2**64])
             | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=4))
JSON = st.recursive(JSON_LEAF, lambda kids: st.lists(kids, max_size=3)
                    | st.dictionaries(st.text(max_size=4), kids, max_size=3), max_leaves=8)
SENTINELS = st.sampled_from([math.nan, math.inf, -math.inf, -1, 0, 1.5, -0.0, "", "yes", None, b"x", (1, 2),
                             10**12, 2**64, torch.tensor(math.nan), torch.tensor([1.0, 2.0]), object()])
JUNK = SENTINELS | JSON


# --- what the docstrings allow --------------------------------------------------------------------------
Rule = Callable[[Any], bool]


def real(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def whole(lo: int, hi: float = math.inf) -> Rule:
    return lambda v: real(v) and float(v).is_integer() and lo <= v <= hi


def number(lo: float, *, above: bool = False) -> Rule:
    return lambda v: real(v) and (v > lo if above else v >= lo)


def boolean(v: Any) -> bool:
    return isinstance(v, bool)


def none(v: Any) -> bool:
    return v is None


def never(v: Any) -> bool:  # nothing JUNK makes can be right here (a model, a loss, a function)
    return False


def or_none(rule: Rule) -> Rule:
    return lambda v: v is None or rule(v)


def names(v: Any) -> bool:  # names= : a dict of name -> tensor
    return v is None or (isinstance(v, dict) and all(isinstance(k, str) and isinstance(t, torch.Tensor)
                                                     for k, t in v.items()))


def grads(v: Any) -> bool:  # grads= : parameter name -> tensor or None; JUNK's names never name a parameter
    return v is None or (v == {} and isinstance(v, dict))


def strings(v: Any) -> bool:
    return isinstance(v, (list, tuple)) and all(isinstance(s, str) for s in v)


# --- small real arguments -------------------------------------------------------------------------------
def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1))


def loss_of(m: nn.Module) -> torch.Tensor:
    return m(torch.ones(4, 2, device=next(m.parameters()).device)).pow(2).mean()


def trained() -> nn.Module:
    m = model()
    loss_of(m).backward()
    return m


@functools.cache  # a traced graph is plain data: one serves every example
def graph() -> gv.AutogradGraph:
    m = model()
    with gv.capture(m) as cap:
        loss = loss_of(m)
    return gv.trace(loss, model=m, capture=cap)


def monitor() -> gv.GradientMonitor:
    return gv.GradientMonitor(trained(), stale_check=False)


def doctor_call(**kw: Any) -> Any:
    m = model()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)

    def step() -> None:
        opt.zero_grad()
        loss_of(m).backward()
        opt.step()

    return gv.doctor(**{"step": step, "model": m, "optimizer": opt, **kw})


def assert_trains_call(**kw: Any) -> Any:
    m = model()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)

    def step() -> None:
        opt.zero_grad()
        loss_of(m).backward()
        opt.step()

    return gv.assert_trains(**{"step": step, "model": m, "optimizer": opt, **kw})


def record_call(**kw: Any) -> Any:
    m = model()
    return gv.record_backward(**{"loss": loss_of(m), "model": m, **kw})


def gradcheck_call(**kw: Any) -> Any:
    return gv.gradcheck(**{"fn": lambda x: (x * x).sum(), "inputs": (torch.ones(2, dtype=torch.float64,
                                                                               requires_grad=True),), **kw})


def monitor_call(method: str, **kw: Any) -> Any:
    return getattr(monitor(), method)(**kw)


def step_call(**kw: Any) -> Any:
    return monitor().step(**{"grad_norm": 1.0, "max_norm": 1.0, **kw})


def widget_call(**kw: Any) -> Any:
    m = model()
    return gv.GraphWidget(**{"roots": loss_of(m), "model": m, **kw})


def dashboard_call(**kw: Any) -> Any:
    m = model()
    with gv.capture(m) as cap:
        loss = loss_of(m)
    loss.backward(retain_graph=True)
    return gv.Dashboard(**{"model": m, "source": gv.trace(loss, model=m, capture=cap), **kw})


def export_call(tmp: Path, **kw: Any) -> Any:
    return gv.export_html(graph(), tmp / "page.html", **kw)


def callback_call(where: str, **kw: Any) -> Any:
    from gradviz_nb import integrations

    try:
        cls = getattr(integrations, where)
    except gv.GradvizError as err:  # the extra is not installed
        pytest.skip(str(err))
    return cls(**kw)


@dataclass
class Target:
    """One public callable: ``call(tmp, **{param: value})`` runs it on small real arguments with one replaced;
    ``params``: each argument's rule."""

    label: str
    call: Callable[..., Any]
    params: dict[str, Rule]


def plain(fn: Callable[..., Any], **fixed: Callable[[], Any]) -> Callable[..., Any]:
    """``fn`` called with fresh ``fixed`` arguments (factories) and the value under test."""
    return lambda tmp, **kw: fn(**{k: make() for k, make in fixed.items()}, **kw)


MONITOR_STATS = ("norm", "max_abs", "ratio", "missing", "update")
CALL_IDS = {c["id"] for c in graph().calls}  # "0", "1", "2": the small model's module calls


def call_ids(v: Any) -> bool:  # expanded= : module call ids of the graph
    return isinstance(v, list) and all(isinstance(s, str) and s in CALL_IDS for s in v)


TABLE: dict[str, list[Target]] = {
    "capture": [Target("gv.capture", plain(gv.capture), {"model": none, "ghosts": boolean})],
    "Capture": [Target("gv.Capture", plain(gv.Capture, model=model),
                       {"keep_forwards": or_none(whole(1)), "ghosts": boolean})],
    "watch": [Target("gv.watch", lambda tmp, **kw: gv.watch(**kw), {"model": never})],
    "unwatch": [Target("gv.unwatch", lambda tmp, **kw: gv.unwatch(**kw), {"model": never})],
    "trace": [Target("gv.trace", lambda tmp, **kw: gv.trace(**{"roots": loss_of(m := model()), "model": m, **kw}),
                     {"roots": never, "model": none, "capture": none, "names": names})],
    "record_backward": [Target("gv.record_backward", lambda tmp, **kw: record_call(**kw), {
        "loss": never, "model": none, "capture": none, "names": names, "accumulate": boolean,
        "keep_values": boolean, "keep_leaf_values": boolean, "into": none,
        "grad": lambda v: v is None or (isinstance(v, torch.Tensor) and v.shape == torch.Size([]))})],
    "gradient_flow": [Target("gv.gradient_flow", plain(gv.gradient_flow, model=trained), {
        "grads": grads, "graph": none, "capture": none, "lr": number(0, above=True),
        "peer": number(1, above=True), "trend": number(1, above=True), "abs_vanishing": or_none(number(0)),
        "abs_exploding": or_none(number(0)), "adapter_patterns": strings, "optimizer": none, "scaler": none,
        "closure": none}),
        Target("gv.gradient_flow(model)", plain(gv.gradient_flow), {"model": never})],
    "doctor": [Target("gv.doctor", lambda tmp, **kw: doctor_call(**kw), {
        "step": never, "model": never, "optimizer": none, "steps": whole(1, 1000), "restore": boolean})],
    "assert_trains": [Target("gv.assert_trains", lambda tmp, **kw: assert_trains_call(**kw), {
        "step": never, "model": never, "optimizer": none, "steps": whole(1, 1000)})],
    "why": [Target("gv.why", lambda tmp, **kw: gv.why(**{"source": (g := graph()), "name": next(iter(g.leaves())),
                                                         **kw}), {"source": never, "name": never, "fn": none,
                                                                  "capture": none})],
    "find_nonfinite": [Target("gv.find_nonfinite", lambda tmp, **kw: gv.find_nonfinite(
        **{"fn": lambda: loss_of(m).backward(), "model": (m := model()), **kw}),
        {"fn": never, "model": none, "optimizer": none})],
    "gradcheck": [Target("gv.gradcheck", lambda tmp, **kw: gradcheck_call(**kw), {
        "fn": never, "eps": lambda v: real(v) and 1e-12 <= v <= 1e-2, "atol": lambda v: real(v) and 0 <= v <= 1e3,
        "rtol": lambda v: real(v) and 0 <= v <= 1e3, "model": none})],
    "memory_held": [Target("gv.memory_held", lambda tmp, **kw: gv.memory_held(**kw), {"graph": never})],
    "diff": [Target("gv.diff", lambda tmp, **kw: gv.diff(**{"before": graph(), "after": graph(), **kw}),
                    {"before": never, "after": never})],
    "to_json": [Target("gv.to_json", plain(gv.to_json, graph=graph), {"indent": or_none(whole(0, 16))}),
                Target("gv.to_json(graph)", plain(gv.to_json), {"graph": never})],
    "to_dot": [Target("gv.to_dot", plain(gv.to_dot), {"graph": never})],
    "to_graphml": [Target("gv.to_graphml", lambda tmp, **kw: gv.to_graphml(path=tmp / "g.graphml", **kw),
                          {"graph": never})],
    "from_json": [Target("gv.from_json", plain(gv.from_json), {"text": never})],
    "export_html": [Target("gv.export_html", export_call, {
        "title": or_none(lambda v: isinstance(v, str)), "height": whole(50, 100_000),
        "expanded": call_ids, "selected": lambda v: isinstance(v, str),
        "step": whole(-1), "can_verify": boolean}),
        Target("gv.export_html(source)", lambda tmp, **kw: gv.export_html(path=tmp / "p.html", **kw),
               {"source": never})],
    "GradientMonitor": [
        Target("gv.GradientMonitor", plain(gv.GradientMonitor, model=trained), {
            "every": whole(1), "capacity": whole(2, 1 << 20), "scaler": none,
            "optimizer": lambda v: v is None or (isinstance(v, (list, tuple)) and not v),  # [] is no optimizer
            "thresholds": none, "stale_check": boolean, "update_ratio": boolean, "live_interval": number(0),
            "max_events": whole(1)}),
        Target("GradientMonitor(model)", plain(gv.GradientMonitor), {"model": none}),
        Target("GradientMonitor.step", lambda tmp, **kw: step_call(**kw), {
            "grad_norm": lambda v: number(0)(v) or (isinstance(v, torch.Tensor) and v.numel() == 1),
            "max_norm": number(0, above=True)}),
        *(Target(f"GradientMonitor.{m}", lambda tmp, m=m, **kw: monitor_call(m, **kw),
                 {"stat": lambda v: isinstance(v, str) and v in MONITOR_STATS})
          for m in ("history", "per_rank", "reduced")),
        Target("GradientMonitor.on_record", lambda tmp, **kw: monitor_call("on_record", **kw), {"listener": never}),
    ],
    "GraphWidget": [
        Target("gv.GraphWidget", lambda tmp, **kw: widget_call(**kw), {
            "roots": never, "model": none, "capture": none, "names": names, "height": whole(50, 100_000),
            "lazy": or_none(boolean)}),
        Target("GraphWidget.from_fn", lambda tmp, **kw: gv.GraphWidget.from_fn(
            **{"fn": lambda: loss_of(m), "model": (m := model()), **kw}), {"fn": never, "names": names}),
    ],
    "Dashboard": [Target("gv.Dashboard", lambda tmp, **kw: dashboard_call(**kw), {
        "model": never, "source": never, "capture": none, "grads": grads, "histograms": boolean,
        "height": whole(50, 100_000)})],
}
CALLBACK_RULES: dict[str, Rule] = {"every": whole(1), "flow_check": boolean, "save": boolean, "log": boolean,
                                   "tensorboard": lambda v: isinstance(v, (bool, str)), "thresholds": none}
CALLBACKS = [Target("transformers GradvizCallback", lambda tmp, **kw: callback_call("GradvizCallback", **kw),
                    {**CALLBACK_RULES, "doctor": boolean}),
             Target("lightning GradvizCallback", lambda tmp, **kw: callback_call("GradvizLightningCallback", **kw),
                    CALLBACK_RULES)]

# Public names that take no user arguments worth checking: results the library builds and hands back.
EXEMPT = {
    "GradvizError": "the error type itself",
    "AutogradGraph": "built by gv.trace / gv.from_json (checked in TABLE), not by users",
    "BackwardRecording": "returned by gv.record_backward (checked in TABLE)",
    "Diagnosis": "returned by gv.doctor (checked in TABLE)",
    "Finding": "made by the doctor's checks, read by users",
    "GradCheck": "returned by gv.gradcheck (checked in TABLE)",
    "GraphDiff": "returned by gv.diff (checked in TABLE)",
    "MemoryReport": "returned by gv.memory_held (checked in TABLE)",
    "NonFinite": "returned by gv.find_nonfinite (checked in TABLE)",
}

CASES = [pytest.param(t, p, id=f"{t.label}-{p}") for ts in [*TABLE.values(), CALLBACKS] for t in ts for p in t.params]


def test_every_public_name_is_in_the_table() -> None:
    missing = sorted(set(gv.__all__) - set(TABLE) - set(EXEMPT))
    assert not missing, f"add these public names to TABLE (with a rule per argument) or to EXEMPT: {missing}"
    assert not set(TABLE) & set(EXEMPT)
    assert not (set(TABLE) | set(EXEMPT)) - set(gv.__all__), "the table names something that is not public"


# The thing a function works on: its refusal says what was expected ("pass the loss tensor") by name or not.
SUBJECTS = {"roots", "source", "loss", "fn", "step", "text", "before", "after", "graph", "model"}


def _refused_by_name(err: Exception, param: str) -> None:
    assert isinstance(err, gv.GradvizError), f"raw {type(err).__name__} instead of a GradvizError: {err}"
    assert str(err) and (param in str(err) or param in SUBJECTS), f"the message does not name {param}: {err}"


@pytest.mark.parametrize(("target", "param"), CASES)
@EXAMPLES
@given(value=JUNK)
def test_bad_arguments_are_refused_by_name(target: Target, param: str, value: Any, tmp_path: Path) -> None:
    valid = target.params[param](value)
    try:
        target.call(tmp_path, **{param: value})
    except pytest.skip.Exception:
        raise
    except Exception as err:
        assert not valid, f"{target.label}({param}={value!r}) is allowed but raised {type(err).__name__}: {err}"
        _refused_by_name(err, param)
        return
    assert valid, f"{target.label}({param}={value!r}) was accepted silently; its docstring rules it out"


# --- widget traits ----------------------------------------------------------------------------------------
TRAIT_RULES: dict[str, Rule] = {
    "graph_data": lambda v: v == {} and isinstance(v, dict),
    "expanded": call_ids,
    "unfolded": lambda v: isinstance(v, list) and all(isinstance(s, str) for s in v),
    "selected": lambda v: isinstance(v, str),
    "height": whole(50, 100_000),
    "toggles": never,  # JUNK never makes {"detach": [...], "freeze": [...]}
    "verified": lambda v: v == {} and isinstance(v, dict),
    "can_verify": boolean,
    "overlay": lambda v: v == {} and isinstance(v, dict),
    "recording": lambda v: v == {} and isinstance(v, dict),
    "step": whole(-1),
    "diff": lambda v: v == {} and isinstance(v, dict),
    "findings": lambda v: isinstance(v, (list, tuple)) and not v,
    "checkpoints": lambda v: v == {} and isinstance(v, dict),
    "checkpoint_table": lambda v: v == {} and isinstance(v, dict),
    "checkpoint_verified": lambda v: v == {} and isinstance(v, dict),
}


def test_every_trait_has_a_rule_and_a_converter() -> None:
    traits = set(contract.Traits.__annotations__)
    assert set(TRAIT_RULES) == traits, "give every synced trait a rule here"
    assert traits <= set(CONVERTERS), f"traits without a converter take anything: {traits - set(CONVERTERS)}"


@pytest.fixture(scope="module")
def widget() -> gv.GraphWidget:
    m = model()
    with gv.capture(m) as cap:
        loss = loss_of(m)
    return gv.GraphWidget(loss, model=m, capture=cap)


@pytest.mark.parametrize("trait", sorted(TRAIT_RULES))
@EXAMPLES
@given(value=JUNK)
def test_bad_trait_values_are_refused(widget: gv.GraphWidget, trait: str, value: Any) -> None:
    valid = TRAIT_RULES[trait](value)
    before = getattr(widget, trait)
    try:
        setattr(widget, trait, value)
    except Exception as err:
        assert isinstance(err, PageTraitError), f"raw {type(err).__name__}: {err}"
        assert not valid, f"w.{trait} = {value!r} is allowed but was refused: {err}"
        assert trait in str(err)
        assert getattr(widget, trait) == before  # a refused value changes nothing
        return
    finally:
        setattr(widget, trait, before)
    assert valid, f"w.{trait} = {value!r} was accepted silently"


def test_graph_data_problems_are_named(widget: gv.GraphWidget) -> None:
    with pytest.raises(gv.GradvizError, match=r"graph_data\.nodes must be list") as err:
        widget.graph_data = {**widget.graph_data, "nodes": "x"}
    assert isinstance(err.value, PageTraitError)
    node = widget.graph_data["nodes"][0]
    for bad, words in [({**node, "kind": "blob"}, "graph_data.nodes[0].kind"),
                       ({**node, "shape": ["a"]}, "graph_data.nodes[0].shape"),
                       ({k: v for k, v in node.items() if k != "id"}, "lacks id")]:
        with pytest.raises(PageTraitError, match=words.replace("[", r"\[").replace("]", r"\]")):
            widget.graph_data = {**widget.graph_data, "nodes": [bad]}
    widget.graph_data = dict(widget.graph_data)  # the real payload passes


# --- page messages ----------------------------------------------------------------------------------------
KINDS = st.sampled_from(["load", "verify", "values", "reply", ""]) | JSON
MESSAGES = JSON | st.fixed_dictionaries({"id": st.integers(-(2**63), 2**63), "kind": KINDS},
                                        optional={"body": JSON | st.fixed_dictionaries({"calls": JSON})})


@settings(EXAMPLES, max_examples=150)
@given(message=MESSAGES)
def test_page_messages_never_raise(widget: gv.GraphWidget, message: Any) -> None:
    answer = widget.answer(message)
    has_id = isinstance(message, dict) and type(message.get("id")) is int
    if not has_id:
        assert answer is None
        return
    assert answer is not None and answer["id"] == message["id"] and answer["kind"] == "reply"
    assert isinstance(answer["ok"], bool)
    if not answer["ok"]:
        assert isinstance(answer["error"], str) and answer["error"]


@pytest.mark.parametrize("kind", [[1], {"a": 1}, [], {}, 3.5, None, True])
def test_an_unhashable_or_odd_kind_is_an_error_reply(kind: Any) -> None:
    answer = dispatch({"id": 1, "kind": kind, "body": {}}, {"load": lambda body: {"chunks": []}})
    assert answer is not None and answer["ok"] is False and "unknown request kind" in answer["error"]


# --- meta-device models -----------------------------------------------------------------------------------
def meta() -> nn.Module:
    return model().to("meta")


META_CALLS: dict[str, Callable[[], Any]] = {
    "gradient_flow": lambda: gv.gradient_flow(meta()),
    "doctor": lambda: gv.doctor(lambda: None, meta()),
    "GradientMonitor": lambda: gv.GradientMonitor(meta()),
    "find_nonfinite": lambda: gv.find_nonfinite(lambda: None, meta()),
    "gradcheck": lambda: gv.gradcheck(lambda x: x.sum(), torch.ones(2, dtype=torch.float64, device="meta")),
    "record_backward": lambda: gv.record_backward(loss_of(m := meta()), model=m),
}


@pytest.mark.parametrize("tool", sorted(META_CALLS))
def test_value_tools_refuse_a_meta_model_in_one_line(tool: str) -> None:
    with pytest.raises(gv.GradvizError) as err:
        META_CALLS[tool]()
    text = str(err.value)
    assert "meta device" in text and "to_empty" in text and "\n" not in text


# --- the audit's cases, one by one ------------------------------------------------------------------------
AUDIT: dict[str, Callable[[], Any]] = {
    "every": lambda: gv.GradientMonitor(model(), every=math.nan),
    "every ": lambda: gv.GradientMonitor(model(), every=1.5),
    "steps": lambda: doctor_call(steps=10**12),
    "lr": lambda: gv.gradient_flow(trained(), lr=math.nan),
    "max_norm": lambda: monitor().step(grad_norm=1.0, max_norm=-1),
    "height": lambda: widget_call(height=-5),
    "lazy": lambda: widget_call(lazy="yes"),
    "names": lambda: widget_call(names={"x": 5}),
    "gv.watch(model)": lambda: gv.watch(None),
    "expanded": lambda: gv.export_html(graph(), "page.html", expanded=["no such call"]),  # in tmp_path
}


@pytest.mark.parametrize("name", sorted(AUDIT))
def test_audited_nonsense_is_refused(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(gv.GradvizError, match=name.strip().replace("(", r"\(").replace(")", r"\)")):
        AUDIT[name]()
