"""What the ramp asks the driver to do (`Action`s, in order, inside a `Plan`), what it tells
(`Outcome`s, Kubernetes Events), and a scale-down it refuses (`Refusal`).

Pure: no I/O, no clock, no logging.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TypeAlias

from autoscaler.core.ramp.state import RampState

# Event reasons, as Kubernetes Events on the Deployment show them.
WARMUP_TIMED_OUT = "WarmupTimedOut"
RAMP_STARTED = "RampStarted"
RAMP_STEP = "RampStep"
RAMP_PROMOTED = "RampPromoted"
RAMP_ROLLED_BACK = "RampRolledBack"
RAMP_PODS_SPARED = "RampPodsSpared"
RAMP_ABANDONED = "RampAbandoned"
RAMP_HELD = "RampHeld"
RAMP_RELEASED = "RampReleased"
DRAIN_STARTED = "DrainStarted"
DRAIN_CANCELLED = "DrainCancelled"
DRAINED = "Drained"


class EventType(enum.Enum):
    NORMAL = "Normal"
    WARNING = "Warning"


class Outcome(enum.Enum):
    PROMOTED = "promoted"
    ROLLED_BACK = "rolled-back"
    HELD = "held"
    RELEASED = "released"


# -- actions -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Probe:
    """Request: probe the pod's warm-up endpoint; the answer comes in the next `Tick`."""

    pod: str


@dataclass(frozen=True, slots=True)
class MeasureHealth:
    """Request: the health of the warming and the stable pods over the last `window_s`."""

    warming: tuple[str, ...]
    stable: tuple[str, ...]
    window_s: float


@dataclass(frozen=True, slots=True)
class MeasurePodHealth:
    """Request: the health of each of `pods` alone, and of the stable pods, over the last
    `window_s` (one query per pod; asked only when a cohort of several pods fails a gate)."""

    pods: tuple[str, ...]
    stable: tuple[str, ...]
    window_s: float


@dataclass(frozen=True, slots=True)
class MeasureInFlight:
    """Request: the in-flight requests of these pods, for the next tick's `Pod.in_flight`."""

    pods: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CheckSettled:
    """Request: whether the router has applied the last weights."""


@dataclass(frozen=True, slots=True)
class EnsureRoutes:
    """Create the router's objects (all traffic on stable) before the first weights."""


@dataclass(frozen=True, slots=True)
class SetWeights:
    warming_pct: int
    """To the warming set; the stable set gets the rest (the two always sum to 100)."""


@dataclass(frozen=True, slots=True)
class SetWarm:
    pod: str
    warm: bool
    message: str


@dataclass(frozen=True, slots=True)
class Label:
    pod: str
    warming: bool
    stable: bool


@dataclass(frozen=True, slots=True)
class Reclaim:
    pod: str
    reason: str


@dataclass(frozen=True, slots=True)
class MarkVictim:
    pod: str


@dataclass(frozen=True, slots=True)
class ScaleTo:
    replicas: int


@dataclass(frozen=True, slots=True)
class Event:
    type: EventType
    reason: str
    message: str


Action: TypeAlias = (
    Probe
    | MeasureHealth
    | MeasurePodHealth
    | MeasureInFlight
    | CheckSettled
    | EnsureRoutes
    | SetWeights
    | SetWarm
    | Label
    | Reclaim
    | MarkVictim
    | ScaleTo
    | Event
)
REQUESTS = (Probe, MeasureHealth, MeasurePodHealth, MeasureInFlight, CheckSettled)
"""Actions that only read: the driver answers them in the next tick."""


@dataclass(frozen=True, slots=True)
class Plan:
    state: RampState
    actions: tuple[Action, ...] = ()
    outcomes: tuple[Outcome, ...] = ()


@dataclass(frozen=True, slots=True)
class Refusal:
    """A scale change that must wait, and why."""

    reason: str
