"""The controller's own metrics and health endpoints."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter

from aiohttp import test_utils
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from autoscaler import loop, ports, telemetry
from autoscaler.core import cache, model

SVC = model.ServiceId("ml/llama")


def _workload(serving: int = 3) -> ports.Workload:
    config = model.PolicyConfig(max_replicas=10, target_load_per_replica=2.0)
    return ports.Workload(id=SVC, policy=config, half_life_s=30.0, replicas=4, serving=serving)


POOL = model.Standby(size=1, replicas=1, waiting=1)


def _report(
    kind: model.Kind,
    reason: model.Reason,
    *,
    desired: int = 5,
    standby: model.Standby | None = None,
) -> loop.TickReport:
    vote = model.Contribution(ratio=1.5, desired=desired, estimator="mean", estimate=9.0)
    decision = model.Decision(
        current=4,
        desired=desired,
        kind=kind,
        reason=reason,
        detail="",
        contributions={model.Signal.LOAD: vote},
        cooldown_until_s=130.0 if kind is model.Kind.HOLD else None,
        standby=standby,
    )
    return loop.TickReport(
        now_s=100.0,
        decisions={SVC: decision},
        scaled=(),
        failed=(),
        kinds=Counter({kind: 1}),
    )


def _value(t: telemetry.Telemetry, name: str, **labels: str) -> float | None:
    return t.registry.get_sample_value(name, labels)


def test_tick_sets_replica_signal_and_cooldown_gauges() -> None:
    """A tick's decision shows up as replica, signal, target and cooldown gauges."""
    t = telemetry.Telemetry()
    t.observe_tick(
        _report(model.Kind.HOLD, model.Reason.COOLDOWN),
        [_workload()],
        duration_s=0.02,
        wall_time_s=1.7e9,
    )
    ids = {"namespace": "ml", "service": "llama"}
    assert _value(t, "autoscaler_replicas", **ids, state="desired") == 5
    assert _value(t, "autoscaler_replicas", **ids, state="current") == 4
    assert _value(t, "autoscaler_replicas", **ids, state="serving") == 3
    assert _value(t, "autoscaler_signal", **ids, signal="load") == 9.0
    assert _value(t, "autoscaler_signal_target", **ids, signal="load") == 6.0
    assert _value(t, "autoscaler_cooldown_remaining_seconds", **ids) == 30.0
    assert _value(t, "autoscaler_holding_services", reason="cooldown") == 1
    assert _value(t, "autoscaler_tick_duration_seconds_count") == 1
    assert _value(t, "autoscaler_last_tick_timestamp_seconds") == 1.7e9


def test_decisions_are_counted_once_per_change_of_outcome() -> None:
    """Repeating the same outcome does not inflate the decision counter."""
    t = telemetry.Telemetry()
    for _ in range(3):
        t.observe_tick(
            _report(model.Kind.STEADY, model.Reason.IN_DEADBAND),
            [_workload()],
            duration_s=0.01,
            wall_time_s=0.0,
        )
    t.observe_tick(
        _report(model.Kind.SCALE_UP, model.Reason.ABOVE_TARGET),
        [_workload()],
        duration_s=0.01,
        wall_time_s=0.0,
    )
    ids = {"namespace": "ml", "service": "llama"}
    labels = {**ids, "kind": "steady", "reason": "in-deadband"}
    assert _value(t, "autoscaler_decisions_total", **labels) == 1
    up = {**ids, "kind": "scale-up", "reason": "above-target"}
    assert _value(t, "autoscaler_decisions_total", **up) == 1


def test_each_service_says_why_it_holds_in_one_series() -> None:
    """`service_holding` and `service_decision` carry the last reason, one series a service."""
    t = telemetry.Telemetry()
    ids = {"namespace": "ml", "service": "llama"}
    t.observe_tick(
        _report(model.Kind.HOLD, model.Reason.COOLDOWN), [_workload()], duration_s=0, wall_time_s=0
    )
    assert _value(t, "autoscaler_service_holding", **ids, reason="cooldown") == 1
    kind = {"kind": "hold", "reason": "cooldown"}
    assert _value(t, "autoscaler_service_decision", **ids, **kind) == 1
    t.observe_tick(
        _report(model.Kind.SCALE_UP, model.Reason.ABOVE_TARGET),
        [_workload()],
        duration_s=0,
        wall_time_s=0,
    )
    assert _value(t, "autoscaler_service_holding", **ids, reason="cooldown") is None
    assert _value(t, "autoscaler_service_holding", **ids, reason="above-target") == 0
    assert _value(t, "autoscaler_service_decision", **ids, **kind) is None
    up = {"kind": "scale-up", "reason": "above-target"}
    assert _value(t, "autoscaler_service_decision", **ids, **up) == 1
    assert _value(t, "autoscaler_target_gpu_utilization_percent", **ids) == 75.0


def test_start_up_is_split_by_cache_hit_and_miss() -> None:
    """The start-up gauges give all pods, hits and misses, and a counter how many of each ever
    started, gone pods included; a kind without a sample has a count and no time."""
    t = telemetry.Telemetry()
    split = cache.StartupSplit(hit_s=8.0, miss_s=None, hits=1, misses=0, started_hits=3)
    workload = dataclasses.replace(_workload(), startup_s=8.5, startup_split=split)
    t.observe_tick(
        _report(model.Kind.STEADY, model.Reason.AT_DESIRED),
        [workload],
        duration_s=0.01,
        wall_time_s=0.0,
    )
    ids = {"namespace": "ml", "service": "llama"}
    assert _value(t, "autoscaler_pod_startup_seconds", **ids, cache="all") == 8.5
    assert _value(t, "autoscaler_pod_startup_seconds", **ids, cache="hit") == 8.0
    assert _value(t, "autoscaler_pod_startup_seconds", **ids, cache="miss") is None
    assert _value(t, "autoscaler_pod_starts_total", **ids, cache="hit") == 3
    assert _value(t, "autoscaler_pod_starts_total", **ids, cache="miss") == 0
    assert "# TYPE autoscaler_pod_starts_total counter" in t.exposition().decode()


def test_series_of_a_service_that_is_gone_are_removed() -> None:
    """A service that stops being managed leaves no stale per-service series behind."""
    t = telemetry.Telemetry()
    t.observe_tick(
        _report(model.Kind.STEADY, model.Reason.AT_DESIRED),
        [_workload()],
        duration_s=0.01,
        wall_time_s=0.0,
    )
    empty = loop.TickReport(now_s=101.0, decisions={}, scaled=(), failed=())
    t.observe_tick(empty, [], duration_s=0.01, wall_time_s=0.0)
    ids = {"namespace": "ml", "service": "llama"}
    assert _value(t, "autoscaler_replicas", **ids, state="desired") is None
    assert _value(t, "autoscaler_managed_services") == 0
    per_service = [
        family.name
        for family in t.registry.collect()
        for sample in family.samples
        if sample.labels.get("service") == "llama"
        and family.name
        in (
            "autoscaler_decisions",
            "autoscaler_service_decision",
            "autoscaler_service_holding",
            "autoscaler_target_gpu_utilization_percent",
        )
    ]
    assert per_service == []


OTHER = model.ServiceId("ml/mistral")


def _series_of(t: telemetry.Telemetry, service: model.ServiceId) -> set[str]:
    """The families with at least one series labelled with `service`."""
    namespace, _, name = service.partition("/")
    return {
        family.name
        for family in t.registry.collect()
        for sample in family.samples
        if sample.labels.get("namespace") == namespace and sample.labels.get("service") == name
    }


def _declared(t: telemetry.Telemetry) -> set[str]:
    return {family.name for family in t.per_service}


def _every_series(t: telemetry.Telemetry, *services: model.ServiceId) -> None:
    """Drive every per-service family for `services`: a tick, a ramp, placement."""
    split = cache.StartupSplit(hit_s=8.0, miss_s=120.0, hits=2, misses=1)
    workloads = [
        dataclasses.replace(
            _workload(),
            id=s,
            core_rate=2.0,
            project="research",
            startup_s=9.0,
            startup_split=split,
        )
        for s in services
    ]
    hold = _report(model.Kind.HOLD, model.Reason.COOLDOWN, standby=POOL)
    report = dataclasses.replace(hold, decisions=dict.fromkeys(services, hold.decisions[SVC]))
    t.observe_tick(report, workloads, duration_s=0.01, wall_time_s=0.0, tick_s=15.0)
    for service in services:
        t.ramp(service, step_pct=25.0, warming_pct=25.0, held=True)
        t.rolled_back(service)
        t.promoted(service)
        t.tiers(service, {"whole": 2, "mig-3g.40gb": 1})
        t.fell_back(service, "mig-3g.40gb", 1)


def test_every_per_service_family_is_dropped_with_its_service() -> None:
    """Once a service goes no per-service family keeps a series of it; the others stay."""
    t = telemetry.Telemetry()
    _every_series(t, SVC, OTHER)
    # The test covers every declared family, and no undeclared family carries a service label.
    assert _series_of(t, SVC) == _declared(t)
    split = cache.StartupSplit(hit_s=8.0, miss_s=120.0, hits=2, misses=1)
    stays = dataclasses.replace(_workload(), id=OTHER, startup_s=9.0, startup_split=split)
    report = _report(model.Kind.STEADY, model.Reason.AT_DESIRED, standby=POOL)
    only_other = dataclasses.replace(report, decisions={OTHER: report.decisions[SVC]})
    t.observe_tick(only_other, [stays], duration_s=0.01, wall_time_s=0.0)
    assert _series_of(t, SVC) == set()
    assert _series_of(t, OTHER) == _declared(t)


def test_a_series_made_after_its_service_went_is_dropped_next_tick() -> None:
    """A placement callback that lands after its service went leaves nothing after the next tick."""
    t = telemetry.Telemetry()
    _every_series(t, SVC)
    empty = loop.TickReport(now_s=101.0, decisions={}, scaled=(), failed=())
    t.observe_tick(empty, [], duration_s=0.01, wall_time_s=0.0)
    t.fell_back(SVC, "shared", 1)
    t.tiers(SVC, {"shared": 1})
    t.observe_tick(empty, [], duration_s=0.01, wall_time_s=0.0)
    assert _series_of(t, SVC) == set()


def test_the_end_of_a_term_drops_every_per_service_series() -> None:
    """A replica whose term of leadership ended exports no per-service series and no services."""
    t = telemetry.Telemetry()
    _every_series(t, SVC, OTHER)
    t.forget_services()
    assert _series_of(t, SVC) == _series_of(t, OTHER) == set()
    assert _value(t, "autoscaler_managed_services") == 0
    assert _value(t, "autoscaler_holding_services", reason="cooldown") == 0


def test_missing_estimates_are_not_exported_as_zero() -> None:
    """A signal with no estimate is absent from /metrics rather than reported as 0."""
    t = telemetry.Telemetry()
    report = _report(model.Kind.HOLD, model.Reason.MISSING_DATA)
    decision = report.decisions[SVC]
    vote = model.Contribution(ratio=math.nan, desired=None, estimator="missing")
    missing = model.Decision(
        current=4,
        desired=4,
        kind=decision.kind,
        reason=decision.reason,
        detail="",
        contributions={model.Signal.LOAD: vote},
    )
    report = loop.TickReport(now_s=100.0, decisions={SVC: missing}, scaled=(), failed=())
    t.observe_tick(report, [_workload()], duration_s=0.01, wall_time_s=0.0)
    assert _value(t, "autoscaler_signal", namespace="ml", service="llama", signal="load") is None


async def test_http_endpoints_answer_health_readiness_and_metrics() -> None:
    """/healthz always answers, /readyz follows the readiness check, /metrics is text."""
    t = telemetry.Telemetry()
    t.leader.set(1)
    ready = False
    app = telemetry.http_app(t, ready=lambda: ready)
    async with test_utils.TestClient(test_utils.TestServer(app)) as client:
        assert (await client.get("/healthz")).status == 200
        assert (await client.get("/readyz")).status == 503
        ready = True
        assert (await client.get("/readyz")).status == 200
        response = await client.get("/metrics")
        assert response.status == 200
        assert "autoscaler_leader 1.0" in await response.text()


def test_a_paused_service_is_one_and_its_series_goes_with_it() -> None:
    """`autoscaler_paused` is 1 for a paused service, 0 for one that is not, and removed when
    the service is no longer managed."""
    t = telemetry.Telemetry()
    ids = {"namespace": "ml", "service": "llama"}
    paused = _workload()
    paused = dataclasses.replace(
        paused, policy=dataclasses.replace(paused.policy, pause=model.Pause())
    )
    report = _report(model.Kind.HOLD, model.Reason.PAUSED, desired=4)
    t.observe_tick(report, [paused], duration_s=0.01, wall_time_s=0.0)
    assert _value(t, "autoscaler_paused", **ids) == 1
    assert _value(t, "autoscaler_holding_services", reason="paused") == 1
    t.observe_tick(report, [_workload()], duration_s=0.01, wall_time_s=0.0)
    assert _value(t, "autoscaler_paused", **ids) == 0
    empty = loop.TickReport(now_s=101.0, decisions={}, scaled=(), failed=())
    t.observe_tick(empty, [], duration_s=0.01, wall_time_s=0.0)
    assert _value(t, "autoscaler_paused", **ids) is None


def test_per_service_counters_export_no_created_series() -> None:
    """A per-service counter exports its total alone, with no `_created` series beside it."""
    t = telemetry.Telemetry()
    _every_series(t, SVC)
    text = t.exposition().decode()
    counters = [f.name for f in t.per_service if f.kind is telemetry.CounterMetricFamily]
    assert all(f"{name}_total{{" in text for name in counters)
    assert not [line for line in text.splitlines() if "_created{" in line and "llama" in line]


def test_a_scrape_renders_the_last_tick_of_many_services() -> None:
    """A scrape after several ticks shows each service's values of the last tick only."""
    t = telemetry.Telemetry()
    services = [model.ServiceId(f"ns-{i % 3}/svc-{i}") for i in range(50)]
    for desired in (3, 4, 6):
        report = _report(model.Kind.SCALE_UP, model.Reason.ABOVE_TARGET, desired=desired)
        decision = report.decisions[SVC]
        report = dataclasses.replace(report, decisions=dict.fromkeys(services, decision))
        workloads = [dataclasses.replace(_workload(), id=s) for s in services]
        t.observe_tick(report, workloads, duration_s=0.01, wall_time_s=0.0)
    for i in range(len(services)):
        ids = {"namespace": f"ns-{i % 3}", "service": f"svc-{i}"}
        assert _value(t, "autoscaler_replicas", **ids, state="desired") == 6
        up = {"kind": "scale-up", "reason": "above-target"}
        assert _value(t, "autoscaler_decisions_total", **ids, **up) == 1
    assert _value(t, "autoscaler_managed_services") == 50


def test_the_exposition_writes_every_series_as_prometheus_client_does() -> None:
    """`/metrics` holds the lines prometheus_client writes for the registry, quoting included."""
    t = telemetry.Telemetry()
    _every_series(t, SVC, OTHER)
    odd = dataclasses.replace(_workload(), id=SVC, core_rate=1.0, project='a"b\\c\nd')
    report = _report(model.Kind.HOLD, model.Reason.COOLDOWN)
    report = dataclasses.replace(
        report, decisions=dict.fromkeys((SVC, OTHER), report.decisions[SVC])
    )
    t.observe_tick(
        report, [odd, dataclasses.replace(odd, id=OTHER)], duration_s=0.01, wall_time_s=0.0
    )
    written = t.exposition().decode().splitlines()
    assert sorted(written) == sorted(generate_latest(t.registry).decode().splitlines())
    assert any('project="a\\"b\\\\c\\nd"' in line for line in written)


def test_sample_values_are_written_as_prometheus_client_writes_them_however_often() -> None:
    """Each value's text is prometheus_client's, on its first writing and after: the two zeros
    stay apart, and a whole number kept for reuse reads as it did."""
    values = [0.0, -0.0, 1.0, 1, 3.0, 2.5, -4.0, 1e7, 12345678.0, 1e-9, math.inf, -math.inf]
    for _ in range(2):
        for value in values:
            assert telemetry._number(value) == floatToGoString(value)
    assert telemetry._number(math.nan) == "NaN"


def test_the_standby_pool_is_counted_apart_in_replicas_and_core_hours() -> None:
    """A pool of one waiting pod out of four shows as standby replicas, and a quarter of the
    service's core-hours accrue to the standby counter too."""
    t = telemetry.Telemetry()
    report = _report(model.Kind.STEADY, model.Reason.IN_DEADBAND, desired=4, standby=POOL)
    workload = dataclasses.replace(_workload(), core_rate=8.0, project="ml")
    t.observe_tick(report, [workload], duration_s=0.01, wall_time_s=1.7e9, tick_s=3600.0)
    ids = {"namespace": "ml", "service": "llama"}
    assert _value(t, "autoscaler_standby_replicas", **ids, state="size") == 1
    assert _value(t, "autoscaler_standby_replicas", **ids, state="waiting") == 1
    assert _value(t, "autoscaler_gpu_core_hours_total", **ids, project="ml") == 8.0
    assert _value(t, "autoscaler_standby_gpu_core_hours_total", **ids, project="ml") == 2.0


def test_token_votes_export_their_signal_and_target() -> None:
    """The KV-cache target is per replica times the serving ones; the TTFT target is the P95
    the service is held to, not multiplied."""
    config = model.PolicyConfig(max_replicas=10, target_kv_cache_ratio=0.5, target_ttft_p95_s=1.5)
    workload = dataclasses.replace(_workload(serving=4), policy=config)
    report = _report(model.Kind.STEADY, model.Reason.AT_DESIRED)
    contributions = {
        model.Signal.KV_CACHE: model.Contribution(0.9, 4, "mean", 1.8),
        model.Signal.TTFT: model.Contribution(0.4, 0, "p95", 0.6),
    }
    decision = dataclasses.replace(report.decisions[SVC], contributions=contributions)
    t = telemetry.Telemetry()
    t.observe_tick(
        dataclasses.replace(report, decisions={SVC: decision}),
        [workload],
        duration_s=0.02,
        wall_time_s=1.7e9,
    )
    ids = {"namespace": "ml", "service": "llama"}
    assert _value(t, "autoscaler_signal", **ids, signal="kv_cache") == 1.8
    assert _value(t, "autoscaler_signal_target", **ids, signal="kv_cache") == 2.0
    assert _value(t, "autoscaler_signal", **ids, signal="ttft") == 0.6
    assert _value(t, "autoscaler_signal_target", **ids, signal="ttft") == 1.5


_OUTCOMES = (
    (model.Kind.HOLD, model.Reason.COOLDOWN),
    (model.Kind.HOLD, model.Reason.MISSING_DATA),
    (model.Kind.SCALE_UP, model.Reason.ABOVE_TARGET),
    (model.Kind.STEADY, model.Reason.AT_DESIRED),
    (model.Kind.SCALE_DOWN, model.Reason.BELOW_TARGET),
)


def _varied_tick(
    services: list[model.ServiceId], shift: int
) -> tuple[loop.TickReport, list[ports.Workload]]:
    """A tick whose services between them carry every kind of series, each a little apart."""
    decisions: dict[model.ServiceId, model.Decision] = {}
    workloads: list[ports.Workload] = []
    for i, service in enumerate(services):
        kind, reason = _OUTCOMES[(i + shift) % len(_OUTCOMES)]
        votes = {model.Signal.LOAD: model.Contribution(1.2, 3, "mean", 7.25 * i + 0.1)}
        config = model.PolicyConfig(
            max_replicas=10 + i,
            target_load_per_replica=2.0,
            target_gpu_utilization_pct=None if i % 4 == 0 else 60.0 + i,
            target_ttft_p95_s=1.5 if i % 3 == 0 else None,
            pause=model.Pause() if i % 5 == 2 else None,
        )
        if i % 2:
            votes[model.Signal.SATURATION] = model.Contribution(0.5, 2, "mean", math.nan)
        if i % 3 == 0:
            votes[model.Signal.TTFT] = model.Contribution(0.4, 0, "p95", 0.6 + i)
        decisions[service] = model.Decision(
            current=3,
            desired=3 + i % 3,
            kind=kind,
            reason=reason,
            detail="",
            contributions=votes,
            cooldown_until_s=100.0 + 10 * (i % 3) if kind is model.Kind.HOLD else None,
            standby=POOL if i % 3 == 1 else None,
        )
        split = cache.StartupSplit(hit_s=None if i % 2 else 8.5, miss_s=120.0, started_hits=i)
        workloads.append(
            ports.Workload(
                id=service,
                policy=config,
                half_life_s=30.0,
                replicas=4,
                serving=2 + i % 2,
                core_rate=1.5 + i,
                project=('a"b\\c\nd %s 100%' if i % 2 else None),
                startup_s=None if i % 4 == 3 else 9.0 + i,
                startup_split=split if i % 3 else None,
            )
        )
    report = loop.TickReport(
        now_s=100.0, decisions=decisions, scaled=(), failed=(), kinds=Counter()
    )
    return report, workloads


def test_a_varied_exposition_holds_every_sample_as_prometheus_client_writes_it() -> None:
    """Over services between them carrying every kind of series (holds with and without a
    cooldown left, missing data, a pause, a standby pool, with and without a GPU target,
    latency votes, a missing estimate, start-ups split by cache or not, ramps, tiers and
    fallbacks, a service no tick decided for) and label values that need quoting or hold a `%`,
    `/metrics` writes each line prometheus_client writes for the registry, and its parse is the
    registry's samples in the same order."""
    t = telemetry.Telemetry()
    services = [model.ServiceId(f"ns-{i % 3}/svc-{i}") for i in range(15)]
    for shift in (0, 1, 3):
        report, workloads = _varied_tick(services, shift)
        t.observe_tick(report, workloads, duration_s=0.01, wall_time_s=0.0, tick_s=15.0)
    for i, service in enumerate([*services[::4], model.ServiceId("ns-0/ramped-only")]):
        t.ramp(service, step_pct=12.5 * i, warming_pct=25.0, held=i % 2 == 1)
        t.rolled_back(service)
        t.tiers(service, {"whole": 2, 'mig-3g.40gb"%d': i})
        t.fell_back(service, "shared %s", 1 + i)
    for service in services[1::5]:
        t.promoted(service)
    written = t.exposition().decode()
    reference = generate_latest(t.registry).decode()
    assert sorted(written.splitlines()) == sorted(reference.splitlines())

    def samples(text: str) -> list[str]:
        return [
            repr((sample.name, sorted(sample.labels.items()), sample.value))
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        ]

    assert samples(written) == samples(reference)
    assert 'project="a\\"b\\\\c\\nd %s 100%"' in written
    assert 'autoscaler_ramp_held{namespace="ns-0",service="ramped-only"} 0.0' in written


def test_a_familys_line_templates_are_kept_within_a_bound() -> None:
    """Label values that come and go (projects, tiers) do not grow the kept templates."""
    t = telemetry.Telemetry()
    for n in range(3):
        for i in range(700):
            t.tiers(SVC, {f"tier-{n}-{i}": i})
            t.exposition()
    assert len(telemetry._TEMPLATES[telemetry.TIER_REPLICAS]) <= telemetry._Templates._KEPT
