"""The bad-pod scenario end to end on a shortened trace: the table, the JSON, and what the ramp
changes for a failing new pod."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import structlog

from bench import bad_pod

RISE_S = 1560
"""The `rise` trace just past its end (the load stops growing at 1500 s)."""


@pytest.fixture(autouse=True)
def _reset_logs() -> Iterator[None]:
    """The benchmark configures logging; the setting does not leak into other tests."""
    yield
    structlog.reset_defaults()


def table_rows(markdown: str) -> list[list[str]]:
    lines = [line for line in markdown.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]


def test_bad_pod_bench_prints_the_table_and_writes_the_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One trace: every case with the ramp and without, in the table and in results.json; the
    ramp rolls the failing pod back and fails far fewer requests."""
    out = tmp_path / "out"

    code = bad_pod.main(["--traces", "rise", "--duration-s", str(RISE_S), "--out", str(out)])

    assert code == 0
    header, rule, *rows = table_rows(capsys.readouterr().out)
    assert tuple(header) == bad_pod.COLUMNS
    assert all(set(cell) <= {"-", ":"} for cell in rule)
    assert [row[2] for row in rows] == ["istio", "off"] * 3
    assert [row[1] for row in rows] == ["no bad pod", "", "slow", "", "failing", ""]

    saved = json.loads((out / "results.json").read_text())
    assert saved["router"] == "istio"
    assert saved["traces"]["rise"]["duration_s"] == RISE_S
    assert saved["params"]["replica_capacity_rps"] == bad_pod.MU_RPS
    runs = {(r["case"], r["ramp"]): r for r in saved["runs"]}
    assert len(runs) == 6
    ramped, plain = runs[("failing", "istio")], runs[("failing", "off")]
    assert ramped["rollbacks"] >= 1
    assert ramped["pods_reclaimed"] >= 1
    assert plain["pods_reclaimed"] == plain["rollbacks"] == 0
    assert ramped["failed"] < plain["failed"] / 10
    assert ramped["slo_misses"] < plain["slo_misses"]
    assert runs[("slow", "istio")]["slo_misses"] < runs[("slow", "off")]["slo_misses"]
    assert runs[("no bad pod", "off")]["failed"] == 0
    for run in saved["runs"]:
        assert run["requests"] == pytest.approx(saved["runs"][0]["requests"])
        assert run["time_to_capacity_s"] is not None


def test_traces_rise_then_hold_or_step() -> None:
    """`rise` climbs from 8 to 16 replicas' worth and holds; `step` triples at 10 minutes."""
    config = bad_pod.Config(duration_s=1800)
    target = config.base.target_load_per_replica

    rise = bad_pod.build("rise", config)
    step = bad_pod.build("step", config)

    assert (rise.rise_at_s, rise.final_from_s) == (300, 1500)
    assert np.mean(rise.arrivals[:300]) == pytest.approx(8 * target, rel=0.05)
    assert rise.final_rps == pytest.approx(16 * target, rel=0.05)
    assert step.final_rps == pytest.approx(24 * target, rel=0.05)
    assert rise.time_to_capacity(np.full(1800, 16 * target * 1.1)) == 0.0
    assert rise.time_to_capacity(np.full(1800, 8 * target)) is None


def test_too_short_a_run_or_an_unknown_trace_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run that ends before the load stops growing, or an unknown trace, is refused."""
    assert bad_pod.main(["--traces", "rise", "--duration-s", "900", "--out", str(tmp_path)]) == 2
    assert "raise --duration-s" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bad_pod.main(["--traces", "diurnal"])
    assert "unknown trace 'diurnal'; known: rise, step" in capsys.readouterr().err
    assert not (tmp_path / "results.json").exists()
