"""The simulator's policy registry offers the baselines, built on the simulation's own targets."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import structlog

from autoscaler import cli
from autoscaler.baselines import hpa, keda, kpa, oracle
from autoscaler.experiment import run
from autoscaler.sim import policies
from autoscaler.sim.params import SimParams

PARAMS = SimParams(min_replicas=3, max_replicas=40, startup_s=100.0, warmup_s=5.0)
BASELINES = ("hpa", "hpa-conc", "keda", "keda-conc", "kpa", "oracle")


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No AUTOSCALER_ variable from the caller's shell, and no logging set up by a test leaks."""
    for name in list(os.environ):
        if name.startswith("AUTOSCALER_"):
            monkeypatch.delenv(name)
    yield
    structlog.reset_defaults()


def test_every_baseline_is_registered_after_ours() -> None:
    """The registry offers ours first, then HPA and KEDA on two signals, KPA and the oracle."""
    assert policies.names() == ("seed", "default", *BASELINES)
    assert tuple(run.POLICIES) == policies.names()


@pytest.mark.parametrize(("name", "kind"), [("hpa", hpa.Hpa), ("keda", keda.Keda)])
def test_rate_baselines_aim_at_the_simulation_load_target(name: str, kind: type) -> None:
    """HPA and KEDA on the rate get the per-replica load target of the run."""
    decider = policies.lookup(name).decider(PARAMS, np.ones(10))
    assert isinstance(decider, kind)
    assert decider.target == pytest.approx(PARAMS.target_load_per_replica)


@pytest.mark.parametrize(
    ("name", "kind"), [("hpa-conc", hpa.Hpa), ("keda-conc", keda.Keda), ("kpa", kpa.Kpa)]
)
def test_concurrency_baselines_aim_at_the_concurrency_of_the_load_target(
    name: str, kind: type
) -> None:
    """On concurrency the target is the load target times the service time: 0.75 x 1 x 2 s."""
    decider = policies.lookup(name).decider(PARAMS, np.ones(10))
    assert isinstance(decider, kind)
    assert decider.target == pytest.approx(1.5)


def test_keda_queries_prometheus_at_every_sync() -> None:
    """KEDA runs with upstream's default of no cached metrics."""
    decider = policies.lookup("keda").decider(PARAMS, np.ones(10))
    assert isinstance(decider, keda.Keda)
    assert not decider.use_cached_metrics


def test_kpa_applies_its_own_utilisation_on_top() -> None:
    """KPA keeps Knative's default 0.7 target utilisation of the target it is given."""
    decider = policies.lookup("kpa").decider(PARAMS, np.ones(10))
    assert isinstance(decider, kpa.Kpa)
    assert decider.target_value == pytest.approx(0.7 * 1.5)


def test_baselines_share_our_bounds() -> None:
    """Every baseline's service config carries the simulation's min and max replicas."""
    for name in BASELINES:
        config = policies.lookup(name).config(PARAMS)
        assert (config.min_replicas, config.max_replicas) == (3, 40)


def test_oracle_knows_the_trace_the_delay_and_its_spread() -> None:
    """The oracle reads the smoothed trace, leads by start-up plus warm-up and holds for jitter."""
    arrivals = np.zeros(200)
    arrivals[100] = 30.0

    decider = policies.lookup("oracle").decider(PARAMS, arrivals)

    assert isinstance(decider, oracle.Oracle)
    assert decider.target_utilisation == pytest.approx(PARAMS.target_utilisation)
    assert decider.lead_s == pytest.approx(105.0)
    assert decider.hold_s == pytest.approx(100.0 * (math.exp(0.4) - 1.0))
    assert decider.peak_at(0.0) == pytest.approx(1.0)  # 30 requests over a 30 s window


def test_oracle_without_start_up_spread_holds_nothing() -> None:
    """With a fixed start-up delay the oracle looks exactly start-up plus warm-up ahead."""
    params = dataclasses.replace(PARAMS, startup_sigma=0.0)
    decider = policies.lookup("oracle").decider(params, np.ones(10))
    assert isinstance(decider, oracle.Oracle)
    assert decider.hold_s == 0.0


def test_centred_mean_averages_each_neighbourhood() -> None:
    """Each second becomes the mean of its window, shorter at the ends of the trace."""
    values = np.array([0.0, 3.0, 6.0, 9.0, 12.0])
    assert policies.centred_mean(values, 3).tolist() == [1.5, 3.0, 6.0, 9.0, 10.5]
    assert policies.centred_mean(values, 1).tolist() == values.tolist()
    assert policies.centred_mean(values, 30).tolist() == [6.0] * 5


@pytest.mark.parametrize("name", BASELINES)
def test_simulate_runs_each_baseline(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`autoscaler simulate --policy NAME` replays a short step trace with each baseline."""
    counts = np.concatenate([np.full(200, 4.0), np.full(200, 12.0), np.full(200, 4.0)])
    rows = "".join(f"{t},{c:g}\n" for t, c in enumerate(counts))
    trace = tmp_path / "step.csv"
    trace.write_text("t_seconds,requests\n" + rows)
    out = tmp_path / "out"

    code = cli.main(
        [
            "simulate",
            "--trace",
            str(trace),
            "--policy",
            name,
            "--startup-s",
            "20",
            "--out",
            str(out),
        ]
    )

    assert code == 0, capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["params"]["policy"] == name
    assert summary["simulated_s"] == 600
    assert summary["requests"] == pytest.approx(counts.sum())
    assert summary["max_replicas_seen"] > math.ceil(4.0 / PARAMS.target_load_per_replica)
    assert (out / "plot.png").stat().st_size > 0
