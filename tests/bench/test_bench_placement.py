"""The placement benchmark, briefly: the ladder and whole cards alone on the fragmented cluster."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from bench import placement


@pytest.fixture(autouse=True)
def _reset_logs() -> Iterator[None]:
    """`main` configures logging; the setting does not leak into other tests."""
    yield
    structlog.reset_defaults()


def test_a_short_run_prints_both_placements_and_writes_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ten minutes of the Azure trace: whole cards alone leave replicas pending, the ladder
    only what the whole cluster cannot hold (48 copies; the first burst asks for 50), and it
    pays for that in core-hours on MIG slices and time-sliced shares."""
    code = placement.main(["--duration-s", "600", "--out", str(tmp_path), "--quiet"])

    assert code == 0
    table = capsys.readouterr().out
    rows = [line.split("|")[1:-1] for line in table.splitlines() if line.startswith("| ")]
    assert [cells[0].strip() for cells in rows[1:]] == ["ladder", "whole"]

    document = json.loads((tmp_path / "results.json").read_text())
    assert document["scenario"]["name"] == "azure-conv"
    assert document["scenario"]["duration_s"] == 600
    ladder, whole = document["runs"]
    assert (ladder["placement"], whole["placement"]) == ("ladder", "whole")
    assert whole["pending_replica_s"] > 0
    assert ladder["pending_replica_s"] <= 2 * 300  # two replicas past 48 until the way down
    assert whole["pending_replica_s"] > 5 * ladder["pending_replica_s"]
    assert ladder["slo_misses"] <= whole["slo_misses"]
    assert set(whole["tier_pod_hours"]) == {"whole"}
    assert set(ladder["tier_pod_hours"]) == {"whole", "mig-3g.40gb", "shared"}
    assert ladder["tier_pod_hours"]["mig-3g.40gb"] > 0
    assert ladder["tier_pod_hours"]["shared"] > 0
    assert ladder["core_hours"] > whole["core_hours"]
    assert document["params"]["model_memory_mib"] == 6 * 1024


@pytest.mark.parametrize("argv", [["--duration-s", "0"], ["--model-memory-gib", "-1"]])
def test_bad_arguments_are_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """A non-positive duration or model memory exits with a usage error naming the rule."""
    with pytest.raises(SystemExit) as exit_:
        placement.main(argv)
    assert exit_.value.code == 2
    assert "must be" in capsys.readouterr().err
