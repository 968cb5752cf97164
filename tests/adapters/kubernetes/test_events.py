"""`EventRecorder`: repeats, similar Events, the spam filter, the pace and the counts, against the
emulator."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import structlog
from kube.emulator import Kube
from kubernetes_asyncio import client

from autoscaler.adapters.kubernetes import _api, events

from .support import NS, WALL_S, StepClock, running

RECORDS_IN: tuple[str, ...] = ("queued", "merged", "rate_limited", "dropped")
"""The outcomes one of which every accepted Event meets when recorded."""
SENDS_IN: tuple[str, ...] = ("created", "patched", "failed", "unsent")
"""The outcomes one of which every queued Event meets when sent."""


def owner(name: str) -> dict[str, Any]:
    """A Deployment as the caches hold it: enough for an `involvedObject`."""
    return {"metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"}}


@pytest.fixture
async def api(kube: Kube) -> client.ApiClient:
    return kube.api_client()


@pytest.fixture
def clock() -> StepClock:
    return StepClock(WALL_S)


@pytest.fixture
def make(api: client.ApiClient, clock: StepClock) -> Callable[..., events.EventRecorder]:
    def build(**kwargs: Any) -> events.EventRecorder:
        return events.EventRecorder(
            api, instance="autoscaler-0", clock=clock, wall_now=clock.now, **kwargs
        )

    return build


Start = Callable[[events.EventRecorder], Awaitable[object]]


@pytest.fixture
async def sending() -> AsyncIterator[Start]:
    """Starts a recorder's `run` for the rest of the test."""
    async with contextlib.AsyncExitStack() as stack:

        async def start(recorder: events.EventRecorder) -> object:
            return await stack.enter_async_context(running(recorder.run()))

        yield start


async def listed(api: client.ApiClient) -> list[dict[str, Any]]:
    """Every Event of the test namespace, read through the API."""
    answer = await _api.call_json(client.CoreV1Api(api).list_namespaced_event, NS)
    items: list[dict[str, Any]] = answer["items"]
    return items


async def test_repeats_of_one_event_become_one_event_with_a_count(
    kube: Kube, api: client.ApiClient, make: Callable[..., events.EventRecorder], sending: Start
) -> None:
    """An Event recorded again, waiting or sent, is one Event whose count says how often."""
    recorder = make()
    for _ in range(5):
        recorder.record(owner("web"), events.NORMAL, "ScaleHeld", "Holding at 2 replicas")
    await sending(recorder)
    await recorder.wait_idle()
    recorder.record(owner("web"), events.NORMAL, "ScaleHeld", "Holding at 2 replicas")
    recorder.record(owner("web"), events.NORMAL, "ScaleHeld", "Holding at 2 replicas")
    await recorder.wait_idle()

    (event,) = await listed(api)
    assert (event["reason"], event["count"]) == ("ScaleHeld", 7)
    assert event["involvedObject"]["uid"] == "uid-web"
    assert kube.requests.count("create", "events") == 1
    assert kube.requests.count("patch", "events") == 1
    assert recorder.counts == {"queued": 2, "merged": 5, "created": 1, "patched": 1}


async def test_similar_events_on_one_object_are_combined_from_the_tenth(
    api: client.ApiClient, make: Callable[..., events.EventRecorder], sending: Start
) -> None:
    """Past nine distinct messages of one reason on one object, the rest become one Event."""
    recorder = make()
    await sending(recorder)
    for n in range(15):
        recorder.record(owner("web"), events.WARNING, "RampStalled", f"step {n} stalled")
    await recorder.wait_idle()

    found = await listed(api)
    combined = [e for e in found if e["message"].startswith(events.COMBINED_PREFIX)]
    assert len(found) == 10
    (one,) = combined
    assert one["message"] == events.COMBINED_PREFIX + "step 14 stalled"
    assert one["count"] == 6
    assert recorder.counts["aggregated"] == 6
    # Another reason, or another object, is not similar.
    recorder.record(owner("web"), events.WARNING, "Other", "step 0 stalled")
    recorder.record(owner("api"), events.WARNING, "RampStalled", "step 0 stalled")
    await recorder.wait_idle()
    assert recorder.counts["aggregated"] == 6


async def test_an_object_past_its_burst_loses_events_counted_until_its_bucket_refills(
    kube: Kube, clock: StepClock, make: Callable[..., events.EventRecorder], sending: Start
) -> None:
    """One object gets 25 Events of a type at once, then one per 300 s; the rest are counted."""
    recorder = make()
    await sending(recorder)
    with structlog.testing.capture_logs() as logs:
        for n in range(30):
            recorder.record(owner("web"), events.NORMAL, f"Reason{n}", "something happened")
        recorder.record(owner("web"), events.WARNING, "Bad", "another type, another bucket")
        recorder.record(owner("api"), events.NORMAL, "Reason0", "another object, another bucket")
        await recorder.wait_idle()

    assert kube.requests.count("create", "events") == 27
    assert recorder.counts["rate_limited"] == 5
    (line,) = [entry for entry in logs if entry["event"] == "event.dropped"]
    assert (line["why"], line["object"]) == ("rate_limited", f"{NS}/web")

    clock.advance(300.0)
    recorder.record(owner("web"), events.NORMAL, "Later", "one token more")
    recorder.record(owner("web"), events.NORMAL, "Later2", "and no second")
    await recorder.wait_idle()
    assert kube.requests.count("create", "events") == 28
    assert recorder.counts["rate_limited"] == 6


async def test_ten_thousand_services_on_a_first_tick_cost_a_bounded_rate_of_calls(
    kube: Kube, clock: StepClock, make: Callable[..., events.EventRecorder], sending: Start
) -> None:
    """A storm of Events is sent at the pace, after its burst, and none is lost uncounted."""
    services = 10_000
    told: list[str] = []
    recorder = make(on_outcome=told.append)
    for n in range(services):
        recorder.record(owner(f"model-{n}"), events.NORMAL, "ScaleHeld", "Holding at 1 replicas")
        recorder.record(owner(f"model-{n}"), events.NORMAL, "ScaleHeld", "Holding at 1 replicas")
    await sending(recorder)
    await clock.wait_sleeping(1, timeout_s=120.0)  # the burst is spent

    assert kube.requests.count("create", "events") == events.POST_BURST
    clock.advance(4.0)
    await clock.wait_sleeping(1, timeout_s=30.0)
    assert kube.requests.count("create", "events") == events.POST_BURST + 4 * events.POSTS_PER_S
    assert kube.requests.count(resource="events") == events.POST_BURST + 4 * events.POSTS_PER_S

    counts = recorder.counts
    assert sum(counts[o] for o in RECORDS_IN) == 2 * services
    assert (counts["queued"], counts["merged"]) == (services, services)
    assert counts["dropped"] == counts["rate_limited"] == 0
    assert sum(counts[o] for o in SENDS_IN) + recorder.pending == counts["queued"]
    assert told.count("queued") == services


async def test_a_full_waiting_list_drops_what_comes_next_counted_with_one_log_line(
    api: client.ApiClient, make: Callable[..., events.EventRecorder], sending: Start
) -> None:
    """Past `max_pending` distinct waiting Events a new one is dropped, counted, logged once."""
    recorder = make(max_pending=100)
    with structlog.testing.capture_logs() as logs:
        for n in range(1000):
            recorder.record(owner(f"model-{n}"), events.NORMAL, "ScaleHeld", "Holding")
        # A repeat of one waiting merges into it: it needs no room.
        recorder.record(owner("model-0"), events.NORMAL, "ScaleHeld", "Holding")
    await sending(recorder)
    await recorder.wait_idle()

    assert recorder.counts == {"queued": 100, "merged": 1, "dropped": 900, "created": 100}
    (line,) = [entry for entry in logs if entry["event"] == "event.dropped"]
    assert line["why"] == "dropped"
    assert len(await listed(api)) == 100


async def test_a_follower_accepts_nothing_and_a_lost_lead_leaves_the_rest_unsent(
    kube: Kube, make: Callable[..., events.EventRecorder], sending: Start
) -> None:
    """A follower records nothing; Events waiting when the lead ends are counted unsent."""
    leading = [False]
    recorder = make(calls=_api.Caller(fence=lambda _: leading[0]))
    recorder.record(owner("web"), events.NORMAL, "ScaleHeld", "Holding")
    assert recorder.pending == 0
    leading[0] = True
    recorder.record(owner("web"), events.NORMAL, "ScaleHeld", "Holding")
    recorder.record(owner("api"), events.NORMAL, "ScaleHeld", "Holding")
    leading[0] = False
    await sending(recorder)
    async with asyncio.timeout(5):
        await recorder.wait_idle()

    assert recorder.counts == {"queued": 2, "unsent": 2}
    assert kube.requests.count(resource="events") == 0
