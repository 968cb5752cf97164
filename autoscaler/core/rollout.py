"""The warm-up gate, the traffic ramp and the drain (docs/architecture.md,
"The warm-up gate and the traffic ramp"), as a pure state machine.

One service at a time. `advance(config, state, tick)` takes what the driver saw this tick and
returns a `Plan`: the next `RampState`, the `Action`s to carry out in order, and the `Outcome`s
worth telling (promoted, rolled back, held, released). `scale(...)` answers a replica change:
upward at once, downward through a drain, refused while new pods hold traffic.

**Inputs on request.** Some inputs cost a network call: warm-up probes, the health gate, the
in-flight requests of drain victims, whether the router has applied its weights. The core asks
for them with an action (`Probe`, `MeasureHealth`, `MeasurePodHealth`, `MeasureInFlight`,
`CheckSettled`) and
reads the answer in the next tick's `Tick`; an answer that never comes is asked for again. A
service with nothing to do asks for nothing.

**A new pod** carries the `warming` label and is not warm. Once it runs, its warm-up deadline
starts (`warmup_deadline_s`) and it is probed every `probe_interval_s`: it is warm when
`warmup_requests` probes all succeed and their median latency is within `warmup_latency_ratio`
of the serving pods' probe latency (a few serving pods are probed alongside), or under
`max_p95_latency_s` when that is set; with neither reference, success alone counts. Without a
warm-up probe configured, a pod is warm once running. Past the deadline the pod is reclaimed
with a Warning Event. A pod that warms up while a cohort ramps waits (not yet marked warm,
so outside every routed set) for the cohort's next step boundary and joins it there (see
below); one that turns up warm outside the cohort mid-ramp (a container restart) is taken out
again and warms up anew.

**The ramp** (a traffic router other than `none`). The warm pods still labelled `warming` form
a cohort of K pods next to the N serving pods. Step p of `steps_pct` routes
`share_pct(p, K, N)` = floor(p x K / (N + K)) percent to the cohort (at least 1), never an
absolute p; the step's clock starts when the router reports the weights applied. The gate
compares the cohort with the serving pods (`judge`) over the time since the step began: error
rate at most `max_error_rate` and at most the serving pods' plus `error_rate_slack`; P95
latency at most `max_p95_ratio` times theirs and under `max_p95_latency_s` when set.

- The early gate: once `min_dwell_ratio` of `step_interval_s` has passed, the cohort's health
  is measured on every tick, and the step is judged (passed or failed) as soon as the cohort
  has served `min_requests` requests (at least one). A busy service walks its steps in a
  fraction of the intervals, which under a sudden rise is capacity arriving sooner; a quiet
  one, still short of requests, waits for the full interval as before. Only the first interval
  of a step is watched so: a step still thin after it is judged once per extension. The early
  gate judges only a complete measurement: while the serving pods show a P95 (or an error
  rate) that the cohort's does not yet (its latency histogram not yet scraped twice in the
  window), it waits rather than pass on the half it has.
- Fewer than `min_requests` requests at the end of the interval: the step is extended by another
  interval, up to `max_step_extensions` times; then it is judged on what there is. No request at
  all passes (traffic is too thin to judge and the warm-up probe already vouched for the pods); a
  missing measurement (asked for and not answered for a whole interval), or a cohort whose error
  rate and latency are both unknown, holds: a missing metric never reads as healthy. An unknown
  error rate next to a known latency is judged on the latency alone: a server that creates its
  failure counter at its first failure (TGI) has no error series while it is healthy.
- Pass: the next step. The pods that passed their warm-up during the step join the cohort
  now, marked warm together with the new weights, which count them: step p gives
  `share_pct(p, K + J, N)`. A joining pod has not passed the earlier gates, so the bound the
  ramp keeps is on the step the cohort is at, not on the pod's history: the warming set never
  gets more than p x (its size) / (N + its size) at step p, and every pod in it is judged at
  that step's gate. After the last gate nothing joins: such pods wait for the promotion to end
  and form the next cohort. Without joining, under a sudden rise the new capacity would arrive
  one whole ramp at a time.
- After the last step, promotion in an order that never routes to an empty set:
  label the cohort `stable` while it is still `warming`, give the labels `propagation_s` and the
  router time to settle, set the warming weight to 0, wait until that is in effect, then remove
  `warming`.
- Fail: the warming weight goes to 0 first; once the router has applied it (or
  `settle_timeout_s` passed) the failing pods are reclaimed and their ReplicaSet makes fresh
  ones. A cohort of more than one pod is judged pod by pod first (`MeasurePodHealth`, each pod
  alone against the serving pods over the step's window, or a whole interval when the step
  was judged early, the same `judge` without the extensions): the pods that fail on their own
  are reclaimed with those too thin to judge, and the pods that pass on their own stay warm in
  the warming set to form the next cohort. When no pod can be blamed on its own (too few
  requests each, all fine alone, or no answer before `settle_timeout_s`) the whole cohort is
  reclaimed. Either way the gate failed:
  it counts towards `max_failures`.
  After `max_failures` failures in a row the service is held: new pods still warm up but
  none is ramped. A hold ends when any ramp setting changes (the state remembers a fingerprint
  of the settings it was held under) or when someone deletes the persisted state (the driver
  notices that). A promotion resets the count.
- A router that does not report its weights applied within `settle_timeout_s` also holds, with
  the weight back to 0: the ramp cannot know what the mesh does.
- With no serving pod at all there is nothing to compare with or fall back on: the warm pods
  are promoted without steps. With the `none` router (gate only), a pod is promoted as soon as
  it is warm.

A warm, running pod in neither set (its `stable` label removed by hand) is put back in the
stable set.

**Scale-down** never touches the serving set while a cohort holds traffic: it is refused with a
reason. Otherwise victims are chosen warming pods first, then the lowest placement tier
(`shared` < `mig-*` < `whole`), then the least loaded (`victim_order`); those in the Service's
endpoints leave them (`SetWarm` False, `stable` removed); once their in-flight requests are 0
(a missing count is not 0) or `drain_grace_s` passed, each gets the lowest deletion cost and the
replica count drops (`ScaleTo`). A scale-up during a drain puts the victims back.

The state survives a restart as JSON (`dumps`/`loads`, all but the probe throttle); the first
tick after a restore re-asserts the weight it computes, so none stays stuck. It also starts the
ramp's overdue waits again (`Tick.resumed`): a step already due restarts its dwell with the
weights as they are, and a wait for the router that the gap used up gets its full time again. The
successor of a crashed leader finds the step's start long past and no measurement asked for in
between: on the old clock, that is a missing measurement and the ramp would hold, its new pods
kept warm at 0 % until someone edits a setting. A hold stays for what the gate measures, and for
a measurement asked for and not answered within an interval. `loads` reads text a tenant can
edit: through `untrusted.loads`, so any bad text is a `ValueError`.

Pure: no I/O, no clock (time is `tick.now_s`), no logging; `autoscaler.rollout` gathers the
inputs and carries out the actions.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import itertools
import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from autoscaler import untrusted
from autoscaler.core import placement

VERSION = 1
"""The version of the persisted state's layout; `loads` refuses any other."""
LIMIT_BYTES = 256 * 1024
"""Longest text `loads` reads: what Kubernetes allows for all of an object's annotations
together. A ramp of thousands of pods writes tens of kB, so no tighter bound is safe."""

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


class EventType(enum.Enum):
    NORMAL = "Normal"
    WARNING = "Warning"


class Outcome(enum.Enum):
    PROMOTED = "promoted"
    ROLLED_BACK = "rolled-back"
    HELD = "held"
    RELEASED = "released"


class Verdict(enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    WAIT = "wait"
    """Not enough to judge yet: extend the step."""
    HOLD = "hold"
    """Nothing to judge on, even after the extensions."""


# -- configuration ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RampConfig:
    """One service's warm-up gate and traffic ramp."""

    steps_pct: tuple[int, ...] = (10, 30, 50, 100)
    """Steps, percent of the new pods' fair share; strictly increasing, ending at 100."""
    step_interval_s: float = 30.0
    max_error_rate: float = 0.01
    error_rate_slack: float = 0.005
    """How far the new pods' error rate may exceed the serving pods' (absolute)."""
    max_p95_latency_s: float | None = None
    """Absolute P95 latency limit for the gate and the warm-up; none when unset."""
    max_p95_ratio: float = 1.2
    min_requests: int = 20
    """Requests the new pods must have served before a step is judged."""
    min_dwell_ratio: float = 1 / 3
    """Share of `step_interval_s` a step lasts at least, however busy the service: past it, a
    step is judged as soon as the new pods have served `min_requests` (the early gate).

    A third: the new pods have held their share for long enough that their first batches at
    the new weight, and a latency spike they cause, are in the window (10 s at the default
    30 s interval), while a busy service's ramp takes a third of the time. A window holding
    fewer than two scrapes reads as unknown, never as healthy: the step then waits. 1 turns
    the early gate off."""
    max_step_extensions: int = 3
    """Times a step is extended for want of requests before it is judged on what there is."""
    warmup_probe: bool = True
    """Whether a warm-up probe is configured; without one a pod is warm once running."""
    warmup_requests: int = 3
    warmup_deadline_s: float = 600.0
    warmup_latency_ratio: float = 1.5
    probe_interval_s: float = 5.0
    baseline_pods: int = 2
    """Serving pods probed alongside new ones, for the latency a warm pod shows."""
    max_failures: int = 3
    drain_grace_s: float = 60.0
    settle_timeout_s: float = 120.0
    """How long the router may take to report new weights applied before the ramp holds."""
    propagation_s: float = 5.0
    """Time given to label changes to reach the mesh's endpoints, which no API reports."""
    gate_only: bool = False
    """The `none` router: pods go warming, warm, promoted, with no weight steps."""

    def __post_init__(self) -> None:
        steps = self.steps_pct
        _require(bool(steps), "steps_pct must not be empty")
        _require(
            all(isinstance(p, int) and 1 <= p <= 100 for p in steps), "steps_pct must lie in 1..100"
        )
        _require(all(a < b for a, b in itertools.pairwise(steps)), "steps_pct must increase")
        _require(steps[-1] == 100, "steps_pct must end at 100")
        for name in (
            "step_interval_s",
            "warmup_deadline_s",
            "probe_interval_s",
            "settle_timeout_s",
            "warmup_latency_ratio",
            "max_p95_ratio",
        ):
            value = getattr(self, name)
            _require(math.isfinite(value) and value > 0, f"{name} must be positive")
        _require(
            math.isfinite(self.min_dwell_ratio) and 0 < self.min_dwell_ratio <= 1,
            "min_dwell_ratio must lie in (0, 1]",
        )
        for name in ("drain_grace_s", "propagation_s", "max_error_rate", "error_rate_slack"):
            value = getattr(self, name)
            _require(math.isfinite(value) and value >= 0, f"{name} must not be negative")
        limit = self.max_p95_latency_s
        _require(
            limit is None or (math.isfinite(limit) and limit > 0),
            "max_p95_latency_s must be positive",
        )
        _require(
            self.min_requests >= 0 and self.max_step_extensions >= 0,
            "min_requests and max_step_extensions must not be negative",
        )
        _require(
            self.warmup_requests >= 1 and self.max_failures >= 1,
            "warmup_requests and max_failures must be at least 1",
        )
        _require(self.baseline_pods >= 0, "baseline_pods must not be negative")


def fingerprint(config: RampConfig) -> str:
    """A short stable digest of the settings: a hold ends when it changes."""
    return hashlib.sha256(repr(config).encode()).hexdigest()[:16]


# -- inputs ------------------------------------------------------------------------------------


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


# -- state -------------------------------------------------------------------------------------


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


# -- the rules ---------------------------------------------------------------------------------


def share_pct(step_pct: int, warming: int, stable: int) -> int:
    """The warming set's weight at a step: its fair share `step x K / (N + K)`, rounded down,
    at least 1 when there is anything to give, all of it when there is no stable pod."""
    if step_pct <= 0 or warming <= 0:
        return 0
    if stable <= 0:
        return 100
    return max(1, step_pct * warming // (stable + warming))


def victim_order(pods: Iterable[Pod]) -> list[Pod]:
    """Pods in the order a scale-down removes them: warming first, then the lowest placement
    tier (the ladder's order reversed; a tier it does not know counts as whole), then the least
    loaded (an unknown load counts as the most), then by name."""

    def key(pod: Pod) -> tuple[int, int, float, str]:
        load = pod.in_flight if not math.isnan(pod.in_flight) else math.inf
        tier = pod.tier if placement.is_tier(pod.tier) else placement.WHOLE
        return (0 if pod.warming else 1, -placement.preference(tier), load, pod.name)

    return sorted(pods, key=key)


def judge(
    config: RampConfig, warming: Health, stable: Health, *, final: bool
) -> tuple[Verdict, str]:
    """The health gate: the cohort against the absolute limits and against the serving pods.

    `final` is the last extension: too few requests no longer wait (see the module docstring).
    """
    requests = warming.requests
    if math.isnan(requests):
        return (Verdict.HOLD if final else Verdict.WAIT), "no request count for the new pods"
    if requests < config.min_requests and not final:
        return Verdict.WAIT, f"{requests:g} requests on the new pods, fewer than the gate needs"
    if requests <= 0:
        return Verdict.PASS, "no request reached the new pods; nothing to judge"
    compared = 0
    problems: list[str] = []
    if not math.isnan(warming.error_rate):
        compared += 1
        if warming.error_rate > config.max_error_rate:
            problems.append(
                f"error rate {warming.error_rate:.4f} above the limit {config.max_error_rate:g}"
            )
        elif (
            not math.isnan(stable.error_rate)
            and warming.error_rate > stable.error_rate + config.error_rate_slack
        ):
            problems.append(
                f"error rate {warming.error_rate:.4f} above the serving pods' "
                f"{stable.error_rate:.4f}"
            )
    if not math.isnan(warming.p95_s):
        limit = config.max_p95_latency_s
        if limit is not None:
            compared += 1
            if warming.p95_s > limit:
                problems.append(f"P95 {warming.p95_s:.3f} s above the limit {limit:g} s")
        if not math.isnan(stable.p95_s):
            compared += 1
            if warming.p95_s > config.max_p95_ratio * stable.p95_s:
                problems.append(
                    f"P95 {warming.p95_s:.3f} s above {config.max_p95_ratio:g} x the serving "
                    f"pods' {stable.p95_s:.3f} s"
                )
    if problems:
        return Verdict.FAIL, "; ".join(problems)
    if not compared:
        verdict = Verdict.HOLD if final else Verdict.WAIT
        return verdict, "neither the error rate nor the P95 latency of the new pods is known"
    return Verdict.PASS, (
        f"{requests:g} requests, error rate {_fmt(warming.error_rate)}, P95 {_fmt(warming.p95_s)} s"
    )


def _complete(warming: Health, stable: Health) -> bool:
    """Whether the cohort's measurement has every kind the serving pods' has: the early gate
    judges nothing less (a kind neither group shows is one the server does not export)."""
    return not any(
        math.isnan(getattr(warming, kind)) and not math.isnan(getattr(stable, kind))
        for kind in ("error_rate", "p95_s")
    )


def blame(
    config: RampConfig, cohort: Sequence[str], alone: Mapping[str, tuple[Health, Health]]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(reclaimed, spared) after a failed gate, from each pod's health alone.

    A pod is blamed when it fails `judge` on its own, with the minimum request count (never
    judged on a handful of requests). Only pods that pass on their own are spared: a pod too thin
    to judge goes with the blamed ones, since the cohort it was part of failed. With none to
    blame, or a pod without an answer, the whole cohort is reclaimed and none spared."""
    if any(name not in alone for name in cohort):
        return tuple(cohort), ()
    verdicts = {
        name: judge(config, alone[name][0], alone[name][1], final=False)[0] for name in cohort
    }
    if Verdict.FAIL not in verdicts.values():
        return tuple(cohort), ()
    spared = tuple(name for name in cohort if verdicts[name] is Verdict.PASS)
    return tuple(name for name in cohort if name not in spared), spared


def advance(config: RampConfig, state: RampState, tick: Tick) -> Plan:
    """One tick of one service: the next state, the actions in order, the outcomes."""
    return _Advance(config, state, tick).run()


def scale(
    config: RampConfig,
    state: RampState,
    *,
    pods: Sequence[Pod],
    replicas: int,
    current: int,
) -> Plan | Refusal:
    """Answer the loop's replica change: up at once (cancelling a drain), down by draining
    first, refused while new pods hold traffic or another drain is under way."""
    if replicas >= current:
        return _scale_up(state, replicas)
    if state.phase in RAMP_PHASES:
        step = config.steps_pct[min(state.step, len(config.steps_pct) - 1)]
        return Refusal(
            f"new pods are {state.phase.value} at the {step} % step; the serving pods are not "
            "scaled down until the ramp ends"
        )
    if state.drain is not None:
        if state.drain.scaled_s is not None:
            return Refusal("the pods of the last scale-down are still terminating")
        if state.drain.replicas == replicas:
            return Plan(state)
        return Refusal(f"a drain to {state.drain.replicas} replicas is under way")
    live = [p for p in pods if not p.terminating]
    count = max(0, min(len(live), current) - replicas)
    chosen = victim_order(live)[:count]
    if not chosen:
        return Plan(state, (ScaleTo(replicas),))
    actions: list[Action] = []
    victims: list[Victim] = []
    for pod in chosen:
        # A warm pod whose container is restarting is not in the endpoints now, but would be
        # again once it runs: every warm victim leaves them.
        victims.append(Victim(pod.name, warm=pod.warm, stable=pod.stable))
        if pod.warm:
            actions.append(SetWarm(pod.name, False, f"draining for a scale-down to {replicas}"))
        if pod.stable:
            actions.append(Label(pod.name, warming=pod.warming, stable=False))
    names = ", ".join(v.name for v in victims)
    actions.append(
        Event(
            EventType.NORMAL,
            DRAIN_STARTED,
            f"Scaling down from {current} to {replicas}: draining {names} first",
        )
    )
    serving = tuple(p.name for p in chosen if p.warm and p.running)
    if serving:
        actions.append(MeasureInFlight(serving))
    gone = {v.name for v in victims}
    next_state = dataclasses.replace(
        state,
        phase=Phase.DRAINING,
        drain=Drain(replicas=replicas, victims=tuple(victims)),
        deadlines={k: v for k, v in state.deadlines.items() if k not in gone},
        probe_after={k: v for k, v in state.probe_after.items() if k not in gone},
        passed=tuple(n for n in state.passed if n not in gone),
    )
    return Plan(next_state, tuple(actions))


def release(state: RampState, reason: str) -> Plan:
    """End a hold by hand (the persisted state was deleted): ramping may start again."""
    if state.hold_reason is None:
        return Plan(state)
    phase = Phase.IDLE if state.phase is Phase.HELD else state.phase
    next_state = dataclasses.replace(
        state, phase=phase, hold_reason=None, held_config=None, failures=0
    )
    message = f"The ramp hold is released: {reason}"
    return Plan(next_state, (Event(EventType.NORMAL, RAMP_RELEASED, message),), (Outcome.RELEASED,))


def _scale_up(state: RampState, replicas: int) -> Plan:
    actions: list[Action] = []
    drain = state.drain
    if drain is not None and drain.scaled_s is None:
        for victim in drain.victims:
            if victim.warm:
                actions.append(SetWarm(victim.name, True, "drain cancelled by a scale-up"))
            if victim.stable:
                actions.append(Label(victim.name, warming=False, stable=True))
        actions.append(
            Event(
                EventType.NORMAL,
                DRAIN_CANCELLED,
                f"Scaling up to {replicas}: the pods being drained serve again",
            )
        )
        drain = None
    # The victims of a finished drain stay excluded until they are gone.
    actions.append(ScaleTo(replicas))
    phase = state.phase
    if phase is Phase.DRAINING:
        phase = Phase.HELD if state.held else Phase.IDLE
    return Plan(dataclasses.replace(state, phase=phase, drain=drain), tuple(actions))


class _Advance:
    """One call of `advance`: a working copy of the state, the actions and the outcomes."""

    def __init__(self, config: RampConfig, state: RampState, tick: Tick) -> None:
        self.config = config
        self.tick = tick
        self.now = tick.now_s
        self.phase = state.phase
        self.cohort = state.cohort
        self.step = min(state.step, len(config.steps_pct) - 1)
        self.step_started_s = state.step_started_s
        self.settle_since_s = state.settle_since_s
        self.stage = state.stage
        self.weight = state.weight_pct
        self.checks = state.checks
        self.asked_s = None if tick.health is not None else state.asked_s
        self.deadlines = dict(state.deadlines)
        self.probe_after = dict(state.probe_after)
        self.passed = list(state.passed)
        self.joined = state.joined
        self.failures = state.failures
        self.hold_reason = state.hold_reason
        self.held_config = state.held_config
        self.drain = state.drain
        self.actions: list[Action] = []
        self.outcomes: list[Outcome] = []
        self.warmed = False
        """A pod was set warm this tick."""
        self.pods = {p.name: p for p in tick.pods if not p.terminating}
        self.excluded = frozenset(v.name for v in self.drain.victims) if self.drain else frozenset()

    def run(self) -> Plan:
        if self.hold_reason is not None and self.held_config != fingerprint(self.config):
            self._release("the ramp settings changed")
        if self.config.gate_only and self.phase in RAMP_PHASES:
            self._end_ramp()  # the router went away: there is no weight left to manage
        ramping = self.phase in RAMP_PHASES
        draining = self._draining()
        if self.tick.resumed and ramping:
            self._resume()
        if self.tick.resumed and not ramping and not self.config.gate_only:
            # Whatever happened before the restart, no new pod holds traffic now.
            self.actions.append(EnsureRoutes())
            self._write_weights(0)
        if self.phase is Phase.RAMPING:
            self._ramp()
        elif self.phase is Phase.PROMOTING:
            self._promote()
        elif self.phase is Phase.ROLLING_BACK:
            self._roll_back()
        if self.drain is not None:
            self._drain()
        self._warm_up()
        # A ramp or a drain that ended this tick still sees its pods as they were (being
        # relabelled, reclaimed or removed), and a pod just set warm is not yet seen warm: the
        # next cohort forms from the next tick's pods, with every warm pod in it.
        free = self.phase not in RAMP_PHASES and self.hold_reason is None
        if free and not ramping and not draining and not self.warmed:
            self._start()
        return Plan(self._state(), tuple(self.actions), tuple(self.outcomes))

    # -- sets of pods ----------------------------------------------------------------------------

    def _stable(self) -> list[str]:
        """The serving pods: the stable set the cohort is compared with and falls back on."""
        return sorted(
            p.name
            for p in self.pods.values()
            if p.stable and not p.warming and p.warm and p.running and p.name not in self.excluded
        )

    def _alive(self, *, warming: bool = True) -> list[str]:
        """The cohort's pods still warm (or just set warm to join) and running (and still
        `warming`, unless told)."""
        alive = []
        for name in self.cohort:
            pod = self.pods.get(name)
            if pod is None or not pod.running or not (pod.warming or not warming):
                continue
            if pod.warm or name in self.joined:
                alive.append(name)
        return alive

    def _draining(self) -> bool:
        return self.drain is not None and self.drain.scaled_s is None

    # -- the ramp --------------------------------------------------------------------------------

    def _start(self) -> None:
        """Promote (gate only) or form a cohort from the warm pods still labelled `warming`."""
        ready = [
            p
            for name, p in sorted(self.pods.items())
            if p.warming and p.warm and p.running and name not in self.excluded
        ]
        if not ready:
            return
        if self.config.gate_only:
            for pod in ready:
                self.actions.append(Label(pod.name, warming=False, stable=True))
            names = ", ".join(p.name for p in ready)
            self._event(EventType.NORMAL, RAMP_PROMOTED, f"Warm and serving: {names}")
            self.outcomes.append(Outcome.PROMOTED)
            return
        for pod in ready:
            if pod.stable:  # a promotion cut short (a hold or a restart); the weight is 0
                self.actions.append(Label(pod.name, warming=False, stable=True))
        fresh = tuple(p.name for p in ready if not p.stable)
        if not fresh:
            return
        self.cohort = fresh
        self.step, self.checks, self.step_started_s = 0, 0, None
        self.actions.append(EnsureRoutes())
        stable = self._stable()
        if not stable:
            self._event(
                EventType.NORMAL,
                RAMP_PROMOTED,
                f"No serving pod to compare with or fall back on: promoting {_names(fresh)}",
            )
            self._begin_promotion()
            return
        self.phase = Phase.RAMPING
        weight = share_pct(self.config.steps_pct[0], len(fresh), len(stable))
        self._write_weights(weight, settle=True)
        self._event(
            EventType.NORMAL,
            RAMP_STARTED,
            f"Ramping {_names(fresh)} next to {len(stable)} serving pods: "
            f"step {self.config.steps_pct[0]} %, {weight} % of the traffic",
        )

    def _ramp(self) -> None:
        alive = self._alive()
        self.cohort = tuple(alive)
        self.joined = tuple(n for n in self.joined if n in alive and not self.pods[n].warm)
        if not alive:
            self._write_weights(0)
            self._event(
                EventType.WARNING,
                RAMP_ABANDONED,
                "The pods being ramped are gone; all traffic is back on the serving pods",
            )
            self._end_ramp()
            return
        stable = self._stable()
        if not stable:
            self._event(
                EventType.WARNING,
                RAMP_PROMOTED,
                f"No serving pod left to fall back on: promoting {_names(alive)}",
            )
            self._begin_promotion()
            return
        weight = share_pct(self.config.steps_pct[self.step], len(alive), len(stable))
        if weight != self.weight or self.tick.resumed:
            self._write_weights(weight)
        if self.settle_since_s is not None:
            if not self.tick.settled:
                self._still_settling("the new weights")
                return
            self.settle_since_s = None
            self.step_started_s = self.now
        self._gate(alive, stable)

    def _gate(self, alive: list[str], stable: list[str]) -> None:
        """Judge the step at the end of its interval (or extension), or earlier (the early
        gate) once the dwell has passed and the cohort has served enough requests."""
        started = self.step_started_s if self.step_started_s is not None else self.now
        self.step_started_s = started
        interval = self.config.step_interval_s
        due_s = started + interval * (self.checks + 1)
        early = self.checks == 0 and self.now < due_s
        if self.now < (started + self.config.min_dwell_ratio * interval if early else due_s):
            return
        health = self.tick.health
        # The window is the step so far: the traffic before it went to the cohort at another
        # share (or to some of its pods only), and would dilute what this step shows.
        measure = MeasureHealth(tuple(alive), tuple(stable), self.now - started)
        if early:
            if health is not None:
                verdict, why = judge(self.config, health[0], health[1], final=False)
                # A measured zero passes `judge` only without a minimum; early, it is no reason
                # to cut the step short.
                if verdict is not Verdict.WAIT and health[0].requests > 0 and _complete(*health):
                    self._judged(verdict, why, alive, stable)
                    return
            self._ask(measure)
            return
        if health is None:
            # Counted from the first request left unanswered, not from the step's due time:
            # a gate that did not ask (a step just extended, a leader just taken over) has
            # nothing missing yet.
            if self.asked_s is not None and self.now >= self.asked_s + interval:
                self._hold(f"no health measurement of the new pods for {interval:g} s")
                return
            self._ask(measure)
            return
        final = self.checks >= self.config.max_step_extensions
        verdict, why = judge(self.config, health[0], health[1], final=final)
        self._judged(verdict, why, alive, stable)

    def _ask(self, measure: MeasureHealth) -> None:
        self.actions.append(measure)
        if self.asked_s is None:
            self.asked_s = self.now

    def _judged(self, verdict: Verdict, why: str, alive: list[str], stable: list[str]) -> None:
        if verdict is Verdict.WAIT:
            self.checks += 1
        elif verdict is Verdict.HOLD:
            self._hold(f"the {self._step_pct()} % step cannot be judged: {why}")
        elif verdict is Verdict.FAIL:
            self._fail(why)
        else:
            self._pass(alive, stable, why)

    def _pass(self, alive: list[str], stable: list[str], why: str) -> None:
        passed_pct = self._step_pct()
        if self.step + 1 >= len(self.config.steps_pct):
            self._event(
                EventType.NORMAL,
                RAMP_STEP,
                f"{_names(alive)} passed the last step ({why}); promoting",
            )
            self._begin_promotion()
            return
        self.step += 1
        self.checks = 0
        self.step_started_s = None
        joiners = self._join()
        weight = share_pct(self._step_pct(), len(self.cohort), len(stable))
        self._write_weights(weight, settle=True)
        joined = f"; {_names(joiners)} joined" if joiners else ""
        self._event(
            EventType.NORMAL,
            RAMP_STEP,
            f"{_names(alive)} passed the {passed_pct} % step ({why}); now at "
            f"{self._step_pct()} %{joined}, {weight} % of the traffic",
        )

    def _join(self) -> list[str]:
        """Mark warm the pods that passed their warm-up during the step and add them to the
        cohort (before the weights that count them are written)."""
        joiners = []
        for name in list(self.passed):
            pod = self.pods.get(name)
            if pod is None or not pod.running or not pod.warming or name in self.excluded:
                continue
            self.passed.remove(name)
            self.actions.append(
                SetWarm(
                    name, True, f"warm-up passed; joins the ramp at the {self._step_pct()} % step"
                )
            )
            joiners.append(name)
        self.cohort = (*self.cohort, *joiners)
        self.joined = (*self.joined, *joiners)
        return joiners

    def _fail(self, why: str) -> None:
        self._write_weights(0, settle=True)
        self.phase = Phase.ROLLING_BACK
        replaced = "it will be replaced"
        if len(self.cohort) > 1:
            self._measure_alone()
            replaced = "the pods failing on their own will be replaced"
        self._event(
            EventType.WARNING,
            RAMP_ROLLED_BACK,
            f"{_names(self.cohort)} failed the {self._step_pct()} % step: {why}; their "
            f"traffic is back on the serving pods and {replaced}",
        )
        self.outcomes.append(Outcome.ROLLED_BACK)

    def _measure_alone(self) -> None:
        """Ask for each cohort pod's health alone over the failed step's window, or a whole
        interval when the step failed early: each pod alone needs `min_requests` to be blamed,
        and before the step it served at a lower share, not another way."""
        interval = self.config.step_interval_s
        started = self.step_started_s
        window_s = interval if started is None else max(interval, self.now - started)
        self.actions.append(MeasurePodHealth(self.cohort, tuple(self._stable()), window_s))

    def _roll_back(self) -> None:
        if self.tick.resumed:
            self._write_weights(0)
        several = len(self.cohort) > 1
        answered = all(name in self.tick.pod_health for name in self.cohort)
        ready = bool(self.tick.settled) and (answered or not several)
        if not ready and self._still_settling("the weight of 0", hold=False):
            if several:
                self._measure_alone()
            return
        if several:
            reclaimed, spared = blame(self.config, self.cohort, self.tick.pod_health)
        else:
            reclaimed, spared = self.cohort, ()
        reason = "failed the traffic ramp's health gate"
        if spared:
            reason += " on its own"
            self._event(
                EventType.NORMAL,
                RAMP_PODS_SPARED,
                f"{_names(reclaimed)} failed the gate on their own and will be replaced; "
                f"{_names(spared)} did not and ramp again with the next group",
            )
        for name in reclaimed:
            if name in self.pods:
                self.actions.append(Reclaim(name, reason))
        self.failures += 1
        self._end_ramp()
        if self.failures >= self.config.max_failures:
            self._hold(f"{self.failures} health gates failed in a row")

    def _begin_promotion(self) -> None:
        self.cohort = tuple(self._alive())
        for name in self.cohort:
            self.actions.append(Label(name, warming=True, stable=True))
        self.phase = Phase.PROMOTING
        self.stage = Stage.LABELLED
        self.settle_since_s = self.now
        self.step_started_s = None

    def _promote(self) -> None:
        if self.stage is Stage.UNWEIGHTED:
            alive = self._alive(warming=False)
            if self.tick.resumed:
                self._write_weights(0)
            if not self.tick.settled:
                self._still_settling("the weight of 0")
                return
            for name in alive:
                self.actions.append(Label(name, warming=False, stable=True))
            self._event(EventType.NORMAL, RAMP_PROMOTED, f"Promoted to serving: {_names(alive)}")
            self.outcomes.append(Outcome.PROMOTED)
            self.failures = 0
            self._end_ramp()
            return
        # A pod that restarts mid-promotion stays in the cohort: it passed every gate.
        alive = self._alive()
        if not alive:
            if self.weight:
                self._write_weights(0)
            self._end_ramp()
            return
        if self.tick.resumed:
            for name in alive:
                self.actions.append(Label(name, warming=True, stable=True))
            self._write_weights(self.weight)
        since = self.settle_since_s if self.settle_since_s is not None else self.now
        self.settle_since_s = since
        if self.now - since < self.config.propagation_s:
            return
        if not self.tick.settled:
            self._still_settling("the stable labels")
            return
        self._write_weights(0, settle=True)
        self.stage = Stage.UNWEIGHTED

    def _still_settling(self, what: str, *, hold: bool = True) -> bool:
        """Ask again whether the router has settled; False once it has taken too long (and,
        with `hold`, the ramp is held)."""
        since = self.settle_since_s if self.settle_since_s is not None else self.now
        self.settle_since_s = since
        if self.now - since < self.config.settle_timeout_s:
            self.actions.append(CheckSettled())
            return True
        if hold:
            self._hold(
                f"the traffic router did not apply {what} within {self.config.settle_timeout_s:g} s"
            )
        return False

    def _resume(self) -> None:
        """After a restart, give back to the ramp's timed waits what the gap took from them.

        The answers asked for before the restart are lost, and the time the controller was
        away says nothing of the router or of the cohort. A step already due restarts its
        dwell (its extensions too) with the weights as they are, rather than being judged, or
        held, on a clock nobody watched; a wait for the router or the labels that the gap used
        up gets its full time again. A wait not yet over keeps its clock: a controller that
        restarts again and again still moves on.
        """
        self.asked_s = None  # the answer went with the old leader
        since = self.settle_since_s
        if since is not None and self.now - since >= self.config.settle_timeout_s:
            self.settle_since_s = self.now
        started = self.step_started_s
        if self.phase is Phase.RAMPING and started is not None:
            due_s = started + self.config.step_interval_s * (self.checks + 1)
            if self.now >= due_s:
                self.step_started_s = self.now
                self.checks = 0

    def _write_weights(self, weight: int, *, settle: bool = False) -> None:
        self.actions.append(SetWeights(weight))
        self.weight = weight
        if settle:
            self.settle_since_s = self.now
            self.actions.append(CheckSettled())

    def _end_ramp(self) -> None:
        self.phase = Phase.IDLE
        self.cohort = self.joined = ()
        self.step, self.checks, self.weight = 0, 0, 0
        self.step_started_s = self.settle_since_s = None
        self.stage = None

    def _hold(self, reason: str) -> None:
        if self.weight or self.phase in RAMP_PHASES:
            self._write_weights(0)
        self._end_ramp()
        self.phase = Phase.HELD
        self.hold_reason = reason
        self.held_config = fingerprint(self.config)
        self._event(
            EventType.WARNING,
            RAMP_HELD,
            f"Ramp held: {reason}. New pods warm up but get no traffic until a ramp setting "
            "changes or the saved ramp state is deleted",
        )
        self.outcomes.append(Outcome.HELD)

    def _release(self, reason: str) -> None:
        self.hold_reason = self.held_config = None
        self.failures = 0
        if self.phase is Phase.HELD:
            self.phase = Phase.IDLE
        self._event(EventType.NORMAL, RAMP_RELEASED, f"The ramp hold is released: {reason}")
        self.outcomes.append(Outcome.RELEASED)

    # -- warm-up ---------------------------------------------------------------------------------

    def _warm_up(self) -> None:
        deferring = self.phase in RAMP_PHASES
        stable = self._stable()
        baseline = self._baseline(stable)
        probing = False
        for name, pod in sorted(self.pods.items()):
            if name in self.excluded or name in self.joined:
                continue
            if not pod.warming:
                if not pod.stable and pod.warm and pod.running:
                    # Warm and serving behind the Service, but in neither routed set (someone
                    # removed its label): the stable set is where it belongs.
                    self.actions.append(Label(name, warming=False, stable=True))
                continue
            if pod.warm:
                if deferring and pod.running and name not in self.cohort:
                    self._stray(name, pod)
                continue
            deadline = self.deadlines.get(name)
            if not pod.running:
                if deadline is not None and self.now >= deadline:
                    self._time_out(name)
                continue
            if name in self.passed:
                if not deferring:
                    self.passed.remove(name)
                    self._set_warm(name, "warm-up passed")
                continue
            if deadline is None:
                deadline = self.deadlines[name] = self.now + self.config.warmup_deadline_s
            if self.config.warmup_probe:
                result = self.tick.probes.get(name)
                warm, message = (False, "") if result is None else self._warm(result, baseline)
            else:
                warm, message = True, "running; no warm-up probe is configured"
            if warm:
                self.deadlines.pop(name, None)
                self.probe_after.pop(name, None)
                if deferring:
                    self.passed.append(name)
                else:
                    self._set_warm(name, message)
                continue
            if self.now >= deadline:
                self._time_out(name)
                continue
            if self.probe_after.get(name, -math.inf) <= self.now and pod.ip is not None:
                self.actions.append(Probe(name))
                self.probe_after[name] = self.now + self.config.probe_interval_s
                probing = True
        if probing:
            for name in stable[: self.config.baseline_pods]:
                self.actions.append(Probe(name))
        self._forget_gone()

    def _stray(self, name: str, pod: Pod) -> None:
        """A warm pod in the warming set but not in the cohort, say after a container restart:
        the gate does not judge it, so it must not share the cohort's weight."""
        if pod.stable:  # a promotion cut short: it passed its gates, finish it
            self.actions.append(Label(name, warming=False, stable=True))
        else:  # out of the warming set; it warms up again after the ramp
            self.actions.append(SetWarm(name, False, "warm outside the ramping group"))

    def _set_warm(self, name: str, message: str) -> None:
        self.actions.append(SetWarm(name, True, message))
        self.warmed = True

    def _baseline(self, stable: Sequence[str]) -> float | None:
        """Median probe latency of the serving pods probed last tick; None without one."""
        latencies: list[float] = []
        for name in stable:
            result = self.tick.probes.get(name)
            if result is not None and result.failed == 0:
                latencies.extend(result.latencies_s)
        return statistics.median(latencies) if latencies else None

    def _warm(self, result: Probed, baseline: float | None) -> tuple[bool, str]:
        asked = result.ok + result.failed
        if result.ok < self.config.warmup_requests or result.failed:
            return False, f"{result.ok} of {asked} probes answered"
        if not result.latencies_s:
            return False, "probes answered without a latency"
        median = statistics.median(result.latencies_s)
        said = f"{result.ok} of {asked} probes answered, median {median:.3f} s"
        limits = []
        if baseline is not None:
            limits.append((self.config.warmup_latency_ratio * baseline, "the serving pods'"))
        if self.config.max_p95_latency_s is not None:
            limits.append((self.config.max_p95_latency_s, "the limit"))
        if not limits:
            return True, said
        for limit, what in limits:
            if median <= limit:
                return True, f"{said}, within {what} {limit:.3f} s"
        return False, f"{said}, above {limits[0][1]} {limits[0][0]:.3f} s"

    def _time_out(self, name: str) -> None:
        self.deadlines.pop(name, None)
        self.probe_after.pop(name, None)
        limit = self.config.warmup_deadline_s
        self.actions.append(Reclaim(name, f"not warm within {limit:g} s"))
        self._event(
            EventType.WARNING,
            WARMUP_TIMED_OUT,
            f"Pod {name} was not warm within {limit:g} s of running; it is replaced",
        )

    def _forget_gone(self) -> None:
        def warming(name: str) -> bool:
            pod = self.pods.get(name)
            return pod is not None and pod.warming and not pod.warm and name not in self.excluded

        self.deadlines = {k: v for k, v in self.deadlines.items() if warming(k)}
        self.probe_after = {k: v for k, v in self.probe_after.items() if warming(k)}
        self.passed = [name for name in self.passed if warming(name)]

    # -- drain -----------------------------------------------------------------------------------

    def _drain(self) -> None:
        drain = self.drain
        assert drain is not None
        alive = [v for v in drain.victims if v.name in self.pods]
        if drain.scaled_s is not None:
            if not alive or self.now >= drain.scaled_s + self.config.drain_grace_s:
                self.drain = None
                self.excluded = frozenset()
            return
        started = drain.started_s if drain.started_s is not None else self.now
        waiting = tuple(
            v.name
            for v in alive
            if v.warm and self.pods[v.name].running and not self.pods[v.name].in_flight <= 0
        )
        grace_over = self.now >= started + self.config.drain_grace_s
        if waiting and not grace_over:
            self.drain = dataclasses.replace(drain, started_s=started)
            self.actions.append(MeasureInFlight(waiting))
            return
        for victim in alive:
            self.actions.append(MarkVictim(victim.name))
        self.actions.append(ScaleTo(drain.replicas))
        how = (
            f"the grace period of {self.config.drain_grace_s:g} s passed"
            if waiting
            else "no requests in flight"
        )
        self._event(
            EventType.NORMAL,
            DRAINED,
            f"Drained {_names(v.name for v in drain.victims)} ({how}); replicas set to "
            f"{drain.replicas}",
        )
        self.drain = dataclasses.replace(drain, started_s=started, scaled_s=self.now)

    # -- the result ------------------------------------------------------------------------------

    def _step_pct(self) -> int:
        return self.config.steps_pct[self.step]

    def _event(self, type_: EventType, reason: str, message: str) -> None:
        self.actions.append(Event(type_, reason, message))

    def _state(self) -> RampState:
        phase = self.phase
        if phase not in RAMP_PHASES:
            if self._draining():
                phase = Phase.DRAINING
            elif self.hold_reason is not None:
                phase = Phase.HELD
            elif self.deadlines or self.passed or self._any_warming():
                phase = Phase.WARMING
            else:
                phase = Phase.IDLE
        return RampState(
            phase=phase,
            cohort=self.cohort,
            step=self.step,
            step_started_s=self.step_started_s,
            settle_since_s=self.settle_since_s,
            stage=self.stage if phase is Phase.PROMOTING else None,
            weight_pct=self.weight,
            checks=self.checks,
            asked_s=self.asked_s if phase is Phase.RAMPING else None,
            deadlines=self.deadlines,
            probe_after=self.probe_after,
            passed=tuple(self.passed),
            joined=self.joined,
            failures=self.failures,
            hold_reason=self.hold_reason,
            held_config=self.held_config,
            drain=self.drain,
        )

    def _any_warming(self) -> bool:
        return any(
            p.warming and not p.warm and name not in self.excluded for name, p in self.pods.items()
        )


# -- persistence -------------------------------------------------------------------------------


def dumps(state: RampState) -> str:
    """The state as compact JSON with a version field; fields at their default are left out.

    `probe_after` stays in memory: it changes with every probe, and a restarted controller
    that probes a warming pod a little early loses nothing. So does `asked_s`: it changes with
    every health request, and a restarted controller has lost the answer it awaited.
    """
    doc: dict[str, Any] = {"v": VERSION, "phase": state.phase.value}
    if state.cohort:
        doc["cohort"] = list(state.cohort)
    if state.step:
        doc["step"] = state.step
    if state.step_started_s is not None:
        doc["step_started_s"] = state.step_started_s
    if state.settle_since_s is not None:
        doc["settle_since_s"] = state.settle_since_s
    if state.stage is not None:
        doc["stage"] = state.stage.value
    if state.weight_pct:
        doc["weight_pct"] = state.weight_pct
    if state.checks:
        doc["checks"] = state.checks
    if state.deadlines:
        doc["deadlines"] = dict(state.deadlines)
    if state.passed:
        doc["passed"] = list(state.passed)
    if state.joined:
        doc["joined"] = list(state.joined)
    if state.failures:
        doc["failures"] = state.failures
    if state.hold_reason is not None:
        doc["hold_reason"] = state.hold_reason
    if state.held_config is not None:
        doc["held_config"] = state.held_config
    if state.drain is not None:
        drain = state.drain
        doc["drain"] = {
            "replicas": drain.replicas,
            "victims": [[v.name, v.warm, v.stable] for v in drain.victims],
            "started_s": drain.started_s,
            "scaled_s": drain.scaled_s,
        }
    return json.dumps(doc, separators=(",", ":"), sort_keys=True, allow_nan=False)


def loads(text: str) -> RampState:
    """The state `dumps` wrote; `ValueError` naming the problem for anything else."""
    try:
        doc = untrusted.loads(text, limit_bytes=LIMIT_BYTES)
    except untrusted.UntrustedJsonError as e:
        raise ValueError(f"ramp state {e.rule}") from None
    if not isinstance(doc, dict):
        raise ValueError("ramp state is not a JSON object")
    known = {
        "v",
        "phase",
        "cohort",
        "step",
        "step_started_s",
        "settle_since_s",
        "stage",
        "weight_pct",
        "checks",
        "deadlines",
        "passed",
        "joined",
        "failures",
        "hold_reason",
        "held_config",
        "drain",
    }
    unknown = sorted(set(doc) - known)
    if unknown:
        raise ValueError(f"ramp state has unknown fields: {untrusted.excerpt(', '.join(unknown))}")
    if doc.get("v") != VERSION or isinstance(doc.get("v"), bool):
        raise ValueError(f"ramp state version {untrusted.excerpt(doc.get('v'))} is not {VERSION}")
    stage = doc.get("stage")
    drain = doc.get("drain")
    state = RampState(
        phase=_enum(Phase, doc.get("phase"), "phase"),
        cohort=_names_of(doc.get("cohort", []), "cohort"),
        step=_count(doc.get("step", 0), "step"),
        step_started_s=_time(doc.get("step_started_s"), "step_started_s"),
        settle_since_s=_time(doc.get("settle_since_s"), "settle_since_s"),
        stage=None if stage is None else _enum(Stage, stage, "stage"),
        weight_pct=_count(doc.get("weight_pct", 0), "weight_pct"),
        checks=_count(doc.get("checks", 0), "checks"),
        deadlines=_times(doc.get("deadlines", {}), "deadlines"),
        passed=_names_of(doc.get("passed", []), "passed"),
        joined=_names_of(doc.get("joined", []), "joined"),
        failures=_count(doc.get("failures", 0), "failures"),
        hold_reason=_text(doc.get("hold_reason"), "hold_reason"),
        held_config=_text(doc.get("held_config"), "held_config"),
        drain=None if drain is None else _drain(drain),
    )
    if state.weight_pct > 100:
        raise ValueError(f"ramp state weight_pct {state.weight_pct} is above 100")
    if (state.phase is Phase.PROMOTING) != (state.stage is not None):
        raise ValueError("ramp state has a promotion stage exactly when promoting")
    return state


def _drain(value: object) -> Drain:
    if not isinstance(value, dict) or set(value) != {
        "replicas",
        "victims",
        "started_s",
        "scaled_s",
    }:
        raise ValueError("ramp state drain must have replicas, victims, started_s and scaled_s")
    victims_doc = value["victims"]
    if not isinstance(victims_doc, list):
        raise ValueError("ramp state drain victims must be a list")
    victims = []
    for item in victims_doc:
        if (
            not isinstance(item, list)
            or len(item) != 3
            or not isinstance(item[0], str)
            or not isinstance(item[1], bool)
            or not isinstance(item[2], bool)
        ):
            raise ValueError("ramp state drain victim must be [name, warm, stable]")
        victims.append(Victim(item[0], warm=item[1], stable=item[2]))
    return Drain(
        replicas=_count(value["replicas"], "drain.replicas"),
        victims=tuple(victims),
        started_s=_time(value["started_s"], "drain.started_s"),
        scaled_s=_time(value["scaled_s"], "drain.scaled_s"),
    )


def _enum(kind: type[enum.Enum], value: object, name: str) -> Any:
    try:
        return kind(value)
    except ValueError:
        raise ValueError(
            f"ramp state {name} {untrusted.excerpt(value)} is not one of the known values"
        ) from None


def _count(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(
            f"ramp state {name} must be a whole number >= 0, not {untrusted.excerpt(value)}"
        )
    return value


def _time(value: object, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(
            f"ramp state {name} must be a finite number, not {untrusted.excerpt(value)}"
        )
    return float(value)


def _times(value: object, name: str) -> dict[str, float]:
    if not isinstance(value, dict):
        raise ValueError(f"ramp state {name} must be an object of times")
    out = {}
    for key, item in value.items():
        when = _time(item, f"{name}.{key}")
        if when is None:
            raise ValueError(f"ramp state {name}.{key} must be a finite number")
        out[key] = when
    return out


def _names_of(value: object, name: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"ramp state {name} must be a list of pod names")
    return tuple(value)


def _text(value: object, name: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"ramp state {name} must be text")
    return value


def _names(names: Iterable[str]) -> str:
    return ", ".join(names)


def _fmt(value: float) -> str:
    return "unknown" if math.isnan(value) else f"{value:.4g}"


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)
