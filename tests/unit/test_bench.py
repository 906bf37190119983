"""``python -m gradviz_nb.bench --quick`` runs end to end and writes the Costs table (docs/guides/costs.md). It only
proves the command works: timings are never asserted (the machine is shared; the table is for reading)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
