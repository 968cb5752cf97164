"""Hostile text in the controller's own annotations costs only the service that carries it."""

from __future__ import annotations

import json

from kube.emulator import Kube
from kube.kubelet import FakeCluster
from prom.fixtures import Stack

from autoscaler.contract.annotations import CORRUPT_STATE, RAMP_KEY, STATE_KEY, quote

from .support import (
    DEPLOYMENTS,
    Controllers,
    Service,
    SteppedClock,
    advance_until,
    deployment,
    ensure_namespace,
    managed,
    wait_for,
    wait_for_load,
)

WARM = "autoscaler.dsec.io/warm"
HUGE_STATE = '{"lastScaleUp": ' + "9" * 400 + "}"
"""An OverflowError for a reader that turns it into a float."""
DEEP_RAMP = "[" * 100_000
"""A RecursionError for a reader that hands it to json.loads."""


def hostile(service: Service, key: str, text: str) -> None:
    """Write `text` into one of the controller's annotations, as any editor of it can."""
    service.kube.store.patch(
        DEPLOYMENTS,
        service.namespace,
        service.name,
        {"metadata": {"annotations": {key: text}}},
        content_type="application/merge-patch+json",
    )


def annotation(service: Service, key: str) -> str | None:
    value = service.object["metadata"].get("annotations", {}).get(key)
    return value if isinstance(value, str) else None


def rebuilt(service: Service, key: str, text: str) -> bool:
    """Whether the controller has replaced `text` with a state of its own."""
    value = annotation(service, key)
    return value is not None and value != text and isinstance(json.loads(value), dict)


async def test_hostile_state_and_ramp_cost_only_their_service_across_a_takeover(
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    clock: SteppedClock,
    unique: str,
) -> None:
    """A 400-digit state and a 100,000-deep ramp get CorruptState Events and fresh states, the
    neighbour scales, and the follower that takes over from a killed leader does the same."""
    kubelet.add_node("gpu-1", gpus=16)
    namespace = f"{unique}-h"
    odd_state = await Service.create(
        kube,
        kubelet,
        stack.upper,
        namespace,
        "odd-state",
        annotations=managed() | {STATE_KEY: HUGE_STATE},
    )
    ensure_namespace(kube, namespace)
    body = deployment("odd-ramp", annotations=managed() | {RAMP_KEY: DEEP_RAMP})
    body["spec"]["template"]["spec"]["readinessGates"] = [{"conditionType": WARM}]
    kube.store.create(DEPLOYMENTS, body, namespace=namespace)
    odd_ramp = Service(kube, kubelet, stack.upper, namespace, "odd-ramp")
    good = await Service.create(kube, kubelet, stack.upper, namespace, "good")
    good.serve(rate_per_s=12.5)  # 25 req/s on 2 replicas, target 10 each: 3 wanted
    await wait_for_load(stack.prometheus, good, 25.0)

    first = await cluster.start("ctl-a")
    second = await cluster.start("ctl-b", leader=False)
    await advance_until(clock, lambda: good.replicas == 3, limit_s=5, what="scale-up")
    await advance_until(
        clock,
        lambda: (
            rebuilt(odd_state, STATE_KEY, HUGE_STATE) and rebuilt(odd_ramp, RAMP_KEY, DEEP_RAMP)
        ),
        limit_s=5,
        what="the hostile states rebuilt",
    )
    await first.controller.cluster.events.wait_idle()

    (state_event,) = odd_state.events(CORRUPT_STATE)
    assert state_event["type"] == "Warning"
    assert state_event["message"] == (
        f"{STATE_KEY}={quote(HUGE_STATE)}: has an integer beyond 2^53 (400 characters); "
        "ignored, the state is rebuilt as for a new service"
    )
    (ramp_event,) = odd_ramp.events(CORRUPT_STATE)
    assert ramp_event["type"] == "Warning"
    assert ramp_event["message"] == (
        f"{RAMP_KEY}={quote(DEEP_RAMP)}: ramp state nested deeper than 8 arrays or objects; "
        "ignored, the ramp starts over with its weight at 0"
    )
    assert good.events(CORRUPT_STATE) == []
    assert not first.task.done()

    # The leader dies; the tenant writes the same text again before the follower takes over.
    await first.kill()
    hostile(odd_state, STATE_KEY, HUGE_STATE)
    hostile(odd_ramp, RAMP_KEY, DEEP_RAMP)
    config = second.controller.settings.kubernetes
    await advance_until(
        clock,
        lambda: second.controller.leading,
        limit_s=config.lease_duration_s + 3 * config.retry_interval_s,
        what="the follower leading",
    )
    await wait_for(lambda: second.controller.ticks > 0, what="the new leader's first tick")
    await advance_until(
        clock,
        lambda: (
            rebuilt(odd_state, STATE_KEY, HUGE_STATE) and rebuilt(odd_ramp, RAMP_KEY, DEEP_RAMP)
        ),
        limit_s=5,
        what="the hostile states rebuilt again",
    )
    ticks = second.controller.ticks
    await clock.advance(3)
    assert second.controller.ticks > ticks
    assert not second.task.done()
    await second.controller.cluster.events.wait_idle()
    for service in (odd_state, odd_ramp):
        instances = [e["reportingInstance"] for e in service.events(CORRUPT_STATE)]
        assert instances == ["ctl-a", "ctl-b"], instances

    # The neighbour goes on scaling under the new leader.
    await good.sync_pods()
    good.serve(rate_per_s=20.0)
    await wait_for_load(stack.prometheus, good, 60.0)
    await advance_until(clock, lambda: good.replicas > 3, limit_s=90, what="second scale-up")
