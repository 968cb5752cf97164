"""The fault suite's own recorder: tables merge by their first column and render as Markdown."""

from __future__ import annotations

from pathlib import Path

from .figures import Figures, markdown


def test_a_rerun_replaces_its_rows_and_keeps_the_others(tmp_path: Path) -> None:
    """Rows with the same key are replaced on a second write; rows of other keys stay."""
    first = Figures()
    first.record("outages", shape="refused", scale_downs=0)
    first.record("outages", shape="hung", scale_downs=0)
    first.write(tmp_path)
    second = Figures()
    second.record("outages", shape="hung", scale_downs=1)
    (path,) = second.write(tmp_path)
    text = markdown("outages", __import__("json").loads(path.read_text()))
    assert "| refused | 0 |" in text
    assert "| hung | 1 |" in text
    assert "| hung | 0 |" not in text
