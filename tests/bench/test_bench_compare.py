"""Two runs' equal-SLO views side by side, matched by policy family."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import compare


def outcome(policy: str, gpu_hours: float | None, ratio: float | None) -> dict[str, Any]:
    best = None if gpu_hours is None else {"gpu_hours": gpu_hours, "utilisation": 0.8}
    return {
        "scenario": "s",
        "regime": "warm",
        "policy": policy,
        "equal_slo": best,
        "equal_slo_vs_oracle": ratio,
    }


def results(*outcomes: dict[str, Any]) -> dict[str, Any]:
    return {"config": {"scenarios": ["s"], "regimes": {"warm": 8.0}}, "outcomes": list(outcomes)}


def test_variants_line_up_with_the_peer_they_replace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`hpa-conc` after sits beside `hpa` before; a missing policy reads a dash, none reads none."""
    before = results(outcome("hpa", None, None), outcome("oracle", 10.0, 1.0))
    after = results(
        outcome("hpa-conc", 30.0, 3.0), outcome("kpa", 12.0, 1.2), outcome("oracle", 10.0, 1.0)
    )
    (tmp_path / "b.json").write_text(json.dumps(before))
    (tmp_path / "a.json").write_text(json.dumps(after))

    assert compare.main([str(tmp_path / "b.json"), str(tmp_path / "a.json")]) == 0

    lines = capsys.readouterr().out.splitlines()
    rows = {
        cells[2]: cells[3:]
        for cells in ([c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:])
    }
    assert rows["hpa"] == ["none", "n/a", "30.0 (0.80)", "3.00", "concurrency"]
    assert rows["kpa"] == ["—", "—", "12.0 (0.80)", "1.20", "concurrency"]
    assert rows["seed"] == ["—", "—", "—", "—", ""]
    assert rows["oracle"][:4] == ["10.0 (0.80)", "1.00", "10.0 (0.80)", "1.00"]


def cell(scenario: str, regime: str, policy: str, gpu_hours: float | None) -> dict[str, Any]:
    best = None if gpu_hours is None else {"gpu_hours": gpu_hours, "utilisation": 0.9}
    return {
        "scenario": scenario,
        "regime": regime,
        "policy": policy,
        "equal_slo": best,
        "equal_slo_vs_oracle": None,
    }


def two_scenarios(*outcomes: dict[str, Any]) -> dict[str, Any]:
    config = {"scenarios": ["a", "b"], "regimes": {"warm": 8.0, "cold": 120.0}}
    return {"config": config, "outcomes": list(outcomes)}


def test_keep_judges_the_total_the_lost_settings_and_each_fold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Totals add only cells with a setting in both runs; a lost setting is named; each fold
    leaves one scenario out, and the other policies' cells do not count."""
    before = two_scenarios(
        cell("a", "warm", "default", 10.0),
        cell("a", "cold", "default", 20.0),
        cell("b", "warm", "default", 30.0),
        cell("b", "cold", "default", 40.0),
        cell("a", "warm", "hpa", 1.0),
    )
    after = two_scenarios(
        cell("a", "warm", "default", 9.0),
        cell("a", "cold", "default", None),
        cell("b", "warm", "default", 33.0),
        cell("b", "cold", "default", 40.0),
        cell("a", "warm", "hpa", 99.0),
    )
    (tmp_path / "b.json").write_text(json.dumps(before))
    (tmp_path / "a.json").write_text(json.dumps(after))

    assert (
        compare.main(["--keep", "default", str(tmp_path / "b.json"), str(tmp_path / "a.json")]) == 0
    )

    out = capsys.readouterr().out.splitlines()
    assert out[1].split() == ["a", "warm", "10.0", "9.0", "-1.0"]
    assert out[2].split() == ["a", "cold", "20.0", "none"]
    assert "total over 3 cells with a setting in both: 80.0 -> 82.0" in out
    assert "lost a setting: a cold" in out
    folds = [line.split() for line in out if line.startswith("  without")]
    assert folds == [
        ["without", "a", "70.0", "->", "73.0", "dearer"],
        ["without", "b", "10.0", "->", "9.0"],
    ]
    assert out[-2] == "folds dearer: 1 of 2"
    assert (
        out[-1] == "keep rule: not kept (the total is not cheaper; 1 of 2 folds dearer; "
        "a cell lost its setting)"
    )


def with_default(outcome: dict[str, Any], misses_pct: float) -> dict[str, Any]:
    return {**outcome, "default": {"utilisation": 0.75, "slo_miss_pct": misses_pct}}


@pytest.mark.parametrize(
    ("misses_after", "verdict"),
    [
        (2.13, "keep rule: kept"),
        (
            2.14,
            "keep rule: not kept (misses at the default target up more than 1 point)",
        ),
    ],
)
def test_keep_refuses_a_change_that_raises_misses_at_the_default_target(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], misses_after: float, verdict: str
) -> None:
    """A cheaper total on every fold is still refused when one cell's misses at the shipped
    target rise by more than a point; a rise of exactly a point is kept."""
    before = two_scenarios(
        with_default(cell("a", "warm", "default", 10.0), 0.0),
        with_default(cell("a", "cold", "default", 20.0), 1.13),
        with_default(cell("b", "warm", "default", 30.0), 0.5),
        with_default(cell("b", "cold", "default", 40.0), 0.0),
    )
    after = two_scenarios(
        with_default(cell("a", "warm", "default", 9.0), 0.0),
        with_default(cell("a", "cold", "default", 19.0), misses_after),
        with_default(cell("b", "warm", "default", 29.0), 0.0),
        with_default(cell("b", "cold", "default", 39.0), 0.0),
    )
    (tmp_path / "b.json").write_text(json.dumps(before))
    (tmp_path / "a.json").write_text(json.dumps(after))

    assert (
        compare.main(["--keep", "default", str(tmp_path / "b.json"), str(tmp_path / "a.json")]) == 0
    )

    out = capsys.readouterr().out.splitlines()
    assert out[-1] == verdict
    raised = [line for line in out if line.startswith("misses at the default target up:")]
    assert raised == (
        [] if misses_after < 2.14 else ["misses at the default target up: a cold 1.13 % -> 2.14 %"]
    )
