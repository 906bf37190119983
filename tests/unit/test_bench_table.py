"""The published Costs table is the median of at least 3 full runs with the range beside each ratio
(gradviz_nb/bench: ``combine``, ``main --readme``), shown with quick-sized fake runs: no timing here."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import gradviz_nb.bench as bench
from gradviz_nb.bench import END, MIN_RUNS, START, main
from gradviz_nb.bench.timing import Row, combine


def _run(trace: float, capture: float, skipped: str = "") -> list[Row]:
    return [Row("tiny", "gv.trace", "torchviz make_dot", 0.010 * trace, 0.010, "<= 1.0", paired=trace),
            Row("tiny", "forward in gv.capture", "plain forward", 0.02 * capture, 0.02, paired=capture),
            Row("tiny", "torchlens log_forward_pass (peer)", "plain forward", skipped=skipped)]


def test_combine_takes_each_ratios_median_and_range_over_runs() -> None:
    rows = combine([_run(1.23, 1.5), _run(0.88, 1.4, "torchlens not installed"), _run(1.01, 1.6)])
    trace, capture, peer = rows
    assert (trace.ratio, trace.low, trace.high, trace.runs) == (1.01, 0.88, 1.23, 3)
    assert math.isclose(trace.t_feature, 0.0101) and math.isclose(capture.ratio, 1.5)
    assert peer.skipped == "torchlens not installed", "a row skipped in any run stays skipped"
    text = bench.table(rows, reps=9, runs=3)
    assert "| 1.01x (0.88-1.23) |" in text and "| 1.50x (1.40-1.60) |" in text and "3 full runs" in text
    assert "| 1.23x" not in text, "no one run's ratio is published"


def test_readme_is_written_from_three_full_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = iter([(_run(1.23, 1.5), (2e-6, 1e-6)), (_run(0.88, 1.4), (3e-6, 1e-6)), (_run(1.01, 1.6), (4e-6, 1e-6))])
    calls: list[tuple[int, bool]] = []

    def one_run(reps: int, quick: bool, only: str = "") -> tuple[list[Row], tuple[float, float]]:
        calls.append((reps, quick))
        return next(script)

    monkeypatch.setattr(bench, "one_run", one_run)
    monkeypatch.setattr(bench.meta_llama, "row", lambda **kw: "meta-device Llama: skipped in this test")
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{START}\nold table\n{END}\n", encoding="utf-8")
    text = main(["--quick", "--reps", "1", "--readme", str(readme)])
    assert len(calls) == MIN_RUNS >= 3
    assert "| 1.01x (0.88-1.23) |" in text and "capture per module call 3.0 us" in text and "medians of 3 runs" in text
    assert text in readme.read_text(encoding="utf-8") and "old table" not in readme.read_text(encoding="utf-8")


def test_fewer_runs_than_three_are_refused_for_a_readme(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench, "one_run", lambda *a, **k: pytest.fail("measured before refusing"))
    readme = tmp_path / "README.md"
    readme.write_text(f"{START}\nold\n{END}\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="at least 3 full runs"):
        main(["--quick", "--runs", "2", "--readme", str(readme)])
