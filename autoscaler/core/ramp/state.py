"""What the ramp remembers about one service (`RampState`), persisted on the Deployment by
`codec`.

Pure: no I/O, no clock, no logging.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field


class Phase(enum.Enum):
    IDLE = "idle"
    WARMING = "warming"
    """New pods are warming up; none holds traffic."""
    RAMPING = "ramping"
    """A cohort of warm pods holds a step's share of the traffic."""
    PROMOTING = "promoting"
    ROLLING_BACK = "rolling-back"
    """The cohort failed a gate: its weight is going to 0, then its pods are reclaimed."""
    HELD = "held"
    """Repeated failures (or a router that does not settle): nothing ramps until released."""
    DRAINING = "draining"
    """Scale-down victims are out of the routed set; waiting for their requests to finish."""


RAMP_PHASES = frozenset({Phase.RAMPING, Phase.PROMOTING, Phase.ROLLING_BACK})
"""Phases in which new pods may hold traffic: no scale-down and no second cohort."""


class Stage(enum.Enum):
    """Where a promotion is."""

    LABELLED = "labelled"
    """The cohort carries `stable` as well as `warming`; waiting for the labels to propagate."""
    UNWEIGHTED = "unweighted"
    """The warming weight is 0; waiting for it to apply before removing `warming`."""


@dataclass(frozen=True, slots=True)
class Victim:
    name: str
    warm: bool
    """Warm when the drain began: taken out of the endpoints, and drained while it runs."""
    stable: bool
    """In the stable set when the drain began: put back there if the drain is cancelled."""


@dataclass(frozen=True, slots=True)
class Drain:
    replicas: int
    """The replica count once the victims are drained."""
    victims: tuple[Victim, ...]
    started_s: float | None = None
    """Set by the first tick after the drain was asked for (`scale` has no clock)."""
    scaled_s: float | None = None
    """When `ScaleTo` went out; the victims stay out of everything until they are gone."""


@dataclass(frozen=True, slots=True)
class RampState:
    """What the ramp remembers about one service; persisted on the Deployment."""

    phase: Phase = Phase.IDLE
    cohort: tuple[str, ...] = ()
    """The warm pods being ramped (or promoted, or rolled back)."""
    step: int = 0
    """Index into `steps_pct`."""
    step_started_s: float | None = None
    """When the router confirmed this step's weights; None while waiting for it."""
    settle_since_s: float | None = None
    """When the weights (or labels) now awaited were written; None when nothing is awaited."""
    stage: Stage | None = None
    weight_pct: int = 0
    """The warming weight last written."""
    checks: int = 0
    """Gate measurements of this step found too thin to judge (extensions used)."""
    asked_s: float | None = None
    """When the gate first asked for the health measurement it still awaits; None when it
    awaits none. Kept in memory only (see `dumps`)."""
    deadlines: Mapping[str, float] = field(default_factory=dict)
    """Warm-up deadline of each running warming pod."""
    probe_after: Mapping[str, float] = field(default_factory=dict)
    """No new probe of a pod before this time (not persisted: see `dumps`)."""
    passed: tuple[str, ...] = ()
    """Pods that passed the warm-up while another cohort held traffic; marked warm when they
    join it at its next step, or after it."""
    joined: tuple[str, ...] = ()
    """Cohort pods marked warm at the last step boundary and not yet seen warm (the caches
    lag the write): still counted in the cohort."""
    failures: int = 0
    """Failed gates in a row."""
    hold_reason: str | None = None
    held_config: str | None = None
    """`fingerprint` of the settings the hold happened under."""
    drain: Drain | None = None
    standby: int = 0
    """Replicas of the Deployment's count that form the warm standby pool (as last scaled):
    the serving replicas are the count less these."""
    pool: tuple[str, ...] = ()
    """The standby pool: pods that passed their warm-up and wait, not marked warm (out of every
    routed set), until a scale-up promotes them; the oldest first."""
    released: Mapping[str, float] = field(default_factory=dict)
    """When each pod set warm and not yet seen warm was set so (the caches lag the write):
    counted as serving, so that a lagging cache never lets a second pod out of the pool for
    the same place; forgotten after `settle_timeout_s`. Kept in memory only (see `dumps`)."""

    @property
    def held(self) -> bool:
        return self.hold_reason is not None

    @property
    def quiet(self) -> bool:
        """Nothing under way: with no warming pod, a tick has nothing to do."""
        return (
            self.phase is Phase.IDLE
            and not self.deadlines
            and not self.passed
            and self.drain is None
            and self.hold_reason is None
        )
