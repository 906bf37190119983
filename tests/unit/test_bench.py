"""``python -m gradviz_nb.bench --quick`` runs end to end and writes the Costs table (docs/guides/costs.md). It only
proves the command works: timings are never asserted (the machine is shared; the table is for reading)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gradviz_nb.bench import END, START, main

ROOT = Path(__file__).resolve().parents[2]


def test_the_quick_table_has_every_row_and_goes_into_a_readme(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n## Costs\n\n{START}\nold table\n{END}\n\n## Next\n", encoding="utf-8")
    text = main(["--quick", "--reps", "1", "--readme", str(readme)])
    for feature in ("gv.trace", "forward in gv.capture", "gv.record_backward", "gv.find_nonfinite",
                    "detect_anomaly() (peer)", "GradientMonitor(every=10)", "torchlens log_forward_pass (peer)",
                    "capture per module call", "capture per op", "does not fit in memory (meta-device Llama"):
        assert feature in text, feature
    written = readme.read_text(encoding="utf-8")
    assert "old table" not in written and text in written and written.endswith("\n\n## Next\n")
    assert "1 torch thread" in text and "UTC" in text


def test_the_module_entry_runs() -> None:
    run = subprocess.run([sys.executable, "-m", "gradviz_nb.bench", "--help"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0 and "--quick" in run.stdout


def test_every_file_is_checked_for_its_markers_before_measuring(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import gradviz_nb.bench as bench

    good, bad = tmp_path / "good.md", tmp_path / "bad.md"
    good.write_text(f"{START}\nold\n{END}\n", encoding="utf-8")
    bad.write_text("no markers here\n", encoding="utf-8")
    measured: list[object] = []
    monkeypatch.setattr(bench, "fixed_costs", lambda *a, **k: measured.append(a) or (0.0, 0.0))
    with pytest.raises(SystemExit, match=r"bad\.md: no .* markers"):
        main(["--quick", "--readme", str(good), "--readme", str(bad)])
    assert measured == [] and "old" in good.read_text(encoding="utf-8")


def test_the_repository_files_the_command_writes_have_their_markers() -> None:
    for name in ("README.md", "docs/guides/costs.md"):
        text = (ROOT / name).read_text(encoding="utf-8")
        assert text.count(START) == 1 and text.count(END) == 1 and text.index(START) < text.index(END), name
        assert f"--readme {name}" in START


@pytest.mark.parametrize(("make", "says"), [
    (lambda d: d, "is a directory"),
    (lambda d: d / "missing.md", "does not exist"),
    (lambda d: (d / "latin1.md").write_bytes(b"# Co\xfbts\n") and d / "latin1.md", "not UTF-8"),
])
def test_an_unreadable_readme_is_one_sentence_before_measuring(tmp_path: Path, make: Any, says: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import gradviz_nb.bench as bench

    monkeypatch.setattr(bench, "fixed_costs", lambda *a, **k: pytest.fail("measured before checking the file"))
    with pytest.raises(SystemExit) as exit_:
        main(["--quick", "--readme", str(make(tmp_path))])
    assert says in str(exit_.value) and "--readme" in str(exit_.value)


@pytest.mark.parametrize("argv", [["--reps", "-3"], ["--only", "no-such-model"]])
def test_bad_counts_and_an_only_naming_no_model_are_refused_and_write_nothing(
        tmp_path: Path, argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import gradviz_nb.bench as bench

    readme = tmp_path / "README.md"
    before = f"# x\n\n{START}\nthe old table\n{END}\n"
    readme.write_text(before, encoding="utf-8")
    monkeypatch.setattr(bench, "fixed_costs", lambda *a, **k: pytest.fail("measured"))
    with pytest.raises(SystemExit) as exit_:
        main(["--quick", *argv, "--readme", str(readme)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert ("--reps must be 1 or more" in err) if argv[0] == "--reps" else ("names no model" in err)
    assert readme.read_text(encoding="utf-8") == before
