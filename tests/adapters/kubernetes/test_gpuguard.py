"""`GpuGuard`: nodes DCGM reports unhealthy leave the free capacity, with Events on the Node,
against the emulator (the DCGM reading is a plain function the test sets)."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
from kube.emulator import Kube
from kube.kubelet import FakeCluster
from kubernetes_asyncio import client

from autoscaler import errors
from autoscaler.adapters.kubernetes import _api, cluster, gpuguard
from autoscaler.clock import ManualClock
from autoscaler.core import gpuhealth
from autoscaler.core.gpuhealth import Reading

from .support import WALL_S, eventually, running

A800 = {"nvidia.com/gpu.product": "NVIDIA-A800-SXM4-80GB", "nvidia.com/gpu.memory": "81920"}


class Dcgm:
    """What DCGM says, as the test sets it; `None` fails the read as a Prometheus outage."""

    def __init__(self) -> None:
        self.readings: Mapping[str, Reading] | None = {}
        self.reads = 0

    async def read(self) -> Mapping[str, Reading]:
        self.reads += 1
        if self.readings is None:
            raise errors.ObservationError("Prometheus unreachable")
        return self.readings


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(WALL_S)


@pytest.fixture
async def made(
    kube: Kube, kubelet: FakeCluster, api: client.ApiClient, clock: ManualClock
) -> AsyncIterator[cluster.KubeCluster]:
    kubelet.add_node("gpu-a", gpus=2, labels=A800)
    kubelet.add_node("gpu-b", gpus=2, labels=A800)
    built = cluster.KubeCluster(
        api, identity="autoscaler-0", clock=clock, wall_now=clock.now, rng=random.Random(7)
    )
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(running(built.run()))
        async with asyncio.timeout(5):
            await built.wait_synced()
            await eventually(lambda: len(built.caches.nodes.items()) == 2, built.caches.nodes)
        yield built


def guard_of(
    made: cluster.KubeCluster, dcgm: Dcgm, clock: ManualClock, told: list[Any]
) -> gpuguard.GpuGuard:
    return gpuguard.GpuGuard(
        made.placement.capacity,
        made.caches,
        made.events,
        read=dcgm.read,
        now=clock.now,
        interval_s=60.0,
        on_change=told.append,
    )


def usable(made: cluster.KubeCluster) -> dict[str, bool]:
    return {node.name: node.usable for node in made.placement.capacity.snapshot().nodes}


async def node_events(api: client.ApiClient) -> list[tuple[str, str, str, str]]:
    listed = await _api.call_json(client.CoreV1Api(api).list_namespaced_event, "default")
    return sorted(
        (e["involvedObject"]["kind"], e["involvedObject"]["name"], e["type"], e["reason"])
        for e in listed["items"]
    )


async def test_an_unhealthy_node_leaves_the_capacity_and_comes_back_when_it_clears(
    made: cluster.KubeCluster, api: client.ApiClient, clock: ManualClock
) -> None:
    """XID errors exclude the node with a Warning on it; a failed read keeps that; a clean
    reading restores it with a Normal Event, and the metric callback follows each change."""
    dcgm, told = Dcgm(), []
    guard = guard_of(made, dcgm, clock, told)
    dcgm.readings = {"gpu-a": Reading(xid_error=79.0), "gpu-b": Reading(xid_error=0.0)}

    await guard.tend()
    assert usable(made) == {"gpu-a": False, "gpu-b": True}
    assert made.placement.capacity.totals().nodes[0].usable  # not unsatisfiable, only waiting
    assert told == [{"gpu-a": frozenset({"xid_errors"})}]

    dcgm.readings = None
    clock.advance(60)
    await guard.tend()
    assert usable(made) == {"gpu-a": False, "gpu-b": True}  # no answer is not a clean bill

    dcgm.readings = {"gpu-a": Reading(xid_error=0.0)}
    clock.advance(60)
    await guard.tend()
    assert usable(made) == {"gpu-a": True, "gpu-b": True}
    assert told[-1] == {}
    await made.events.wait_idle()
    assert await node_events(api) == [
        ("Node", "gpu-a", "Normal", gpuguard.RESTORED),
        ("Node", "gpu-a", "Warning", gpuguard.EXCLUDED),
    ]


async def test_the_guard_reads_once_per_interval_and_a_silent_node_stays_in(
    made: cluster.KubeCluster, clock: ManualClock
) -> None:
    """Ticks within the interval send no query; a node DCGM says nothing about is not excluded."""
    dcgm, told = Dcgm(), []
    guard = guard_of(made, dcgm, clock, told)
    dcgm.readings = {"gpu-b": Reading(memory_ratio=0.99)}

    for _ in range(5):
        await guard.tend()
        clock.advance(10)
    assert dcgm.reads == 1
    assert usable(made) == {"gpu-a": True, "gpu-b": False}
    assert guard.excluded == {"gpu-b": frozenset({gpuhealth.Reason.MEMORY_FULL})}

    guard.forget()
    assert usable(made) == {"gpu-a": True, "gpu-b": True}
    await guard.tend()  # a new term reads at once
    assert dcgm.reads == 2
