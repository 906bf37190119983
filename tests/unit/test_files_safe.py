"""Files are safe to write and to read (``gradviz_nb/files.py``, ``export/``, ``GradientMonitor.save/load``).

- Every writer checks its arguments before any work (no browser starts for a bad ``scale`` or path), and
  writes through one atomic writer: an existing file is never truncated by a failure, also when the rendering
  or the serialisation raises midway.
- Readers (``from_json``, ``GradientMonitor.load``) check a whole file before building or allocating anything
  and raise one ``GradvizError`` for anything malformed; hypothesis throws random, truncated and mutated
  files at them.
- GraphML and DOT carry no raw control character (XML cannot hold them), JSON round-trips exactly; hostile
  names go through networkx's GraphML reader and, when installed, Graphviz's own parser.

No test here starts a browser (``tests/page/test_files_safe_browser.py`` has the two that do).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import json
import math
import os
import re
import shutil
import stat
import subprocess
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import networkx as nx
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import gradviz_nb as gv
from gradviz_nb import files
from gradviz_nb.demo_models import MLP
from gradviz_nb.export import data as export_data
from gradviz_nb.export import image
from gradviz_nb.export.data import MAX_CALL_DEPTH, visible

PNG = b"\x89PNG\r\n\x1a\n"
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Everything GraphML and DOT may not carry raw (what gradviz_nb.export.data writes as \xNN text).
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


@functools.cache
def _base_graph() -> gv.AutogradGraph:
    torch.manual_seed(0)
    model = MLP()
    with gv.capture(model) as cap:
        loss = model(torch.randn(3, 4)).sum()
    return gv.trace(loss, model=model, capture=cap)


def _graph() -> gv.AutogradGraph:
    return gv.AutogradGraph(copy.deepcopy(_base_graph().nx))


@pytest.fixture
def no_browser(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if headless Chromium would start: the checks must come first."""

    def started(*args: Any) -> Any:
        raise AssertionError("the browser was started before the arguments were checked")

    monkeypatch.setattr(image, "_evaluate", started)


def _existing_picture(path: Path) -> bytes:
    """An existing 113 kB "picture" the user cares about."""
    original = PNG + os.urandom(113_000)
    path.write_bytes(original)
    return original


def _listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


# -- 1. the data loss: a bad scale over an existing picture ---------------------------------------------------

@pytest.mark.parametrize("scale", [0, math.nan, math.inf, -math.inf, 40, -1, 10.5, True, "2", None])
def test_bad_scale_leaves_the_existing_picture_byte_for_byte(tmp_path: Path, scale: Any) -> None:
    """The audit's reproduction: ``w.save_png("keep.png", scale=0)`` wrote a 0-byte file over a 113 kB
    picture with no error (nan, inf, 40 too; -1 wrote a blank image). Now: refused, the bytes unchanged."""
    keep = tmp_path / "keep.png"
    original = _existing_picture(keep)
    w = gv.GraphWidget(_graph())
    with pytest.raises(gv.GradvizError, match=r"save_png: scale must be a finite number > 0 and <= 10"):
        w.save_png(keep, scale=scale)
    assert keep.read_bytes() == original
    assert _listing(tmp_path) == ["keep.png"]  # no temp file left either


@pytest.mark.parametrize("aspect", [0, -1, math.nan, math.inf, 11, True, "16/9"])
@pytest.mark.parametrize("fmt", ["png", "svg"])
def test_bad_aspect_is_refused_before_the_browser(tmp_path: Path, no_browser: None, aspect: Any, fmt: str) -> None:
    keep = tmp_path / f"keep.{fmt}"
    original = _existing_picture(keep)
    w = gv.GraphWidget(_graph())
    with pytest.raises(gv.GradvizError, match=rf"save_{fmt}: aspect must be a finite number >= 0.1 and <= 10"):
        getattr(w, f"save_{fmt}")(keep, aspect=aspect)
    assert keep.read_bytes() == original


def test_bad_scale_is_refused_before_the_browser(tmp_path: Path, no_browser: None) -> None:
    with pytest.raises(gv.GradvizError, match="scale"):
        image.save_png(_graph(), tmp_path / "x.png", scale=0)
    assert _listing(tmp_path) == []


# -- 2. every writer checks its path first ----------------------------------------------------------------

def _monitor_save(g: gv.AutogradGraph, path: Any) -> Any:
    return gv.GradientMonitor(MLP()).save(path)


WRITERS: dict[str, tuple[Callable[[gv.AutogradGraph, Any], Any], str]] = {
    "save_html": (lambda g, p: gv.GraphWidget(g).save_html(p), ".html"),
    "export_html": (lambda g, p: gv.export_html(g, p), ".html"),
    "save_png": (lambda g, p: gv.GraphWidget(g).save_png(p), ".png"),
    "save_svg": (lambda g, p: gv.GraphWidget(g).save_svg(p), ".svg"),
    "to_graphml": (lambda g, p: gv.to_graphml(g, p), ".graphml"),
    "GradientMonitor.save": (_monitor_save, ".pt"),
}
BAD_PATHS: dict[str, Callable[[Path, str], Any]] = {
    "missing directory": lambda d, ext: d / "no_such_dir" / f"out{ext}",
    "a directory": lambda d, ext: d,
    "a directory named like a file": lambda d, ext: d / f"folder{ext}",
    "parent is a file": lambda d, ext: d / "plain.txt" / f"out{ext}",
    "wrong suffix": lambda d, ext: d / "out.txt",
    "no suffix": lambda d, ext: d / "out",
    "not a path": lambda d, ext: 42,
    "empty": lambda d, ext: "",
    "bytes": lambda d, ext: os.fsencode(d / f"out{ext}"),
}


@pytest.mark.parametrize("bad", list(BAD_PATHS))
@pytest.mark.parametrize("writer", list(WRITERS))
def test_every_writer_refuses_a_bad_path_before_writing(tmp_path: Path, no_browser: None, writer: str,
                                                        bad: str) -> None:
    """Missing directories, directories, wrong suffixes: one GradvizError naming ``path`` and what it accepts
    (before: FileNotFoundError, IsADirectoryError, torch's ``enforce fail``), and nothing written."""
    write, ext = WRITERS[writer]
    (tmp_path / "plain.txt").write_text("keep")
    (tmp_path / f"folder{ext}").mkdir()
    before = _listing(tmp_path)
    with pytest.raises(gv.GradvizError, match=rf"{re.escape(writer)}: path\b") as err:
        write(_graph(), BAD_PATHS[bad](tmp_path, ext))
    assert ext in str(err.value)
    assert _listing(tmp_path) == before and (tmp_path / "plain.txt").read_text() == "keep"


@pytest.mark.parametrize("writer", ["save_html", "export_html", "to_graphml", "GradientMonitor.save"])
def test_every_writer_replaces_the_file_never_rewrites_it_in_place(tmp_path: Path, writer: str) -> None:
    """A reader that opened the old file keeps reading all of it while the new one is written (a write in
    place truncated it under the reader); afterwards the path holds the new file, and no temp file is left."""
    write, ext = WRITERS[writer]
    out = tmp_path / f"out{ext}"
    old = os.urandom(50_000)
    out.write_bytes(old)
    with open(out, "rb") as reader:
        write(_graph(), out)
        assert reader.read() == old
    assert out.read_bytes() != old and out.stat().st_size > 100
    assert _listing(tmp_path) == [out.name]


# -- 3. a failure midway never truncates an existing file -----------------------------------------------------

@pytest.mark.parametrize("answer", ["data:,", "data:image/png;base64,", "data:image/png;base64,AAAA", None])
def test_an_empty_canvas_is_refused_not_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answer: Any) -> None:
    """Chromium answers ``data:,`` for a canvas larger than it draws (how scale=40 became a 0-byte file)."""
    keep = tmp_path / "keep.png"
    original = _existing_picture(keep)
    monkeypatch.setattr(image, "in_page", lambda *a, **k: answer)
    with pytest.raises(gv.GradvizError, match="no picture"):
        gv.GraphWidget(_graph()).save_png(keep, scale=10)
    assert keep.read_bytes() == original

    def dies(*args: Any, **kwargs: Any) -> Any:  # and a renderer that raises midway
        raise RuntimeError("the renderer died")

    monkeypatch.setattr(image, "in_page", dies)
    with pytest.raises(RuntimeError, match="renderer died"):
        gv.GraphWidget(_graph()).save_png(keep)
    assert keep.read_bytes() == original and _listing(tmp_path) == ["keep.png"]


def test_graphml_serialiser_failing_midway_leaves_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keep = tmp_path / "keep.graphml"
    keep.write_text("<graphml>the old one</graphml>")

    def half_then_fail(graph: Any, path_or_file: Any, **kwargs: Any) -> None:
        if isinstance(path_or_file, str | os.PathLike):
            path_or_file = open(path_or_file, "wb")  # noqa: SIM115 (what a plain writer does first)
        path_or_file.write(b"<?xml version='1.0'")
        path_or_file.flush()
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(export_data.nx, "write_graphml", half_then_fail)
    with pytest.raises((gv.GradvizError, OSError)):
        gv.to_graphml(_graph(), keep)
    assert keep.read_text() == "<graphml>the old one</graphml>" and _listing(tmp_path) == ["keep.graphml"]


def test_monitor_save_failing_midway_leaves_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keep = tmp_path / "history.pt"
    mon = gv.GradientMonitor(MLP())
    mon.save(keep)
    original = keep.read_bytes()
    real_save = torch.save

    def half_then_fail(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        buffer = io.BytesIO()
        real_save(obj, buffer)
        if isinstance(f, str | os.PathLike):
            f = open(f, "wb")  # noqa: SIM115
        f.write(buffer.getvalue()[:100])
        f.flush()
        raise RuntimeError("killed while writing")

    monkeypatch.setattr(torch, "save", half_then_fail)
    with pytest.raises(RuntimeError, match="killed"):
        mon.save(keep)
    assert keep.read_bytes() == original and _listing(tmp_path) == ["history.pt"]
    mon.close()


def test_html_with_a_lone_surrogate_is_written_not_truncated(tmp_path: Path) -> None:
    """A lone surrogate (not UTF-8) in a title or name used to raise UnicodeEncodeError after the file was
    opened, leaving it empty. It is written as visible \\udXXX text; the page's JSON reads it back exactly."""
    keep = tmp_path / "keep.html"
    keep.write_text("old page")
    x = torch.randn(2, requires_grad=True)
    g = gv.trace((x * 2).sum(), names={"bad\ud800name": x})
    gv.export_html(g, keep, title="title \udfff")
    text = keep.read_bytes().decode("utf-8")  # valid UTF-8
    assert "title \\udfff" in text
    state = json.loads(re.search(r'id="gradviz-state">(.*?)</script>', text, re.S).group(1))  # type: ignore[union-attr]
    assert "bad\ud800name" in json.dumps(state["graph_data"], ensure_ascii=False)


# -- the writer itself ------------------------------------------------------------------------------------

def test_write_atomic_keeps_permissions_and_links(tmp_path: Path) -> None:
    existing = tmp_path / "a.png"
    existing.write_bytes(b"old")
    existing.chmod(0o640)
    files.write_atomic(existing, b"new", "test")
    assert existing.read_bytes() == b"new" and stat.S_IMODE(existing.stat().st_mode) == 0o640
    fresh = tmp_path / "b.png"
    files.write_atomic(fresh, "tëxt", "test")
    umask = os.umask(0)
    os.umask(umask)
    assert fresh.read_text(encoding="utf-8") == "tëxt" and stat.S_IMODE(fresh.stat().st_mode) == 0o666 & ~umask
    link = tmp_path / "link.png"
    link.symlink_to(existing)
    files.write_atomic(link, b"through the link", "test")
    assert link.is_symlink() and existing.read_bytes() == b"through the link"


def test_write_atomic_failures_leave_the_file_and_no_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keep = tmp_path / "keep.pt"
    keep.write_bytes(b"precious")

    def writes_half(f: Any) -> None:
        f.write(b"half")
        raise KeyboardInterrupt  # even an interrupt midway

    with pytest.raises(KeyboardInterrupt):
        files.write_atomic(keep, writes_half, "test")
    assert keep.read_bytes() == b"precious" and _listing(tmp_path) == ["keep.pt"]

    def no_rename(src: Any, dst: Any) -> None:
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(files.os, "replace", no_rename)
    with pytest.raises(gv.GradvizError, match="nothing was changed"):
        files.write_atomic(keep, b"new", "test")
    assert keep.read_bytes() == b"precious" and _listing(tmp_path) == ["keep.pt"]


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_read_only_directory_is_one_clear_error(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(gv.GradvizError, match="cannot write in"):
            gv.to_graphml(_graph(), locked / "g.graphml")
    finally:
        locked.chmod(0o700)


# -- 4. GradientMonitor.load --------------------------------------------------------------------------------

@contextlib.contextmanager
def _guarded_allocations() -> Iterator[None]:
    """Fail (instead of allocating) if a reader asks torch for a buffer of more than 10M elements."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        _guard(monkeypatch)
        yield


@pytest.fixture
def allocation_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    _guard(monkeypatch)


def _guard(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("full", "zeros", "empty", "ones"):
        real = getattr(torch, name)

        def guarded(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            shape = args[0] if args and isinstance(args[0], tuple | list | torch.Size) else args
            numel = math.prod(int(s) for s in shape if isinstance(s, int)) if shape else 0
            if numel > 10_000_000:
                raise AssertionError(f"torch.{_name} asked for {numel} elements")
            return _real(*args, **kwargs)

        monkeypatch.setattr(torch, name, guarded)


@functools.cache
def _saved_monitor() -> bytes:
    """The bytes GradientMonitor.save writes for a short run (clipping, compaction: capacity 4, 6 steps)."""
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mon = gv.GradientMonitor(model, capacity=4, optimizer=opt)
    for _ in range(6):
        model(torch.randn(3, 4)).sum().backward()
        mon.step(grad_norm=torch.tensor(2.0), max_norm=1.0)
        opt.step()
        opt.zero_grad()
    mon.close()
    with tempfile.TemporaryDirectory() as tmp:
        mon.save(Path(tmp) / "m.pt")
        return (Path(tmp) / "m.pt").read_bytes()


def _crafted(tmp_path: Path, **changes: Any) -> Path:
    data = torch.load(io.BytesIO(_saved_monitor()), weights_only=True)
    for key, value in changes.items():
        if value is _DROP:
            del data[key]
        else:
            data[key] = value
    path = tmp_path / "crafted.pt"
    torch.save(data, path)
    return path


_DROP = object()

CRAFTED: dict[str, dict[str, Any]] = {
    "missing every": {"every": _DROP},
    "missing layers": {"layers": _DROP},
    "missing hist": {"hist": _DROP},
    "hist of the wrong shape": {"hist": torch.zeros(3, 7, 5)},
    "hist of integers": {"hist": torch.zeros(4, 2, 5, dtype=torch.long)},
    "steps of floats": {"steps": torch.zeros(4)},
    "count above capacity": {"count": 9},
    "negative count": {"count": -1},
    "capacity beyond any machine": {"capacity": 2**50},
    "every not a number": {"every": "1"},
    "every a bool": {"every": True},
    "layers not strings": {"layers": [1, 2]},
    "unknown stat": {"stats": ["norm", "max_abs", "ratio", "missing", "colour"]},
    "unknown event kind": {"events": [(1, "explode", "fc1", "why", ["fc1.weight"])]},
    "event too short": {"events": [(1, "spike")]},
    "rank_hist of the wrong shape": {"rank_hist": torch.zeros(4, 2, 3, 5)},
    "unknown threshold": {"thresholds": {"colour": 1}},
    "threshold not a number": {"thresholds": {"spike_factor": "ten"}},
    "threshold nan": {"thresholds": {"spike_factor": math.nan}},
    "clip wrong": {"clip": [1]},
    "newer fields unknown here": {"colour": "red"},
    "version text": {"version": "2"},
}


@pytest.mark.parametrize("case", list(CRAFTED))
def test_load_refuses_a_crafted_file_with_one_error(tmp_path: Path, allocation_guard: None, case: str) -> None:
    path = _crafted(tmp_path, **CRAFTED[case])
    with pytest.raises(gv.GradvizError, match=r"GradientMonitor\.load: .* is not a GradientMonitor\.save file"):
        gv.GradientMonitor.load(path)


def test_load_allocates_what_the_file_holds_not_the_capacity_it_claims(tmp_path: Path, allocation_guard: None) -> None:
    """A capacity of 10**11 made load allocate 800 GB (an empty buffer for records a loaded monitor never
    records). Now the buffers hold the saved records; the capacity is kept as a number."""
    mon = gv.GradientMonitor.load(_crafted(tmp_path, capacity=10**11))
    assert mon.capacity == 10**11 and mon.steps and mon.history().shape[0] == len(mon.steps)
    assert "capacity 100000000000" in mon.summary()
    # a real save still reads back exactly, and a newer format still says to upgrade
    with pytest.raises(gv.GradvizError, match="newer gradviz_nb"):
        gv.GradientMonitor.load(_crafted(tmp_path, version=99))
    path = tmp_path / "m.pt"
    path.write_bytes(_saved_monitor())
    loaded = gv.GradientMonitor.load(path)
    original = torch.load(io.BytesIO(_saved_monitor()), weights_only=True)
    assert loaded.steps == original["steps"].tolist() and loaded.capacity == 4
    assert torch.equal(loaded.history().nan_to_num(-1), original["hist"][:, :, 0].nan_to_num(-1))
    assert loaded.clipped == (6, 6)


@pytest.mark.parametrize("kind", ["empty", "garbage", "truncated", "legacy format", "compressed", "directory",
                                  "missing", "a list", "a tensor"])
def test_load_refuses_files_that_are_not_a_save(tmp_path: Path, allocation_guard: None, kind: str) -> None:
    path = tmp_path / "m.pt"
    valid = _saved_monitor()
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "garbage":
        path.write_bytes(b"\x80\x02garbage" * 10)
    elif kind == "truncated":
        path.write_bytes(valid[: len(valid) // 2])
    elif kind == "legacy format":  # not a zip: its storages' sizes come from the pickle, not the file
        torch.save(torch.load(io.BytesIO(valid), weights_only=True), path, _use_new_zipfile_serialization=False)
    elif kind == "compressed":  # a zip whose records could unpack to far more than the file
        with zipfile.ZipFile(io.BytesIO(valid)) as src, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as dst:
            for info in src.infolist():
                dst.writestr(info.filename, src.read(info))
    elif kind == "directory":
        path.mkdir()
    elif kind == "a list":
        torch.save([1, 2, 3], path)
    elif kind == "a tensor":
        torch.save(torch.zeros(3), path)
    with pytest.raises(gv.GradvizError, match=r"GradientMonitor\.load"):
        gv.GradientMonitor.load(path)


def _load_or_refuse(blob: bytes, tmp: Path) -> None:
    path = tmp / "fuzz.pt"
    path.write_bytes(blob)
    with _guarded_allocations():
        try:
            mon = gv.GradientMonitor.load(path)
        except gv.GradvizError:
            return
        mon.summary()  # what was accepted is usable
        mon.history()


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("fuzz")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@FUZZ
@given(blob=st.binary(max_size=2048))
def test_fuzz_load_random_bytes(fuzz_dir: Path, blob: bytes) -> None:
    _load_or_refuse(blob, fuzz_dir)


@FUZZ
@given(data=st.data())
def test_fuzz_load_truncated_and_mutated(fuzz_dir: Path, data: st.DataObject) -> None:
    blob = bytearray(_saved_monitor())
    if data.draw(st.booleans(), label="truncate"):
        blob = blob[: data.draw(st.integers(0, len(blob) - 1), label="cut at")]
    else:
        for _ in range(data.draw(st.integers(1, 8), label="mutations")):
            at = data.draw(st.integers(0, len(blob) - 1), label="at")
            blob[at] = data.draw(st.integers(0, 255), label="byte")
    _load_or_refuse(bytes(blob), fuzz_dir)


@FUZZ
@given(data=st.data())
def test_fuzz_load_mutated_fields(fuzz_dir: Path, data: st.DataObject) -> None:
    """Valid archives holding wrong values: the fields' types, shapes and ranges are checked."""
    saved = torch.load(io.BytesIO(_saved_monitor()), weights_only=True)
    key = data.draw(st.sampled_from(sorted(saved)), label="field")
    values = st.one_of(st.none(), st.integers(-2**70, 2**70), st.floats(), st.text(max_size=5),
                       st.lists(st.integers(-3, 3), max_size=3), st.sampled_from([True, 2**40, 10**11]),
                       st.tuples(st.integers(0, 5), st.integers(0, 5)).map(lambda s: torch.zeros(*s)))
    saved[key] = data.draw(values, label="value")
    buffer = io.BytesIO()
    torch.save(saved, buffer)
    _load_or_refuse(buffer.getvalue(), fuzz_dir)


# -- 5. from_json ------------------------------------------------------------------------------------------

def _doc() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(gv.to_json(_graph()))
    return doc


def _mutate(change: Callable[[dict[str, Any]], Any]) -> str:
    doc = _doc()
    change(doc)
    return json.dumps(doc)


def _call(doc: dict[str, Any], cid: str) -> dict[str, Any]:
    return next(c for c in doc["graph"]["calls"] if c["id"] == cid)


def _deep_calls(depth: int) -> str:
    doc = _doc()
    doc["graph"]["calls"] = [{"id": f"c{i}", "path": f"c{i}", "type": "Linear", "index": 1,
                              "parent": f"c{i - 1}" if i else "", "size": 0} for i in range(depth)]
    for _, d in doc["nodes"]:
        d["call"], d["module"] = "", ""
    return json.dumps(doc)


MALFORMED: dict[str, Callable[[], Any]] = {
    "a call that is its own parent": lambda: _mutate(lambda d: _call(d, "fc1").update(parent="fc1")),
    "two calls each other's parent": lambda: _mutate(
        lambda d: (_call(d, "fc1").update(parent="fc2"), _call(d, "fc2").update(parent="fc1"))),
    "an unknown parent call": lambda: _mutate(lambda d: _call(d, "fc1").update(parent="nowhere")),
    "a node in an unknown call": lambda: _mutate(lambda d: d["nodes"][0][1].update(call="nowhere")),
    "an edge to an unknown node": lambda: _mutate(lambda d: d["edges"].append([d["nodes"][0][0], "zzz", {}])),
    "an unknown root": lambda: _mutate(lambda d: d["graph"]["roots"].append("zzz")),
    "an unknown checkpoint node": lambda: _mutate(lambda d: d["graph"]["checkpoints"].update(zzz=None)),
    "a node listed twice": lambda: _mutate(lambda d: d["nodes"].append(d["nodes"][0])),
    "an edge listed twice": lambda: _mutate(lambda d: d["edges"].append(d["edges"][0])),
    "a call listed twice": lambda: _mutate(lambda d: d["graph"]["calls"].append(d["graph"]["calls"][0])),
    "no nodes": lambda: _mutate(lambda d: d.pop("nodes")),
    "no edges": lambda: _mutate(lambda d: d.pop("edges")),
    "no graph": lambda: _mutate(lambda d: d.pop("graph")),
    "no calls": lambda: _mutate(lambda d: d["graph"].pop("calls")),
    "a node without its kind": lambda: _mutate(lambda d: d["nodes"][0][1].pop("kind")),
    "a call without its parent": lambda: _mutate(lambda d: d["graph"]["calls"][0].pop("parent")),
    "a node id that is a number": lambda: _mutate(lambda d: d["nodes"][0].__setitem__(0, 7)),
    "a node record that is a string": lambda: _mutate(lambda d: d["nodes"].__setitem__(0, "n0")),
    "nodes as an object": lambda: _mutate(lambda d: d.__setitem__("nodes", {})),
    "a shape of strings": lambda: _mutate(lambda d: d["nodes"][0][1].update(shape=["a"])),
    "deep JSON nesting": lambda: '{"format": "gradviz_nb.AutogradGraph", "version": 1, "graph": '
                                 + "[" * 100_000 + "]" * 100_000 + "}",
    "deep nesting inside a node": lambda: _mutate(
        lambda d: d["nodes"][0][1].update(value=json.loads("[" * 500 + "]" * 500))),
    "module calls nested too deep": lambda: _deep_calls(MAX_CALL_DEPTH + 10),
    "not UTF-8": lambda: b'{"format": "\xff\xfe"}',
    "not text": lambda: 42,
    "None": lambda: None,
    "an integer too long to read": lambda: '{"format": ' + "9" * 5000 + "}",
    "a graph that is a list": lambda: _mutate(lambda d: d.__setitem__("graph", [])),
    "a float where a count goes": lambda: _mutate(lambda d: d["edges"][0][2].update(output_nr=0.5)),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_from_json_refuses_a_malformed_file_with_one_error(case: str) -> None:
    """Before: KeyError (missing keys), RecursionError (deep nesting), or a graph quietly built with a call
    cycle or an edge to a node that is not there."""
    with pytest.raises(gv.GradvizError, match="from_json"):
        gv.from_json(MALFORMED[case]())


def test_from_json_reads_deep_but_sane_call_nesting_and_to_dot_draws_any_depth() -> None:
    g = gv.from_json(_deep_calls(100))
    assert len(g.calls) == 100 and gv.to_dot(g).count("subgraph") == 100
    # to_dot nests clusters without recursion: a graph built in memory with 3000 nested calls draws too
    h = _graph()
    h.nx.graph["calls"] = [{"id": f"c{i}", "path": f"c{i}", "type": "T", "index": 1,
                            "parent": f"c{i - 1}" if i else "", "size": 0} for i in range(3000)]
    h.nx.nodes[next(iter(h.nx.nodes))]["call"] = "c2999"
    text = gv.to_dot(h)
    assert text.count("subgraph") == 3000 and text.count("{") == text.count("}")


def _accepted_graph_is_usable(text: Any) -> None:
    try:
        g = gv.from_json(text)
    except gv.GradvizError:
        return
    gv.to_dot(g)
    export_data.graphml_ready(g)
    assert gv.from_json(gv.to_json(g)).nx.nodes(data=True) == g.nx.nodes(data=True)


@FUZZ
@given(blob=st.one_of(st.binary(max_size=512), st.text(max_size=512)))
def test_fuzz_from_json_random_input(blob: Any) -> None:
    _accepted_graph_is_usable(blob)


@FUZZ
@given(data=st.data())
def test_fuzz_from_json_truncated_and_mutated_text(data: st.DataObject) -> None:
    text = gv.to_json(_graph())
    if data.draw(st.booleans(), label="truncate"):
        text = text[: data.draw(st.integers(0, len(text) - 1), label="cut at")]
    else:
        chars = list(text)
        for _ in range(data.draw(st.integers(1, 6), label="mutations")):
            at = data.draw(st.integers(0, len(chars) - 1), label="at")
            chars[at] = data.draw(st.sampled_from(list('{}[]",:0123456789-.aetnrufl\\ ')), label="char")
        text = "".join(chars)
    _accepted_graph_is_usable(text)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(["", "n0", "fc1", "root0", "op", "leaf"]) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8)


@FUZZ
@given(data=st.data())
def test_fuzz_from_json_mutated_structure(data: st.DataObject) -> None:
    """A valid document with one value anywhere replaced by random JSON, or one key dropped."""
    doc = _doc()
    holder: Any = doc
    while True:  # walk down to a random value (the document is a few levels deep)
        key: Any = (data.draw(st.sampled_from(sorted(holder)), label="key") if isinstance(holder, dict)
                    else data.draw(st.integers(0, len(holder) - 1), label="index"))
        child = holder[key]
        if isinstance(child, dict | list) and child and data.draw(st.booleans(), label="go deeper"):
            holder = child
            continue
        break
    if isinstance(holder, dict) and data.draw(st.booleans(), label="drop"):
        del holder[key]
    else:
        holder[key] = data.draw(JSON_VALUES, label="value")
    _accepted_graph_is_usable(json.dumps(doc))


# -- 6. hostile names: GraphML, DOT, JSON ------------------------------------------------------------------

HOSTILE = ["\x00", "\x01", "\x08", "\x0b", "\x0c", "\x1b", "\x1f", "\x7f", "\x85", "\x9f", "\r", "\n", "\t",
           "\ud800", "\udfff", "\ufffe", "\uffff", '"', "'", "<", ">", "&", "\\", "]]>", "<!--", "\\n", "é", "😀",
           "\u2028", " ", "{", "}", ";", "--", "->"]
NAMES = st.lists(st.one_of(st.sampled_from(HOSTILE), st.characters(exclude_categories=())), min_size=1,
                 max_size=12).map("".join)


def _hostile_graph(leaf: str, call: str, kind: str) -> tuple[gv.AutogradGraph, str]:
    """The MLP graph with a leaf named ``leaf`` (its id too), and its first module call renamed ``call``."""
    g = _graph()
    node = next(n for n, d in g.nx.nodes(data=True) if d["kind"] == "leaf")
    new_id = "leaf " + leaf
    d = g.nx.nodes[node]
    d.update(label=leaf, name=leaf, names=[leaf, kind])
    old_call = g.nx.graph["calls"][0]["id"]
    for c in g.nx.graph["calls"]:
        c["parent"] = call if c["parent"] == old_call else c["parent"]
    g.nx.graph["calls"][0].update(id=call, type=kind)
    for _, nd in g.nx.nodes(data=True):
        nd["call"] = call if nd["call"] == old_call else nd["call"]
    g.nx.graph["notes"].append(kind)
    nx.relabel_nodes(g.nx, {node: new_id}, copy=False)
    g.nx.graph["roots"] = [new_id if r == node else r for r in g.nx.graph["roots"]]
    return g, new_id


def _names_ok(*names: str) -> bool:
    # A high surrogate followed by a low one reads back from JSON as one character: not a lone surrogate
    return all(not re.search("[\ud800-\udbff][\udc00-\udfff]", n) for n in names)


@settings(max_examples=120, deadline=None)
@given(leaf=NAMES, call=NAMES, kind=NAMES)
def test_hostile_names_round_trip_through_json_graphml_and_dot(fuzz_dir: Path, leaf: str, call: str,
                                                               kind: str) -> None:
    assume(call != "" and call not in {c["id"] for c in _base_graph().calls})
    assume(visible(call) not in {c["id"] for c in _base_graph().calls})
    g, leaf_id = _hostile_graph(leaf, call, kind)

    # JSON: exact, and valid UTF-8 text (lone surrogates escaped as \udXXX)
    text = gv.to_json(g)
    text.encode("utf-8")
    assert not RAW_CONTROL.search(text)
    if _names_ok(leaf, call, kind):
        back = gv.from_json(text)
        assert list(back.nx.nodes(data=True)) == list(g.nx.nodes(data=True))
        assert back.nx.graph == g.nx.graph

    # GraphML: well-formed XML that networkx reads; names come back as visible text, JSON values exactly
    path = fuzz_dir / "hostile.graphml"
    gv.to_graphml(g, path)
    raw = path.read_bytes().decode("utf-8")
    assert not RAW_CONTROL.search(raw)
    h = nx.read_graphml(path)
    assert visible(leaf_id) in h
    assert h.nodes[visible(leaf_id)]["label"] == visible(leaf)
    if _names_ok(leaf, call, kind):  # JSON text inside GraphML: exact
        assert json.loads(h.nodes[visible(leaf_id)]["names"]) == [leaf, kind]
        assert json.loads(h.graph["calls"]) == g.nx.graph["calls"]
    assert {d["call"] for _, d in h.nodes(data=True)} == {visible(d["call"]) for _, d in g.nx.nodes(data=True)}
    assert set(h.edges) == {(visible(u), visible(v)) for u, v in g.nx.edges}

    # DOT: no raw control character; each quoted node id reads back as the visible name
    dot = gv.to_dot(g)
    assert not RAW_CONTROL.search(dot.replace("\n", ""))
    dot.encode("utf-8")
    quoted = {_unquote(s) for s in re.findall(r'"((?:[^"\\]|\\.)*)"', dot)}
    assert visible(leaf_id) in quoted and "cluster_" + visible(call) in quoted
    if shutil.which("dot"):
        run = subprocess.run(["dot", "-Tsvg"], input=dot.encode("utf-8"), capture_output=True, timeout=60)
        assert run.returncode == 0, run.stderr.decode("utf-8", "replace")


def _unquote(body: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), body)


def test_dot_is_read_by_graphviz_if_installed() -> None:
    """Graphviz's own parser on a graph full of hostile names (skipped when ``dot`` is not installed)."""
    if not shutil.which("dot"):
        pytest.skip("Graphviz's dot is not installed")
    g, _ = _hostile_graph("".join(HOSTILE), "call" + "".join(HOSTILE), "".join(reversed(HOSTILE)))
    run = subprocess.run(["dot", "-Tsvg"], input=gv.to_dot(g).encode("utf-8"), capture_output=True, timeout=60)
    assert run.returncode == 0, run.stderr.decode("utf-8", "replace")


def test_graphml_with_a_control_character_is_xml() -> None:
    """The audit's case: a name with \\x01 made a file XML parsers refuse; it reads back as visible text."""
    g, leaf_id = _hostile_graph("a\x01b", "blocks\x1b.0", "Lin\x00ear")
    buffer = io.BytesIO()
    nx.write_graphml(export_data.graphml_ready(g), buffer)
    h = nx.read_graphml(io.BytesIO(buffer.getvalue()))
    assert h.nodes[visible(leaf_id)]["label"] == "a\\x01b"
    assert '"blocks\\x1b.0"' not in gv.to_dot(g) and "\x01" not in gv.to_dot(g) and "\x1b" not in gv.to_dot(g)
    assert '"cluster_blocks\\\\x1b.0"' in gv.to_dot(g)
