"""The GPU health guard on Kubernetes (docs/operations.md, "GPU health"): nodes whose cards DCGM
reports unhealthy are left out of the placement ladder's free capacity.

`GpuGuard.tend` is a chore the loop runs at the end of each tick; it reads DCGM's series once
every `interval_s` (one query), asks `core.gpuhealth` which nodes to exclude, and carries that
out: the ladder's `Capacity` stops offering the nodes' GPUs (no cordon, no taint: what runs
there stays, and the scheduler is not told), each new (node, reason) gets a Warning Event
`GpuNodeExcluded` on the Node, each cleared one a Normal `GpuNodeRestored`, and `on_change` is
told the whole set (the `autoscaler_gpu_node_excluded` gauge). A node DCGM says nothing about is
not excluded; a query that fails keeps the last answer until one succeeds.

This module decides nothing: the rules are `core.gpuhealth`'s.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Final

import structlog

from autoscaler import errors
from autoscaler.adapters.kubernetes import caches, events, placement
from autoscaler.core import gpuhealth

log = structlog.get_logger(__name__)

EXCLUDED: Final = "GpuNodeExcluded"
RESTORED: Final = "GpuNodeRestored"
DEFAULT_INTERVAL_S: Final = 60.0

Read = Callable[[], Awaitable[Mapping[str, gpuhealth.Reading]]]
"""One reading of every node's cards (`prometheus.GpuHealth.read`)."""
OnChange = Callable[[Mapping[str, frozenset[str]]], None]
"""Told the excluded nodes and their reasons after each change (`Telemetry.gpu_exclusions`)."""

_MESSAGES: Final = {
    gpuhealth.Reason.XID_ERRORS: (
        "a GPU of this node reported XID error {xid:g} within the last {xid_window}; its GPUs "
        "get no new replicas until DCGM reports none (the node is neither cordoned nor tainted)"
    ),
    gpuhealth.Reason.MEMORY_FULL: (
        "a GPU of this node has had over {ratio:.0%} of its memory in use for {memory_window} "
        "(lowest {used:.1%}); its GPUs get no new replicas until it drops (the node is neither "
        "cordoned nor tainted)"
    ),
}


class GpuGuard:
    """See the module docstring."""

    def __init__(
        self,
        capacity: placement.Capacity,
        cache: caches.Caches,
        recorder: events.EventRecorder,
        *,
        read: Read,
        now: Callable[[], float],
        rules: gpuhealth.Rules = gpuhealth.DEFAULT_RULES,
        interval_s: float = DEFAULT_INTERVAL_S,
        on_change: OnChange | None = None,
    ) -> None:
        """`now` is the loop's clock, in seconds; `interval_s` the time between two reads."""
        if not (interval_s > 0 and math.isfinite(interval_s)):
            raise ValueError(f"interval_s must be > 0 and finite, not {interval_s!r}")
        self._capacity = capacity
        self._caches = cache
        self._events = recorder
        self._read = read
        self._now = now
        self.rules = rules
        self.interval_s = interval_s
        self._on_change = on_change
        self._due_s = -math.inf
        self._failing = False
        self.excluded: dict[str, frozenset[gpuhealth.Reason]] = {}
        """The nodes left out now, with their reasons."""
        self.readings: Mapping[str, gpuhealth.Reading] = {}
        """The last reading that came back."""

    async def tend(self) -> None:
        """Read and apply the nodes' health when `interval_s` has passed since the last read."""
        now_s = self._now()
        if now_s < self._due_s:
            return
        self._due_s = now_s + self.interval_s
        try:
            readings = await self._read()
        except errors.ObservationError as e:
            if not self._failing:  # once per outage
                log.warning("gpu_health.unavailable", error=str(e), kept=sorted(self.excluded))
            self._failing = True
            return
        if self._failing:
            log.info("gpu_health.recovered")
        self._failing = False
        self.readings = readings
        self.apply(gpuhealth.exclusions(readings, self.rules))

    def forget(self) -> None:
        """Drop what this term knew (its leadership ended): nothing excluded, and the next
        `tend` reads at once (its Events are the next leader's)."""
        self.excluded = {}
        self.readings = {}
        self._capacity.exclude(())
        self._due_s = -math.inf

    def apply(self, after: dict[str, frozenset[gpuhealth.Reason]]) -> None:
        """Exclude exactly the nodes of `after`; Events and logs for what changed."""
        change = gpuhealth.compare(self.excluded, after)
        self.excluded = after
        self._capacity.exclude(after)
        for node_name, reason in change.raised:
            self._tell(node_name, reason, raised=True)
        for node_name, reason in change.cleared:
            self._tell(node_name, reason, raised=False)
        if (change.raised or change.cleared) and self._on_change is not None:
            self._on_change(
                {node: frozenset(r.value for r in found) for node, found in after.items()}
            )

    def _tell(self, node_name: str, reason: gpuhealth.Reason, *, raised: bool) -> None:
        reading = self.readings.get(node_name, gpuhealth.Reading())
        if raised:
            log.warning(
                "gpu_node.excluded",
                node=node_name,
                reason=reason.value,
                xid_error=reading.xid_error,
                memory_ratio=reading.memory_ratio,
            )
        else:
            log.info("gpu_node.restored", node=node_name, reason=reason.value)
        node = self._caches.nodes.get("", node_name)
        if node is None:  # DCGM knows a node the API server does not (yet): the log says it
            return
        if raised:
            message = _MESSAGES[reason].format(
                xid=reading.xid_error or 0.0,
                xid_window=_minutes(self.rules.xid_window_s),
                ratio=self.rules.memory_ratio,
                memory_window=_minutes(self.rules.memory_window_s),
                used=reading.memory_ratio or 0.0,
            )
            self._events.record_node(node, events.WARNING, EXCLUDED, f"{reason.value}: {message}")
        else:
            message = f"{reason.value} cleared: its GPUs take new replicas again"
            self._events.record_node(node, events.NORMAL, RESTORED, message)


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:g} min"
