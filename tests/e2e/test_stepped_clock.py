"""The e2e tests' clock: a step returns only once what it set going has settled."""

from __future__ import annotations

import asyncio

from .support import SteppedClock

YIELDS = 50
"""Event-loop turns the followed task takes between its wake-up and its next sleep: as a new
term's first tick does with its requests, whatever the machine's speed."""


async def test_a_step_waits_for_a_followed_task_that_an_event_woke() -> None:
    """A task woken by an Event, not by the clock, has reached its next sleep when a step ends."""
    clock = SteppedClock()
    leading = asyncio.Event()
    reached: list[float] = []

    async def ticker() -> None:
        await leading.wait()
        for _ in range(YIELDS):
            await asyncio.sleep(0)
        reached.append(clock.now())
        await clock.sleep(3600)

    task = asyncio.create_task(ticker())
    clock.followed.append(lambda: task)
    await clock.advance(1)  # parked on the Event: nothing to wait for
    assert reached == []

    leading.set()
    await clock.advance(1)

    assert reached == [clock.now()]
    task.cancel()
    await asyncio.wait([task])


async def test_a_step_does_not_wait_for_a_task_it_does_not_follow() -> None:
    """Without following, the same task is still on its way when the step ends."""
    clock = SteppedClock()
    leading = asyncio.Event()
    reached: list[float] = []

    async def ticker() -> None:
        await leading.wait()
        for _ in range(YIELDS):
            await asyncio.sleep(0)
        reached.append(clock.now())

    task = asyncio.create_task(ticker())
    leading.set()
    await clock.advance(1)

    assert reached == []
    await task
