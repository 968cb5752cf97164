"""The loop's writes and logs: bounded concurrency for status writes, one log line per outage."""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from autoscaler import clock, errors, loop, ports
from autoscaler.core import forecast, model

CONFIG = model.PolicyConfig(max_replicas=10, target_load_per_replica=1.0)


class SlowPublishCluster:
    """Workloads below their minimum, so every one changes at the first tick; scale and publish
    wait."""

    def __init__(self, n: int) -> None:
        self._workloads = [
            ports.Workload(
                id=model.ServiceId(f"ns/s{i}"),
                policy=CONFIG,
                half_life_s=30.0,
                replicas=1,
                serving=1,
            )
            for i in range(n)
        ]
        self.in_flight = 0
        self.most_in_flight = 0
        self.published: list[model.ServiceId] = []
        self.scaling = 0
        self.most_scaling = 0
        self.scaled: list[model.ServiceId] = []

    def workloads(self) -> Sequence[ports.Workload]:
        return self._workloads

    async def scale(self, service: model.ServiceId, replicas: int) -> None:
        self.scaling += 1
        self.most_scaling = max(self.most_scaling, self.scaling)
        for _ in range(3):  # as a network round trip would
            await asyncio.sleep(0)
        self.scaling -= 1
        self.scaled.append(service)

    async def publish(
        self, service: model.ServiceId, decision: model.Decision, state: model.PolicyState
    ) -> None:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        for _ in range(3):  # let the other publishers start, as a network round trip would
            await asyncio.sleep(0)
        self.in_flight -= 1
        self.published.append(service)


class SwitchableMetrics:
    def __init__(self) -> None:
        self.up = True

    async def sample(
        self, workloads: Sequence[ports.Workload], now_s: float
    ) -> npt.NDArray[np.float64]:
        if not self.up:
            raise errors.ObservationError("connection refused")
        return np.full((len(workloads), len(model.Signal)), 1.0)


async def test_decisions_are_published_a_bounded_number_at_a_time() -> None:
    """Forty changed decisions are all published, never more than the limit at once."""
    cluster = SlowPublishCluster(40)
    the_loop = loop.Loop(cluster=cluster, metrics=SwitchableMetrics(), clock=clock.ManualClock())

    await the_loop.step()

    assert sorted(cluster.published) == sorted(w.id for w in cluster.workloads())
    assert cluster.most_in_flight == loop.PUBLISH_CONCURRENCY


async def test_scale_writes_are_made_a_bounded_number_at_a_time() -> None:
    """A hundred services scaled on one tick are all written, never more than the limit at
    once, so the writes leave room in the client's pool for the Lease's renewals."""
    cluster = SlowPublishCluster(100)
    the_loop = loop.Loop(cluster=cluster, metrics=SwitchableMetrics(), clock=clock.ManualClock())

    await the_loop.step()

    assert sorted(cluster.scaled) == sorted(w.id for w in cluster.workloads())
    assert cluster.most_scaling == loop.SCALE_CONCURRENCY


async def test_a_metrics_outage_is_logged_once_and_its_end_once() -> None:
    """Ten ticks without metrics log one warning, and their return one info line."""
    metrics = SwitchableMetrics()
    ticking = clock.ManualClock()
    the_loop = loop.Loop(cluster=SlowPublishCluster(2), metrics=metrics, clock=ticking)

    with capture_logs() as logs:
        await the_loop.step()
        metrics.up = False
        for _ in range(10):
            ticking.advance(1.0)
            report = await the_loop.step()
            assert report.metrics_error == "connection refused"
        metrics.up = True
        ticking.advance(1.0)
        await the_loop.step()

    events = [entry["event"] for entry in logs]
    assert events.count("metrics.unavailable") == 1
    assert events.count("metrics.recovered") == 1


class CountingCluster:
    """Services within their bounds; every publish is kept with its outcome."""

    def __init__(self, n: int) -> None:
        self._workloads = [
            ports.Workload(
                model.ServiceId(f"ns/s{i}"), CONFIG, half_life_s=30.0, replicas=2, serving=2
            )
            for i in range(n)
        ]
        self.published: list[tuple[model.ServiceId, model.Reason]] = []

    def workloads(self) -> Sequence[ports.Workload]:
        return self._workloads

    async def scale(self, service: model.ServiceId, replicas: int) -> None:
        self.scaling += 1
        self.most_scaling = max(self.most_scaling, self.scaling)
        for _ in range(3):  # as a network round trip would
            await asyncio.sleep(0)
        self.scaling -= 1
        self.scaled.append(service)

    async def publish(
        self, service: model.ServiceId, decision: model.Decision, state: model.PolicyState
    ) -> None:
        self.published.append((service, decision.reason))


async def test_a_short_metrics_outage_writes_nothing_and_a_long_one_writes_each_hold_once() -> None:
    """An outage shorter than the quiet time publishes nothing, before or after; a longer one
    publishes each service's missing-data hold once, and its end each service's return."""
    metrics = SwitchableMetrics()
    ticking = clock.ManualClock()
    cluster = CountingCluster(3)
    the_loop = loop.Loop(cluster=cluster, metrics=metrics, clock=ticking, outage_quiet_s=5.0)
    await the_loop.step()
    steady = list(cluster.published)
    assert len(steady) == 3

    metrics.up = False
    for _ in range(4):
        ticking.advance(1.0)
        report = await the_loop.step()
        assert {d.reason for d in report.decisions.values()} == {model.Reason.MISSING_DATA}
    metrics.up = True
    ticking.advance(1.0)
    await the_loop.step()
    assert cluster.published == steady

    metrics.up = False
    for _ in range(8):
        ticking.advance(1.0)
        await the_loop.step()
    metrics.up = True
    ticking.advance(1.0)
    await the_loop.step()
    later = [(service, reason.value) for service, reason in cluster.published[len(steady) :]]
    held = [(service, model.Reason.MISSING_DATA.value) for service, _ in steady]
    assert sorted(later) == sorted(held + [(service, reason.value) for service, reason in steady])


class RefusingCluster(CountingCluster):
    """A `CountingCluster` whose API refuses the publishes of the services in `refused`."""

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.refused: set[model.ServiceId] = set()

    async def publish(
        self, service: model.ServiceId, decision: model.Decision, state: model.PolicyState
    ) -> None:
        if service in self.refused:
            raise errors.ActuationError(f"{service}: 503 from the API server")
        await super().publish(service, decision, state)


async def test_a_refused_publish_is_made_again_while_its_outcome_stands() -> None:
    """A publish the API refused is made on the next tick although the outcome has not moved,
    and an outcome once published is not published again."""
    ticking = clock.ManualClock()
    cluster = RefusingCluster(3)
    refused = cluster.workloads()[1].id
    cluster.refused = {refused}
    the_loop = loop.Loop(cluster=cluster, metrics=SwitchableMetrics(), clock=ticking)
    await the_loop.step()
    assert [service for service, _ in cluster.published] == [
        w.id for w in cluster.workloads() if w.id != refused
    ]
    for attempt in range(3):
        ticking.advance(1.0)
        if attempt == 1:
            cluster.refused = set()
        await the_loop.step()
    assert [service for service, _ in cluster.published[2:]] == [refused]


class MixedCluster(CountingCluster):
    """A `CountingCluster` whose services in `low` are below their minimum: they scale."""

    def __init__(self, n: int, low: Sequence[int]) -> None:
        super().__init__(n)
        self.low = [self._workloads[i].id for i in low]
        self._workloads = [
            dataclasses.replace(w, replicas=1, serving=1) if w.id in self.low else w
            for w in self._workloads
        ]
        self.scaled: list[model.ServiceId] = []

    async def scale(self, service: model.ServiceId, replicas: int) -> None:
        self.scaled.append(service)


async def test_a_first_tick_publishes_its_unchanged_decisions_a_budget_at_a_time() -> None:
    """Seven services at their count and three scaled, a budget of two: the first tick publishes
    the three new counts and two of the others, each later tick two more in the records' order,
    and none is published twice."""
    ticking = clock.ManualClock()
    cluster = MixedCluster(10, low=(2, 5, 8))
    the_loop = loop.Loop(
        cluster=cluster,
        metrics=SwitchableMetrics(),
        clock=ticking,
        unchanged_publishes_per_tick=2,
    )
    ids = [w.id for w in cluster.workloads()]
    unchanged = [s for s in ids if s not in cluster.low]

    await the_loop.step()
    first = [service for service, _ in cluster.published]
    assert sorted(cluster.scaled) == sorted(cluster.low)
    assert sorted(first) == sorted([*cluster.low, *unchanged[:2]])

    for tick in range(1, 4):
        ticking.advance(1.0)
        await the_loop.step()
        assert [s for s, _ in cluster.published[len(first) :]] == unchanged[2 : 2 + 2 * tick]
    ticking.advance(1.0)
    await the_loop.step()
    assert sorted(s for s, _ in cluster.published) == sorted(ids)


class HistoryAfterPublish:
    """A load history that remembers, at each fetch, how many decisions had been published."""

    def __init__(self, cluster: CountingCluster) -> None:
        self.cluster = cluster
        self.calls: list[tuple[float, int]] = []

    async def load_history(
        self, workloads: Sequence[ports.Workload], now_s: float, *, span_s: float, step_s: float
    ) -> Mapping[model.ServiceId, forecast.History]:
        self.calls.append((now_s, len(self.cluster.published)))
        return {}


async def test_the_histories_first_fetch_starts_once_the_first_tick_has_published() -> None:
    """The first tick votes without a history and publishes; the fetch it asks for starts after
    that, at the tick's time, and is not started again by the next tick."""
    ticking = clock.ManualClock()
    cluster = CountingCluster(3)
    forecasting = dataclasses.replace(CONFIG, forecast=model.ForecastConfig())
    cluster._workloads = [dataclasses.replace(w, policy=forecasting) for w in cluster._workloads]
    history = HistoryAfterPublish(cluster)
    the_loop = loop.Loop(
        cluster=cluster, metrics=SwitchableMetrics(), clock=ticking, history=history
    )

    report = await the_loop.step()
    assert history.calls == [(0.0, 3)]
    off = model.ForecastVote.off("no load history")
    assert [d.forecast for d in report.decisions.values()] == [off] * 3
    ticking.advance(1.0)
    await the_loop.step()
    assert history.calls == [(0.0, 3)]


class FlickeringMetrics:
    """Every signal at 1.0, but missing for the services in `flicker` every other tick: their
    outcome moves between a hold for missing data and a steady one on every tick."""

    def __init__(self, flicker: Sequence[int]) -> None:
        self.flicker = list(flicker)
        self.calls = 0

    async def sample(
        self, workloads: Sequence[ports.Workload], now_s: float
    ) -> npt.NDArray[np.float64]:
        self.calls += 1
        values = np.full((len(workloads), len(model.Signal)), 1.0)
        if self.calls % 2 == 0:
            values[self.flicker] = np.nan
        return values


async def test_services_whose_outcome_moves_every_tick_do_not_keep_the_budget_from_the_rest() -> (
    None
):
    """The first two services' outcomes move on every tick and the budget is two: the budget
    goes round from the first service it left out, so the last service is published too."""
    ticking = clock.ManualClock()
    cluster = CountingCluster(5)
    the_loop = loop.Loop(
        cluster=cluster,
        metrics=FlickeringMetrics(flicker=(0, 1)),
        clock=ticking,
        unchanged_publishes_per_tick=2,
    )
    ids = [w.id for w in cluster.workloads()]
    for _ in range(6):
        await the_loop.step()
        ticking.advance(1.0)
    assert {service for service, _ in cluster.published} == set(ids)
    # and the flickering ones still get their turns
    assert sum(1 for service, _ in cluster.published if service == ids[0]) >= 2


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.floats(0.25, 200.0),  # the time to the next tick
            st.lists(st.tuples(st.integers(0, 5), st.sampled_from([None, 5.0, 90.0, 1e4]))),
        ),
        min_size=1,
        max_size=25,
    ),
    refresh_at=st.integers(0, 30),
)
def test_forecast_votes_kept_from_tick_to_tick_are_those_read_anew(
    steps: list[tuple[float, list[tuple[int, float | None]]]], refresh_at: int
) -> None:
    """The votes a tick takes from the last one, looking again only at the records made again
    and the votes whose step or target step moved, are the votes read one by one from the same
    histories, tick after tick: at steps of a minute and of seven seconds, past a history's
    end, with start-up times that change, and across a refresh of the histories."""
    config = model.ForecastConfig()
    now = 7 * 86_400.0

    def histories() -> dict[model.ServiceId, loop._Seasonal]:
        """A daily load the forecast beats the reactive estimate on, so that votes move with
        their steps; one history with steps of seven seconds, one ending before the ticks."""
        made = {}
        for i, (start, step, size) in enumerate(
            [
                (0.0, 60.0, 8 * 1440),
                (13.0, 7.0, 100_000),
                (-500.5, 60.0, 10_085),
                (0.0, 60.0, 8_000),
            ]
        ):
            load = 50.0 + 40.0 * np.sin(np.arange(size) * step * 2 * np.pi / 86_400.0) + i
            history = forecast.History(start, step, load)
            scored = forecast.backtest(config, history, now_s=now, horizon_s=120.0)
            made[model.ServiceId(f"ns/s{i}")] = loop._Seasonal(history, scored)
        return made

    policy = dataclasses.replace(CONFIG, forecast=config)
    records = [
        ports.Workload(
            id=model.ServiceId(f"ns/s{i}"), policy=policy, half_life_s=30.0, replicas=1, serving=1
        )
        for i in range(6)  # s4 and s5 have no history
    ]
    kept, anew = (
        loop.Loop(
            cluster=CountingCluster(0),
            metrics=SwitchableMetrics(),
            clock=clock.ManualClock(),
            history=HistoryAfterPublish(CountingCluster(0)),
        )
        for _ in range(2)
    )
    for each in (kept, anew):
        each._seasonal = histories()
        each._history_due_s = math.inf  # no fetch: the histories are set here

    async def run() -> None:
        nonlocal now, records
        for tick, (wait, changes) in enumerate(steps):
            now += wait
            for i, startup_s in changes:
                records[i] = dataclasses.replace(records[i], startup_s=startup_s)
            if tick == refresh_at:
                for each in (kept, anew):
                    each._seasonal = histories()
            anew._votes = None
            assert await kept._forecasts(list(records), now) == await anew._forecasts(
                list(records), now
            )

    asyncio.run(run())
