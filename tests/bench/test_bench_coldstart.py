"""The cold-start benchmark, briefly: variants of placement and the standby pool at equal SLO."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from autoscaler.experiment import sweep
from bench import coldstart, scenarios


@pytest.fixture(autouse=True)
def _reset_logs() -> Iterator[None]:
    """`main` configures logging; the setting does not leak into other tests."""
    yield
    structlog.reset_defaults()


def step(duration_s: int = 1500) -> scenarios.Scenario:
    return scenarios.build("step-5x", coldstart.CLUSTER).truncated(duration_s)


def test_cache_aware_placement_finds_the_cache_and_reaches_capacity_sooner() -> None:
    """On the 5x step, cache-aware placement starts more pods warm and covers the step sooner."""
    sweep.quiet_logs()
    trace = step()
    spread = coldstart.evaluate(coldstart.Key("step-5x", "none", "default"), 0.75, trace)
    aware = coldstart.evaluate(coldstart.Key("step-5x", "cache-aware", "default"), 0.75, trace)
    assert spread.cache_hit_ratio is not None
    assert aware.cache_hit_ratio is not None
    assert aware.cache_hit_ratio > spread.cache_hit_ratio + 0.3
    assert aware.time_to_capacity_s is not None
    assert spread.time_to_capacity_s is not None
    assert aware.time_to_capacity_s < spread.time_to_capacity_s / 2
    assert spread.standby_gpu_hours == aware.standby_gpu_hours == 0.0


def test_ours_runs_every_variant_and_the_peers_the_cluster_as_it_is() -> None:
    """Each scenario has ours on four variants, and HPA, KEDA, KPA and the oracle on `none`."""
    found = coldstart.keys(coldstart.Config(scenarios=("step-5x",)))
    assert [(k.variant, k.policy) for k in found] == [
        ("none", "default"),
        ("cache-aware", "default"),
        ("standby", "default"),
        ("both", "default"),
        ("none", "hpa"),
        ("none", "keda"),
        ("none", "kpa"),
        ("none", "oracle"),
    ]


def test_a_short_run_prints_the_table_and_writes_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Four minutes of the step: one row per policy and variant, each with its equal-SLO search."""
    argv = ["--quick", "--scenarios", "step-5x", "--duration-s", "240"]
    code = coldstart.main([*argv, "--jobs", "1", "--out", str(tmp_path), "--quiet"])

    assert code == 0
    table = capsys.readouterr().out
    rows = [line.split("|")[1:-1] for line in table.splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + 8
    document = json.loads((tmp_path / "results.json").read_text())
    outcomes = document["outcomes"]
    assert len(outcomes) == 8
    oracle = next(o for o in outcomes if o["policy"] == "oracle")
    assert oracle["vs_oracle"] == pytest.approx(1.0)
    for outcome in outcomes:
        assert outcome["trials"]
        if outcome["equal_slo"] is not None:
            assert outcome["equal_slo"]["slo_miss_pct"] <= 1.0


@pytest.mark.parametrize("argv", [["--duration-s", "0"], ["--scenarios", "nowhere"]])
def test_bad_arguments_are_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """A non-positive duration or an unknown scenario exits with a usage error naming it."""
    with pytest.raises(SystemExit) as exit_:
        coldstart.main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "must be" in err or "unknown scenario" in err
