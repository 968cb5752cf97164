"""The warm standby pool end to end (docs/operations.md, "The warm standby pool"), on the
harness of `ramped`: a pod that waits warm at 0 % of the traffic, is promoted first by a scale-up
and refilled behind."""

from __future__ import annotations

from kube.kubelet import FakeCluster
from prom.fixtures import Stack

from .ramped import ISTIO, WARMING, Ramped, WarmupEndpoint, endpoint, restart
from .support import Controllers

__all__ = ["endpoint"]


async def test_a_scale_up_promotes_the_standby_pod_first_and_refills_the_pool(
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    unique: str,
    endpoint: WarmupEndpoint,
) -> None:
    """With `standby-replicas: 1` a third pod warms up and waits with no traffic, across a
    change of leader; a load step has that pod ramped before any new pod is warm, and one of
    the new pods takes its place in the pool."""
    kubelet.add_node("gpu-1", gpus=8)
    chat = await Ramped.make(
        cluster, kubelet, stack, f"{unique}-s", ISTIO, endpoint, **{"standby-replicas": "1"}
    )
    first = chat.pods()
    chat.serve_pods(first, rate_per_s=5.0)  # 10 req/s: the minimum of 2 serving is enough
    running = await cluster.start()
    await chat.run_until(
        lambda: chat.stable() == first and bool((chat.ramp() or {}).get("pool")),
        limit_s=30,
        what="the serving pods promoted and the pool filled",
    )
    assert chat.replicas == 3
    (waiting,) = (chat.ramp() or {})["pool"]
    assert waiting not in first
    await chat.tick(10)
    assert not chat.warm(waiting)
    assert chat.labels(waiting).get(WARMING) == "true"
    assert set(chat.warming_weights()) == {0}
    assert chat.status() is not None
    assert (chat.status() or {})["standby"] == {
        "size": 1,
        "replicas": 1,
        "waiting": 1,
        "why": "fixed at 1",
    }

    running = await restart(cluster, running, "ctl-b")
    await chat.tick(5)
    assert not chat.warm(waiting), "a new leader ramped the standby pod"
    assert (chat.ramp() or {})["pool"] == [waiting]
    assert set(chat.warming_weights()) == {0}

    # 35 req/s on 2 serving replicas, target 10 each: 4 serving wanted, and the pool on top.
    chat.serve_pods(first, rate_per_s=17.5)
    chat.serve_pods([waiting], rate_per_s=10.0)
    await chat.wait_for_rate(first, 35.0)
    await chat.wait_for_rate([waiting], 10.0)  # its ramp's first step judges its own counts
    # The controller reads its own rate window, which Prometheus fills by real-time scrapes: on a
    # busy machine it can trail the 4 s rate seen above by a scrape or two, while controller
    # seconds pass as fast as the test ticks. The limit leaves room for that; the order asserted
    # below (the standby pod ramped before any new pod is warm) does not depend on it.
    await chat.run_until(lambda: chat.replicas == 5, limit_s=30, what="the scale-up")
    await kubelet.settle()
    new = sorted(set(chat.pods()) - set(first) - {waiting})
    assert len(new) == 2
    await chat.run_until(
        lambda: chat.warming_weights()[-1] > 0, limit_s=10, what="the standby pod ramped"
    )
    assert chat.warm(waiting) is True
    assert not any(chat.warm(p) for p in new), "a new pod was warm before the pool's"
    assert (chat.ramp() or {})["cohort"] == [waiting]

    await chat.run_until(
        lambda: bool(set((chat.ramp() or {}).get("pool") or ()) & set(new)),
        limit_s=30,
        what="the pool refilled",
    )
    (refill,) = (chat.ramp() or {})["pool"]
    assert not chat.warm(refill)
    assert chat.replicas == 5
    await running.controller.cluster.events.wait_idle()
    started = [e["message"] for e in chat.events("RampStarted")]
    assert started[0].startswith(f"Ramping {waiting} next to 2 serving pods")
