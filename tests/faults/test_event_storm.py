"""An Event storm: ten thousand services' first tick, a few noisy objects and a failing API
server, through the real client against the emulator."""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import Any

from adapters.kubernetes.support import StepClock
from e2e.support import WALL_S, ensure_namespace
from kube.emulator import Kube

from autoscaler.adapters.kubernetes import events

from .figures import Figures

SERVICES = 10_000
NOISY = 20
"""Objects that each get more distinct Events at once than their spam burst admits."""
FAILED_CREATES = 100
LIMIT_S = 600.0
NAMESPACE = "storm"


def owner(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": NAMESPACE, "uid": f"uid-{name}"}}


async def settle(clock: StepClock, recorder: events.EventRecorder) -> None:
    """Wait until the recorder has sent what its pace allows now: asleep on the clock, or idle."""
    waits = [
        asyncio.ensure_future(clock.wait_sleeping(1, timeout_s=120.0)),
        asyncio.ensure_future(recorder.wait_idle()),
    ]
    done, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for wait in pending:
        wait.cancel()
    for wait in done:
        wait.result()


async def test_a_first_tick_storm_is_sent_at_the_pace_and_nothing_is_lost_uncounted(
    kube: Kube, figures: Figures
) -> None:
    """The storm costs at most the burst plus the pace in calls, and every Event is counted."""
    rng = random.Random(14)
    ensure_namespace(kube, NAMESPACE)
    clock = StepClock(WALL_S)
    recorder = events.EventRecorder(
        kube.api_client(), instance="autoscaler-0", clock=clock, wall_now=clock.now
    )
    records = 0
    for n in rng.sample(range(SERVICES), SERVICES):
        for _ in range(2):  # published twice before the first post: one Event, count 2
            recorder.record(owner(f"model-{n}"), events.NORMAL, "ScaleHeld", "Holding at 1")
            records += 1
        if n % 10 == 0:
            recorder.record(owner(f"model-{n}"), events.WARNING, "InvalidConfig", f"bad {n}")
            records += 1
    for n in range(NOISY):
        for reason in range(events.SPAM_BURST + 5):
            recorder.record(owner(f"noisy-{n}"), events.NORMAL, f"Step{reason}", "moved")
            records += 1
    kube.fail("create", "events", status=500, times=FAILED_CREATES)

    started_s, peak_per_s = clock.now(), 0
    task = asyncio.create_task(recorder.run())
    try:
        await settle(clock, recorder)
        calls = kube.requests.count(resource="events")
        assert calls == events.POST_BURST
        while recorder.pending and clock.now() - started_s < LIMIT_S:
            clock.advance(1.0)
            await settle(clock, recorder)
            sent = kube.requests.count(resource="events")
            assert sent <= events.POST_BURST + events.POSTS_PER_S * (clock.now() - started_s)
            peak_per_s = max(peak_per_s, sent - calls)
            calls = sent
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    drained_s = clock.now() - started_s

    counts = recorder.counts
    calls = kube.requests.count(resource="events")
    accepted = sum(counts[o] for o in ("queued", "merged", "rate_limited", "dropped"))
    sent = sum(counts[o] for o in ("created", "patched", "failed", "unsent"))
    figures.record(
        "event_storm",
        services=SERVICES,
        records=records,
        api_calls=calls,
        peak_calls_per_s_after_burst=peak_per_s,
        drained_s=round(drained_s),
        merged=counts["merged"],
        aggregated=counts["aggregated"],
        rate_limited=counts["rate_limited"],
        dropped=counts["dropped"],
        failed=counts["failed"],
        lost_uncounted=records - accepted,
    )
    assert accepted == records
    assert sent == counts["queued"] == calls
    assert counts["failed"] == FAILED_CREATES
    assert counts["rate_limited"] == NOISY * 5
    assert counts["dropped"] == 0
    assert peak_per_s <= events.POSTS_PER_S
    assert calls == SERVICES + SERVICES // 10 + NOISY * events.SPAM_BURST
