"""The controller's process: what `autoscaler run` does to the garbage collector."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable
from typing import TypeVar

from autoscaler import app, settings

from .support import LEASE_NAMESPACE, Controllers, SteppedClock, ensure_namespace

_T = TypeVar("_T")


async def _after_first_tick(
    cluster: Controllers, clock: SteppedClock, config: settings.Settings, read: Callable[[], _T]
) -> _T:
    """Serve `config` with a frozen heap until its first tick, and what `read` says then."""
    stop, ticked = asyncio.Event(), asyncio.Event()
    try:
        async with app.wire(
            config,
            clock=clock,
            lease_clock=clock,
            wall_now=clock.now,
            on_tick=lambda _report, _duration_s: ticked.set(),
            freeze_heap=True,
        ) as controller:
            task = asyncio.create_task(controller.serve(stop))
            async with asyncio.timeout(10):
                await ticked.wait()
            seen = read()
            stop.set()
            await task
    finally:
        gc.unfreeze()
        cluster.record_calls()  # its calls count for the RBAC check, as a `Running`'s do
    return seen


async def test_the_heap_is_frozen_once_the_caches_synced(
    cluster: Controllers, clock: SteppedClock
) -> None:
    """A controller told to freeze its heap leaves what is alive after the sync to no collection."""
    assert gc.get_freeze_count() == 0
    ensure_namespace(cluster.kube, LEASE_NAMESPACE)
    config = cluster.config(identity="ctl-heap")
    frozen = await _after_first_tick(cluster, clock, config, gc.get_freeze_count)
    assert frozen > 0


async def test_the_collector_takes_the_configured_thresholds_once_the_heap_is_frozen(
    cluster: Controllers, clock: SteppedClock
) -> None:
    """A controller that freezes its heap then sets the collector's thresholds it is given."""
    thresholds = gc.get_threshold()
    ensure_namespace(cluster.kube, LEASE_NAMESPACE)
    config = cluster.config(identity="ctl-gc").model_copy(
        update={"loop": settings.LoopSettings(gc_threshold=(50_000, 20))}
    )
    try:
        during = await _after_first_tick(cluster, clock, config, gc.get_threshold)
    finally:
        gc.set_threshold(*thresholds)
    assert during == (50_000, 20, thresholds[2])
