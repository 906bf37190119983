"""``trace``: turn the autograd graph behind tensors into an :class:`AutogradGraph`."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import networkx as nx
import torch
from torch import nn

from gradviz_nb.errors import GradvizError
from gradviz_nb.tracing.capture import Attribution, Capture, ModuleCall, watched
from gradviz_nb.tracing.compiled import annotate_compiled, real_name, unwrap_compiled
from gradviz_nb.tracing.distributed import annotate_distributed
from gradviz_nb.tracing.ghosts import Ghost
from gradviz_nb.tracing.graph import AutogradGraph
from gradviz_nb.tracing.summary import SMALL
from gradviz_nb.tracing.walk import RawNode, Storages, short_op, walk
from gradviz_nb.validate import instance, tensor_mapping

NO_CAPTURE_NOTE = (
    "No module boxes: this graph was traced without module capture. Run the forward inside "
    "`with gv.capture(model) as cap:` and pass `capture=cap`, or call `gv.watch(model)` before the forward."
)
OPAQUE_CHECKPOINT = "CheckpointFunctionBackward"


def trace(
    roots: torch.Tensor | Sequence[torch.Tensor],
    model: nn.Module | None = None,
    capture: Capture | None = None,
    names: Mapping[str, torch.Tensor] | None = None,
) -> AutogradGraph:
    """Trace the autograd graph behind ``roots`` into an :class:`AutogradGraph`.

    ``model`` names parameter leaves (a tied weight gets all its names); ``names`` names other
    tensors (``{"x": x}``); ``capture`` (from :func:`gv.capture`) groups nodes by module call. Without
    ``capture``, models registered with :func:`gv.watch` are used. No autograd node is kept alive.

    Example::

        with gv.capture(model) as cap:
            loss = model(x).sum()
        g = gv.trace(loss, model=model, capture=cap)
    """
    graph, _ = _trace(roots, model, capture, names, want_nodes=False)
    return graph  # no node map was made: nothing pins the autograd graph


def trace_with_nodes(
    roots: torch.Tensor | Sequence[torch.Tensor],
    model: nn.Module | None = None,
    capture: Capture | None = None,
    names: Mapping[str, torch.Tensor] | None = None,
) -> tuple[AutogradGraph, dict[Any, str]]:
    """:func:`trace`, plus the live autograd Node -> node id map, for analyses that must hook the nodes
    (backward recording). The caller must drop the map as soon as it is done: it pins the graph."""
    return _trace(roots, model, capture, names, want_nodes=True)


def _trace(
    roots: torch.Tensor | Sequence[torch.Tensor],
    model: nn.Module | None,
    capture: Capture | None,
    names: Mapping[str, torch.Tensor] | None,
    want_nodes: bool,
) -> tuple[AutogradGraph, dict[Any, str]]:
    if names is not None:
        tensor_mapping("names", names)
    if capture is not None:
        instance("capture", capture, Capture, "a Capture (with gv.capture(model) as cap) or None")
    tensors = _check_roots(roots, model)
    model = unwrap_compiled(model)  # torch.compile's wrapper: name by the model's own names
    captures = [capture] if capture is not None else watched()
    if model is None and capture is None:
        model = next((c.model for c in captures), None)
    edges = [torch.autograd.graph.get_gradient_edge(t) for t in tensors]
    storages: Storages = {}
    raw, keys = walk([e.node for e in edges], storages)
    root_edges = [(keys[e.node], int(e.output_nr)) for e in edges]
    nodes = {fn: f"n{key}" for fn, key in keys.items()} if want_nodes else {}
    opaque = {r.key for r in raw if r.op == OPAQUE_CHECKPOINT}
    checkpoints = _checkpoint_contents({f"n{k}": fn for fn, k in keys.items() if k in opaque}, model, names
                                       ) if opaque else {}
    del edges, keys
    leaf_of_tensor: dict[int, str] = {}
    values: dict[str, list[float] | None] = {}
    # Leaves by weak reference: the details panel asks for their statistics (and .grad's) when one is
    # selected (tracing/summary.py); the graph never keeps a tensor alive.
    live: dict[str, weakref.ref[torch.Tensor]] = {}
    for r in raw:
        if r.leaf is not None:
            node_id = leaf_of_tensor[id(r.leaf)] = f"n{r.key}"
            values[node_id] = _small(r.leaf)
            live[node_id] = weakref.ref(r.leaf)
    values.update((f"root{i}", _small(t)) for i, t in enumerate(tensors))
    leaf_names = _leaf_names(raw, model, names)
    graph = _build(raw, root_edges, tensors, leaf_names, [c for cap in captures for c in cap.calls])
    ghosts = _relevant_ghosts(graph, [gh for cap in captures for gh in cap.ghosts], leaf_of_tensor)
    call_ids = _name_calls(graph, [gh.call for gh, _, _ in ghosts])
    graph.graph["ghosts"] = [
        {"id": f"g{i}", "kind": gh.kind, "label": gh.label, "names": [gh.label] if gh.kind == "frozen" else [],
         "shape": gh.shape, "source": source, "output_nr": gh.output_nr, "targets": targets,
         "where": gh.where, "line": gh.line, "cut": gh.cut,
         "call": call_ids[id(c)] if (c := _box(gh.call)) is not None else ""}
        for i, (gh, source, targets) in enumerate(ghosts)
    ]
    observed = {seq: v for cap in captures for seq, v in cap.values.items()}
    for n, attrs in graph.nodes(data=True):
        attrs["value"] = observed.get(attrs["seq"]) if attrs["kind"] == "op" else values.get(n)
    graph.graph["modules"] = _module_tree(model)
    # A plain str: torch.__version__ is a TorchVersion (a str subclass) that marimo's JSON writes as {}.
    graph.graph["torch_version"] = str(torch.__version__)
    graph.graph["captured"] = bool(graph.graph["calls"])
    graph.graph["checkpoints"] = checkpoints
    # A capture without a model (a teaching example) asked for values, not boxes: no note then.
    modelless = capture is not None and capture.model is None
    notes = [] if graph.graph["captured"] or modelless else [_no_boxes_note(captures)]
    graph.graph["notes"] = notes
    annotate_compiled(graph)  # torch.compile regions: label, and a note on what they hide
    annotate_distributed(graph, model)  # FSDP2 / DDP / DTensor nodes: label, note, where collectives run
    out = AutogradGraph(graph)
    out.tensors = live
    out.saved_params = {key: index for key, (index, param, _) in storages.items() if param}
    return out, nodes


def _small(t: torch.Tensor) -> list[float] | None:
    """Values of a tensor small enough to show on a node (teaching graphs), else None.

    Only metadata, never values, of tensor subclasses (FSDP2's ``DTensor`` shards: reading one would be a
    collective) and of tensors whose storage is not allocated (FSDP2's unsharded parameters outside
    forward are resized to zero bytes)."""
    if t.numel() > SMALL or type(t) not in (torch.Tensor, nn.Parameter):
        return None
    if t.is_meta or t.layout != torch.strided or t.is_complex():  # no data / not a list of real numbers
        return None
    if t.numel() and t.untyped_storage().nbytes() < (t.storage_offset() + 1) * t.element_size():
        return None
    return t.detach().flatten().tolist()


def _check_roots(roots: Any, model: nn.Module | None) -> list[torch.Tensor]:
    _check_model(model)
    tensors = [roots] if isinstance(roots, torch.Tensor) else roots
    if not isinstance(tensors, (list, tuple)):
        raise GradvizError(
            f"expected a tensor or a list of tensors (e.g. the loss), got {type(roots).__name__}."
        )
    if not tensors:
        raise GradvizError("got an empty list: pass at least one tensor (e.g. the loss) to trace.")
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor):
            raise GradvizError(f"root {i} is a {type(t).__name__}, not a tensor: pass the loss tensor.")
        if t.grad_fn is None and not t.requires_grad:
            raise GradvizError(_why_no_graph(t, model, i if len(tensors) > 1 else None))
    return list(tensors)


def _check_model(model: object) -> None:
    if model is None or isinstance(model, nn.Module):
        return
    if isinstance(model, torch.optim.Optimizer):
        raise GradvizError(
            f"model= got an optimizer ({type(model).__name__}), not the model: pass the nn.Module it trains "
            "(gv.trace(loss, model=model)). To name other tensors, pass names={'w': w}."
        )
    raise GradvizError(
        f"model= must be the nn.Module whose parameters name the leaves, got {type(model).__name__}. "
        "To name plain tensors, pass names={'w': w} instead."
    )


def _checkpoint_contents(
    fns: dict[str, Any], model: nn.Module | None, names: Mapping[str, torch.Tensor] | None
) -> dict[str, list[str] | None]:
    """Reentrant checkpoint node id -> names of the parameters its hidden backward reaches.

    A ``CheckpointFunctionBackward`` re-runs its function during backward and differentiates that
    inner graph itself: the parameters it uses are not in this graph. They are found from the
    function the checkpoint kept (``ctx.run_function``: a module, a bound method or ``partial`` of
    one, or a closure over modules) plus modules passed as arguments. ``None`` when the function
    holds no module (a plain function using globals): then nobody can tell without running backward.
    A checkpoint whose inputs need no grad makes no node at all (PyTorch warns "None of the inputs
    have requires_grad=True"), so its parameters are in no list: they get no gradient.
    """
    if not fns:
        return {}
    by_tensor: dict[int, list[str]] = {}
    if model is not None:
        for name, p in model.named_parameters(remove_duplicate=False):
            by_tensor.setdefault(id(p), []).append(name)
    for name, t in (names or {}).items():
        by_tensor.setdefault(id(t), []).append(name)
    out: dict[str, list[str] | None] = {}
    for node_id, fn in fns.items():
        modules = list(_modules_in(getattr(fn, "run_function", None)))
        modules += [m for m in getattr(fn, "inputs", ()) or () if isinstance(m, nn.Module)]
        if not modules:
            out[node_id] = None
            continue
        params = {id(p): p for m in modules for p in m.parameters() if p.requires_grad}
        out[node_id] = sorted({n for i in params for n in by_tensor.get(i, [])})
    return out


def _modules_in(fn: Any, depth: int = 0) -> Iterator[nn.Module]:
    if depth > 3 or fn is None:
        return
    if isinstance(fn, nn.Module):
        yield fn
    elif isinstance(fn, functools.partial):
        yield from _modules_in(fn.func, depth + 1)
        for a in (*fn.args, *fn.keywords.values()):
            yield from _modules_in(a, depth + 1)
    elif isinstance(getattr(fn, "__self__", None), nn.Module):  # block.forward, block.__call__
        yield fn.__self__
    else:
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                content = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if callable(content):
                yield from _modules_in(content, depth + 1)


def _why_no_graph(t: torch.Tensor, model: nn.Module | None, index: int | None) -> str:
    what = "the tensor" if index is None else f"root {index}"
    head = f"{what} has no autograd graph (grad_fn is None and requires_grad is False), so there is nothing to draw."
    if torch.is_inference(t):
        why = "It was made under torch.inference_mode(); compute it outside inference_mode."
    elif not torch.is_grad_enabled():
        why = "Gradients are disabled here (inside torch.no_grad()?); compute the loss with grad enabled."
    elif model is not None and not any(p.requires_grad for p in model.parameters()):
        why = "None of the model's parameters require grad; set requires_grad=True on what should learn."
    else:
        why = (
            "Likely causes: it was computed under torch.no_grad() or inference_mode, none of its inputs "
            "require grad, or it was detached (.detach(), .data, .item()/.numpy() round trips). "
            "Compute it from parameters or inputs with requires_grad=True, with grad enabled."
        )
    return f"{head} {why}"


def _leaf_names(
    raw: list[RawNode], model: nn.Module | None, names: Mapping[str, torch.Tensor] | None
) -> dict[int, list[str]]:
    by_tensor: dict[int, list[str]] = {}
    if model is not None:
        for name, p in model.named_parameters(remove_duplicate=False):
            by_tensor.setdefault(id(p), []).append(real_name(name))  # no compiled submodule's "_orig_mod."
    for name, t in (names or {}).items():
        by_tensor.setdefault(id(t), []).append(name)
    if model is not None and any(r.leaf is not None and hasattr(r.leaf, "_fqns") for r in raw):
        _name_flat_parameters(model, by_tensor)
    if model is not None and _distributed():  # fully_shard needs a process group; else no module has its state
        _name_unsharded_parameters(model, by_tensor)
    found = {}
    for r in raw:
        if r.leaf is not None:
            found[r.key] = by_tensor.get(id(r.leaf), [])
            r.leaf = None  # do not keep the user's tensors alive through the graph
    return found


def _distributed() -> bool:
    dist = getattr(torch, "distributed", None)
    return bool(dist is not None and dist.is_available() and dist.is_initialized())


def _name_flat_parameters(model: nn.Module, by_tensor: dict[int, list[str]]) -> None:
    """FSDP (v1) flattens each wrapped module's parameters into one ``FlatParameter``: that is the leaf
    autograd accumulates into, unnamed by ``named_parameters()`` with ``use_orig_params=True``. Name it by
    the parameters it holds (their ``named_parameters()`` names), so they count as reached."""
    for path, module in model.named_modules():
        flat = getattr(getattr(module, "_handle", None), "flat_param", None)
        fqns = getattr(flat, "_fqns", None)
        if flat is None or not fqns:
            continue
        inner = f"{path}._fsdp_wrapped_module" if path else "_fsdp_wrapped_module"
        if not hasattr(module, "_fsdp_wrapped_module"):
            inner = path
        known = by_tensor.setdefault(id(flat), [])
        known += [n for q in fqns if (n := f"{inner}.{q}" if inner else str(q)) not in known]


def _name_unsharded_parameters(model: nn.Module, by_tensor: dict[int, list[str]]) -> None:
    """FSDP2 (``fully_shard``) registers sharded ``DTensor`` parameters on the module but runs forward with
    unsharded copies: those are the leaves autograd accumulates into. Name each copy like the parameter it
    is the unsharded form of (the names ``named_parameters()`` gives, without any wrapper prefix)."""
    for module in model.modules():
        get_state = getattr(module, "_get_fsdp_state", None)
        if get_state is None:
            continue
        state = get_state()
        groups = getattr(state, "_fsdp_param_groups", None)
        if groups is None:
            group = getattr(state, "_fsdp_param_group", None)
            groups = [group] if group is not None else []
        for group in groups:
            for fp in getattr(group, "fsdp_params", ()):
                sharded, unsharded = getattr(fp, "sharded_param", None), getattr(fp, "_unsharded_param", None)
                if unsharded is None:
                    continue
                names = by_tensor.get(id(sharded)) or by_tensor.get(id(unsharded)) or []
                known = by_tensor.setdefault(id(unsharded), [])
                known += [n for n in names if n not in known]


def _build(
    raw: list[RawNode],
    root_edges: list[tuple[int, int]],
    tensors: list[torch.Tensor],
    leaf_names: dict[int, list[str]],
    calls: list[ModuleCall],
) -> nx.DiGraph:
    g = nx.DiGraph()
    attribution = Attribution(calls)
    call_of = {r.key: _box(attribution.call_of(r.seq, r.op)) for r in raw if r.key not in leaf_names}
    consumers: dict[int, list[ModuleCall | None]] = {}
    for r in raw:
        for producer, _ in r.inputs:
            if producer in leaf_names:
                consumers.setdefault(producer, []).append(call_of[r.key])
    ids = [f"n{r.key}" for r in raw]  # r.key is r's position in raw; edges reuse these strings
    nodes = []
    for r in raw:
        shape, dtype = r.outputs[0] if r.outputs else (None, "")
        if r.key in leaf_names:
            attrs = _leaf_attrs(r, leaf_names[r.key], shape, dtype)
            attrs["_call"] = _common_ancestor(consumers.get(r.key, []))
        else:
            attrs = _op_attrs(r, shape, dtype)
            attrs["_call"] = call_of[r.key]
        nodes.append((ids[r.key], attrs))
    fill_digraph(g, nodes, _edges(raw, ids))
    for i, ((producer, output_nr), t) in enumerate(zip(root_edges, tensors, strict=True)):
        root = f"root{i}"
        g.add_node(root, kind="root", op="", label=f"output {i}" if len(tensors) > 1 else "output",
                   module="", call="", name="", names=[], shape=list(t.shape),
                   dtype=str(t.dtype).removeprefix("torch."), requires_grad=True, seq=-1, saved=[])
        g.add_edge(f"n{producer}", root, output_nr=output_nr, input_nr=0, shape=list(t.shape),
                   slots=[[output_nr, 0]])
    g.graph["roots"] = [f"root{i}" for i in range(len(tensors))]
    return g


def fill_digraph(
    g: nx.DiGraph, nodes: list[tuple[str, dict[str, Any]]], edges: list[tuple[str, str, dict[str, Any]]]
) -> None:
    """``g.add_nodes_from(nodes); g.add_edges_from(edges)`` on an empty graph, 5x faster.

    The public methods copy every attribute dict and check each endpoint (43 ms for 10k nodes and 20k
    edges against 8.5 ms here: most of what tracing costs more than torchviz). Our nodes and edges are
    new, distinct and their dicts ours, so they go straight into NetworkX's documented dict-of-dicts
    (``_node``, ``_succ``, ``_pred``); tests/unit/test_trace.py checks the result equals the public path.
    """
    if g.number_of_nodes():
        raise ValueError("fill_digraph needs an empty graph")
    node, succ, pred = g._node, g._succ, g._pred
    for n, attrs in nodes:
        node[n] = attrs
        succ[n] = {}
        pred[n] = {}
    for u, v, attrs in edges:
        if u not in node or v not in node or v in succ[u]:  # never for a walk's output; stay correct anyway
            g.add_edge(u, v, **attrs)
            continue
        succ[u][v] = attrs
        pred[v][u] = attrs
    clear = getattr(nx, "_clear_cache", None)  # networkx >= 3.3 caches per graph; ours is new, but be exact
    if clear is not None:
        clear(g)


def _edges(raw: list[RawNode], ids: list[str]) -> list[tuple[str, str, dict[str, Any]]]:
    """One edge per (producer, consumer) pair; ``slots`` lists every (output_nr, input_nr) it carries.

    ``x * x`` feeds one tensor into two inputs, and ``a, b = t.chunk(2); a * b`` two outputs of
    one node into one consumer: a DiGraph has one edge for each, so the edge keeps all its slots.
    ``output_nr``/``input_nr`` are those of the first slot.
    """
    edges: dict[tuple[int, int], dict[str, Any]] = {}
    for r in raw:
        for input_nr, (producer, output_nr) in enumerate(r.inputs):
            if producer < 0:
                continue
            attrs = edges.get((producer, r.key))
            if attrs is not None:
                attrs["slots"].append([output_nr, input_nr])
                continue
            out = raw[producer].outputs
            shape = out[output_nr][0] if output_nr < len(out) else None
            edges[producer, r.key] = {"output_nr": output_nr, "input_nr": input_nr, "shape": shape,
                                      "slots": [[output_nr, input_nr]]}
    return [(ids[u], ids[v], attrs) for (u, v), attrs in edges.items()]


def _relevant_ghosts(
    g: nx.DiGraph, ghosts: list[Ghost], leaf_of_tensor: dict[int, str]
) -> list[tuple[Ghost, str | None, list[str]]]:
    """Ghosts touching this graph, with their source and target node ids."""
    if not ghosts:
        return []
    node_of_seq = {d["seq"]: n for n, d in g.nodes(data=True) if d["kind"] == "op"}
    out = []
    for gh in ghosts:
        source = node_of_seq.get(gh.source_seq) if gh.source_seq is not None else None
        if gh.kind == "detached" and source is None and gh.source_leaf is not None:
            source = leaf_of_tensor.get(gh.source_leaf)
        targets = [node_of_seq[s] for s in gh.target_seqs if s in node_of_seq]
        if targets:  # drawn beside what consumed it, like a leaf
            gh.call = _common_ancestor([g.nodes[t]["_call"] for t in targets])
        if targets or source is not None:
            out.append((gh, source, targets))
    return out


def _box(call: ModuleCall | None) -> ModuleCall | None:
    """Calls of the top-level model (path "") are the canvas itself, not a box."""
    while call is not None and call.path == "":
        call = call.parent
    return call


def _chain(call: ModuleCall | None) -> list[ModuleCall]:
    chain = []
    while call is not None:
        chain.append(call)
        call = _box(call.parent)
    return chain[::-1]  # outermost first


def _common_ancestor(calls: list[ModuleCall | None]) -> ModuleCall | None:
    """Deepest call holding all of ``calls``: where a leaf used by several calls is drawn."""
    if not calls:
        return None
    if all(c is calls[0] for c in calls):  # the usual leaf: one consumer, or one call using it repeatedly
        return calls[0]
    common = _chain(calls[0])
    for call in calls[1:]:
        chain = _chain(call)
        n = 0
        while n < min(len(common), len(chain)) and common[n] is chain[n]:
            n += 1
        common = common[:n]
    return common[-1] if common else None


def _op_attrs(r: RawNode, shape: list[int] | None, dtype: str) -> dict[str, Any]:
    # Dict literals, not dict(...): built once per node of every trace, a literal is twice as quick.
    saved = [{**s, "shape": shape, "dtype": dtype} if s["name"] == "result" else s for s in r.saved]
    return {"kind": "op", "op": r.op, "label": short_op(r.op), "name": "", "names": [], "shape": shape,
            "dtype": dtype, "requires_grad": True, "seq": r.seq, "saved": saved}


def _leaf_attrs(r: RawNode, names: list[str], shape: list[int] | None, dtype: str) -> dict[str, Any]:
    shape_text = "×".join(map(str, shape)) if shape else "scalar"
    module = names[0].rpartition(".")[0] if names else ""
    label = names[0] if names else f"tensor {shape_text}"
    return {"kind": "leaf", "op": r.op, "label": label, "module": module, "name": names[0] if names else "",
            "names": names, "shape": shape, "dtype": dtype, "requires_grad": True, "seq": -1, "saved": []}


def _name_calls(g: nx.DiGraph, extra: list[ModuleCall | None]) -> dict[int, str]:
    """Give the calls this graph uses stable ids ("blocks.0", "blocks.0 (call 2)") and sizes.

    ``extra`` are calls used by ghosts only. Returns ``id(call) -> call id``.
    """
    used: dict[int, ModuleCall] = {}
    distinct = {id(call): call for _, call in g.nodes(data="_call")}  # thousands of nodes, few calls
    distinct.update((id(call), call) for call in extra)
    for call in distinct.values():
        for c in _chain(_box(call)):
            used[id(c)] = c
    ordered = sorted(used.values(), key=lambda c: (c.start, -c.end))
    index = {id(c): c.index for c in ordered}
    if len({(c.path, c.index) for c in ordered}) < len(ordered):
        # calls from several watched forwards: number them in the order this graph uses them
        seen: dict[str, int] = {}
        for c in ordered:
            seen[c.path] = index[id(c)] = seen.get(c.path, 0) + 1
    ids = {id(c): c.path if index[id(c)] == 1 else f"{c.path} (call {index[id(c)]})" for c in ordered}
    members: dict[int, int] = {}  # direct members per call; sizes are summed up the tree below
    for _, attrs in g.nodes(data=True):
        call = attrs.pop("_call", None)
        if attrs["kind"] == "root":
            continue
        attrs["call"] = ids[id(call)] if call is not None else ""
        if attrs["kind"] == "op":
            attrs["module"] = call.path if call is not None else ""
        if call is not None:
            members[id(call)] = members.get(id(call), 0) + 1
    size = dict.fromkeys(ids.values(), 0)
    for c in ordered:
        for a in _chain(c):
            size[ids[id(a)]] += members.get(id(c), 0)
    g.graph["calls"] = [
        {"id": ids[id(c)], "path": c.path, "type": c.type, "index": index[id(c)],
         "parent": ids[id(p)] if (p := _box(c.parent)) is not None else "", "size": size[ids[id(c)]]}
        for c in ordered
    ]
    return ids


def _module_tree(model: nn.Module | None) -> dict[str, dict[str, Any]]:
    if model is None:
        return {}
    # Direct `_parameters` reads: named_parameters() per module costs a generator walk each.
    tree = {
        path: {"type": type(m).__name__, "parameters": [f"{path}.{n}" if path else n
                                                         for n, p in m._parameters.items() if p is not None]}
        for path, m in model.named_modules()
    }
    if any("_orig_mod" in path for path in tree):  # a compiled submodule: its wrapper gives way to the module
        tree = {real_name(path): {**v, "parameters": [real_name(n) for n in v["parameters"]]}
                for path, v in tree.items()}
    return tree


def _no_boxes_note(captures: list[Capture]) -> str:
    if any(c.calls for c in captures):
        return (
            "No module boxes: the capture recorded module calls, but none of this graph's nodes were made "
            "inside them. Compute the loss inside the `with gv.capture(model)` block you pass."
        )
    return NO_CAPTURE_NOTE
