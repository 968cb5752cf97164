"""The Kubernetes HorizontalPodAutoscaler (autoscaling/v2) on a per-pod custom metric.

What a service owner gets with `kubectl autoscale` plus prometheus-adapter: a `Pods` metric with an
`AverageValue` target of `target` per pod, default controller flags and no `spec.behavior`. The
metric (`metric.Metric`) is the per-pod rate of the server's request counter (`RATE`, requests
per second) or its running plus waiting requests (`CONCURRENCY`, the usual vLLM setup:
`vllm:num_requests_running + vllm:num_requests_waiting`); the controller treats both alike.
Reproduced from kubernetes/kubernetes:

- `pkg/controller/podautoscaler/horizontal.go`: `reconcileAutoscaler` (bounds first, then the
  metric proposal), `recordInitialRecommendation`, `normalizeDesiredReplicas` with
  `stabilizeRecommendation` (the highest recommendation of the last 300 s) and
  `convertDesiredReplicasWithRules` (`scaleUpLimitFactor = 2.0`, `scaleUpLimitMinimum = 4.0`);
  with a `behavior` (see `Behavior`), `normalizeDesiredReplicasWithBehaviors`,
  `stabilizeRecommendationWithBehaviors`, `convertDesiredReplicasWithBehaviorRate`,
  `calculateScaleUpLimitWithScalingRules`, `calculateScaleDownLimitWithBehaviors` and
  `storeScaleEvent`.
- `pkg/controller/podautoscaler/replica_calculator.go`: `calcPlainMetricReplicas` and `groupPods`
  for a `Pods` metric (readiness is checked only for CPU, so a running pod that reports the
  metric counts whether it is ready or not; pending pods are "unready"; pods without a sample are
  "missing": 0 on a scale-up, the target on a scale-down; no scaling when that would reverse the
  direction), and the tolerance test `Tolerances.isWithin`.
- `pkg/controller/podautoscaler/rate_limiters.go`: each HPA is reconciled once per resync period,
  the first time one period after it appears.
- `pkg/controller/podautoscaler/config/v1alpha1/defaults.go`: sync period 15 s, tolerance 0.1,
  downscale stabilisation 5 min. `pkg/apis/autoscaling/v2/defaults.go`: the rules an API server
  fills in when a `behavior` is given (`DEFAULT_BEHAVIOR`).

Defaults and modelling choices:

- **No `spec.behavior`** (`HpaConfig.behavior = None`), as `kubectl autoscale` and KEDA create
  it. The controller then takes its legacy path: at most `max(2 x current, 4)` replicas per sync
  and no scale-down rate limit beyond the 300 s stabilisation window. With
  `behavior=DEFAULT_BEHAVIOR` it runs the documented default rules instead: `+max(4 pods, 100 %)`
  per 15 s period, `-100 %` per 15 s after the same 300 s window. From 2 replicas the legacy path
  allows 4 at the next sync, the behaviour path 6.
- **Bounds**: min and max replicas are the service's own (`workload.policy`), so every policy in a
  comparison runs with the same floor; HPA's own default minimum would be 1.
- **The metric**: `observation.signal(LOAD).last`, the raw sample of this tick (the rate or the
  concurrency, as prometheus-adapter would serve it), never our smoothed mean. It is the sum
  over the serving pods and is split evenly among them; values are milli-quantities truncated as
  `int64(v * 1000)`, and the per-pod average is an integer division, as in `GetMetricUsageRatio`.
- **Pods not serving** (`replicas - serving`: starting, warming, behind our readiness gate) are
  seen as `NotServingPods` says. The default, `REPORT_ZERO`, is the documented HPA behaviour for
  custom metrics: a running pod whose server already exports its counter reports ~0 requests per
  second and counts, unready or not, so the usage ratio is `total / (target x replicas)`.
  `MISSING` models pods with no sample yet (model still loading); `PENDING` models pods not yet
  scheduled. Outside the tolerance band all three scale up to `ceil(total / target)`; they differ
  on the way down.
- A missing sample (NaN) is a failed metric: HPA does not scale and says so (`HOLD`).
- Between syncs the decision is `STEADY` with `desired = current`.
- The controller assumes a decided scale is applied (the real one records scale events only after
  a successful write).

Pure: no I/O, no clock (time is `observation.now_s`), no asyncio, no logging.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from autoscaler import ports
from autoscaler.baselines import _verdict
from autoscaler.baselines.metric import Metric
from autoscaler.core import model
from autoscaler.core.model import Bound, Decision, Reason, Signal

SCALE_UP_LIMIT_FACTOR = 2.0
"""`scaleUpLimitFactor` of the legacy path (no `behavior`)."""
SCALE_UP_LIMIT_MINIMUM = 4.0
"""`scaleUpLimitMinimum` of the legacy path (no `behavior`)."""

# Simulated times are whole seconds; a sync due at t must not slip to t + 1 on float noise.
_TIME_SLACK_S = 1e-6


class NotServingPods(enum.Enum):
    """How HPA sees the `replicas - serving` pods that exist but do not serve yet."""

    REPORT_ZERO = "report-zero"
    """Running and exporting the metric at ~0 rps: counted (HPA ignores readiness for custom
    metrics)."""
    MISSING = "missing"
    """Running without a sample yet: `missingPods` (0 on a scale-up, the target on a scale-down)."""
    PENDING = "pending"
    """Not running yet: `unreadyPods` (0 on a scale-up, ignored otherwise)."""


class PolicyType(enum.Enum):
    PODS = "Pods"
    PERCENT = "Percent"


class SelectPolicy(enum.Enum):
    MAX = "Max"
    MIN = "Min"
    DISABLED = "Disabled"


@dataclass(frozen=True, slots=True)
class ScalingPolicy:
    """One `HPAScalingPolicy`: change by `value` pods or percent per `period_s`."""

    type: PolicyType
    value: int
    period_s: float


@dataclass(frozen=True, slots=True)
class ScalingRules:
    """One direction of an `HorizontalPodAutoscalerBehavior`."""

    policies: tuple[ScalingPolicy, ...]
    select: SelectPolicy = SelectPolicy.MAX
    stabilization_window_s: float | None = None
    """None: the controller's `--horizontal-pod-autoscaler-downscale-stabilization`."""


@dataclass(frozen=True, slots=True)
class Behavior:
    scale_up: ScalingRules
    scale_down: ScalingRules


DEFAULT_BEHAVIOR = Behavior(
    scale_up=ScalingRules(
        policies=(
            ScalingPolicy(PolicyType.PODS, 4, 15.0),
            ScalingPolicy(PolicyType.PERCENT, 100, 15.0),
        ),
        select=SelectPolicy.MAX,
        stabilization_window_s=0.0,
    ),
    scale_down=ScalingRules(
        policies=(ScalingPolicy(PolicyType.PERCENT, 100, 15.0),),
        select=SelectPolicy.MAX,
        stabilization_window_s=None,
    ),
)
"""What the API server fills in for a `behavior` given without rules (`GenerateHPAScaleUpRules`,
`GenerateHPAScaleDownRules` in `pkg/apis/autoscaling/v2/defaults.go`)."""


@dataclass(frozen=True, slots=True)
class HpaConfig:
    """kube-controller-manager flags and the HPA object's `behavior`; defaults as shipped."""

    sync_period_s: float = 15.0
    """`--horizontal-pod-autoscaler-sync-period`."""
    tolerance: float = 0.1
    """`--horizontal-pod-autoscaler-tolerance`, both directions."""
    downscale_stabilization_s: float = 300.0
    """`--horizontal-pod-autoscaler-downscale-stabilization`."""
    behavior: Behavior | None = None
    """`spec.behavior`; None (unset) selects the controller's legacy normalisation."""

    def __post_init__(self) -> None:
        if not self.sync_period_s > 0:
            raise ValueError("sync_period_s must be > 0")
        if not 0 <= self.tolerance < 1:
            raise ValueError("tolerance must be in [0, 1)")
        if self.downscale_stabilization_s < 0:
            raise ValueError("downscale_stabilization_s must be >= 0")


@dataclass(frozen=True, slots=True)
class Proposal:
    """One metric's proposal, as `computeReplicasForMetric` returns it."""

    replicas: int
    ratio: float
    """The usage ratio HPA reports (current value over target)."""
    within_tolerance: bool
    detail: str


@dataclass(slots=True)
class _Timestamped:
    replicas: int
    at_s: float


@dataclass(slots=True)
class _ScaleEvent:
    change: int
    """Absolute replica change, never negative."""
    at_s: float
    outdated: bool = False


@dataclass(slots=True)
class _Memory:
    """What the controller keeps per HPA between syncs."""

    next_sync_s: float
    recommendations: list[_Timestamped] = field(default_factory=list)
    up_events: list[_ScaleEvent] = field(default_factory=list)
    down_events: list[_ScaleEvent] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Normalized:
    desired: int
    stabilized: int
    limit: str | None
    """The HPA condition reason when a rule moved the count: `ScaleUpLimit`, `TooManyReplicas`,
    `ScaleDownLimit`, `TooFewReplicas`."""


class Hpa:
    """HPA with a `Pods` metric on the load signal (`metric`), `AverageValue` target `target`
    per pod."""

    def __init__(
        self,
        *,
        target: float,
        metric: Metric = Metric.RATE,
        not_serving: NotServingPods = NotServingPods.REPORT_ZERO,
        config: HpaConfig | None = None,
    ) -> None:
        if not (math.isfinite(target) and target > 0):
            raise ValueError("target must be > 0")
        self.target = target
        self.metric = metric
        self.not_serving = not_serving
        self.config = config or HpaConfig()
        # A target is a quantity such as "750m": an exact milli-value.
        self._target_milli = max(1, round(target * 1000))
        self._memory: dict[model.ServiceId, _Memory] = {}

    def decide(
        self,
        workload: ports.Workload,
        observation: model.Observation,
        state: model.PolicyState,
    ) -> tuple[Decision, model.PolicyState]:
        now = observation.now_s
        memory = self._memory.get(workload.id)
        if memory is None:
            memory = _Memory(next_sync_s=now + self.config.sync_period_s)
            self._memory[workload.id] = memory
        self._observe(workload, observation)
        if now + _TIME_SLACK_S < memory.next_sync_s:
            detail = f"no HPA sync until {memory.next_sync_s:g} s"
            return _verdict.steady(observation, Reason.AT_DESIRED, detail), state
        memory.next_sync_s = now + self.config.sync_period_s
        return self._reconcile(workload, observation, memory), state

    # Hooks for KEDA, which feeds the same controller an External metric.

    def _observe(self, workload: ports.Workload, observation: model.Observation) -> None:
        """Called every tick before the sync check; HPA itself keeps nothing."""

    def _bounds(self, workload: ports.Workload) -> tuple[int, int]:
        return workload.policy.min_replicas, workload.policy.max_replicas

    def _propose(self, workload: ports.Workload, observation: model.Observation) -> Proposal | str:
        """`computeStatusForPodsMetric`: the proposal, or why the metric failed."""
        est = observation.signal(Signal.LOAD)
        total = est.last
        if not (est.fresh and math.isfinite(total)):
            return "unable to get pods metric: no sample this sync"
        current = observation.replicas
        serving = max(0, min(observation.serving, current))
        not_serving = current - serving
        per_pod_milli = _milli(total / serving) if serving else 0
        n_ready, n_missing, n_unready = serving, 0, 0
        if self.not_serving is NotServingPods.REPORT_ZERO:
            n_ready += not_serving
        elif self.not_serving is NotServingPods.MISSING:
            n_missing = not_serving
        else:
            n_unready = not_serving
        result = pods_metric_replicas(
            current,
            total_milli=per_pod_milli * serving,
            n_ready=n_ready,
            n_unready=n_unready,
            n_missing=n_missing,
            target_milli=self._target_milli,
            tolerance=self.config.tolerance,
        )
        if result is None:
            return "did not receive metrics for targeted pods (pods might be unready)"
        replicas, ratio = result
        detail = (
            f"pods metric {total:.3g} {self.metric.unit} over {n_ready} pods with a sample"
            f" ({n_missing} missing, {n_unready} pending): ratio {ratio:.2f} asks for {replicas}"
        )
        return Proposal(replicas, ratio, within_tolerance(ratio, self.config.tolerance), detail)

    # The controller.

    def _reconcile(
        self, workload: ports.Workload, observation: model.Observation, memory: _Memory
    ) -> Decision:
        now, current = observation.now_s, observation.replicas
        lo, hi = self._bounds(workload)
        if not memory.recommendations:  # recordInitialRecommendation
            memory.recommendations.append(_Timestamped(current, now))
        if current == 0 and lo != 0:
            detail = "scaling is disabled since the replica count of the target is zero"
            return _verdict.steady(observation, Reason.AT_DESIRED, detail)
        if current > hi:
            self._store_scale_event(memory, current, hi, now)
            detail = "current number of replicas above max replicas"
            return _verdict.decision(observation, hi, Reason.ABOVE_MAX, detail, bound=Bound.MAX)
        if current < lo:
            self._store_scale_event(memory, current, lo, now)
            detail = "current number of replicas below min replicas"
            return _verdict.decision(observation, lo, Reason.BELOW_MIN, detail, bound=Bound.MIN)

        proposal = self._propose(workload, observation)
        if isinstance(proposal, str):
            return _verdict.hold(observation, Reason.MISSING_DATA, proposal)
        wanted = max(0, proposal.replicas)
        if self.config.behavior is None:
            norm = self._normalize(memory, current, wanted, lo, hi, now)
        else:
            norm = self._normalize_with_behavior(
                self.config.behavior, memory, current, wanted, lo, hi, now
            )
        if norm.desired != current:
            self._store_scale_event(memory, current, norm.desired, now)
        return self._decision(observation, proposal, wanted, norm, lo, hi)

    def _decision(
        self,
        observation: model.Observation,
        proposal: Proposal,
        wanted: int,
        norm: _Normalized,
        lo: int,
        hi: int,
    ) -> Decision:
        current = observation.replicas
        votes = _verdict.load_vote(proposal.ratio, proposal.replicas, "last")
        bound = {"TooManyReplicas": Bound.MAX, "TooFewReplicas": Bound.MIN}.get(norm.limit or "")
        window = self._down_window_s()
        detail = proposal.detail
        if norm.stabilized != wanted:
            detail += f"; stabilised at {norm.stabilized} (highest in the last {window:g} s)"
        if norm.limit is not None and norm.desired != norm.stabilized:
            detail += f"; {norm.limit}: {norm.desired}"
        if norm.desired > current:
            return _verdict.decision(
                observation,
                norm.desired,
                Reason.ABOVE_TARGET,
                detail,
                contributions=votes,
                bound=bound,
            )
        if norm.desired < current:
            return _verdict.decision(
                observation,
                norm.desired,
                Reason.BELOW_TARGET,
                detail,
                contributions=votes,
                bound=bound,
            )
        if wanted == current:
            reason = Reason.IN_DEADBAND if proposal.within_tolerance else Reason.AT_DESIRED
            return _verdict.steady(observation, reason, detail, contributions=votes)
        if (wanted > current and current == hi) or (wanted < current and current == lo):
            bound = Bound.MAX if wanted > current else Bound.MIN
            return _verdict.steady(
                observation, Reason.AT_DESIRED, detail, contributions=votes, bound=bound
            )
        return _verdict.hold(observation, Reason.COOLDOWN, detail, contributions=votes)

    def _down_window_s(self) -> float:
        behavior = self.config.behavior
        if behavior is not None and behavior.scale_down.stabilization_window_s is not None:
            return behavior.scale_down.stabilization_window_s
        return self.config.downscale_stabilization_s

    def _normalize(
        self, memory: _Memory, current: int, wanted: int, lo: int, hi: int, now: float
    ) -> _Normalized:
        """`normalizeDesiredReplicas`: the path taken when `spec.behavior` is unset."""
        stabilized = _stabilize(memory.recommendations, wanted, now, self._down_window_s())
        scale_up_limit = int(max(SCALE_UP_LIMIT_FACTOR * current, SCALE_UP_LIMIT_MINIMUM))
        if hi > scale_up_limit:
            maximum, reason = scale_up_limit, "ScaleUpLimit"
        else:
            maximum, reason = hi, "TooManyReplicas"
        if stabilized < lo:
            return _Normalized(lo, stabilized, "TooFewReplicas")
        if stabilized > maximum:
            return _Normalized(maximum, stabilized, reason)
        return _Normalized(stabilized, stabilized, None)

    def _normalize_with_behavior(
        self,
        behavior: Behavior,
        memory: _Memory,
        current: int,
        wanted: int,
        lo: int,
        hi: int,
        now: float,
    ) -> _Normalized:
        """`normalizeDesiredReplicasWithBehaviors`: stabilise, then apply the rate rules."""
        up_window = behavior.scale_up.stabilization_window_s
        stabilized = _stabilize_with_behavior(
            memory.recommendations,
            wanted,
            current,
            up_window_s=0.0 if up_window is None else up_window,
            down_window_s=self._down_window_s(),
            now=now,
        )
        if stabilized > current:
            limit = _scale_limit(
                current, memory.up_events, memory.down_events, behavior.scale_up, now, up=True
            )
            limit = max(limit, current)
            if hi > limit:
                maximum, reason = limit, "ScaleUpLimit"
            else:
                maximum, reason = hi, "TooManyReplicas"
            if stabilized > maximum:
                return _Normalized(maximum, stabilized, reason)
        elif stabilized < current:
            limit = _scale_limit(
                current, memory.up_events, memory.down_events, behavior.scale_down, now, up=False
            )
            limit = min(limit, current)
            if lo < limit:
                minimum, reason = limit, "ScaleDownLimit"
            else:
                minimum, reason = lo, "TooFewReplicas"
            if stabilized < minimum:
                return _Normalized(minimum, stabilized, reason)
        return _Normalized(stabilized, stabilized, None)

    def _store_scale_event(self, memory: _Memory, previous: int, new: int, now: float) -> None:
        """`storeScaleEvent`: only kept when a `behavior` is set (only its rules read them)."""
        behavior = self.config.behavior
        if behavior is None:
            return
        if new > previous:
            rules, events, change = behavior.scale_up, memory.up_events, new - previous
        else:
            rules, events, change = behavior.scale_down, memory.down_events, previous - new
        longest = max((p.period_s for p in rules.policies), default=0.0)
        old_index: int | None = None
        for i, event in enumerate(events):
            if event.at_s < now - longest:
                event.outdated = True
            if event.outdated:
                old_index = i
        fresh = _ScaleEvent(change, now)
        if old_index is None:
            events.append(fresh)
        else:
            events[old_index] = fresh


def pods_metric_replicas(
    current: int,
    *,
    total_milli: int,
    n_ready: int,
    n_unready: int,
    n_missing: int,
    target_milli: int,
    tolerance: float,
) -> tuple[int, float] | None:
    """`calcPlainMetricReplicas` for a `Pods` metric: (replicas, usage ratio), None on no metrics.

    `total_milli` sums the samples of the `n_ready` pods that reported one; `n_unready` pods are
    pending (`unreadyPods`), `n_missing` are running without a sample (`missingPods`).
    """
    if n_ready <= 0:
        return None
    ratio = (total_milli // n_ready) / target_milli
    scale_up_with_unready = n_unready > 0 and ratio > 1.0
    if not scale_up_with_unready and n_missing == 0:
        if within_tolerance(ratio, tolerance):
            return current, ratio
        return math.ceil(ratio * n_ready), ratio

    total, count = total_milli, n_ready
    if n_missing > 0:
        if ratio < 1.0:  # on a scale-down, missing pods use exactly the target
            total += n_missing * target_milli
            count += n_missing
        elif ratio > 1.0:  # on a scale-up, they use nothing
            count += n_missing
    if scale_up_with_unready:
        count += n_unready
    new_ratio = (total // count) / target_milli
    if (
        within_tolerance(new_ratio, tolerance)
        or (ratio < 1.0 < new_ratio)
        or (ratio > 1.0 > new_ratio)
    ):
        return current, ratio
    new_replicas = math.ceil(new_ratio * count)
    if (new_ratio < 1.0 and new_replicas > current) or (new_ratio > 1.0 and new_replicas < current):
        return current, ratio
    return new_replicas, ratio


def within_tolerance(ratio: float, tolerance: float) -> bool:
    """`Tolerances.isWithin` with the same tolerance both ways."""
    return (1.0 - tolerance) <= ratio <= (1.0 + tolerance)


def _milli(value: float) -> int:
    """A sample as the milli-quantity it travels as: `int64(value * 1000)`, truncated."""
    return int(value * 1000.0)


def _stabilize(
    recommendations: list[_Timestamped], wanted: int, now: float, window_s: float
) -> int:
    """`stabilizeRecommendation`: the highest recommendation not older than the window.

    Records `wanted`, reusing the slot of one expired recommendation.
    """
    cutoff = now - window_s
    highest = wanted
    old_index: int | None = None
    for i, rec in enumerate(recommendations):
        if rec.at_s < cutoff:
            old_index = i
        elif rec.replicas > highest:
            highest = rec.replicas
    _record(recommendations, old_index, _Timestamped(wanted, now))
    return highest


def _stabilize_with_behavior(
    recommendations: list[_Timestamped],
    wanted: int,
    current: int,
    *,
    up_window_s: float,
    down_window_s: float,
    now: float,
) -> int:
    """`stabilizeRecommendationWithBehaviors`: keep `current` within [min of the up window, max of
    the down window]."""
    up_cutoff, down_cutoff = now - up_window_s, now - down_window_s
    up, down = wanted, wanted
    old_index: int | None = None
    for i, rec in enumerate(recommendations):
        if rec.at_s > up_cutoff:
            up = min(rec.replicas, up)
        if rec.at_s > down_cutoff:
            down = max(rec.replicas, down)
        if rec.at_s < up_cutoff and rec.at_s < down_cutoff:
            old_index = i
    recommendation = current
    if recommendation < up:
        recommendation = up
    if recommendation > down:
        recommendation = down
    _record(recommendations, old_index, _Timestamped(wanted, now))
    return recommendation


def _record(recommendations: list[_Timestamped], old_index: int | None, rec: _Timestamped) -> None:
    if old_index is None:
        recommendations.append(rec)
    else:
        recommendations[old_index] = rec


def _changes_in_period(period_s: float, events: Sequence[_ScaleEvent], now: float) -> int:
    """`getReplicasChangePerPeriod`: events strictly after `now - period`."""
    cutoff = now - period_s
    return sum(e.change for e in events if e.at_s > cutoff)


def _scale_limit(
    current: int,
    up_events: Sequence[_ScaleEvent],
    down_events: Sequence[_ScaleEvent],
    rules: ScalingRules,
    now: float,
    *,
    up: bool,
) -> int:
    """`calculateScaleUpLimitWithScalingRules` (`up`) and `calculateScaleDownLimitWithBehaviors`:
    each policy's bound from the count at the start of its period; `Min` picks the one that
    changes least, `Max` the one that changes most."""
    if rules.select is SelectPolicy.DISABLED:
        return current
    least = (rules.select is SelectPolicy.MIN) == up
    pick = min if least else max
    result: int | None = None
    for policy in rules.policies:
        added = _changes_in_period(policy.period_s, up_events, now)
        deleted = _changes_in_period(policy.period_s, down_events, now)
        start = current - added + deleted
        if policy.type is PolicyType.PODS:
            proposed = start + policy.value if up else start - policy.value
        elif up:
            proposed = math.ceil(start * (1 + policy.value / 100))
        else:
            proposed = int(start * (1 - policy.value / 100))
        result = proposed if result is None else pick(result, proposed)
    return current if result is None else result
