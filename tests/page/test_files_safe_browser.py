"""The atomic writer end to end with the real renderer (headless Chromium): a picture is replaced whole by a
good export and left byte for byte by a refused one. The checks themselves need no browser:
``tests/unit/test_files_safe.py``."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch
from pagekit import CHROMIUM

import gradviz_nb as gv
from gradviz_nb.demo_models import MLP

pytestmark = pytest.mark.browser


@pytest.fixture(autouse=True)
def _chromium() -> None:
    """Skipped without Chromium, as tests/pagekit.py's browser fixture is (a failure when CI is set)."""
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI", "").lower() not in ("", "0", "false", "no"):
            pytest.fail(f"CI is set and there is no Chromium at {CHROMIUM} (apt-get install -y chromium)")
        pytest.skip(f"no Chromium at {CHROMIUM}")


def _widget() -> gv.GraphWidget:
    torch.manual_seed(0)
    model = MLP()
    with gv.capture(model) as cap:
        loss = model(torch.randn(3, 4)).sum()
    return gv.GraphWidget(loss, model=model, capture=cap)


def test_png_replaces_the_picture_whole_and_a_bad_scale_keeps_it(tmp_path: Path) -> None:
    keep = tmp_path / "keep.png"
    keep.write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(113_000))
    w = _widget()
    w.save_png(keep, scale=1)
    picture = keep.read_bytes()
    assert picture.startswith(b"\x89PNG\r\n\x1a\n") and picture[12:16] == b"IHDR" and len(picture) > 1000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.png"]  # no temp file left
    for scale in (0, float("nan"), 40, -1):
        with pytest.raises(gv.GradvizError, match="scale"):
            w.save_png(keep, scale=scale)
        assert keep.read_bytes() == picture


def test_svg_replaces_the_file_whole(tmp_path: Path) -> None:
    keep = tmp_path / "keep.svg"
    keep.write_text("<svg>old</svg>")
    _widget().save_svg(keep)
    root = ET.fromstring(keep.read_text(encoding="utf-8"))
    assert root.tag.endswith("svg") and len(root) > 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.svg"]
