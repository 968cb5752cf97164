"""A pod wedged in its warm-up (it accepts connections and never answers) next to a service that
must scale: the real controller on the API emulator and a real Prometheus, stepped by the test."""

from __future__ import annotations

from kube.emulator import Kube
from kube.kubelet import FakeCluster
from prom.fixtures import Stack

from .support import Controllers
from .wedged import WedgedEndpoint, run_beside_wedged_pods


async def test_a_wedged_pod_delays_no_tick_and_its_neighbour_scales(
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    unique: str,
    wedged: WedgedEndpoint,
) -> None:
    """Every second ticks on time while a wedged pod's probe is pending, and the neighbour
    service scales up from 2 to 4 replicas meanwhile."""
    beside = await run_beside_wedged_pods(
        kube=kube,
        kubelet=kubelet,
        stack=stack,
        cluster=cluster,
        namespace=f"{unique}-w",
        endpoint=wedged,
        pods=1,
        warmup_requests=20,
        seconds=8,
    )

    assert (beside.ticks, beside.ticks_delayed) == (8, 0)
    assert beside.neighbour_replicas == 4
    assert beside.probes_in_flight == 1
