"""What the driver hands the ramp each tick: the pods, and the answers to the last tick's
requests (`Tick`).

Pure: no I/O, no clock, no logging.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Pod:
    """One pod of the service as the ramp sees it (any placement tier)."""

    name: str
    running: bool
    """Running with every container ready: up, warm or not."""
    warm: bool
    """The readiness-gate condition is True: the pod is in the Service's endpoints."""
    warming: bool
    stable: bool
    terminating: bool = False
    ip: str | None = None
    tier: str = "whole"
    in_flight: float = math.nan
    """Queued plus running requests; NaN when unknown (never read as 0)."""


@dataclass(frozen=True, slots=True)
class Health:
    """A set of pods over the gate's window."""

    requests: float
    error_rate: float
    """NaN when unknown."""
    p95_s: float
    """NaN when unknown."""


@dataclass(frozen=True, slots=True)
class Probed:
    """The answer to one `Probe`."""

    ok: int
    failed: int
    latencies_s: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class Tick:
    """What the driver saw this tick, including the answers to the last tick's requests."""

    now_s: float
    pods: Sequence[Pod]
    health: tuple[Health, Health] | None = None
    """(warming, stable), answering `MeasureHealth`; None when not measured."""
    pod_health: Mapping[str, tuple[Health, Health]] = field(default_factory=dict)
    """(the pod alone, stable) by pod name, answering `MeasurePodHealth`; empty when not
    measured (the driver gives every pod asked for or none)."""
    probes: Mapping[str, Probed] = field(default_factory=dict)
    """Answers to `Probe`, by pod name."""
    settled: bool | None = None
    """Answer to `CheckSettled`; None when not asked or not answered."""
    resumed: bool = False
    """The state was just restored (a restart): write the weights again, whatever they were."""
    replicas: int | None = None
    """The Deployment's replica count, serving and standby (the last asked for when the caches
    lag behind it); None when unknown: the standby pool then neither fills nor promotes."""
