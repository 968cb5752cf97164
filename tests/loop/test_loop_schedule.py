"""When work runs: `Loop.run` alone keeps the grid, ends each tick with its chores, tells its
`on_tick` hooks, and ticks only while its caller says it may."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from autoscaler import clock, loop, ports
from autoscaler.core import model

CONFIG = model.PolicyConfig(max_replicas=10, target_load_per_replica=1.0)


class RecordingCluster:
    """One workload below its minimum, so the first tick scales and publishes it."""

    def __init__(self, journal: list[str]) -> None:
        self.journal = journal
        self._workloads = [
            ports.Workload(
                id=model.ServiceId("ns/web"),
                policy=CONFIG,
                half_life_s=30.0,
                replicas=0,
                serving=0,
            )
        ]

    def workloads(self) -> Sequence[ports.Workload]:
        self.journal.append("observe")
        return self._workloads

    async def scale(self, service: model.ServiceId, replicas: int) -> None:
        self.journal.append("scale")

    async def publish(
        self, service: model.ServiceId, decision: model.Decision, state: model.PolicyState
    ) -> None:
        self.journal.append("publish")


class SteadyMetrics:
    async def sample(
        self, workloads: Sequence[ports.Workload], now_s: float
    ) -> npt.NDArray[np.float64]:
        return np.full((len(workloads), len(model.Signal)), 1.0)


def make_loop(
    journal: list[str], ticks: list[tuple[float, float]], ticking: clock.ManualClock
) -> loop.Loop:
    """A loop whose chores and `on_tick` write into `journal` and `ticks` (now_s, duration_s);
    its timer moves by 0.25 s per reading."""

    async def chore(name: str) -> None:
        journal.append(name)

    def on_tick(report: loop.TickReport, duration_s: float) -> None:
        ticks.append((report.now_s, duration_s))

    readings = itertools.count(step=0.25)
    return loop.Loop(
        cluster=RecordingCluster(journal),
        metrics=SteadyMetrics(),
        clock=ticking,
        chores=(lambda: chore("tend"), lambda: chore("second")),
        on_tick=(on_tick,),
        timer=lambda: next(readings),
    )


async def test_a_tick_ends_with_its_chores_in_order_after_its_writes() -> None:
    """The chores run once per tick, in order, after the scale and the publish."""
    journal: list[str] = []
    the_loop = make_loop(journal, [], clock.ManualClock())

    await the_loop.step()
    assert journal == ["observe", "scale", "publish", "tend", "second"]

    journal.clear()
    await the_loop.step()
    assert journal[0] == "observe"
    assert journal[-2:] == ["tend", "second"]
    assert journal.count("tend") == 1


async def test_run_tells_on_tick_of_every_tick_on_the_grid_with_its_duration() -> None:
    """Three slots give three ticks one `tick_s` apart, each told with its timer duration."""
    journal: list[str] = []
    ticks: list[tuple[float, float]] = []
    the_loop = make_loop(journal, ticks, clock.ManualClock(100.0))

    await the_loop.run(until_s=100.0 + 3 * the_loop.tick_s)

    tick_s = the_loop.tick_s
    assert ticks == [(100.0, 0.25), (100.0 + tick_s, 0.25), (100.0 + 2 * tick_s, 0.25)]
    assert journal.count("tend") == 3


async def test_run_returns_at_the_first_slot_after_it_stops_being_active() -> None:
    """Once `active` says no, no tick runs, no chore, and `run` returns."""
    journal: list[str] = []
    ticks: list[tuple[float, float]] = []
    the_loop = make_loop(journal, ticks, clock.ManualClock())

    await the_loop.run(active=lambda: len(ticks) < 2)

    assert len(ticks) == 2
    assert journal.count("tend") == 2


async def test_a_slot_that_may_not_step_is_skipped_and_the_grid_kept() -> None:
    """A slot while `may_step` says no runs nothing; the next slot ticks on the same grid."""
    journal: list[str] = []
    ticks: list[tuple[float, float]] = []
    ticking = clock.ManualClock()
    the_loop = make_loop(journal, ticks, ticking)
    tick_s = the_loop.tick_s

    await the_loop.run(until_s=4 * tick_s, may_step=lambda: ticking.now() != tick_s)

    assert [now_s for now_s, _ in ticks] == [0.0, 2 * tick_s, 3 * tick_s]
    assert journal.count("tend") == 3


async def test_a_tick_report_carries_the_workloads_it_observed() -> None:
    """The report names the services the tick observed, for telemetry to export."""
    the_loop = make_loop([], [], clock.ManualClock())

    report = await the_loop.step()

    assert [w.id for w in report.workloads] == [model.ServiceId("ns/web")]
