"""GPU health under noisy DCGM data: a seeded run of readings with XID errors, full memory,
missing series and failed queries, against the emulator; and the health query's cost on the real
Prometheus for a large fleet of cards.

The promise: a node is excluded exactly when the last reading that came back says so by the
rules; missing data never excludes, a failed query never clears; one Event per change.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Mapping

import pytest
from adapters.kubernetes.support import eventually
from kube.emulator import Kube
from kube.kubelet import FakeCluster
from kubernetes_asyncio import client
from prom import server
from prom.fixtures import Stack

from autoscaler import errors
from autoscaler.adapters import prometheus
from autoscaler.adapters.kubernetes import _api, cluster, gpuguard
from autoscaler.clock import ManualClock
from autoscaler.core import gpuhealth
from autoscaler.core.gpuhealth import Reading

from .figures import Figures

SEED = 16
NODES = [f"gpu-{i:02d}" for i in range(12)]
READS = 300
INTERVAL_S = 60.0
A800 = {"nvidia.com/gpu.product": "NVIDIA-A800-SXM4-80GB", "nvidia.com/gpu.memory": "81920"}
FLEET_NODES = 200
CARDS_PER_NODE = 8


class NoisyDcgm:
    """Seeded readings: per node a fault now and then, series that go missing, failed reads."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.last: Mapping[str, Reading] | None = None
        self.failed = 0

    def _reading(self) -> Reading:
        draw = self.rng.random()
        xid = None if draw < 0.1 else (self.rng.choice([13.0, 48.0, 79.0]) if draw > 0.9 else 0.0)
        ratio = None if self.rng.random() < 0.2 else self.rng.choice([0.3, 0.9, 0.95, 0.97])
        return Reading(xid_error=xid, memory_ratio=ratio)

    async def read(self) -> Mapping[str, Reading]:
        if self.rng.random() < 0.15:
            self.failed += 1
            self.last = None
            raise errors.ObservationError("Prometheus unreachable")
        # A node left out of the answer altogether: DCGM said nothing about it.
        self.last = {n: self._reading() for n in NODES if self.rng.random() > 0.1}
        return self.last


@pytest.fixture
async def made(
    kube: Kube, kubelet: FakeCluster, api: client.ApiClient
) -> AsyncIterator[tuple[cluster.KubeCluster, ManualClock]]:
    clock = ManualClock(1.8e9)
    for node in NODES:
        kubelet.add_node(node, gpus=8, labels=A800)
    built = cluster.KubeCluster(
        api, identity="autoscaler-0", clock=clock, wall_now=clock.now, rng=random.Random(SEED)
    )
    task = asyncio.create_task(built.run())
    try:
        async with asyncio.timeout(10):
            await built.wait_synced()
            await eventually(
                lambda: len(built.caches.nodes.items()) == len(NODES), built.caches.nodes
            )
        yield built, clock
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_noisy_dcgm_data_excludes_exactly_what_the_rules_say(
    made: tuple[cluster.KubeCluster, ManualClock], api: client.ApiClient, figures: Figures
) -> None:
    """Over 300 seeded reads, the free capacity leaves out exactly the nodes the last answer
    condemns: no exclusion from missing data, none lifted by a failed query, one Event each."""
    built, clock = made
    dcgm = NoisyDcgm(random.Random(SEED))
    guard = gpuguard.GpuGuard(
        built.placement.capacity,
        built.caches,
        built.events,
        read=dcgm.read,
        now=clock.now,
        interval_s=INTERVAL_S,
    )
    expected: dict[str, frozenset[gpuhealth.Reason]] = {}
    wrong = raised = cleared = 0
    for _ in range(READS):
        await guard.tend()
        if dcgm.last is not None:
            after = gpuhealth.exclusions(dcgm.last, gpuhealth.DEFAULT_RULES)
            change = gpuhealth.compare(expected, after)
            raised += len(change.raised)
            cleared += len(change.cleared)
            expected = after
        usable = {n.name: n.usable for n in built.placement.capacity.snapshot().nodes}
        wrong += sum(usable[node] == (node in expected) for node in NODES)
        clock.advance(INTERVAL_S)
    await built.events.wait_idle()
    listed = await _api.call_json(client.CoreV1Api(api).list_namespaced_event, "default")
    kinds = [e["reason"] for e in listed["items"]]
    excluded_events = sum(e["count"] for e in listed["items"] if e["reason"] == gpuguard.EXCLUDED)
    restored_events = sum(e["count"] for e in listed["items"] if e["reason"] == gpuguard.RESTORED)

    figures.record(
        "gpu_health",
        run=f"noisy DCGM, {len(NODES)} nodes, seed {SEED}",
        reads=READS,
        failed_reads=dcgm.failed,
        exclusions_raised=raised,
        exclusions_cleared=cleared,
        wrong_node_states=wrong,
        events=len(kinds),
    )
    assert wrong == 0
    # The run did exercise each path.
    assert dcgm.failed > 0
    assert raised > 0
    assert cleared > 0
    assert (excluded_events, restored_events) == (raised, cleared)


async def test_the_health_query_answers_for_a_large_fleet_within_its_deadline(
    stack: Stack, unique: str, figures: Figures
) -> None:
    """One query reads 1,600 cards on 200 nodes, well within the 2 s deadline of a query."""
    for n in range(FLEET_NODES):
        for card in range(CARDS_PER_NODE):
            stack.upper.set_node_gpu(
                f"{unique}-{n:03d}",
                index=card,
                xid=79.0 if (n, card) == (7, 3) else 0.0,
                fb_used_mib=1000,
                fb_free_mib=80000,
            )
    cards = FLEET_NODES * CARDS_PER_NODE
    await stack.prometheus.wait_for_series(
        f'DCGM_FI_DEV_XID_ERRORS{{Hostname=~"{unique}-.*"}}',
        lambda found: len(found) >= cards,
        timeout_s=30,
    )
    client_ = prometheus.Client(stack.prometheus.url)
    health = prometheus.GpuHealth(client_, scrape_interval_s=server.SCRAPE_INTERVAL_S)
    try:
        timings = []
        for _ in range(5):
            started = time.perf_counter()
            readings = await health.read()
            timings.append(time.perf_counter() - started)
    finally:
        await client_.close()

    mine = {node: r for node, r in readings.items() if node.startswith(f"{unique}-")}
    excluded = gpuhealth.exclusions(mine, gpuhealth.DEFAULT_RULES)
    figures.record(
        "gpu_health",
        run=f"query, {FLEET_NODES} nodes x {CARDS_PER_NODE} cards",
        reads=len(timings),
        query_ms_median=round(sorted(timings)[len(timings) // 2] * 1000, 1),
        query_ms_max=round(max(timings) * 1000, 1),
    )
    assert len(mine) == FLEET_NODES
    assert excluded == {f"{unique}-007": frozenset({gpuhealth.Reason.XID_ERRORS})}
    assert max(timings) < prometheus.DEFAULT_TIMEOUT_S
