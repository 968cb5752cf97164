"""GPU health end to end: a node whose card reported an XID error gets no new replicas."""

from __future__ import annotations

from kube.emulator import Kube
from kube.kubelet import FakeCluster
from prom.fixtures import Stack

from .support import (
    Controllers,
    Service,
    SteppedClock,
    advance_until,
    ensure_namespace,
    managed,
    wait_for_load,
)

A800 = {"nvidia.com/gpu.product": "NVIDIA-A800-SXM4-80GB", "nvidia.com/gpu.memory": "81920"}
MIG = "mig-3g.40gb"
TIER_LABEL = "autoscaler.dsec.io/tier"
EVENTS = "v1/events"


async def test_a_node_with_xid_errors_gets_no_new_replicas_and_says_so(
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    clock: SteppedClock,
    unique: str,
) -> None:
    """Free whole cards on a node with an XID error are passed over: the scale-up lands on the
    healthy node's MIG slices, with a Warning Event on the node and the exclusion metric."""
    faulty, healthy = f"{unique}-a", f"{unique}-b"  # the scheduler tries `faulty` first
    kubelet.add_node(faulty, gpus=4, labels=A800)
    kubelet.add_node(
        healthy,
        allocatable={"nvidia.com/mig-3g.40gb": "2"},
        labels={**A800, "nvidia.com/mig.strategy": "mixed"},
    )
    ensure_namespace(kube, "default")
    stack.upper.set_node_gpu(faulty, index=0, xid=0, fb_used_mib=1000, fb_free_mib=80000)
    stack.upper.set_node_gpu(faulty, index=1, xid=79, fb_used_mib=1000, fb_free_mib=80000)
    stack.upper.set_node_gpu(healthy, xid=0, fb_used_mib=1000, fb_free_mib=80000)
    chat = await Service.create(
        kube,
        kubelet,
        stack.upper,
        f"{unique}-n",
        "chat",
        annotations=managed(**{"model-memory": "12Gi"}),
    )
    assert {
        pod["spec"]["nodeName"] for pod in kube.store.list_objects("v1/pods", chat.namespace)
    } == {faulty}
    # 35 req/s on 2 replicas, target 10 each: 4 wanted, and 2 whole cards are free on `faulty`.
    chat.serve(rate_per_s=17.5)
    await wait_for_load(stack.prometheus, chat, 35.0)
    await stack.prometheus.wait_for_series(
        f'DCGM_FI_DEV_XID_ERRORS{{Hostname=~"{unique}-.*"}}', lambda found: len(found) >= 3
    )

    running = await cluster.start()
    await advance_until(
        clock,
        lambda: any(
            d["metadata"]["name"] == f"chat-{MIG}" and d["spec"]["replicas"] == 2
            for d in kube.store.list_objects("apps/v1/deployments", chat.namespace)
        ),
        limit_s=10,
        what="placement past the faulty node",
    )
    await kubelet.settle()
    await running.controller.cluster.events.wait_idle()

    assert chat.replicas == 2
    placed = {
        pod["metadata"]["name"]: pod["spec"].get("nodeName")
        for pod in kube.store.list_objects("v1/pods", chat.namespace)
        if pod["metadata"]["labels"].get(TIER_LABEL) == MIG
    }
    assert sorted(placed.values()) == [healthy, healthy]
    (warning,) = [
        e for e in kube.store.list_objects(EVENTS, "default") if e["reason"] == "GpuNodeExcluded"
    ]
    assert warning["type"] == "Warning"
    assert (warning["involvedObject"]["kind"], warning["involvedObject"]["name"]) == (
        "Node",
        faulty,
    )
    assert warning["message"].startswith("xid_errors: a GPU of this node reported XID error 79")
    telemetry = running.controller.telemetry
    excluded = "autoscaler_gpu_node_excluded"
    assert (
        telemetry.registry.get_sample_value(excluded, {"node": faulty, "reason": "xid_errors"}) == 1
    )
    assert (
        telemetry.registry.get_sample_value(excluded, {"node": healthy, "reason": "xid_errors"})
        is None
    )
    assert b'autoscaler_gpu_node_excluded{node="' + faulty.encode() in telemetry.exposition()
