"""Wedged pods: new pods that accept connections and never answer their warm-up probe (the
contract's most requests, 1,000, each bounded by 5 s) next to a service whose load wants twice
its replicas. The promise: no tick waits for a probe, and the neighbour is decided and scaled.
"""

from __future__ import annotations

import pytest
from e2e.support import Controllers
from e2e.wedged import WedgedEndpoint, run_beside_wedged_pods
from kube.emulator import Kube
from kube.kubelet import FakeCluster
from prom.fixtures import Stack

from autoscaler.ramp_driver import PROBE_CONCURRENCY

from .figures import Figures

MAX_WARMUP_REQUESTS = 1_000
"""The annotation contract's upper bound on `warmup-requests`."""
SECONDS = 10


@pytest.mark.parametrize("pods", [1, 10, 50])
async def test_wedged_pods_delay_no_tick_and_the_neighbour_is_decided(
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    unique: str,
    wedged: WedgedEndpoint,
    figures: Figures,
    pods: int,
) -> None:
    """Every second ticks on time while the wedged pods' probes are pending, at most the
    probe concurrency of them at once, and the neighbour scales from 2 to 4 replicas."""
    beside = await run_beside_wedged_pods(
        kube=kube,
        kubelet=kubelet,
        stack=stack,
        cluster=cluster,
        namespace=f"{unique}-p{pods}",
        endpoint=wedged,
        pods=pods,
        warmup_requests=MAX_WARMUP_REQUESTS,
        seconds=SECONDS,
    )
    figures.record(
        "wedged_pods",
        wedged_pods=pods,
        warmup_requests=MAX_WARMUP_REQUESTS,
        ticks=beside.ticks,
        ticks_delayed=beside.ticks_delayed,
        other_services_decided=beside.neighbour_replicas == 4,
        probes_in_flight=beside.probes_in_flight,
        max_requests_held=wedged.max_held,
    )

    assert (beside.ticks, beside.ticks_delayed) == (SECONDS, 0)
    assert beside.neighbour_replicas == 4
    assert beside.probes_in_flight == pods
    assert wedged.max_held <= PROBE_CONCURRENCY
