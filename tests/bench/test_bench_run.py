"""The policy benchmark end to end on tiny configurations, and its table on fabricated results."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import structlog

from autoscaler import baselines, logs
from autoscaler.baselines import kpa
from autoscaler.experiment import report, sweep
from autoscaler.experiment.scenario import Scenario
from autoscaler.experiment.sweep import Config, Outcome, Results, Run, Task
from bench import run as bench_run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def _quiet_logs() -> Iterator[None]:
    """The simulated controller logs warnings only, and the setting does not leak."""
    logs.configure(json=True, level="warning")
    yield
    structlog.reset_defaults()


def tiny_step() -> Scenario:
    """Five minutes at 6 replicas' worth, then 3x for five more."""
    rate = np.where(np.arange(600) < 300, 4.5, 13.5)
    arrivals = np.random.default_rng(3).poisson(rate).astype(np.float64)
    return Scenario("tiny", "a 3x step", arrivals, step_at_s=300.0)


def table_rows(markdown: str) -> list[list[str]]:
    """The cells of every line of the Markdown table."""
    lines = [line for line in markdown.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]


def test_quick_bench_writes_the_table_the_json_and_a_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--quick` on one cut scenario and two policies prints the table and writes every output."""
    out = tmp_path / "out"
    argv = ["--quick", "--scenarios", "step-5x", "--policies", "hpa,oracle"]
    argv += ["--duration-s", "1200", "--jobs", "1", "--out", str(out), "--quiet"]

    assert bench_run.main(argv) == 0

    printed = capsys.readouterr().out
    written = (out / "results.md").read_text()
    assert written in printed
    header, rule, *rows = table_rows(written)
    assert tuple(header) == report.COLUMNS
    assert all(set(cell) <= {"-", ":"} for cell in rule)
    assert [(row[0], row[1], row[2]) for row in rows] == [
        ("step-5x", "cold 120 s", "hpa (rate)"),
        ("", "", "oracle"),
    ]
    assert rows[1][4] == "1.00"  # the oracle over itself

    saved = json.loads((out / "results.json").read_text())
    assert saved["config"]["quick"] is True
    assert saved["scenarios"]["step-5x"]["duration_s"] == 1200
    assert [(o["policy"], o["regime"]) for o in saved["outcomes"]] == [
        ("hpa", "cold"),
        ("oracle", "cold"),
    ]
    for outcome in saved["outcomes"]:
        targets = [r["utilisation"] for r in outcome["runs"]]
        assert targets == sorted(targets)
        assert outcome["default"]["utilisation"] == 0.75
        assert outcome["default"] in outcome["runs"]
    assert (out / "step-5x.png").read_bytes()[:8] == PNG_MAGIC


def test_results_do_not_depend_on_the_number_of_jobs() -> None:
    """A pool of two workers gives exactly what one process gives."""
    config = Config(scenarios=("tiny",), regimes=("warm",), policies=("seed", "oracle"))
    scenario_map = {"tiny": tiny_step()}

    alone = sweep.run(config, scenario_map, jobs=1)
    pooled = sweep.run(config, scenario_map, jobs=2)

    assert report.as_json(alone) == report.as_json(pooled)
    for one, other in zip(alone.runs, pooled.runs, strict=True):
        for series in ("serving", "misses"):
            np.testing.assert_array_equal(getattr(one, series), getattr(other, series))
        assert one.serving is not None


def test_every_run_starts_sized_for_the_opening_at_its_target() -> None:
    """The initial replicas serve the opening's busiest minute at the run's own target."""
    scenario = Scenario("flat", "flat", np.full(600, 9.0))
    lean = sweep.params_for(Task("flat", "cold", "hpa", 0.9), scenario, sweep.BASE)
    roomy = sweep.params_for(Task("flat", "warm", "hpa", 0.45), scenario, sweep.BASE)

    assert (lean.initial_replicas, lean.startup_s, lean.target_utilisation) == (10, 120.0, 0.9)
    assert (roomy.initial_replicas, roomy.startup_s) == (20, 8.0)


def test_kpa_is_swept_through_its_own_target_utilisation() -> None:
    """KPA runs on concurrency with a busy replica's concurrency (mu x service time) as its
    target and the run's utilisation as its `target-utilization`."""
    task = Task("flat", "warm", "kpa", 0.6)
    params = dataclasses.replace(sweep.BASE, target_utilisation=0.6)

    decider = sweep.decider_for(task, params)

    assert isinstance(decider, kpa.Kpa)
    assert decider.metric is baselines.CONCURRENCY
    assert decider.target == pytest.approx(params.replica_capacity_rps * params.service_time_s)
    assert decider.target_value == pytest.approx(0.6 * 2.0)
    assert sweep.decider_for(Task("flat", "warm", "hpa", 0.6), params) is None


def test_time_to_capacity_counts_from_the_step_while_the_raised_load_lasts() -> None:
    """Capacity is late by the seconds until it first covers the raised load's mean rate."""
    arrivals = np.array([1.0] * 5 + [4.0] * 5)
    step = Scenario("s", "s", arrivals, step_at_s=5.0, step_s=3.0)
    capacity = np.array([2.0] * 6 + [3.0, 4.0, 4.0, 4.0])

    assert sweep.time_to_capacity(step, capacity) == 2.0
    assert sweep.time_to_capacity(step, np.array([2.0] * 8 + [4.0] * 2)) is None
    flat = dataclasses.replace(step, step_at_s=None)
    assert sweep.time_to_capacity(flat, capacity) is None


def fabricated_run(policy: str, utilisation: float, **values: object) -> Run:
    fields: dict[str, object] = {
        "scenario": "step",
        "regime": "warm",
        "policy": policy,
        "utilisation": utilisation,
        "requests": 1000.0,
        "slo_miss_pct": 0.5,
        "dropped_pct": 0.0,
        "gpu_hours": 10.0,
        "scale_events": 4,
        "time_to_capacity_s": 30.0,
        "p95_latency_s": 2.5,
        "mean_replicas": 8.0,
    }
    fields.update(values)
    return Run(**fields)  # type: ignore[arg-type]


def test_table_shows_both_views_with_none_never_and_dashes() -> None:
    """The table names each group once and says none, n/a, never and a dash where they apply."""
    step = Scenario("step", "a step", np.ones(10), step_at_s=5.0)
    flat = Scenario("flat", "flat", np.ones(10))
    failing = fabricated_run("seed", 0.75, slo_miss_pct=7.0, time_to_capacity_s=None)
    oracle = fabricated_run("oracle", 0.75, gpu_hours=8.0)
    outcomes = (
        Outcome("step", "warm", "seed", failing, None, (failing,), 1.25, None),
        Outcome("step", "warm", "oracle", oracle, oracle, (oracle,), 1.0, 1.0),
        Outcome("flat", "cold", "seed", failing, failing, (failing,)),
    )
    config = Config(scenarios=("step", "flat"), policies=("seed", "oracle"))
    results = Results(config, {"step": step, "flat": flat}, outcomes)

    header, _, *rows = table_rows(report.table(results))

    assert tuple(header) == report.COLUMNS
    assert [row[:3] for row in rows] == [
        ["step", "warm 8 s", "seed"],
        ["", "", "oracle"],
        ["flat", "cold 120 s", "seed"],
    ]
    assert rows[0][3:] == ["none", "n/a", "0.75", "7.00 %", "10.0", "1.25", "4", "never", "2.5 s"]
    assert rows[1][3:5] == ["8.0 (0.75)", "1.00"]
    assert rows[2][10] == "—"
    assert "- `flat`: flat." in report.markdown(results)
