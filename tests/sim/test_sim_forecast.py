"""The seasonal forecast on the simulator: the load history holds only the past, and the real
loop votes from it without ever seeing the trace ahead."""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Mapping, Sequence

import numpy as np
import pytest

from autoscaler import errors, ports
from autoscaler.core import forecast, model
from autoscaler.experiment import run
from autoscaler.sim import world
from autoscaler.sim.params import SimParams

DAY_S = 86_400
PARAMS = SimParams(startup_sigma=0.0, startup_s=60.0, warmup_s=5.0, max_replicas=64)
START_S = 7 * 3600
"""The replays begin at 07:00 of the second day."""


def daily_rate(seconds: np.ndarray) -> np.ndarray:
    """Requests per second of a service busy by day and quiet by night."""
    return 12.0 - 9.0 * np.cos(2 * np.pi * (seconds % DAY_S) / DAY_S)


def poisson(rate: np.ndarray, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).poisson(rate).astype(np.float64)


PAST = poisson(daily_rate(np.arange(DAY_S + START_S, dtype=np.float64)), 1)
"""A day and seven hours of history before the replays begin."""


class Recording:
    """The core policy, remembering the forecast vote of every decision."""

    def __init__(self) -> None:
        self.inner = ports.CorePolicy()
        self.votes: list[model.ForecastVote | None] = []

    def decide(
        self, workload: ports.Workload, observation: model.Observation, state: model.PolicyState
    ) -> tuple[model.Decision, model.PolicyState]:
        self.votes.append(observation.forecast)
        return self.inner.decide(workload, observation, state)


class Counting:
    """A history source that counts its calls, or fails when told."""

    def __init__(self, inner: ports.HistorySource, *, fail: bool = False) -> None:
        self.inner = inner
        self.fail = fail
        self.calls: list[float] = []

    async def load_history(
        self, workloads: Sequence[ports.Workload], now_s: float, *, span_s: float, step_s: float
    ) -> Mapping[model.ServiceId, forecast.History]:
        self.calls.append(now_s)
        if self.fail:
            raise errors.ObservationError("Prometheus load history query failed: refused")
        return await self.inner.load_history(workloads, now_s, span_s=span_s, step_s=step_s)


async def replay(
    arrivals: np.ndarray, *, past: np.ndarray | None, until_s: int
) -> tuple[world.World, Recording]:
    sim = world.World(PARAMS)
    sim.add_service("ns/chat", arrivals, PARAMS, past=past)
    policy = Recording()
    await run.drive(sim, until_s=until_s, policy=policy)
    return sim, policy


async def test_the_history_holds_the_past_then_what_was_served() -> None:
    """Before the start the history is the trace's past; after it, the served rate; nothing at
    or after the time asked."""
    past = np.full(3600, 6.0)
    sim = world.World(PARAMS)
    sid = sim.add_service("ns/chat", np.full(1200, 6.0), PARAMS, past=past)
    sim.advance(630.0)
    found = await sim.metrics.load_history(
        sim.cluster.workloads(), float(sim.now_s), span_s=1800.0, step_s=60.0
    )
    history = found[sid]
    assert history.step_s == 60.0
    assert history.end_s <= sim.now_s
    assert history.end_s == 600.0
    assert history.start_s == -1200.0
    values = history.load_per_s
    assert np.allclose(values[:20], 6.0)  # the past
    assert np.allclose(values[20:], 6.0, rtol=0.05)  # served by replicas sized for it
    assert len(values) == 30


async def test_a_metrics_outage_fails_the_history_query() -> None:
    """While the simulated Prometheus is down, the history query fails as the instant one
    does."""
    sim = world.World(PARAMS)
    sim.add_service("ns/chat", np.full(600, 6.0), PARAMS)
    sim.metrics.switch_off(100.0, 200.0)
    with pytest.raises(errors.ObservationError):
        await sim.metrics.load_history(sim.cluster.workloads(), 150.0, span_s=600.0, step_s=60.0)


async def test_the_forecast_cannot_see_the_trace_ahead() -> None:
    """Two replays equal until 07:30 and different after it get the same votes until then,
    although the forecast votes: the second day's surge is not predicted."""
    seconds = np.arange(DAY_S + START_S, DAY_S + START_S + 3600, dtype=np.float64)
    calm = poisson(daily_rate(seconds), 2)
    surge = calm.copy()
    surge[1800:] *= 3.0
    _, plain = await replay(calm, past=PAST, until_s=1800)
    _, surged = await replay(surge, past=PAST, until_s=1800)
    assert plain.votes == surged.votes
    on = [v for v in plain.votes if v is not None and v.on]
    assert on, plain.votes[-1]
    assert max(v.load_per_s for v in on) < 1.5 * float(np.max(daily_rate(seconds[:1800])))


async def test_without_a_past_the_forecast_is_off_and_says_why() -> None:
    """A replay with no history before it gets an off vote naming the history it lacks."""
    _, policy = await replay(np.full(900, 6.0), past=None, until_s=900)
    assert policy.votes[0] == model.ForecastVote.off("no load history")
    last = policy.votes[-1]
    assert last is not None
    assert not last.on
    assert math.isnan(last.load_per_s)
    assert "of load history; a day forecast needs" in last.why


async def test_the_history_is_fetched_every_refresh_not_every_tick() -> None:
    """Over 20 minutes of ticks the history is asked for once per refresh period."""
    sim = world.World(PARAMS)
    sim.add_service("ns/chat", np.full(1200, 6.0), PARAMS, past=PAST)
    source = Counting(sim.metrics)
    controller = run.loop.Loop(
        cluster=sim.cluster, metrics=sim.metrics, clock=sim.clock, history=source
    )
    await controller.run(until_s=1200.0)
    refresh_s = model.ForecastConfig().refresh_s
    assert len(source.calls) == math.ceil(1200.0 / refresh_s)
    assert np.allclose(np.diff(source.calls), refresh_s)


async def test_a_failing_history_turns_the_vote_off_with_the_error() -> None:
    """When the history cannot be read, the vote is off and says so; decisions go on."""
    sim = world.World(PARAMS)
    sim.add_service("ns/chat", np.full(300, 6.0), PARAMS, past=PAST)
    source = Counting(sim.metrics, fail=True)
    policy = Recording()
    controller = run.loop.Loop(
        cluster=sim.cluster, metrics=sim.metrics, clock=sim.clock, history=source, policy=policy
    )
    await controller.run(until_s=300.0)
    last = policy.votes[-1]
    assert last is not None
    assert not last.on
    assert last.why.startswith("load history unavailable: Prometheus load history query failed")
    assert len(policy.votes) == 300


class Hanging:
    """A history source that never answers until released."""

    def __init__(self) -> None:
        self.released = asyncio.Event()
        self.calls = 0

    async def load_history(
        self, workloads: Sequence[ports.Workload], now_s: float, *, span_s: float, step_s: float
    ) -> Mapping[model.ServiceId, forecast.History]:
        self.calls += 1
        await self.released.wait()
        return {}


async def test_a_history_that_does_not_answer_does_not_hold_the_ticks() -> None:
    """While the history fetch hangs the ticks go on, one fetch at a time, the vote off."""
    sim = world.World(PARAMS)
    sim.add_service("ns/chat", np.full(900, 6.0), PARAMS)
    source = Hanging()
    policy = Recording()
    controller = run.loop.Loop(
        cluster=sim.cluster, metrics=sim.metrics, clock=sim.clock, history=source, policy=policy
    )
    for _ in range(3):
        await controller.step()
    source.released.set()
    await controller.step()
    assert source.calls == 1
    assert len(policy.votes) == 4
    assert all(v == model.ForecastVote.off("no load history") for v in policy.votes)


async def test_a_refresh_backtests_in_slices_and_keeps_the_last_backtests_until_done(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A refresh returns to the event loop between slices of backtests, and the votes read the
    last refresh's backtests until every one of the new refresh is made."""
    sim = world.World(PARAMS)
    services = 3 * run.loop.BACKTESTS_PER_SLICE
    for i in range(services):
        sim.add_service(f"ns/chat-{i}", np.full(60, 6.0), PARAMS, past=PAST)
    controller = run.loop.Loop(
        cluster=sim.cluster, metrics=sim.metrics, clock=sim.clock, history=sim.metrics
    )
    workloads = sim.cluster.workloads()
    await controller._refresh_history(workloads, sim.clock.now())
    assert len(controller._seasonal) == services
    before = dict(controller._seasonal)

    turns = 0
    seen: list[tuple[int, int]] = []

    async def other_work() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    backtests = forecast.backtests

    def watched(jobs: Sequence[forecast.Job], *, now_s: float) -> list[forecast.Backtest]:
        seen.append((turns, len(jobs)))
        assert controller._seasonal == before
        return backtests(jobs, now_s=now_s)

    monkeypatch.setattr(forecast, "backtests", watched)
    ticking = asyncio.ensure_future(other_work())
    try:
        await controller._refresh_history(workloads, sim.clock.now())
    finally:
        ticking.cancel()
    assert sum(n for _, n in seen) == services
    assert len({t for t, _ in seen}) >= 3  # other work ran between the slices
    assert controller._seasonal.keys() == before.keys()
    assert all(controller._seasonal[s] is not before[s] for s in before)


async def test_the_votes_due_at_a_tick_are_made_together_as_one_by_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The votes whose step moved are made in one `forecast.votes` call, each the vote
    `forecast.vote` makes alone; a tick within the same step makes none again."""
    sim = world.World(PARAMS)
    services = 6
    for i in range(services):
        past = poisson(daily_rate(np.arange(DAY_S + START_S, dtype=np.float64)), 10 + i)
        sim.add_service(f"ns/chat-{i}", np.full(600, 6.0), PARAMS, past=past)
    controller = run.loop.Loop(
        cluster=sim.cluster, metrics=sim.metrics, clock=sim.clock, history=sim.metrics
    )
    workloads = sim.cluster.workloads()
    now = sim.clock.now()
    await controller._refresh_history(workloads, now)
    controller._history_due_s = now + DAY_S  # no refresh during the test

    calls: list[int] = []
    made_together = forecast.votes

    def watched(jobs: Sequence[forecast.VoteJob], *, now_s: float) -> list[model.ForecastVote]:
        calls.append(len(jobs))
        return made_together(jobs, now_s=now_s)

    monkeypatch.setattr(forecast, "votes", watched)
    for at_s, due in ((now, services), (now + 1.0, 0), (now + 60.0, services)):
        voted = await controller._forecasts(workloads, at_s)
        assert calls.pop() == due
        on = 0
        for workload in workloads:
            config = workload.policy.forecast
            assert config is not None
            seasonal = controller._seasonal[workload.id]
            ahead = forecast.horizon_s(config, workload.startup_s)
            alone = forecast.vote(
                config,
                dataclasses.replace(seasonal.history),
                seasonal.scored,
                now_s=at_s,
                horizon_s=ahead,
            )
            assert voted[workload.id] == alone
            on += alone.on
        assert on >= services - 1  # made together, not alone
