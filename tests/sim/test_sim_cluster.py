"""The virtual cluster: pod life cycle, GPUs, victim order and GPU time."""

from __future__ import annotations

import numpy as np
import pytest

from autoscaler import errors
from autoscaler.core import model, policy
from autoscaler.sim.cluster import Lifecycle, Phase, ServiceSpec, SimCluster

FIXED = Lifecycle(startup_s=60.0, startup_sigma=0.0, warmup_s=5.0)


def spec(name: str = "ns/model", lifecycle: Lifecycle = FIXED) -> ServiceSpec:
    config = policy.seed(max_replicas=50, target_load_per_replica=0.75)
    return ServiceSpec(model.ServiceId(name), config, half_life_s=30.0, lifecycle=lifecycle)


def phases(cluster: SimCluster, service: str) -> list[Phase]:
    return [p.phase for p in cluster.pods(model.ServiceId(service))]


def advance_to(cluster: SimCluster, t_s: float) -> None:
    while cluster.now_s < t_s - 1e-9:
        cluster.advance(1.0)


async def test_pod_goes_through_its_phases_after_the_startup_delay() -> None:
    """A new pod starts at once, warms at the start-up delay, and serves after the warm-up."""
    cluster = SimCluster()
    sid = cluster.add_service(spec()).spec.id
    await cluster.scale(sid, 1)

    seen = {}
    for _ in range(70):
        seen[cluster.now_s] = phases(cluster, sid)[0]
        cluster.advance(1.0)

    assert seen[0] is Phase.STARTING
    assert seen[59] is Phase.STARTING
    assert seen[60] is Phase.WARMING
    assert seen[64] is Phase.WARMING
    assert seen[65] is Phase.SERVING


async def test_workload_reports_desired_serving_and_observed_startup() -> None:
    """`workloads()` counts desired and serving pods and the mean creation-to-serving time."""
    cluster = SimCluster()
    sid = cluster.add_service(spec(), replicas=2).spec.id
    (before,) = cluster.workloads()
    await cluster.scale(sid, 3)
    (scaled,) = cluster.workloads()
    advance_to(cluster, 65)
    (after,) = cluster.workloads()

    assert (before.replicas, before.serving, before.startup_s) == (2, 2, None)
    assert (scaled.replicas, scaled.serving) == (3, 2)
    assert (after.replicas, after.serving, after.startup_s) == (3, 3, 65.0)
    assert after.half_life_s == 30.0
    assert after.policy.target_load_per_replica == 0.75


async def test_pods_stay_pending_without_a_free_gpu() -> None:
    """With every GPU taken, a new pod stays pending, and starts when a GPU frees up."""
    cluster = SimCluster(gpus=3, gpus_per_node=2)
    a = cluster.add_service(spec("ns/a"), replicas=2).spec.id
    b = cluster.add_service(spec("ns/b"), replicas=1).spec.id
    await cluster.scale(a, 3)
    advance_to(cluster, 100)

    assert cluster.counts(a).pending == 1
    assert [n.used for n in cluster.nodes()] == [2, 1]

    await cluster.scale(b, 0)
    assert cluster.counts(a).starting == 1
    advance_to(cluster, 165)
    assert cluster.counts(a).serving == 3
    # The pending pod waited 100 s for its GPU, which counts in the observed start-up.
    assert cluster.workloads()[0].startup_s == 165.0


async def test_unlimited_gpus_add_nodes_as_needed() -> None:
    """Without a GPU limit, pods never wait and nodes appear in units of gpus_per_node."""
    cluster = SimCluster(gpus=None, gpus_per_node=4)
    sid = cluster.add_service(spec(), replicas=3).spec.id
    await cluster.scale(sid, 9)

    assert cluster.counts(sid).pending == 0
    assert [(n.gpus, n.used) for n in cluster.nodes()] == [(4, 4), (4, 4), (4, 1)]


async def test_scale_down_removes_pending_then_starting_then_warming_then_serving() -> None:
    """Victims go in phase order (pending, starting, warming, serving), newest first."""
    cluster = SimCluster(gpus=7)
    sid = cluster.add_service(spec(), replicas=2).spec.id  # serving: pods 0, 1
    await cluster.scale(sid, 3)  # pod 2 starts at 0
    advance_to(cluster, 61)  # pod 2 warming
    await cluster.scale(sid, 5)  # pods 3, 4 start at 61
    await cluster.scale(sid, 8)  # pods 5, 6 start at 61; pod 7 is pending (7 GPUs)
    counts = cluster.counts(sid)
    assert (counts.pending, counts.starting, counts.warming, counts.serving) == (1, 4, 1, 2)

    removed = []
    for n in range(7, -1, -1):
        names = {p.name for p in cluster.pods(sid)}
        await cluster.scale(sid, n)
        (gone,) = names - {p.name for p in cluster.pods(sid)}
        removed.append(int(gone.rsplit("-", 1)[1]))

    assert removed == [7, 6, 5, 4, 3, 2, 1, 0]


async def test_freed_gpu_goes_to_the_oldest_pending_pod() -> None:
    """A GPU freed by one service goes to the pod that has waited longest, in any service."""
    cluster = SimCluster(gpus=3)
    a = cluster.add_service(spec("ns/a"), replicas=2).spec.id
    b = cluster.add_service(spec("ns/b")).spec.id
    c = cluster.add_service(spec("ns/c"), replicas=1).spec.id
    await cluster.scale(b, 1)  # pending since 0
    cluster.advance(1.0)
    await cluster.scale(a, 3)  # pending since 1
    await cluster.scale(c, 0)

    assert (cluster.counts(b).starting, cluster.counts(b).pending) == (1, 0)
    assert (cluster.counts(a).starting, cluster.counts(a).pending) == (0, 1)


async def test_gpu_time_counts_only_pods_holding_a_gpu() -> None:
    """GPU-seconds integrate starting, warming and serving pods; pending pods cost nothing."""
    cluster = SimCluster(gpus=3)
    sid = cluster.add_service(spec(), replicas=2).spec.id
    advance_to(cluster, 10)  # 2 x 10
    await cluster.scale(sid, 4)  # one starts, one pending
    advance_to(cluster, 20)  # 3 x 10
    await cluster.scale(sid, 2)  # the pending one, then the starting one
    advance_to(cluster, 30)  # 2 x 10

    assert cluster.gpu_seconds(sid) == pytest.approx(20 + 30 + 20)
    assert cluster.gpu_seconds() == pytest.approx(70)


async def test_startup_delays_are_log_normal_around_the_median_and_reproducible() -> None:
    """Start-up delays have the configured median and come out the same for the same seed."""
    life = Lifecycle(startup_s=60.0, startup_sigma=0.3, warmup_s=0.0)

    def delays(seed: int) -> list[float]:
        cluster = SimCluster(seed=seed)
        cluster.add_service(spec(lifecycle=life))
        cluster.set_replicas(model.ServiceId("ns/model"), 400)
        return [p.startup_delay_s for p in cluster.pods(model.ServiceId("ns/model"))]

    first = delays(7)
    assert first == delays(7)
    assert first != delays(8)
    assert np.median(first) == pytest.approx(60.0, rel=0.05)
    assert np.std(np.log(first)) == pytest.approx(0.3, rel=0.15)


async def test_scale_records_events_and_rejects_unknown_services() -> None:
    """Changes of the desired count are recorded; an unknown service is an ActuationError."""
    cluster = SimCluster()
    sid = cluster.add_service(spec(), replicas=2).spec.id
    await cluster.scale(sid, 2)
    cluster.advance(5.0)
    await cluster.scale(sid, 4)

    assert cluster.service(sid).scale_events == [(5.0, 2, 4)]
    with pytest.raises(errors.ActuationError):
        await cluster.scale(model.ServiceId("ns/nope"), 1)
    with pytest.raises(errors.ActuationError):
        await cluster.scale(sid, -1)


async def test_publish_keeps_the_last_decision() -> None:
    """`publish` stores the last decision and state of each service."""
    cluster = SimCluster()
    sid = cluster.add_service(spec(), replicas=2).spec.id
    decision = model.Decision(2, 2, model.Kind.HOLD, model.Reason.MISSING_DATA, "no data")
    await cluster.publish(sid, decision, model.PolicyState())

    assert cluster.service(sid).decision == (decision, model.PolicyState())
    assert cluster.service(sid).published == 1
