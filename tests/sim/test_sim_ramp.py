"""The warm-up gate and the traffic ramp in the simulator: the ramp ports on the virtual cluster,
per-pod behaviour (slow, failing), and the ramp driver running on them through the real loop."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import structlog

from autoscaler import cli, errors, metricnames, ports
from autoscaler.contract.annotations import TrafficRouter
from autoscaler.core import model, ramp
from autoscaler.experiment import run
from autoscaler.sim import traffic as traffic_
from autoscaler.sim import world
from autoscaler.sim.params import RAMP_SUMMARY_KEYS, SUMMARY_KEYS, PodFault, SimParams

VLLM = metricnames.PRESETS["vllm"]
SERVICE = "ns/model"
# Start-up 20 s, warm-up 5 s, no spread: every new pod runs at 20 s after its creation.
PARAMS = SimParams(startup_s=20.0, startup_sigma=0.0, warmup_s=5.0, max_replicas=40)
ISTIO = dataclasses.replace(PARAMS, ramp="istio")


def gated_world(
    params: SimParams = ISTIO, *, rps: float = 3.0, seconds: int = 600, replicas: int = 4
) -> tuple[world.World, model.ServiceId]:
    sim = world.World(params)
    sid = sim.add_service(SERVICE, np.full(seconds, rps), params, replicas=replicas)
    return sim, sid


def pod_named(sim: world.World, sid: model.ServiceId, name: str) -> ports.PodInfo:
    (info,) = [p for p in sim.ramp_cluster.pods(sid) if p.name == name]
    return info


def new_pods(sim: world.World, sid: model.ServiceId) -> list[str]:
    return [p.name for p in sim.ramp_cluster.pods(sid) if p.warming]


def stable_pods(sim: world.World, sid: model.ServiceId) -> list[str]:
    return [p.name for p in sim.ramp_cluster.pods(sid) if p.stable and not p.warming]


def route(sim: world.World, sid: model.ServiceId) -> ports.RouteTarget:
    (target,) = sim.ramp_cluster.ramp_targets()
    assert target.service == sid
    return target.route


# -- the gate: a started pod waits, unready, for the driver -------------------------------------


async def test_started_pod_is_running_not_warm_and_labelled_warming() -> None:
    """With the ramp, a pod past its start-up runs unready, labelled warming, out of capacity."""
    sim, sid = gated_world()
    await sim.cluster.scale(sid, 5)
    sim.advance(60)

    (name,) = new_pods(sim, sid)
    info = pod_named(sim, sid, name)
    assert (info.running, info.warm, info.warming, info.stable) == (True, False, True, False)
    assert info.ip is not None
    assert sim.cluster.counts(sid).serving == 4
    (workload,) = sim.cluster.workloads()
    assert (workload.replicas, workload.serving) == (5, 4)
    assert set(sim.timeseries(sid)["capacity_rps"]) == {4.0}
    warming = await sim.health.health("ns", VLLM, [name], stable_pods(sim, sid), 30.0)
    assert warming[0].requests == 0


async def test_without_the_ramp_a_pod_serves_once_warm() -> None:
    """Without the ramp, the same pod serves its full share `warmup_s` after its start-up."""
    sim, sid = gated_world(PARAMS)
    await sim.cluster.scale(sid, 5)
    sim.advance(60)

    assert sim.cluster.counts(sid).serving == 5
    capacity = sim.timeseries(sid)["capacity_rps"]
    assert (capacity[24], capacity[25]) == (4.0, 5.0)


async def test_warm_pod_serves_only_when_promoted() -> None:
    """Warm and labelled stable without warming, a pod counts as serving; not before."""
    sim, sid = gated_world()
    await sim.cluster.scale(sid, 5)
    sim.advance(30)
    (name,) = new_pods(sim, sid)

    await sim.ramp_cluster.set_warm(sid, name, True, "warm-up passed")
    assert sim.cluster.counts(sid).serving == 4
    await sim.ramp_cluster.set_labels(sid, name, warming=True, stable=True)
    assert sim.cluster.counts(sid).serving == 4
    await sim.ramp_cluster.set_labels(sid, name, warming=False, stable=True)
    assert sim.cluster.counts(sid).serving == 5
    (workload,) = sim.cluster.workloads()
    assert workload.serving == 5
    assert workload.startup_s == 30.0
    await sim.ramp_cluster.set_warm(sid, name, False, "drained")
    assert sim.cluster.counts(sid).serving == 4


async def test_writes_to_unknown_pods_or_services_are_actuation_errors() -> None:
    """A pod or a service that is not there is an `ActuationError`, as a 404 would be."""
    sim, sid = gated_world()

    with pytest.raises(errors.ActuationError, match="no pod nope"):
        await sim.ramp_cluster.set_warm(sid, "nope", True, "")
    with pytest.raises(errors.ActuationError, match="no ramped service"):
        await sim.ramp_cluster.reclaim(model.ServiceId("ns/other"), "x")
    with pytest.raises(ValueError, match="Normal or Warning"):
        sim.ramp_cluster.record(sid, "Error", "Bad", "no such type")


async def test_ramp_target_carries_the_annotations_settings() -> None:
    """The ramp target has the params' router, steps, gates and warm-up, and the saved state."""
    params = dataclasses.replace(ISTIO, ramp_steps_pct=(25, 100), warmup_requests=5)
    sim, sid = gated_world(params)

    (target,) = sim.ramp_cluster.ramp_targets()
    assert target.traffic.router.value == "istio"
    assert target.traffic.steps_pct == (25, 100)
    assert target.warmup.requests == 5
    assert target.route.namespace == "ns"
    assert target.route.deployment == "model"
    assert target.saved is None
    await sim.ramp_cluster.save_ramp(sid, '{"step": 1}')
    (saved,) = sim.ramp_cluster.ramp_targets()
    assert saved.saved == '{"step": 1}'


def test_bad_params_are_refused_with_the_rule() -> None:
    """Unknown routers, bad steps and bad faults are refused, naming the rule."""
    with pytest.raises(ValueError, match="unknown ramp router 'linkerd'"):
        SimParams(ramp="linkerd")
    with pytest.raises(ValueError, match="end at 100"):
        SimParams(ramp_steps_pct=(10, 50))
    with pytest.raises(ValueError, match="must increase"):
        SimParams(ramp_steps_pct=(50, 30, 100))
    with pytest.raises(ValueError, match="slow_factor"):
        PodFault(0, slow_factor=0.5)
    with pytest.raises(ValueError, match="error_ratio"):
        PodFault(0, error_ratio=1.5)
    with pytest.raises(ValueError, match="same pod"):
        SimParams(faults=(PodFault(0), PodFault(0, error_ratio=0.1)))


# -- the router splits the arrivals between the two sets ----------------------------------------


async def warm_new_pod(sim: world.World, sid: model.ServiceId) -> str:
    """Scale to five and make the new pod warm (labelled warming, not stable)."""
    await sim.cluster.scale(sid, 5)
    sim.advance(30)
    (name,) = new_pods(sim, sid)
    await sim.ramp_cluster.set_warm(sid, name, True, "warm-up passed")
    return name


async def test_warming_weight_sends_that_share_to_the_warming_set() -> None:
    """A warming weight of 20 % sends a fifth of the arrivals to the warming pod."""
    sim, sid = gated_world(rps=3.0)
    name = await warm_new_pod(sim, sid)
    router = sim.routers[TrafficRouter("istio")]
    await router.ensure(route(sim, sid))
    await router.set_weights(route(sim, sid), 20)
    sim.advance(30)

    warming, stable = await sim.health.health("ns", VLLM, [name], stable_pods(sim, sid), 30.0)
    assert warming.requests == pytest.approx(0.2 * 3.0 * 30)
    assert stable.requests == pytest.approx(0.8 * 3.0 * 30)
    assert warming.error_rate == stable.error_rate == 0.0
    assert warming.p95_s == stable.p95_s == PARAMS.service_time_s
    assert list(sim.ramp_series(sid)["warming_pct"][-3:]) == [20.0, 20.0, 20.0]
    assert sim.ramp_series(sid)["pods_ramping"][-1] == 1
    assert router.writes == [(30.0, sid, 20)]


async def test_before_a_route_exists_every_ready_pod_shares_the_traffic() -> None:
    """With no weights written, a warm pod is an endpoint of the plain Service like the rest."""
    sim, sid = gated_world(rps=3.0)
    name = await warm_new_pod(sim, sid)
    sim.advance(10)

    warming, stable = await sim.health.health("ns", VLLM, [name], stable_pods(sim, sid), 10.0)
    assert warming.requests == pytest.approx(3.0 * 10 / 5)
    assert stable.requests == pytest.approx(3.0 * 10 * 4 / 5)


async def test_the_none_router_keeps_no_weights() -> None:
    """`none` accepts every call and never splits: the gate alone decides."""
    sim, sid = gated_world(dataclasses.replace(PARAMS, ramp="none"), rps=3.0)
    name = await warm_new_pod(sim, sid)
    router = sim.routers[TrafficRouter("none")]
    await router.ensure(route(sim, sid))
    await router.set_weights(route(sim, sid), 50)
    sim.advance(10)

    assert router.warming_pct(sid) is None
    warming, _ = await sim.health.health("ns", VLLM, [name], stable_pods(sim, sid), 10.0)
    assert warming.requests == pytest.approx(3.0 * 10 / 5)


async def test_weight_on_an_empty_warming_set_is_rejected() -> None:
    """Traffic routed to a subset with no ready pod fails (no healthy upstream)."""
    sim, sid = gated_world(rps=3.0)
    await sim.cluster.scale(sid, 5)
    sim.advance(30)  # running, but not warm: not an endpoint
    router = sim.routers[TrafficRouter("istio")]
    await router.ensure(route(sim, sid))
    await router.set_weights(route(sim, sid), 30)
    sim.advance(10)

    series = sim.ramp_series(sid)
    assert series["rejected"][-10:] == pytest.approx(np.full(10, 0.9))
    assert series["failed"][-10:] == pytest.approx(np.full(10, 0.9))
    traffic = sim.traffic(sid)
    assert traffic.slo_misses == pytest.approx(9.0)


async def test_promotion_in_order_never_routes_to_an_empty_set() -> None:
    """Stable added, weights to 0, warming removed: no request is rejected on the way."""
    sim, sid = gated_world(rps=3.0)
    name = await warm_new_pod(sim, sid)
    target = route(sim, sid)
    router = sim.routers[TrafficRouter("istio")]
    await router.ensure(target)
    await router.set_weights(target, 20)
    sim.advance(5)

    await sim.ramp_cluster.set_labels(sid, name, warming=True, stable=True)
    sim.advance(1)
    await router.set_weights(target, 0)
    sim.advance(1)
    await sim.ramp_cluster.set_labels(sid, name, warming=False, stable=True)
    sim.advance(5)

    assert sim.ramp_series(sid)["rejected"].sum() == 0
    assert sim.cluster.counts(sid).serving == 5
    _, stable = await sim.health.health("ns", VLLM, [], [name], 5.0)
    assert stable.requests == pytest.approx(3.0 * 5 / 5)


async def test_weights_need_an_ensured_route_and_a_percentage() -> None:
    """Weights on a route never ensured, or outside 0..100, are refused."""
    sim, sid = gated_world()
    router = sim.routers[TrafficRouter("gateway-api")]

    with pytest.raises(errors.ActuationError, match="ensure it"):
        await router.set_weights(route(sim, sid), 10)
    await router.ensure(route(sim, sid))
    with pytest.raises(ValueError, match=r"within \[0, 100\]"):
        await router.set_weights(route(sim, sid), 101)
    assert await router.settled(route(sim, sid))
    await router.release(route(sim, sid))
    assert router.warming_pct(sid) is None


# -- bad pods: slow and failing -------------------------------------------------------------


async def test_slow_pod_is_slower_and_a_failing_pod_fails_its_share() -> None:
    """A slow pod's requests take its longer service time; a failing pod fails its ratio."""
    params = dataclasses.replace(
        ISTIO,
        faults=(PodFault(0, slow_factor=3.0), PodFault(1, error_ratio=0.25)),
    )
    sim, sid = gated_world(params, rps=4.0, replicas=4)
    await sim.cluster.scale(sid, 6)
    sim.advance(30)
    slow, failing = new_pods(sim, sid)
    for name in (slow, failing):
        await sim.ramp_cluster.set_warm(sid, name, True, "")
    sim.advance(20)

    stable = stable_pods(sim, sid)
    slow_health, stable_health = await sim.health.health("ns", VLLM, [slow], stable, 20.0)
    failing_health, _ = await sim.health.health("ns", VLLM, [failing], stable, 20.0)
    # Requests go by speed: the slow pod takes a third of a normal pod's share.
    per_normal = 4.0 * 20 / (5 + 1 / 3)
    assert slow_health.requests == pytest.approx(per_normal / 3)
    assert slow_health.p95_s == pytest.approx(3 * PARAMS.service_time_s)
    assert stable_health.p95_s == pytest.approx(PARAMS.service_time_s)
    assert failing_health.error_rate == pytest.approx(0.25)
    assert stable_health.error_rate == 0.0
    # Both new pods' problems reach the user: misses are the slow share plus the failures.
    traffic = sim.traffic(sid)
    assert traffic.failed == pytest.approx(0.25 * per_normal)
    assert traffic.slo_misses == pytest.approx(per_normal / 3 + 0.25 * per_normal)


async def test_health_reads_nan_for_metrics_the_server_lacks_and_raises_when_down() -> None:
    """No latency histogram: P95 NaN; no error counter: error rate NaN; an outage raises."""
    sim, sid = gated_world(rps=3.0)
    sim.advance(10)
    names = stable_pods(sim, sid)
    bare = metricnames.MetricNames(requests="served_total", queue="waiting")

    _, stable = await sim.health.health("ns", bare, [], names, 10.0)
    assert stable.requests == pytest.approx(30.0)
    assert math.isnan(stable.p95_s)
    assert math.isnan(stable.error_rate)
    _, other_namespace = await sim.health.health("elsewhere", VLLM, [], names, 10.0)
    assert other_namespace.requests == 0

    sim.health.switch_off(5.0, 20.0)
    with pytest.raises(errors.ObservationError, match="outage"):
        await sim.health.health("ns", VLLM, [], names, 10.0)
    with pytest.raises(errors.ObservationError):
        await sim.health.in_flight("ns", VLLM, names)


@pytest.mark.parametrize("out_by", ["readiness", "labels"])
async def test_in_flight_counts_running_and_waiting_and_drains_after_leaving(out_by: str) -> None:
    """In flight is the pod's running work plus its share of the queue; out of the routed set
    (unready, or unlabelled behind a mesh route), it falls to zero within the service time."""
    sim, sid = gated_world(rps=3.0)
    if out_by == "labels":
        await sim.routers[TrafficRouter("istio")].ensure(route(sim, sid))
    sim.advance(10)
    victim, *_ = stable_pods(sim, sid)

    before = await sim.health.in_flight("ns", VLLM, [victim, "gone"])
    # 3/4 request/s each, for a service time of 2 s.
    assert before == {victim: pytest.approx(1.5)}
    if out_by == "labels":
        await sim.ramp_cluster.set_labels(sid, victim, warming=False, stable=False)
    else:
        await sim.ramp_cluster.set_warm(sid, victim, False, "draining")
    sim.advance(1)
    draining = await sim.health.in_flight("ns", VLLM, [victim])
    sim.advance(2)
    drained = await sim.health.in_flight("ns", VLLM, [victim])

    assert 0 < draining[victim] < before[victim]
    assert drained == {victim: 0.0}


# -- the prober -----------------------------------------------------------------------------


async def test_probes_are_slow_while_cold_then_normal() -> None:
    """A fresh pod answers `cold_factor` slower for `warmup_s`, then in its service time."""
    sim, sid = gated_world()
    await sim.cluster.scale(sid, 5)
    sim.advance(20)
    (name,) = new_pods(sim, sid)
    ip = pod_named(sim, sid, name).ip
    assert ip is not None

    cold = await sim.prober.probe(ip, 8000, "/v1/models", 3, 30.0)
    sim.advance(5)
    warm = await sim.prober.probe(ip, 8000, "/v1/models", 3, 30.0)

    assert (cold.ok, cold.failed, warm.ok) == (3, 0, 3)
    assert np.median(cold.latencies_s) == pytest.approx(6.0, rel=0.15)
    assert np.median(warm.latencies_s) == pytest.approx(2.0, rel=0.15)


async def test_probes_refused_before_start_up_and_at_unknown_addresses() -> None:
    """No running pod at the address: every probe fails."""
    sim, sid = gated_world()
    await sim.cluster.scale(sid, 5)
    sim.advance(5)
    (name,) = new_pods(sim, sid)
    ip = pod_named(sim, sid, name).ip
    assert ip is not None  # it holds a GPU, but its server is not up

    assert await sim.prober.probe(ip, 8000, "/", 3, 5.0) == ports.ProbeResult(0, 3, ())
    assert await sim.prober.probe("192.0.2.1", 8000, "/", 2, 5.0) == ports.ProbeResult(0, 2, ())


async def test_slow_and_failing_pods_probe_as_they_serve() -> None:
    """A slow pod probes slow (past the timeout: failed); a failing pod fails some probes."""
    params = dataclasses.replace(
        ISTIO, faults=(PodFault(0, slow_factor=2.0), PodFault(1, error_ratio=0.5))
    )
    sim, sid = gated_world(params)
    await sim.cluster.scale(sid, 6)
    sim.advance(30)
    slow, failing = (pod_named(sim, sid, n).ip for n in new_pods(sim, sid))
    assert slow is not None
    assert failing is not None

    slow_answers = await sim.prober.probe(slow, 8000, "/", 5, 30.0)
    timed_out = await sim.prober.probe(slow, 8000, "/", 5, 3.0)
    failing_answers = await sim.prober.probe(failing, 8000, "/", 40, 30.0)

    assert np.median(slow_answers.latencies_s) == pytest.approx(4.0, rel=0.15)
    assert (timed_out.ok, timed_out.failed) == (0, 5)
    assert 5 < failing_answers.failed < 35
    assert failing_answers.ok + failing_answers.failed == 40


async def test_probes_repeat_exactly_for_a_seed() -> None:
    """The same seed gives the same probe answers; another seed, others."""

    async def answers(seed: int) -> ports.ProbeResult:
        params = dataclasses.replace(ISTIO, seed=seed, faults=(PodFault(0, error_ratio=0.5),))
        sim, sid = gated_world(params)
        await sim.cluster.scale(sid, 5)
        sim.advance(30)
        (name,) = new_pods(sim, sid)
        ip = pod_named(sim, sid, name).ip
        assert ip is not None
        return await sim.prober.probe(ip, 8000, "/", 10, 30.0)

    assert await answers(3) == await answers(3)
    assert await answers(3) != await answers(4)


# -- reclaim and victims --------------------------------------------------------------------


async def test_reclaimed_pod_is_replaced_by_a_fresh_normal_one() -> None:
    """Reclaim deletes the pod; the replica controller makes a new one, which starts over and
    behaves normally."""
    params = dataclasses.replace(ISTIO, faults=(PodFault(0, error_ratio=1.0),))
    sim, sid = gated_world(params)
    await sim.cluster.scale(sid, 5)
    sim.advance(30)
    (bad,) = new_pods(sim, sid)

    await sim.ramp_cluster.reclaim(sid, bad)

    (fresh,) = new_pods(sim, sid)
    assert fresh != bad
    assert sim.cluster.counts(sid).starting == 1
    assert sim.cluster.service(sid).desired == 5
    assert sim.ramp_cluster.reclaimed[sid] == 1
    pod_model = sim.pod_model(sid)
    assert pod_model is not None
    assert pod_model.fault(sim.cluster.pod(sid, fresh)) is None
    sim.advance(20)
    info = pod_named(sim, sid, fresh)
    assert info.running
    assert not info.warm


async def test_marked_victim_goes_first_on_scale_down() -> None:
    """The pod with the lowest deletion cost is the one a scale-down removes."""
    sim, sid = gated_world(replicas=4)
    victim = stable_pods(sim, sid)[1]

    await sim.ramp_cluster.mark_victim(sid, victim)
    await sim.cluster.scale(sid, 3)

    assert victim not in [p.name for p in sim.ramp_cluster.pods(sid)]
    assert len(stable_pods(sim, sid)) == 3


# -- without the ramp, nothing changes ----------------------------------------------------------


def step_trace() -> np.ndarray:
    rng = np.random.default_rng(2)
    arrivals = rng.poisson(8, 900).astype(float)
    arrivals[300:600] *= 3
    return arrivals


def test_ramp_off_keeps_the_plain_model_numbers() -> None:
    """With neither ramp nor faults, a run gives the numbers the plain model always gave."""
    params = SimParams(startup_sigma=0.3, seed=11, max_replicas=40)

    result = run.simulate(step_trace(), params)

    assert set(result.summary) == SUMMARY_KEYS
    s = result.summary
    # The default policy's numbers since its burst path judges the newest sample, it sizes for
    # the bench's SLO and a burst's scale-up is released once its pods serve (policy changes,
    # not simulator ones: the release's scale-down is the fourth event and the saved GPU time).
    assert s["slo_misses"] == pytest.approx(2506.46653144055, rel=1e-12)
    assert s["p95_latency_s"] == pytest.approx(23.60966557123972, rel=1e-12)
    assert s["gpu_hours"] == pytest.approx(6.901944444444444, rel=1e-12)
    assert s["scale_events"] == 4


def test_per_pod_model_with_normal_pods_matches_the_plain_model() -> None:
    """Modelled per pod with every pod alike, a run repeats the plain model's series."""
    params = SimParams(startup_sigma=0.3, seed=11, max_replicas=40)

    plain = run.simulate(step_trace(), params)
    per_pod = run.simulate(step_trace(), dataclasses.replace(params, faults=(PodFault(0),)))

    for name, column in plain.timeseries.items():
        np.testing.assert_allclose(per_pod.timeseries[name], column, rtol=1e-12, atol=1e-12)
    assert set(per_pod.summary) == SUMMARY_KEYS | RAMP_SUMMARY_KEYS
    assert per_pod.summary["slo_misses"] == pytest.approx(plain.summary["slo_misses"])
    assert (per_pod.summary["failed"], per_pod.summary["ramp"]) == (0.0, None)


def test_without_the_ramp_a_failing_new_pod_takes_its_full_share() -> None:
    """Ramp off: the first new pod fails half its requests as soon as it serves."""
    params = SimParams(startup_sigma=0.0, startup_s=30.0, max_replicas=40, policy="seed")
    faulty = dataclasses.replace(params, faults=(PodFault(0, error_ratio=0.5),))

    result = run.simulate(step_trace(), faulty)

    assert result.summary["failed"] > 50
    assert result.summary["rejected"] == 0
    assert result.summary["slo_misses"] > run.simulate(step_trace(), params).summary["slo_misses"]


# -- the ramp driver on the simulator, through the real loop -----------------------------------

FAST = dataclasses.replace(
    ISTIO, replica_capacity_rps=10.0, target_queue_per_replica=20.0, startup_s=30.0
)
"""Ten requests/s per replica: a ramp step of a few percent still sees enough requests."""
LOAD_RPS = 30.0
"""Four replicas at the load target."""


class FixedPolicy:
    """A `ports.Policy` that always wants the same count."""

    def __init__(self, replicas: int) -> None:
        self.replicas = replicas

    def decide(
        self, workload: ports.Workload, observation: model.Observation, state: model.PolicyState
    ) -> tuple[model.Decision, model.PolicyState]:
        current = observation.replicas
        kind, reason = model.Kind.STEADY, model.Reason.AT_DESIRED
        if self.replicas > current:
            kind, reason = model.Kind.SCALE_UP, model.Reason.ABOVE_TARGET
        elif self.replicas < current:
            kind, reason = model.Kind.SCALE_DOWN, model.Reason.BELOW_TARGET
        return model.Decision(current, self.replicas, kind, reason, "fixed"), state


async def ramped(
    params: SimParams, *, to: int, seconds: int = 600, replicas: int = 4
) -> tuple[world.World, model.ServiceId]:
    """Four pods serving `LOAD_RPS`; the policy wants `to`; the loop runs `seconds`."""
    sim = world.World(params)
    sid = sim.add_service(SERVICE, np.full(seconds, LOAD_RPS), params, replicas=replicas)
    await run.drive(sim, until_s=seconds, policy=FixedPolicy(to))
    return sim, sid


def reasons(sim: world.World) -> list[str]:
    return [e.reason for e in sim.ramp_cluster.events]


async def test_ramp_walks_its_steps_then_promotes() -> None:
    """A new pod gets 10, 30, 50 and 100 % of its fair share, each for at least the gate's
    dwell, and is promoted: warming weight back to 0, the pod stable and serving."""
    sim, sid = await ramped(FAST, to=5)

    writes = [(at_s, pct) for at_s, _, pct in sim.routers[TrafficRouter("istio")].writes]
    expected = [ramp.share_pct(p, 1, 4) for p in FAST.ramp_steps_pct] + [0]
    assert [pct for _, pct in writes] == expected == [2, 6, 10, 20, 0]
    times = [at_s for at_s, _ in writes]
    dwell_s = ramp.RampConfig().min_dwell_ratio * FAST.ramp_step_interval_s
    assert all(b - a >= dwell_s for a, b in itertools.pairwise(times[:4]))
    assert reasons(sim).count("RampPromoted") == 1
    assert "RampRolledBack" not in reasons(sim)
    assert sim.cluster.counts(sid).serving == 5
    assert len(stable_pods(sim, sid)) == 5
    assert new_pods(sim, sid) == []
    series = sim.ramp_series(sid)
    assert series["rejected"].sum() == 0
    assert set(series["warming_pct"][np.isfinite(series["warming_pct"])]) == set(expected)
    assert sim.traffic(sid).slo_misses == 0


async def test_failing_new_pod_is_rolled_back_and_replaced() -> None:
    """A new pod failing 30 % of its requests fails the first gate: its weight goes to 0, it is
    reclaimed, and its fresh replacement is ramped and promoted."""
    params = dataclasses.replace(FAST, faults=(PodFault(0, error_ratio=0.3),))

    sim, sid = await ramped(params, to=5, seconds=900)

    events = reasons(sim)
    assert events.index("RampRolledBack") < events.index("RampPromoted")
    assert sim.ramp_cluster.reclaimed[sid] == 1
    weights = [pct for _, _, pct in sim.routers[TrafficRouter("istio")].writes]
    assert weights[:2] == [2, 0]
    assert sim.cluster.counts(sid).serving == 5
    pod_model = sim.pod_model(sid)
    assert pod_model is not None
    assert all(pod_model.fault(p) is None for p in sim.cluster.pods(sid))


async def test_failing_new_pod_misses_fewer_requests_with_the_ramp() -> None:
    """With the ramp, the failing pod is caught on a sliver of traffic; without, it fails its
    full share until the end."""
    params = dataclasses.replace(FAST, faults=(PodFault(0, error_ratio=0.3),))

    with_ramp, sid = await ramped(params, to=5, seconds=900)
    without, _ = await ramped(dataclasses.replace(params, ramp=None), to=5, seconds=900)

    ramp_traffic, plain_traffic = with_ramp.traffic(sid), without.traffic(sid)
    assert isinstance(ramp_traffic, traffic_.SplitTraffic)
    assert isinstance(plain_traffic, traffic_.SplitTraffic)
    assert 0 < ramp_traffic.failed < plain_traffic.failed / 20
    assert ramp_traffic.slo_misses < plain_traffic.slo_misses / 20
    assert plain_traffic.failed == pytest.approx(0.3 * LOAD_RPS / 5 * (900 - 35), rel=0.05)


async def test_slow_new_pod_never_warms_and_is_replaced_at_the_deadline() -> None:
    """A pod three times slower probes slow: it never passes the warm-up, is reclaimed at the
    deadline, and the replacement serves."""
    params = dataclasses.replace(
        FAST, faults=(PodFault(0, slow_factor=3.0),), warmup_deadline_s=120.0
    )

    sim, sid = await ramped(params, to=5, seconds=600)

    assert reasons(sim)[0] == "WarmupTimedOut"
    assert "RampPromoted" in reasons(sim)
    assert sim.ramp_cluster.reclaimed[sid] == 1
    assert sim.cluster.counts(sid).serving == 5
    assert sim.traffic(sid).slo_misses == 0


async def test_gate_only_router_promotes_a_pod_once_warm() -> None:
    """With the `none` router, a pod is promoted once its probes are back to normal; no
    weight is written."""
    sim, sid = await ramped(dataclasses.replace(FAST, ramp="none"), to=5, seconds=120)

    assert sim.routers[TrafficRouter("none")].writes == []
    assert sim.cluster.counts(sid).serving == 5
    (pod,) = [p for p in sim.cluster.pods(sid) if p.ordinal == 4]
    assert pod.serving_at_s is not None
    assert pod.running_at_s is not None
    # Cold for `warmup_s` after it started: the probes say so, and the gate waits.
    assert pod.serving_at_s >= pod.running_at_s + FAST.warmup_s


async def test_scale_down_drains_the_victim_before_removing_it() -> None:
    """A scale-down takes the victim out of traffic, waits for its requests, then removes it;
    no request is rejected or dropped on the way."""
    sim, sid = await ramped(FAST, to=3, seconds=60)

    assert [r for r in reasons(sim) if r.startswith("Drain")] == ["DrainStarted", "Drained"]
    assert sim.cluster.service(sid).desired == 3
    assert len(sim.cluster.pods(sid)) == 3
    traffic = sim.traffic(sid)
    assert isinstance(traffic, traffic_.SplitTraffic)
    assert traffic.rejected == traffic.dropped == 0


def test_ramp_runs_repeat_exactly_for_a_seed() -> None:
    """The same trace, params and seed give the same run, probes and rollbacks included."""
    params = dataclasses.replace(
        FAST, startup_sigma=0.2, faults=(PodFault(0, error_ratio=0.5), PodFault(2, 2.0))
    )
    arrivals = np.random.default_rng(5).poisson(np.linspace(20, 60, 900)).astype(float)

    first = run.simulate(arrivals, params)
    second = run.simulate(arrivals, params)

    assert first.summary == second.summary
    assert first.summary["ramp"]["pods_reclaimed"] >= 1
    for name, column in first.timeseries.items():
        np.testing.assert_array_equal(column, second.timeseries[name])


def test_simulate_command_takes_a_ramp_router(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`autoscaler simulate --ramp istio` runs the ramp and says so in summary.json; an unknown
    router is a usage error."""
    for name in list(os.environ):
        if name.startswith("AUTOSCALER_"):
            monkeypatch.delenv(name)
    trace = tmp_path / "trace.csv"
    counts = np.random.default_rng(1).poisson(np.where(np.arange(600) < 200, 3.0, 6.0))
    trace.write_text("t_seconds,requests\n" + "".join(f"{t},{c}\n" for t, c in enumerate(counts)))
    out = tmp_path / "out"

    try:
        code = cli.main(["simulate", "--trace", str(trace), "--ramp", "istio", "--out", str(out)])
        refused = cli.main(["simulate", "--trace", str(trace), "--ramp", "linkerd"])
    finally:
        structlog.reset_defaults()

    assert (code, refused) == (0, 2)
    summary = json.loads((out / "summary.json").read_text())
    assert summary.keys() >= SUMMARY_KEYS | RAMP_SUMMARY_KEYS
    assert summary["params"]["ramp"] == "istio"
    assert summary["ramp"]["router"] == "istio"
    assert summary["ramp"]["events"]["RampStarted"] >= 1
    assert "invalid choice: 'linkerd'" in capsys.readouterr().err
