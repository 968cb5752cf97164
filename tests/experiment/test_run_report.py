"""The report: the summary table, JSON that stays valid, and all-or-nothing writes."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from autoscaler import errors
from autoscaler.experiment import run_report as report
from autoscaler.sim.params import TIMESERIES_COLUMNS, SimParams, SimResult


def result(*, seconds: int = 120, policy: str = "seed", **summary: object) -> SimResult:
    """A hand-made result: flat load on 3 replicas, latency unknown in the first 10 s."""
    t = np.arange(seconds, dtype=np.float64)
    series = {name: np.full(seconds, 3.0) for name in TIMESERIES_COLUMNS}
    series["t_s"] = t
    series["arrivals"] = 2.0 + np.sin(t / 10)
    series["p95_latency_s"] = np.where(t < 10, math.nan, 2.25)
    series["gpu_cost"] = np.full(seconds, 3 / 3600)
    base: dict[str, object] = {
        "requests": 240.0,
        "slo_miss_pct": 0.5,
        "dropped": 0.0,
        "p95_latency_s": 2.25,
        "gpu_hours": 0.1,
        "scale_events": 2,
        "mean_replicas": 3.0,
        "max_replicas_seen": 4,
    }
    base.update(summary)
    events = [(30.0, 3, 4), (90.0, 4, 3)]
    return SimResult(SimParams(policy=policy), series, events, base)


def test_table_has_one_column_per_result() -> None:
    """Two results make a Markdown table with a column per policy, numbers right-aligned."""
    table = report.summary_table(result(policy="default"), result(policy="seed", requests=1e6))
    lines = table.splitlines()
    assert lines[0].split("|")[1:-1] == [" policy        ", " default ", "      seed "]
    assert set(lines[1]) <= {"|", "-", ":"}
    assert "| requests      |     240 | 1,000,000 |" in lines
    assert len({len(line) for line in lines}) == 1


def test_table_shows_missing_numbers_as_na() -> None:
    """A summary without a p95 (nothing was served) shows n/a instead of failing."""
    table = report.summary_table(result(p95_latency_s=None))
    assert "| p95 latency   |    n/a |" in table.splitlines()


def test_csv_is_compact_and_keeps_unknown_latency(tmp_path: Path) -> None:
    """Whole numbers print without decimals and an unknown latency prints as nan."""
    paths = report.write(result(), tmp_path / "out", trace="flat")
    lines = paths.timeseries.read_text().splitlines()
    assert lines[0] == ",".join(TIMESERIES_COLUMNS)
    assert len(lines) == 121
    assert lines[1] == "0,2,3,3,3,3,3,3,nan,0.000833333,3"
    assert lines[-1].split(",")[8] == "2.25"


def test_summary_json_is_strict_and_sorted(tmp_path: Path) -> None:
    """NaN and numpy numbers become valid JSON, keys are sorted, and params and trace appear."""
    res = result(p95_latency_s=math.nan, max_replicas_seen=np.int64(4))
    paths = report.write(res, tmp_path / "out", trace="flat")
    text = paths.summary.read_text()
    summary = json.loads(text)
    assert summary["p95_latency_s"] is None
    assert summary["max_replicas_seen"] == 4
    assert summary["trace"] == "flat"
    assert summary["params"]["policy"] == "seed"
    assert list(summary) == sorted(summary)
    assert "NaN" not in text


def test_failed_write_leaves_nothing_behind(tmp_path: Path) -> None:
    """When one output cannot be made, no output directory and no staging directory remain."""
    bad = result(unserialisable=object())
    with pytest.raises(TypeError):
        report.write(bad, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_failed_rewrite_keeps_the_previous_outputs(tmp_path: Path) -> None:
    """A failing run into an existing directory leaves the earlier outputs untouched."""
    paths = report.write(result(), tmp_path / "out")
    before = {p.name: p.read_bytes() for p in paths.directory.iterdir()}
    with pytest.raises(TypeError):
        report.write(result(unserialisable=object()), tmp_path / "out")
    assert {p.name: p.read_bytes() for p in paths.directory.iterdir()} == before


def test_output_path_that_is_a_file_is_refused(tmp_path: Path) -> None:
    """Writing over a plain file is a ConfigError, and the file is kept."""
    taken = tmp_path / "taken"
    taken.write_text("keep")
    with pytest.raises(errors.ConfigError, match="not a directory"):
        report.write(result(), taken)
    assert taken.read_text() == "keep"


def test_long_run_plots_within_the_size_limit(tmp_path: Path) -> None:
    """A day-long result is plotted, binned, at the fixed 1400 x 900 pixels."""
    paths = report.write(result(seconds=86_400), tmp_path / "day", trace="day")
    data = paths.plot.read_bytes()
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1400, 900)
