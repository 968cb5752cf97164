"""Churn soak: services come and go in cycles under one controller, and nothing stays behind.

A leading controller (the e2e harness: API emulator, the session's real Prometheus, a stepped
clock) watches cycles of ten services created and then deleted. Every service carries the ramp
series from its first tick and, on GPU nodes, core-hours; a few carry `model-memory`, so they
have placement tiers, and one of them per hot cycle gets load past the whole cards, so a
placement fallback is counted. After each cycle's deletion, no series of a gone service is left
in `/metrics` (read over HTTP, as Prometheus scrapes it).

Memory is the controller's own, measured with tracemalloc rather than RSS: the emulator, the
kubelet and the exporters share this process, so its RSS would mostly measure them (the emulator
keeps every Event and namespace), and blocks the allocator keeps after a free would hide a trend
in a run this short. Over the last cycles, tracemalloc records each allocation's site; what is
still alive at the end and was allocated in `autoscaler` or in `prometheus_client` (where every
series lives) is what the controller kept of those cycles, and must stay under a bound.
Allocations inside other libraries on the controller's behalf (the caches' decoded objects) are
not attributed: the caches drop deleted objects, which the emulator's own tests cover.
"""

from __future__ import annotations

import gc
import re
import tracemalloc
from typing import Final

import aiohttp
import pytest
from e2e.support import (
    DEPLOYMENTS,
    LEASE_NAMESPACE,
    LEASES,
    Controllers,
    Service,
    SteppedClock,
    advance_until,
    managed,
    wait_for_load,
)
from kube.emulator import Kube
from kube.kubelet import FakeCluster
from prom.fixtures import Stack

from autoscaler import app

from .figures import Figures

CYCLES: Final = 30
SERVICES: Final = 10
PLACED: Final = 3
"""Services per cycle that carry `model-memory` (placement tiers)."""
HOT_EVERY: Final = 10
"""Every this many cycles (the first among them) one placed service gets load past whole cards."""
WARM_CYCLES: Final = 3
"""Cycles before the series baseline: every label set a cycle makes has been made once."""
TRACED_CYCLES: Final = 5
"""The last cycles, whose allocations the controller must not keep: tracing slows the whole
process (the emulator's allocations are traced too), so only these are."""
TICKS_ALIVE: Final = 3
TICKS_GONE: Final = 2
GROWTH_LIMIT_KIB: Final = 192.0
"""What the controller may keep of what it allocated after the baseline."""
TRACED_FRAMES: Final = 1
"""Frames kept per allocation: the allocation site only (deeper stacks slow this process, the
emulator's included, several times over)."""

A800: Final = {"nvidia.com/gpu.product": "NVIDIA-A800-SXM4-80GB", "nvidia.com/gpu.memory": "81920"}
MIG: Final = "mig-3g.40gb"


FAMILIES_ALIVE: Final = frozenset(
    {
        "autoscaler_replicas",
        "autoscaler_cooldown_remaining_seconds",
        "autoscaler_metrics_missing",
        "autoscaler_gpu_core_hours_total",
        "autoscaler_ramp_step_percent",
        "autoscaler_ramp_rollbacks_total",
        "autoscaler_ramp_promotions_total",
        "autoscaler_tier_replicas",
    }
)
"""Families every cycle's services must have shown before they go (the hot one adds signals
and a fallback)."""


async def _series(controller: app.Controller) -> list[str]:
    """The sample lines of the controller's `/metrics`, fetched over HTTP."""
    url = f"http://127.0.0.1:{controller.http_port}/metrics"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        text = await response.text()
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def _of(lines: list[str], services: set[str]) -> list[str]:
    """The lines labelled with one of `services` (`namespace/name`)."""
    found = []
    for line in lines:
        labels = dict(_LABEL.findall(line.partition("{")[2].rpartition("}")[0]))
        if f"{labels.get('namespace')}/{labels.get('service')}" in services:
            found.append(line)
    return found


_LABEL: Final = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def _keys(lines: list[str]) -> set[str]:
    return {line.rpartition(" ")[0] for line in lines}


def _family(line: str) -> str:
    return line.partition("{")[0].partition(" ")[0]


def _traced_kib() -> float:
    """The live memory allocated with a frame of the `autoscaler` package on its stack."""
    gc.collect()
    snapshot = tracemalloc.take_snapshot().filter_traces(
        [
            tracemalloc.Filter(True, "*/autoscaler/*"),
            tracemalloc.Filter(True, "*/prometheus_client/*"),
        ]
    )
    return round(sum(trace.size for trace in snapshot.traces) / 1024, 1)


class Soak:
    def __init__(
        self,
        *,
        kube: Kube,
        kubelet: FakeCluster,
        stack: Stack,
        clock: SteppedClock,
        controller: app.Controller,
        unique: str,
    ) -> None:
        self.kube = kube
        self.kubelet = kubelet
        self.stack = stack
        self.clock = clock
        self.controller = controller
        self.unique = unique

    async def cycle(self, index: int) -> tuple[set[str], list[str], int]:
        """Create the cycle's services, tick over them, delete them and tick again; their
        `namespace/name`, their series while they lived and the count of all series then."""
        namespace = f"{self.unique}-c{index}"
        created = []
        for n in range(SERVICES):
            notes = managed(**{"model-memory": "12Gi"}) if n < PLACED else managed()
            created.append(
                await Service.create(
                    self.kube, self.kubelet, self.stack.upper, namespace, f"s{n}", annotations=notes
                )
            )
        names = {f"{namespace}/{service.name}" for service in created}
        hot = created[0] if index % HOT_EVERY == 0 else None
        if hot is not None:
            hot.serve(rate_per_s=20.0)  # 40 req/s on 2 replicas, target 10 each: 4 wanted
            await wait_for_load(self.stack.prometheus, hot, 40.0)
            fallback = {"namespace": namespace, "service": hot.name, "tier": MIG}
            registry = self.controller.telemetry.registry

            def fell_back() -> bool:
                value = registry.get_sample_value("autoscaler_placement_fallbacks_total", fallback)
                return value is not None

            await advance_until(self.clock, fell_back, limit_s=15, what="a placement fallback")
        for _ in range(TICKS_ALIVE):
            await self.clock.advance(1.0)
            await self.kubelet.settle()
        lines = await _series(self.controller)
        alive = _of(lines, names)
        for service in created:
            self.kube.store.delete(DEPLOYMENTS, namespace, service.name)
        await self.kubelet.settle()
        if hot is not None:
            hot.serve(rate_per_s=0.0)  # its pods are gone: their series go
        for _ in range(TICKS_GONE):
            await self.clock.advance(1.0)
        return names, alive, len(lines)


@pytest.mark.timeout(300)
async def test_series_and_memory_return_to_baseline_after_churn(
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    clock: SteppedClock,
    unique: str,
    figures: Figures,
) -> None:
    """After cycles of services created and deleted, /metrics has the series it had before and
    the controller's traced memory has grown by less than a bound."""
    # Whole cards for every replica of a cycle: the hot service's extra two go to MIG slices.
    kubelet.add_node("gpu-a", gpus=SERVICES * 2 + 2, labels=A800)
    kubelet.add_node(
        "gpu-b",
        allocatable={f"nvidia.com/{MIG}": "4"},
        labels={**A800, "nvidia.com/mig.strategy": "mixed"},
    )
    resident = await Service.create(kube, kubelet, stack.upper, f"{unique}-r", "resident")
    running = await cluster.start()
    soak = Soak(
        kube=kube,
        kubelet=kubelet,
        stack=stack,
        clock=clock,
        controller=running.controller,
        unique=unique,
    )
    baseline: list[str] = []
    peak = 0
    try:
        for index in range(CYCLES):
            gone, alive, total = await soak.cycle(index)
            families = {_family(line) for line in alive}
            assert families >= FAMILIES_ALIVE, f"cycle {index}: {FAMILIES_ALIVE - families}"
            if index % HOT_EVERY == 0:
                assert "autoscaler_placement_fallbacks_total" in families
            lines = await _series(running.controller)
            peak = max(peak, total)
            assert _of(lines, gone) == [], f"cycle {index}: series of gone services"
            if index == WARM_CYCLES - 1:
                baseline = lines
            if index == CYCLES - TRACED_CYCLES - 1:
                # From here on, what the controller allocates and keeps is what it leaks.
                tracemalloc.start(TRACED_FRAMES)
        after, retained_kib = await _series(running.controller), _traced_kib()
    finally:
        tracemalloc.stop()

    series = "/metrics series"
    figures.record("churn_soak", measure=series, before=len(baseline), after=len(after))
    figures.record("churn_soak", measure=f"{series}, peak", before=len(baseline), after=peak)
    figures.record(
        "churn_soak",
        measure=f"controller KiB kept of the last {TRACED_CYCLES} cycles",
        before=0,
        after=retained_kib,
    )
    figures.record(
        "churn_soak",
        measure="services created and deleted",
        before=WARM_CYCLES * SERVICES,
        after=CYCLES * SERVICES,
    )
    # The same series (by name and labels; values move on), so none of the gone is left.
    assert _keys(after) == _keys(baseline), sorted(_keys(after) ^ _keys(baseline))[:10]
    assert _of(after, {f"{resident.namespace}/{resident.name}"}), "the resident lost its series"
    assert retained_kib < GROWTH_LIMIT_KIB


async def test_a_leader_whose_lease_is_taken_keeps_no_service_series(
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    clock: SteppedClock,
    unique: str,
) -> None:
    """A leader that finds its Lease taken by another replica drops every per-service series."""
    kubelet.add_node("gpu-a", gpus=4, labels=A800)
    chat = await Service.create(kube, kubelet, stack.upper, f"{unique}-l", "chat")
    running = await cluster.start()
    controller = running.controller
    service = {f"{chat.namespace}/{chat.name}"}
    await clock.advance(1.0)
    assert _of(await _series(controller), service) != []

    kube.store.patch(
        LEASES,
        LEASE_NAMESPACE,
        "inference-autoscaler",
        {"spec": {"holderIdentity": "ctl-z"}},
        content_type="application/merge-patch+json",
    )
    # Not a tick further: the follower's ticker waits for leadership, not for the clock.
    await advance_until(clock, lambda: not controller.leading, limit_s=10, what="the Lease lost")

    lines = await _series(controller)
    assert _of(lines, service) == []
    assert "autoscaler_managed_services 0.0" in lines
    assert "autoscaler_leader 0.0" in lines
