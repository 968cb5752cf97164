"""Time as an input. The loop reads `now()` and waits with `sleep()`; nothing else reads a clock.

`WallClock` is production time: Unix seconds, because the policy state the controller persists
on each Deployment (cooldown timestamps) must mean the same thing to the next leader, in
another process on another node. `LoopClock` is the event loop's monotonic clock, for code whose
times never leave the process. Tests and the simulator provide their own clocks (the
simulator's `sleep` advances the virtual cluster instead of waiting), so nothing in the tests
sleeps for real.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds on this clock's scale (Unix time for `WallClock`); never goes backwards by
        design, though a wall clock can be stepped."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait until `now()` has advanced by `seconds`."""
        ...


class WallClock:
    """Unix time (`time.time()`): comparable across processes and restarts, if not monotonic.

    A step of the system clock (NTP) shifts a cooldown by that much once; Lease expiry, which
    must not depend on wall time, is judged by the leader elector on its own monotonic reads.
    """

    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class LoopClock:
    """The running event loop's clock (monotonic, and virtual under looptime)."""

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class ManualClock:
    """A clock that moves only when told to: `sleep` advances it at once."""

    def __init__(self, start_s: float = 0.0) -> None:
        self._now = start_s

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("time does not go backwards")
        self._now += seconds

    async def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))
        await asyncio.sleep(0)
