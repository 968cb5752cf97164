"""The e2e tests' clock: a step returns only once what it set going has settled."""

from __future__ import annotations

import asyncio

from .support import SteppedClock

YIELDS = 50
"""Event-loop turns the ticker takes between its wake-up and its next sleep: as a new term's
first tick does with its requests, whatever the machine's speed."""


async def ticker(clock: SteppedClock, leading: asyncio.Event, reached: list[float]) -> None:
    """Waits to lead, works for `YIELDS` turns, notes the time, then sleeps on the clock."""
    await leading.wait()
    for _ in range(YIELDS):
        await asyncio.sleep(0)
    reached.append(clock.now())
    await clock.sleep(3600)


async def woken_during_a_step(*, followed: bool) -> list[float]:
    """When the ticker noted the time, after a step during which an Event woke it."""
    clock = SteppedClock()
    leading = asyncio.Event()
    reached: list[float] = []
    task = asyncio.create_task(ticker(clock, leading, reached))
    if followed:
        clock.followed.append(lambda: task)
    await clock.advance(1)  # parked on the Event: nothing to wait for
    leading.set()
    await clock.advance(1)
    noted = list(reached)
    task.cancel()
    await asyncio.wait([task])
    return noted


async def test_a_step_waits_for_a_followed_task_that_an_event_woke() -> None:
    """A followed task woken by an Event, not by the clock, has reached its sleep when the
    step ends."""
    assert await woken_during_a_step(followed=True) == [SteppedClock().now() + 2]


async def test_a_step_does_not_wait_for_a_task_it_does_not_follow() -> None:
    """Without following, the same task is still on its way when the step ends."""
    assert await woken_during_a_step(followed=False) == []
