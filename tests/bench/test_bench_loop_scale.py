"""The scale bench: the series its exporter serves, its audit of each service's writers, its
summary of a controller's ticks."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
from kube.emulator import Write
from kube.store import Store
from prometheus_client.parser import text_string_to_metric_families

from autoscaler import loop, ports
from autoscaler.core import model, shards
from bench import loop_scale_k8s as bench


def _samples(load: bench.Load, now_s: float) -> dict[tuple[str, str], float]:
    text = load.render(now_s).decode()
    return {
        (sample.name, sample.labels["pod"]): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _requests(load: bench.Load, now_s: float, pod: str) -> float:
    return _samples(load, now_s)[("vllm:request_success_total", pod)]


def test_every_pod_serves_its_counter_queue_and_gpu() -> None:
    """Each pod of each service has a request counter, a waiting gauge and a GPU gauge."""
    load = bench.Load(3, change_share=0.5, seed=1)
    for service in range(3):
        load.set_pods(service, [bench.pod_name(service, n) for n in range(2)], now_s=0.0)
    samples = _samples(load, 10.0)
    assert len(samples) == 3 * 2 * 3
    first = bench.pod_name(0, 0)
    assert samples[("vllm:request_success_total", first)] > 0
    assert 0 <= samples[("DCGM_FI_DEV_GPU_UTIL", first)] <= 100


def test_a_counter_never_goes_back_when_load_or_pods_change() -> None:
    """A pod's counter keeps counting from where it was when its service's load or pods change."""
    load = bench.Load(4, change_share=1.0, seed=2)
    for service in range(4):
        load.set_pods(service, [bench.pod_name(service, 0)], now_s=0.0)
    pod = bench.pod_name(0, 0)
    rate = load.rate_per_s[0]
    assert _requests(load, 10.0, pod) == round(10.0 * rate, 3)
    before = _requests(load, 20.0, pod)
    load.set_pods(0, [pod, bench.pod_name(0, 1)], now_s=20.0)
    assert _requests(load, 20.0, pod) == before
    assert _requests(load, 30.0, pod) == round(before + 10.0 * rate / 2, 3)
    load.change(30.0)
    assert load.rate_per_s[0] != rate
    assert _requests(load, 30.0, pod) == round(before + 10.0 * rate / 2, 3)
    assert load.pods() == 5


BUCKETS = shards.Buckets.named(bench.LEASE_NAME, 3)


def _lease(bucket: int, who: str, status: int = 200, *, holder: str | None = None) -> Write:
    """A write of a bucket Lease by `who`, which names `holder` (`who` unless told; "" for a
    release)."""
    name = BUCKETS.names[bucket]
    agent = f"{bench.AGENT}{who}"
    named = (who if holder is None else holder) if status < 300 else None
    return Write("update", "leases", bench.LEASE_NAMESPACE, name, agent, status, named)


def _service_in(bucket: int, *, skip: int = 0) -> str:
    """The first team-0 service name in `bucket`, past `skip` of them."""
    found = (
        bench.deployment_name(i)
        for i in range(0, 10_000, bench.NAMESPACES)
        if BUCKETS.of(f"team-0/{bench.deployment_name(i)}") == bucket
    )
    return list(itertools.islice(found, skip + 1))[-1]


def _scale(name: str, who: str, status: int = 200) -> Write:
    return Write("patch", "deployments", "team-0", name, f"{bench.AGENT}{who}", status)


def _event(name: str, who: str) -> Write:
    return Write(
        "create", "events", "team-0", f"{name}.18c2f1a3b4d5e6f7", f"{bench.AGENT}{who}", 201
    )


def test_each_service_is_charged_to_its_writers_and_checked_against_its_bucket_holder() -> None:
    """A write counts for the service that starts its object's name, against whoever held the
    service's bucket Lease when the server answered it."""
    a, b = _service_in(0), _service_in(1)
    writes = [
        _lease(0, "shard-0"),
        _lease(1, "shard-1"),
        _scale(a, "shard-0"),
        _event(a, "shard-0"),
        _scale(b, "shard-1"),
        _scale(b, "shard-0", status=409),  # refused: not a write
        Write("create", "pods", "team-0", f"{a}-5d8f7c-00002", "kubectl", 201),
    ]
    found = bench.audit_writers(writes, BUCKETS, lease_namespace=bench.LEASE_NAMESPACE)
    assert found["services_written"] == 2  # a (by shard-0 and kubectl) and b
    assert found["with_two_or_more"] == 1
    assert found["writes_by_a_non_holder"] == 1
    assert found["services_per_writer"] == {"kubectl": 1, "shard-0": 1, "shard-1": 1}


def test_a_write_by_a_replica_without_the_bucket_is_counted_and_a_move_is_not_one() -> None:
    """After a bucket moves, its services have two writers one after the other and no stale
    write; a Lease write by an idle replica asking to be counted moves nothing; a write by a
    replica that does not hold the bucket is a stale one."""
    a, other = _service_in(2), _service_in(2, skip=1)
    writes = [
        _lease(2, "shard-0"),
        _scale(a, "shard-0"),
        _lease(2, "shard-1"),
        _lease(2, "shard-0", status=409),  # a failed renewal moves nothing
        _lease(2, "shard-2", holder="shard-1"),  # an idle replica asks: nothing moves
        _scale(a, "shard-1"),
        _scale(other, "shard-1"),
        _lease(2, "shard-1", holder=""),  # handed over: released, then taken
        _lease(2, "shard-3"),
        _lease(2, "shard-1"),
    ]
    found = bench.audit_writers(writes, BUCKETS, lease_namespace=bench.LEASE_NAMESPACE)
    assert found == {
        "services_written": 2,
        "with_one_writer": 1,
        "with_two_or_more": 1,
        "writes_by_a_non_holder": 0,
        "bucket_moves": 3,
        "services_per_writer": {"shard-0": 1, "shard-1": 2},
    }
    late = bench.audit_writers(
        [*writes, _scale(other, "shard-0")], BUCKETS, lease_namespace=bench.LEASE_NAMESPACE
    )
    assert late["writes_by_a_non_holder"] == 1
    assert late["with_two_or_more"] == 2


def _tick(n: int, *, decided: int = 100, led: tuple[int, ...] = (0,)) -> bench.Tick:
    return bench.Tick(
        duration_s=0.1 * (n + 1),
        cpu_s=0.5 * n * n,
        gc_s=0.01 * n,
        gc_counts=[10 * n, n, 0],
        queries=3 * n,
        decided=decided,
        changed=None if n == 0 else n,
        kinds={"steady/within_band": decided},
        led=list(led),
        ended_s=2.0 * n,
    )


def test_a_summary_counts_the_ticks_after_the_warm_ones_from_running_totals() -> None:
    """CPU, collections and queries per tick are differences of the running totals over the
    ticks measured; the warm ticks count for nothing but the queries' first difference."""
    records = [_tick(n) for n in range(5)]
    summary = bench.summarise(records, warm=2)
    assert summary["ticks_measured"] == 3
    assert summary["tick_p50_s"] == 0.4
    assert summary["cpu_per_tick_s"] == 0.5 * ((9 - 4) + (16 - 9)) / 2
    assert summary["gc_s_per_tick"] == 0.01
    assert summary["gc_collections_in_later_ticks"] == [20, 2, 0]
    assert summary["prometheus_queries_per_tick"] == [3]
    assert summary["services_decided_per_tick"] == 100
    assert summary["decisions_in_later_ticks"] == {"steady/within_band": 300}
    assert summary["outcomes_changed_in_later_ticks"] == 2 + 3 + 4


def test_a_summary_charges_cpu_to_the_wall_time_between_tick_ends() -> None:
    """Ticks that end 2 s apart: the interval is 2 s, and the CPU per second is the CPU of the
    ticks measured over the wall time they span (a tick that overruns its period carries more
    of the work paced by wall time, which CPU per tick alone would read as the tick's own)."""
    summary = bench.summarise([_tick(n) for n in range(5)], warm=2)
    assert summary["tick_interval_s"] == 2.0
    assert summary["cpu_per_s"] == 0.5 * (16 - 4) / (8.0 - 4.0)


def _decided(desired: int, kind: model.Kind, reason: model.Reason) -> model.Decision:
    return model.Decision(current=2, desired=desired, kind=kind, reason=reason, detail="")


def _unobserved(row: int) -> model.Observation:
    raise AssertionError(f"every decision is built: row {row} is never observed")


def _report(decided: dict[str, model.Decision]) -> loop.TickReport:
    """A tick's report whose decisions are the loop's (`loop.Decisions`), in `decided`'s order."""
    workloads = [
        ports.Workload(
            id=model.ServiceId(s),
            policy=model.PolicyConfig(max_replicas=10, target_load_per_replica=5.0),
            half_life_s=60.0,
            replicas=2,
            serving=2,
        )
        for s in decided
    ]
    index = {w.id: i for i, w in enumerate(workloads)}
    decisions = loop.Decisions(workloads, index, _unobserved, {})
    for service, decision in decided.items():
        decisions.add(model.ServiceId(service), decision)
    return loop.TickReport(0.0, decisions, (), (), workloads=workloads)


def test_the_recorder_counts_outcomes_changed_and_kinds_from_the_loops_arrays() -> None:
    """A tick's outcomes changed and its kinds are what comparing its decisions one by one
    gives: a new count or kind, a new reason unless steady, and a new service, each counts."""
    steady, up = model.Kind.STEADY, model.Kind.SCALE_UP
    first = {
        "a": _decided(2, steady, model.Reason.AT_DESIRED),
        "b": _decided(2, steady, model.Reason.AT_DESIRED),
        "c": _decided(3, up, model.Reason.ABOVE_TARGET),
    }
    second = {
        "a": _decided(2, steady, model.Reason.IN_DEADBAND),  # steady: its reason is wording
        "b": _decided(3, up, model.Reason.ABOVE_TARGET),
        "c": _decided(3, up, model.Reason.BURST),
    }
    reordered = {"d": _decided(2, steady, model.Reason.AT_DESIRED), **second}
    for reports in (
        [_report(first), _report(second), _report(reordered)],
        [loop.TickReport(0.0, dict(d), (), ()) for d in (first, second, reordered)],
    ):
        ticks = bench.Ticks(lambda: 0, list)
        recorded = [ticks(report, 0.1) for report in reports]
        assert [t.changed for t in recorded] == [None, 2, 1]
        assert [t.decided for t in recorded] == [3, 3, 4]
        assert recorded[1].kinds == {
            "steady/in-deadband": 1,
            "scale-up/above-target": 1,
            "scale-up/burst": 1,
        }


def _filled(load: bench.Load, *, cold_start: bool, forecast: str = "auto") -> Store:
    store = Store()
    bench.fill(store, load, cold_start=cold_start, forecast=forecast)
    return store


def _shape(store: Store, namespace: str, name: str) -> tuple[int, int, list[int]]:
    """A Deployment's replicas, its ReplicaSet's, and the Ready, Running pods it owns (by
    index) as the Deployment and ReplicaSet controllers and the kubelet would leave them."""
    deployment = store.get("apps/v1/deployments", namespace, name)
    replicaset = store.get("apps/v1/replicasets", namespace, f"{name}-5d8f7c")
    assert replicaset["metadata"]["ownerReferences"][0]["uid"] == deployment["metadata"]["uid"]
    pods = store.list_objects("v1/pods", namespace, label_selector=f"app={name}")
    for pod in pods:
        assert pod["metadata"]["ownerReferences"][0]["uid"] == replicaset["metadata"]["uid"]
        assert pod["status"]["phase"] == "Running"
        assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"] == "True"
    indices = sorted(int(pod["metadata"]["name"].rsplit("-", 1)[1], 16) for pod in pods)
    return deployment["spec"]["replicas"], replicaset["spec"]["replicas"], indices


def test_each_deployment_starts_at_the_count_its_load_needs_or_at_two_when_cold() -> None:
    """A sized start gives each Deployment, its ReplicaSet and its Ready pods the count its load
    needs at its targets, the cold start two each, and the exporter serves every pod made."""
    sized_load, cold_load = (bench.Load(20, change_share=0.1, seed=3) for _ in range(2))
    sized = _filled(sized_load, cold_start=False)
    cold = _filled(cold_load, cold_start=True, forecast="off")
    counts = []
    for i in range(20):
        namespace, name = f"team-{i % bench.NAMESPACES}", bench.deployment_name(i)
        needed = sized_load.needed(i)
        rate_per_replica = sized_load.rate_per_s[i] / bench.TARGET_QPS_PER_REPLICA
        assert needed == max(bench.MIN_REPLICAS, math.ceil(rate_per_replica))
        assert _shape(sized, namespace, name) == (needed, needed, list(range(needed)))
        assert _shape(cold, namespace, name) == (2, 2, [0, 1])
        forecasts = [
            store.get("apps/v1/deployments", namespace, name)["metadata"]["annotations"][
                "autoscaler.dsec.io/forecast"
            ]
            for store in (sized, cold)
        ]
        assert forecasts == ["auto", "off"]
        counts.append(needed)
    assert len(set(counts)) > 2  # the seeded loads need different counts
    assert sized_load.pods() == sum(counts)
    assert len(_samples(sized_load, 1.0)) == 3 * sum(counts)
    assert cold_load.pods() == 2 * 20


def test_a_sized_start_holds_where_a_cold_start_scales() -> None:
    """At its sized start every service's load is within its replicas' targets: the queue needs
    no more replicas than the requests do, and one replica fewer would be over target."""
    load = bench.Load(200, change_share=0.1, seed=4)
    for i in range(200):
        needed = load.needed(i)
        rate_per_s = load.rate_per_s[i]
        assert rate_per_s <= needed * bench.TARGET_QPS_PER_REPLICA
        queue = rate_per_s * bench.QUEUE_PER_QPS
        assert queue <= needed * bench.TARGET_QUEUE_PER_REPLICA
        if needed > bench.MIN_REPLICAS:
            assert rate_per_s > (needed - 1) * bench.TARGET_QPS_PER_REPLICA


async def test_the_wait_for_rates_asks_again_after_a_query_that_timed_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a busy machine the count over every pod's series can pass the harness's deadline:
    the wait asks again until its own deadline rather than ending the run."""

    class Prom:
        def __init__(self) -> None:
            self.answers: list[Any] = [TimeoutError("timed out"), [{"value": [0, "3"]}]]

        def query(self, promql: str) -> Any:
            answer = self.answers.pop(0)
            if isinstance(answer, BaseException):
                raise answer
            return answer

    async def no_wait(_: float) -> None:
        return None

    monkeypatch.setattr(bench.asyncio, "sleep", no_wait)
    prom = Prom()
    assert await bench.wait_for_rates(prom, 3, scrape_interval_s=15.0) >= 0.0
    assert prom.answers == []
