"""The warm-up gate and the traffic ramp end to end (docs/architecture.md,
"The warm-up gate and the traffic ramp"), on the harness of `ramped`."""

from __future__ import annotations

import pytest
from kube.kubelet import FakeCluster
from prom.fixtures import Stack

from .ramped import (
    DELETION_COST,
    GATEWAY_API,
    ISTIO,
    LATENCY_S,
    NONE,
    SMI,
    STABLE,
    WARMING,
    Ramped,
    Router,
    WarmupEndpoint,
    dedupe,
    endpoint,
    restart,
)
from .support import PODS, Controllers

__all__ = ["endpoint"]


async def test_the_controllers_time_warm_up_probes_on_the_stepped_clock(
    cluster: Controllers, endpoint: WarmupEndpoint
) -> None:
    """A probe's latency is controller time, none within a tick, so new pods probed in one tick
    are judged alike against the serving pods however long the machine took to answer."""
    running = await cluster.start()

    result = await running.controller.prober.probe("127.0.0.1", endpoint.port, "/warm", 3, 5.0)

    assert (result.ok, result.failed, result.latencies_s) == (3, 0, (0.0, 0.0, 0.0))


# -- the walk --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("router", "restarting"),
    [(ISTIO, True), (GATEWAY_API, True), (SMI, True), (ISTIO, False)],
    ids=[
        "istio-restarted-at-each-step",
        "gateway-api-restarted-at-each-step",
        "smi-restarted-at-each-step",
        "istio",
    ],
)
async def test_a_scale_up_walks_the_steps_and_promotes(
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    unique: str,
    endpoint: WarmupEndpoint,
    router: Router,
    restarting: bool,
) -> None:
    """Two new pods next to two serving ones get 10, 30, 50 and 100 % of their fair share (5, 15,
    25 and 50 % of the traffic), pass each health gate and are promoted; a controller stopped
    and started at each step resumes where the ramp was."""
    kubelet.add_node("gpu-1", gpus=8)
    chat = await Ramped.make(cluster, kubelet, stack, f"{unique}-r", router, endpoint)
    first = await chat.promote_first_pods()
    assert chat.warming_weights() == [0]
    running = cluster.running[-1]
    # What the next ramp needs of the route's companions changes meanwhile; its start mends it.
    chat.drift()

    # 35 req/s on 2 serving replicas, target 10 each: 4 wanted.
    await chat.run_until(lambda: chat.replicas == 4, limit_s=5, what="the scale-up")
    await kubelet.settle()
    new = sorted(set(chat.pods()) - set(first))
    assert len(new) == 2
    assert all(chat.labels(p).get(WARMING) == "true" for p in new)
    chat.serve_pods(new, rate_per_s=10.0)
    await chat.wait_for_rate(new, 20.0)

    restarts = 0
    walked: list[int] = []
    while chat.stable() != sorted(first + new):
        await chat.tick()
        weight = chat.warming_weights()[-1]
        if restarting and weight not in walked and weight:
            walked.append(weight)
            before = chat.weights()
            restarts += 1
            running = await restart(cluster, running, f"ctl-{restarts}")
            await chat.tick()
            assert chat.weights() == before, "a restarted controller moved the weights"
        if len(chat.seen) > 12:
            raise AssertionError(f"the ramp does not end: {chat.seen}")

    assert dedupe(chat.warming_weights()) == [0, 5, 15, 25, 50, 0]
    assert chat.weights() == {"stable": 100, "warming": 0}
    chat.assert_mended()
    if restarting:
        assert restarts == 4
    assert chat.ramp() == {"v": 1, "phase": "idle"}
    assert all(chat.warm(p) for p in chat.pods())
    await running.controller.cluster.events.wait_idle()
    reasons = [e["reason"] for e in chat.events() if e["reason"].startswith("Ramp")]
    assert reasons == [
        "RampPromoted",  # the first pods: no serving pod to compare with,
        "RampPromoted",  # and then serving
        "RampStarted",
        "RampStep",
        "RampStep",
        "RampStep",
        "RampStep",
        "RampPromoted",
    ]
    metrics = running.controller.telemetry.exposition().decode()
    labels = f'namespace="{chat.namespace}",service="chat"'
    assert f"autoscaler_ramp_warming_weight_percent{{{labels}}} 0.0" in metrics
    if not restarting:  # told by the controller that scaled
        assert f'autoscaler_tier_replicas{{{labels},tier="whole"}} 4.0' in metrics


# -- a gate that fails -----------------------------------------------------------------------------


@pytest.mark.parametrize("router", [ISTIO, GATEWAY_API, SMI], ids=["istio", "gateway-api", "smi"])
async def test_new_pods_that_fail_the_health_gate_are_rolled_back_and_replaced(
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    unique: str,
    endpoint: WarmupEndpoint,
    router: Router,
) -> None:
    """New pods aborting half their requests, then new pods too slow, each lose their traffic
    (weight 0 first) and are deleted, and their replacements ramp in turn. A serving pod someone
    took out of the stable set is put back before the ramp starts."""
    kubelet.add_node("gpu-1", gpus=8)
    chat = await Ramped.make(cluster, kubelet, stack, f"{unique}-f", router, endpoint)
    first = await chat.promote_first_pods()
    running = cluster.running[-1]
    # As `kubectl label pod ... autoscaler.dsec.io/stable-` would: a serving pod out of the set.
    chat.kube.store.patch(
        PODS,
        chat.namespace,
        first[0],
        {"metadata": {"labels": {STABLE: None}}},
        content_type="application/merge-patch+json",
    )

    await chat.run_until(lambda: chat.replicas == 4, limit_s=5, what="the scale-up")
    await kubelet.settle()
    # (what fails, the new pods' error ratio and latency)
    failing = [("error rate", 0.5, LATENCY_S), ("P95", 0.0, 2.0)]
    seen_pods: set[str] = set(first)
    for what, error_ratio, latency_s in failing:
        cohort = sorted(set(chat.pods()) - seen_pods)
        assert len(cohort) == 2, cohort
        seen_pods |= set(cohort)
        chat.serve_pods(cohort, rate_per_s=10.0, error_ratio=error_ratio, latency_s=latency_s)
        await chat.wait_for_rate(cohort, 20.0)

        order: list[str] = []

        def replaced(cohort: list[str] = cohort, order: list[str] = order) -> bool:
            """Notes what each second showed: ramped, unweighted with the pods alive, gone."""
            alive = set(cohort) & set(chat.pods())
            warming = (chat.weights() or {}).get("warming")
            seen = "gone" if not alive else ("ramped" if warming else "unweighted")
            if not order or order[-1] != seen:
                order.append(seen)
            return not alive and len(chat.pods()) == 4

        await chat.run_until(replaced, limit_s=40, what=f"the rollback on {what}")
        assert order == ["unweighted", "ramped", "unweighted", "gone"]
        for pod in cohort:
            chat.metrics.drop(chat.namespace, pod)
        rolled_back = chat.events("RampRolledBack")[-1]
        assert rolled_back["type"] == "Warning"
        assert what in rolled_back["message"]
        assert first[0] in chat.stable()

    # Two failures in a row do not hold the ramp: the replacements, once warm, ramp in turn.
    fresh = sorted(set(chat.pods()) - seen_pods)
    await chat.run_until(
        lambda: (chat.ramp() or {}).get("cohort") == fresh and chat.warming_weights()[-1] == 5,
        limit_s=20,
        what="the replacements ramping",
    )

    assert dedupe(chat.warming_weights()) == [0, 5, 0, 5, 0, 5]
    assert len(chat.events("RampRolledBack")) == 2
    assert (chat.ramp() or {})["failures"] == 2
    metrics = running.controller.telemetry.exposition().decode()
    labels = f'namespace="{chat.namespace}",service="chat"'
    assert f"autoscaler_ramp_rollbacks_total{{{labels}}} 2.0" in metrics
    assert f"autoscaler_ramp_held{{{labels}}} 0.0" in metrics


async def test_a_pod_that_never_warms_is_replaced_across_a_restart(
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    unique: str,
    endpoint: WarmupEndpoint,
) -> None:
    """With the gate alone (`none`), new pods whose warm-up endpoint fails stay out of the
    Service (not Ready) until their deadline, which a restarted controller keeps; they are then
    deleted and their replacements, warm, join the stable set."""
    kubelet.add_node("gpu-1", gpus=8)
    chat = await Ramped.make(
        cluster, kubelet, stack, f"{unique}-n", NONE, endpoint, **{"warmup-deadline": "10s"}
    )
    first = await chat.promote_first_pods()
    running = cluster.running[-1]
    endpoint.status = 503

    await chat.run_until(lambda: chat.replicas == 4, limit_s=5, what="the scale-up")
    await kubelet.settle()
    cold = sorted(set(chat.pods()) - set(first))
    started_s = chat.clock.now()
    await chat.tick(5)
    assert [chat.warm(p) for p in cold] == [None, None]
    assert all(chat.labels(p).get(WARMING) == "true" for p in cold)
    deadlines = (chat.ramp() or {}).get("deadlines", {})
    assert sorted(deadlines) == cold
    deadline_s = max(deadlines.values())
    assert deadline_s <= started_s + 10 + 2
    running = await restart(cluster, running, "ctl-b")

    await chat.run_until(lambda: not set(cold) & set(chat.pods()), limit_s=20, what="the reclaim")
    assert 0 <= chat.clock.now() - deadline_s <= 2
    await running.controller.cluster.events.wait_idle()
    timed_out = chat.events("WarmupTimedOut")
    assert len(timed_out) == 2
    assert all(e["type"] == "Warning" for e in timed_out)

    endpoint.status = 200
    fresh = sorted(set(chat.pods()) - set(first) - set(cold))
    assert len(fresh) == 2
    await chat.run_until(
        lambda: chat.stable() == sorted(first + fresh), limit_s=20, what="the fresh pods warm"
    )
    assert all(chat.warm(p) for p in fresh)
    assert chat.route() is None
    assert chat.ramp() == {"v": 1, "phase": "idle"}


# -- scale-down ------------------------------------------------------------------------------------


@pytest.mark.parametrize("router", [NONE, ISTIO], ids=["none", "istio"])
async def test_a_scale_down_drains_its_victim_before_the_replicas_drop(
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    unique: str,
    endpoint: WarmupEndpoint,
    router: Router,
) -> None:
    """The least loaded serving pod leaves the routed set first; the replicas drop once its
    requests have finished (or, across a restart, once the grace period is over), and the
    ReplicaSet removes that pod, marked with the lowest deletion cost. The route's weights stay
    as they were, and `SuccessfulRescale` announces each new size once it is set."""
    kubelet.add_node("gpu-1", gpus=8)
    chat = await Ramped.make(
        cluster,
        kubelet,
        stack,
        f"{unique}-d",
        router,
        endpoint,
        replicas=4,
        **{"scale-down-cooldown": "0s"},
    )
    pods = chat.pods()
    # 6 req/s on 4 replicas, target 10 each: the floor of 2 is wanted, one pod at a time.
    chat.serve_pods(pods, rate_per_s=1.5, running=3.0)
    chat.metrics.set_vllm(chat.namespace, pods[1], running=1.0)
    chat.metrics.set_vllm(chat.namespace, pods[2], running=2.0)
    await cluster.start()
    await chat.run_until(lambda: chat.stable() == pods, limit_s=30, what="the first pods promoted")
    await chat.wait_for_rate(pods, 6.0)
    await chat.wait_for_running(pods[1:2], 1.0)
    weights = chat.weights()

    victim = pods[1]
    await chat.run_until(
        lambda: STABLE not in chat.labels(victim), limit_s=10, what="the drain starts"
    )
    assert chat.warm(victim) is False  # out of the Service's endpoints too
    assert chat.replicas == 4
    await chat.tick(10)
    assert chat.replicas == 4  # a request is still in flight
    assert chat.weights() == weights
    await cluster.running[-1].controller.cluster.events.wait_idle()
    assert not chat.events("SuccessfulRescale")

    chat.metrics.set_vllm(chat.namespace, victim, running=0.0)
    await chat.wait_for_running([victim], 0.0)
    await chat.run_until(lambda: chat.replicas == 3, limit_s=5, what="the drain", settle=False)
    marked = chat.pod(victim)
    assert marked is not None
    assert marked["metadata"]["annotations"][DELETION_COST] == str(-(2**31))
    await kubelet.settle()
    assert victim not in chat.pods()
    assert len(chat.pods()) == 3
    assert chat.weights() == weights
    # The decision was published when the drain started; the new size is announced once set.
    await cluster.running[-1].controller.cluster.events.wait_idle()
    (rescaled,) = chat.events("SuccessfulRescale")
    assert rescaled["message"].startswith("New size: 3; reason: below-target: ")
    if router is not NONE:
        return  # the rest is the router's no more than this was

    # The next victim never goes idle: the grace period ends its drain, a restart included.
    victim = pods[2]
    await chat.run_until(
        lambda: STABLE not in chat.labels(victim), limit_s=10, what="the second drain"
    )
    drain = (chat.ramp() or {})["drain"]
    assert drain["victims"] == [[victim, True, True]]
    await chat.tick(20)
    await restart(cluster, cluster.running[-1], "ctl-b")
    took_s = await chat.run_until(lambda: chat.replicas == 2, limit_s=60, what="the grace period")
    assert chat.clock.now() - drain["started_s"] == pytest.approx(60, abs=3)
    assert took_s > 30
    assert victim not in chat.pods()
    await cluster.running[-1].controller.cluster.events.wait_idle()
    assert [e["reason"] for e in chat.events() if e["reason"].startswith("Drain")] == [
        "DrainStarted",
        "Drained",
        "DrainStarted",
        "Drained",
    ]
    sizes = [e["message"].split(";")[0] for e in chat.events("SuccessfulRescale")]
    assert sizes == ["New size: 3", "New size: 2"]
