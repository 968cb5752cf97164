"""The loop's batch front: the same decisions, states and writes as the per-service policy, and
a batched service's full decision built only when something reads it."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pytest

from autoscaler import clock, loop, ports, telemetry
from autoscaler.core import batch, model, policy

TICKS = 40


def _configs() -> list[model.PolicyConfig]:
    """Batchable shapes, and some the per-service policy keeps (a pause, an SLO, a KV target)."""
    return [
        policy.seed(max_replicas=8, target_load_per_replica=5.0),
        policy.default(max_replicas=12, target_load_per_replica=5.0, forecast=None),
        policy.default(
            max_replicas=12,
            target_load_per_replica=5.0,
            target_queue_per_replica=2.0,
            forecast=None,
            scale_up_cooldown_s=5.0,
            scale_down_cooldown_s=10.0,
        ),
        policy.seed(max_replicas=6, min_replicas=1, target_queue_per_replica=3.0),
        policy.default(
            max_replicas=12,
            target_load_per_replica=5.0,
            forecast=None,
            slo=model.SloConfig(target_latency_s=0.5, replica_capacity_rps=6.0),
        ),
        policy.default(max_replicas=12, target_load_per_replica=5.0, pause=model.Pause()),
        policy.seed(max_replicas=8, target_load_per_replica=5.0, target_kv_cache_ratio=0.8),
    ]


class Cluster:
    """Services that take every write; a few have a quota below their maximum."""

    def __init__(self, copies: int) -> None:
        configs = _configs()
        self.records = [
            ports.Workload(
                model.ServiceId(f"ns/s{i}"),
                configs[i % len(configs)],
                half_life_s=10.0,
                replicas=2,
                serving=2,
                admissible=None if i % 5 else 7,
            )
            for i in range(copies * len(configs))
        ]
        self.published: list[tuple[model.ServiceId, str, model.PolicyState]] = []
        self.anew = False
        """Hand out new records every tick, as if every service had changed."""

    def workloads(self) -> Sequence[ports.Workload]:
        return [dataclasses.replace(r) for r in self.records] if self.anew else self.records

    async def scale(self, service: model.ServiceId, replicas: int) -> None:
        for i, record in enumerate(self.records):
            if record.id == service:
                self.records[i] = dataclasses.replace(record, replicas=replicas, serving=replicas)

    async def publish(
        self, service: model.ServiceId, decision: model.Decision, state: model.PolicyState
    ) -> None:
        self.published.append((service, repr(decision), state))


class Metrics:
    """Seeded loads with steps, bursts and gaps: the same sequence for every loop."""

    def __init__(self, seed: int) -> None:
        self._random = random.Random(seed)

    async def sample(
        self, workloads: Sequence[ports.Workload], now_s: float
    ) -> npt.NDArray[np.float64]:
        values = np.full((len(workloads), len(model.Signal)), np.nan)
        for i in range(len(workloads)):
            roll = self._random.random()
            level = 4.0 + 30.0 * (int(now_s) // 10 % 3 == 1) + 3.0 * (i % 4)
            if roll < 0.05:
                continue  # missing this tick
            if roll < 0.1:
                level *= 6.0  # a burst
            values[i, model.Signal.LOAD] = level * self._random.uniform(0.7, 1.3)
            values[i, model.Signal.SATURATION] = self._random.choice((0.0, 1.0, 5.0, 20.0))
            values[i, model.Signal.CAPACITY] = self._random.uniform(30.0, 90.0)
            values[i, model.Signal.KV_CACHE] = self._random.uniform(0.2, 0.95)
        return values


class PerService:
    """The core policy behind a port that is not `CorePolicy`: the loop decides one by one."""

    def decide(
        self, workload: ports.Workload, observation: model.Observation, state: model.PolicyState
    ) -> tuple[model.Decision, model.PolicyState]:
        return policy.decide(workload.policy, observation, state)


@pytest.mark.parametrize("mixed", [True, False])
async def test_the_batch_decides_writes_and_publishes_as_the_per_service_policy(
    mixed: bool,
) -> None:
    """Over forty ticks of steps, bursts and gaps, every decision, state, write, publish and
    exported series of the batched loop equals the per-service loop's, with or without services
    it leaves alone."""
    clusters = Cluster(6), Cluster(6)
    if not mixed:
        for cluster in clusters:
            cluster.records = [r for r in cluster.records if batch.batchable(r.policy)]
    clocks = clock.ManualClock(0.0), clock.ManualClock(0.0)
    loops = [
        loop.Loop(cluster=clusters[0], metrics=Metrics(14), clock=clocks[0]),
        loop.Loop(cluster=clusters[1], metrics=Metrics(14), clock=clocks[1], policy=PerService()),
    ]
    kinds: set[model.Reason] = set()
    exported = telemetry.Telemetry(), telemetry.Telemetry()
    for _ in range(TICKS):
        batched, single = [await the_loop.step() for the_loop in loops]
        for report, seen in zip((batched, single), exported, strict=True):
            seen.observe_tick(report, report.workloads, duration_s=0.1, wall_time_s=0.0)
        assert _series(exported[0]) == _series(exported[1])
        assert list(batched.decisions) == list(single.decisions)
        for service, decision in single.decisions.items():
            assert repr(batched.decisions[service]) == repr(decision), service
            assert loops[0].state_of(service) == loops[1].state_of(service), service
            kinds.add(decision.reason)
        assert batched.scaled == single.scaled
        assert batched.kinds == single.kinds
        for ticking in clocks:
            ticking.advance(1.0)
    assert clusters[0].published == clusters[1].published
    assert [r.replicas for r in clusters[0].records] == [r.replicas for r in clusters[1].records]
    assert {model.Reason.ABOVE_TARGET, model.Reason.BELOW_TARGET, model.Reason.BURST} <= kinds


async def test_a_record_whose_settings_change_is_decided_on_its_new_settings() -> None:
    """When a few services' policy, half-life and window change between ticks, the batched
    loop decides them as the per-service loop given every record anew does."""
    clusters = Cluster(4), Cluster(4)
    clusters[1].anew = True
    clocks = clock.ManualClock(0.0), clock.ManualClock(0.0)
    loops = [
        loop.Loop(cluster=clusters[0], metrics=Metrics(7), clock=clocks[0]),
        loop.Loop(cluster=clusters[1], metrics=Metrics(7), clock=clocks[1], policy=PerService()),
    ]
    faster = policy.default(
        max_replicas=9, target_load_per_replica=3.0, forecast=None, scale_up_cooldown_s=2.0
    )
    for tick in range(24):
        if tick in (8, 16):
            for cluster in clusters:
                for i in (1, 8, 15) if tick == 8 else (3, 8):
                    cluster.records[i] = dataclasses.replace(
                        cluster.records[i], policy=faster, half_life_s=4.0 + tick, window_s=60.0
                    )
        batched, single = [await the_loop.step() for the_loop in loops]
        for service, decision in single.decisions.items():
            assert repr(batched.decisions[service]) == repr(decision), service
        for ticking in clocks:
            ticking.advance(1.0)
    assert clusters[0].published == clusters[1].published
    assert loops[0].state_of(clusters[0].records[8].id) is not None


async def test_telemetry_exports_a_tick_read_as_arrays_as_it_does_one_read_by_decision() -> None:
    """Over ticks of steps, bursts and gaps, and the end of a term, the series exported from
    the loop's decisions are those exported from the same decisions as a plain mapping."""
    cluster = Cluster(4)
    cluster.records = [dataclasses.replace(r, core_rate=2.0) for r in cluster.records]
    ticking = clock.ManualClock(0.0)
    the_loop = loop.Loop(cluster=cluster, metrics=Metrics(21), clock=ticking)
    arrays, mapping = telemetry.Telemetry(), telemetry.Telemetry()
    for tick in range(30):
        report = await the_loop.step()
        plain = dataclasses.replace(report, decisions=dict(report.decisions))
        if tick == 20:  # a term ends and another begins
            for seen in (arrays, mapping):
                seen.forget_services()
        arrays.observe_tick(report, report.workloads, duration_s=0.1, wall_time_s=0.0)
        mapping.observe_tick(plain, plain.workloads, duration_s=0.1, wall_time_s=0.0)
        assert _series(arrays) == _series(mapping)
        ticking.advance(1.0)
    assert "autoscaler_decisions_total" in "\n".join(_series(arrays))


async def test_core_hours_accrued_as_arrays_are_those_accrued_service_by_service() -> None:
    """Over ticks of various lengths whose records change their rate (to none and back), their
    project (and back), and whose services come, go and end a term, the core-hours exported
    from the loop's decisions are those accrued one by one from the same decisions as a plain
    mapping, to the last digit, on every scrape."""
    cluster = Cluster(3)
    rng = random.Random(5)
    cluster.records = [
        dataclasses.replace(r, core_rate=0.5 + i % 4, project=None if i % 3 else "p-a")
        for i, r in enumerate(cluster.records)
    ]
    ticking = clock.ManualClock(0.0)
    the_loop = loop.Loop(cluster=cluster, metrics=Metrics(3), clock=ticking)
    arrays, mapping = telemetry.Telemetry(), telemetry.Telemetry()
    gone: list[ports.Workload] = []
    for tick in range(40):
        for _ in range(rng.choice((0, 0, 1, 3))):  # records made again, some with new fields
            i = rng.randrange(len(cluster.records))
            change = rng.choice(
                (
                    {},
                    {"core_rate": 0.0},
                    {"core_rate": rng.choice((0.25, 1.0, 7.5))},
                    {"project": rng.choice((None, "p-a", "p-b"))},
                )
            )
            cluster.records[i] = dataclasses.replace(cluster.records[i], **change)
        if tick in (12, 25):  # a service goes, and another comes back
            gone.append(cluster.records.pop(rng.randrange(len(cluster.records))))
        if tick in (18, 33):
            cluster.records.insert(rng.randrange(len(cluster.records)), gone.pop(0))
        report = await the_loop.step()
        plain = dataclasses.replace(report, decisions=dict(report.decisions))
        if tick == 28:  # a term ends and another begins
            for seen in (arrays, mapping):
                seen.forget_services()
        tick_s = rng.choice((1.0, 0.7, 15.0, 0.0))
        arrays.observe_tick(
            report, report.workloads, duration_s=0.1, wall_time_s=0.0, tick_s=tick_s
        )
        mapping.observe_tick(plain, plain.workloads, duration_s=0.1, wall_time_s=0.0, tick_s=tick_s)
        assert _series(arrays) == _series(mapping), (tick, tick_s)
        ticking.advance(1.0)
    hours = [line for line in _series(arrays) if line.startswith("autoscaler_gpu_core_hours")]
    assert {'project="p-a"' in line for line in hours} == {True, False}


async def test_a_tick_over_the_same_records_reads_no_services_project(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Core-hours accrue from the last tick's projects and rates while the records stay the same:
    no service's project is read again (it is its namespace where no project is set)."""
    cluster = Cluster(4)
    cluster.records = [dataclasses.replace(r, core_rate=2.0) for r in cluster.records]
    ticking = clock.ManualClock(0.0)
    the_loop = loop.Loop(cluster=cluster, metrics=Steady(), clock=ticking)
    seen = telemetry.Telemetry()
    for _ in range(2):
        report = await the_loop.step()
        seen.observe_tick(report, report.workloads, duration_s=0.1, wall_time_s=0.0)
        ticking.advance(1.0)
    read: list[model.ServiceId] = []
    labels = telemetry._labels

    def counted(service: model.ServiceId) -> tuple[str, str]:
        read.append(service)
        return labels(service)

    monkeypatch.setattr(telemetry, "_labels", counted)
    report = await the_loop.step()
    seen.observe_tick(report, report.workloads, duration_s=0.1, wall_time_s=0.0)
    assert read == []
    service = cluster.records[0].id
    ids = dict(zip(("namespace", "service"), service.split("/"), strict=True))
    hours = seen.registry.get_sample_value(
        "autoscaler_gpu_core_hours_total", {**ids, "project": "ns"}
    )
    assert hours == 2.0 / 3600.0 + 2.0 / 3600.0 + 2.0 / 3600.0  # added tick by tick


async def test_a_steady_batched_service_builds_no_decision_until_read() -> None:
    """Once services settle, a tick builds no full decision for them; reading one builds it."""
    cluster = Cluster(4)
    cluster.records = [r for r in cluster.records if batch.batchable(r.policy)]
    ticking = clock.ManualClock(0.0)
    the_loop = loop.Loop(cluster=cluster, metrics=Steady(), clock=ticking)
    for _ in range(3):
        report = await the_loop.step()
        ticking.advance(1.0)
    assert isinstance(report.decisions, loop.Decisions)
    assert report.decisions.built == 0
    service = cluster.records[0].id
    brief = loop.brief(report.decisions, service)
    decision = report.decisions[service]
    assert report.decisions.built == 1
    assert brief == loop.Brief.of(decision)
    assert loop.estimates(report.decisions, service) == tuple(
        (signal, vote.estimate) for signal, vote in decision.contributions.items()
    )


def _series(seen: telemetry.Telemetry) -> list[str]:
    """The per-service series a scrape renders (the tick's duration left out)."""
    text = seen.exposition().decode()
    return [line for line in text.splitlines() if "service" in line or "namespace" in line]


class Steady:
    """Every service at its target: 10 rps and no queue on its two replicas."""

    async def sample(
        self, workloads: Sequence[ports.Workload], now_s: float
    ) -> npt.NDArray[np.float64]:
        values = np.full((len(workloads), len(model.Signal)), np.nan)
        values[:, model.Signal.LOAD] = 10.0
        values[:, model.Signal.SATURATION] = 0.0
        values[:, model.Signal.CAPACITY] = 50.0
        return values
