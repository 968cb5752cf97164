"""The loop smooths each service over its own window, as its record says."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pytest

from autoscaler import clock, loop, ports
from autoscaler.core import model, smoothing

CONFIG = model.PolicyConfig(max_replicas=100, min_replicas=1, target_load_per_replica=1.0)
SHORT, DEFAULT = model.ServiceId("ns/short"), model.ServiceId("ns/default")


class TwoServices:
    """Two services with one load history: one with a 10 s window, one with the loop's."""

    def workloads(self) -> Sequence[ports.Workload]:
        return [
            ports.Workload(SHORT, CONFIG, half_life_s=math.inf, replicas=5, serving=5, window_s=10),
            ports.Workload(DEFAULT, CONFIG, half_life_s=math.inf, replicas=5, serving=5),
        ]

    async def scale(self, service: model.ServiceId, replicas: int) -> None:
        return None

    async def publish(
        self, service: model.ServiceId, decision: model.Decision, state: model.PolicyState
    ) -> None:
        return None


class Ramp:
    """Load that rises by one request per second every tick, for every service."""

    def __init__(self, the_clock: clock.ManualClock) -> None:
        self.clock = the_clock

    async def sample(
        self, workloads: Sequence[ports.Workload], now_s: float
    ) -> npt.NDArray[np.float64]:
        values = np.full((len(workloads), len(model.Signal)), np.nan)
        values[:, model.Signal.LOAD] = now_s
        return values


async def test_two_services_with_different_windows_get_their_own_estimates() -> None:
    """In one tick, a 10 s window and the loop's 60 s window give the plain means of the last
    10 and 60 samples."""
    the_clock = clock.ManualClock(0.0)
    the_loop = loop.Loop(
        cluster=TwoServices(),
        metrics=Ramp(the_clock),
        clock=the_clock,
        smoothing_config=smoothing.SmoothingConfig(window_s=60.0),
    )
    for _ in range(100):
        report = await the_loop.step()
        the_clock.advance(1.0)

    estimates = {
        s: d.contributions[model.Signal.LOAD].estimate for s, d in report.decisions.items()
    }
    assert estimates[SHORT] == pytest.approx(np.mean(np.arange(90.0, 100.0)), rel=1e-12)
    assert estimates[DEFAULT] == pytest.approx(np.mean(np.arange(40.0, 100.0)), rel=1e-12)


class Records:
    """The same record objects on every call, until the test swaps one."""

    def __init__(self, records: list[ports.Workload]) -> None:
        self.records = records

    def workloads(self) -> Sequence[ports.Workload]:
        return list(self.records)

    async def scale(self, service: model.ServiceId, replicas: int) -> None:
        return None

    async def publish(
        self, service: model.ServiceId, decision: model.Decision, state: model.PolicyState
    ) -> None:
        return None


async def test_unchanged_records_keep_their_rows_and_a_changed_window_counts_at_once() -> None:
    """Rows are looked up only when a record changes, and a record's new window is used from
    the tick it appears."""
    the_clock = clock.ManualClock(0.0)
    cluster = Records(
        [
            ports.Workload(SHORT, CONFIG, half_life_s=math.inf, replicas=5, serving=5, window_s=10),
            ports.Workload(DEFAULT, CONFIG, half_life_s=math.inf, replicas=5, serving=5),
        ]
    )
    the_loop = loop.Loop(
        cluster=cluster,
        metrics=Ramp(the_clock),
        clock=the_clock,
        smoothing_config=smoothing.SmoothingConfig(window_s=60.0),
    )
    windows = the_loop._windows
    lookups: list[int] = []
    real = windows.rows_for

    def counting(ids: Sequence[model.ServiceId]) -> npt.NDArray[np.intp]:
        lookups.append(len(ids))
        return real(ids)

    windows.rows_for = counting  # type: ignore[method-assign]
    for _ in range(100):
        await the_loop.step()
        the_clock.advance(1.0)
    assert lookups == [2]

    cluster.records[0] = ports.Workload(
        SHORT, CONFIG, half_life_s=math.inf, replicas=5, serving=5, window_s=30
    )
    report = await the_loop.step()

    assert lookups == [2, 2]
    estimate = report.decisions[SHORT].contributions[model.Signal.LOAD].estimate
    assert estimate == pytest.approx(np.mean(np.arange(71.0, 101.0)), rel=1e-12)
