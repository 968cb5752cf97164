"""The Knative Pod Autoscaler (KPA) on concurrency (its default metric) or requests per second.

A Knative revision annotated `autoscaling.knative.dev/metric: concurrency` (Knative's default,
`metric.Metric.CONCURRENCY`) or `rps` (`Metric.RATE`), `autoscaling.knative.dev/target:
<target>`, no `containerConcurrency` limit (0, the default), `min-scale`/`max-scale` from the
service's bounds and the cluster's `config-autoscaler` left at its defaults. Reproduced from
knative/serving:

- `pkg/autoscaler/scaling/autoscaler.go` `Scale`: ready pods counted as `max(1, ready)`;
  `maxScaleUp = ceil(max-scale-up-rate x ready)`, `maxScaleDown = floor(ready /
  max-scale-down-rate)` (the revision is reachable); desired stable and panic counts
  `ceil(observed / TargetValue)` kept in [maxScaleDown, maxScaleUp]; panic when
  `panicDesired / ready >= panic threshold`, extended while over it, left once not over it and a
  stable window has passed since it was last over; in panic the count is the larger of the two
  and never decreases (`maxPanicPods`). `newAutoscaler`: a decider created over more than one
  ready pod starts in panic mode holding that count.
- `pkg/autoscaler/scaling/multiscaler.go`: `tickInterval = 2 s`; the first decision one tick after
  the decider is created.
- `pkg/autoscaler/aggregation/bucketing.go` `TimedFloat64Buckets`: the linear window average
  (the default metric aggregation; `weightedExponential` is opt-in per revision). 1 s buckets; a
  partial window is averaged over the buckets since the first write, gaps inside the window count
  as 0, a recent gap at the end shrinks the window, a whole window without data empties it; the
  result is floored to 6 decimals.
- `pkg/autoscaler/metrics/collector.go`: a 1 s scrape feeds both windows; no data in the stable
  window is `ErrNoData` (no decision).
- `pkg/autoscaler/config/config.go` defaults: stable window 60 s, panic window 10 % of it (6 s),
  panic threshold 200 %, max scale-up rate 1000,
  max scale-down rate 2, target utilisation 0.7, scale-down delay 0; the panic window rounded
  to the second as `MakeMetric` does (`pkg/reconciler/autoscaling/resources/metric.go`).
- `pkg/reconciler/autoscaling/resources/target.go` `ResolveMetricTarget`: with the target
  annotation, `TargetValue = max(0.01, target x target utilisation)` for both metrics (for
  concurrency the utilisation is `container-concurrency-target-percentage`, 0.7 by default like
  rps's `target-utilization`).
- `pkg/reconciler/autoscaling/kpa/scaler.go`: `applyBounds` clamps the desired count to
  [min-scale, max-scale]; then `handleScaleToZero` with `enable-scale-to-zero: false` turns a
  desired 0 into 1 (scale to zero off; with a min scale of at least 1 it never sees a 0).

Modelling choices: the scraped value each second is `observation.signal(LOAD).last` (a NaN sample
is a failed scrape: nothing is recorded): the metric the caller feeds it. For concurrency that is
the requests running plus waiting, as Knative's queue-proxy counts the requests it holds (it
averages them over each second; the simulator's gauge is read at each scrape). For rps,
queue-proxy reports requests *received* per second, while the simulator's load sample is the
served-request rate over its Prometheus window, so on rps this KPA sees load later and never
above capacity. Ready pods are `observation.serving`, as KPA
counts ready endpoints. Between decider ticks the decision is `STEADY` with `desired = current`.

Pure: no I/O, no clock (time is `observation.now_s`), no asyncio, no logging.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autoscaler import ports
from autoscaler.baselines import _verdict
from autoscaler.baselines.metric import Metric
from autoscaler.core import model
from autoscaler.core.model import Bound, Decision, Reason, Signal

TARGET_MIN = 0.01
"""`autoscaling.TargetMin`."""

_TIME_SLACK_S = 1e-6
_PRECISION_DIGITS = 6


@dataclass(frozen=True, slots=True)
class KpaConfig:
    """`config-autoscaler` keys; defaults as shipped."""

    stable_window_s: float = 60.0
    """`stable-window`."""
    panic_window_percentage: float = 10.0
    """`panic-window-percentage`."""
    panic_threshold_percentage: float = 200.0
    """`panic-threshold-percentage`."""
    max_scale_up_rate: float = 1000.0
    """`max-scale-up-rate`."""
    max_scale_down_rate: float = 2.0
    """`max-scale-down-rate`."""
    target_utilization: float = 0.7
    """`target-utilization-percentage` as a fraction (`container-concurrency-target-percentage`
    for concurrency; both 0.7 by default)."""
    tick_s: float = 2.0
    """The decider's `tickInterval` (not configurable upstream)."""

    def __post_init__(self) -> None:
        if self.stable_window_s < 1 or self.stable_window_s != round(self.stable_window_s):
            raise ValueError("stable_window_s must be a whole number of seconds >= 1")
        if not 0 < self.target_utilization <= 1:
            raise ValueError("target_utilization must be in (0, 1]")
        if not self.max_scale_up_rate > 1:
            raise ValueError("max_scale_up_rate must be > 1")
        if not self.max_scale_down_rate > 1:
            raise ValueError("max_scale_down_rate must be > 1")
        if not self.panic_threshold_percentage > 0:
            raise ValueError("panic_threshold_percentage must be > 0")
        if not self.tick_s > 0:
            raise ValueError("tick_s must be > 0")

    @property
    def panic_window_s(self) -> int:
        """`MakeMetric`: the percentage of the stable window, rounded, at least one bucket."""
        return max(1, round(self.stable_window_s * self.panic_window_percentage / 100.0))

    @property
    def panic_threshold(self) -> float:
        return self.panic_threshold_percentage / 100.0


class WindowBuckets:
    """`TimedFloat64Buckets` with 1 s buckets: the linear window average of Knative's collector.

    Times are whole seconds (`now.Truncate(granularity)`).
    """

    def __init__(self, window_s: int) -> None:
        self._buckets = [0.0] * window_s
        self._first: int | None = None
        self._last: int | None = None
        self._total = 0.0

    @property
    def window_s(self) -> int:
        return len(self._buckets)

    def record(self, t: int, value: float) -> None:
        n = len(self._buckets)
        if self._last != t:
            if self._last is not None and t + n <= self._last:
                return  # older than a window before the last write
            if self._first is None or self._first > t:
                self._first = t
            if self._last is None or t > self._last:
                if self._last is None or t - self._last >= n:
                    self._first = t
                    self._buckets = [0.0] * n
                    self._total = 0.0
                else:
                    for i in range(self._last + 1, t + 1):
                        self._total -= self._buckets[i % n]
                        self._buckets[i % n] = 0.0
                self._last = t
        self._buckets[t % n] += value
        self._total += value

    def is_empty(self, now: int) -> bool:
        return self._last is None or now - self._last > len(self._buckets)

    def average(self, now: int) -> float:
        n = len(self._buckets)
        if self._last is None or self._first is None:
            return 0.0
        d = now - self._last
        valid = self._last - self._first + 1
        if d <= 0:
            return _floor_digits(self._total / min(valid, n))
        if d < n:
            total = self._total
            for i in range(self._last + 1, now + 1):
                total -= self._buckets[i % n]
            return _floor_digits(total / min(valid, n - d))
        return 0.0


@dataclass(slots=True)
class _Decider:
    """One revision's autoscaler: its metric windows and its panic state."""

    stable: WindowBuckets
    panic: WindowBuckets
    next_tick_s: float
    panic_since_s: float | None
    """`panicTime`: when the panic window was last over the threshold; None when not panicking."""
    max_panic_pods: int


class Kpa:
    """KPA on the load signal (`metric`), target `target` per pod before the 0.7 utilisation."""

    def __init__(
        self,
        *,
        target: float,
        metric: Metric = Metric.CONCURRENCY,
        config: KpaConfig | None = None,
    ) -> None:
        if not (math.isfinite(target) and target > 0):
            raise ValueError("target must be > 0")
        self.target = target
        self.metric = metric
        self.config = config or KpaConfig()
        self.target_value = max(TARGET_MIN, target * self.config.target_utilization)
        """`DeciderSpec.TargetValue`: what one pod is meant to carry."""
        self._deciders: dict[model.ServiceId, _Decider] = {}

    def decide(
        self,
        workload: ports.Workload,
        observation: model.Observation,
        state: model.PolicyState,
    ) -> tuple[Decision, model.PolicyState]:
        now = observation.now_s
        decider = self._deciders.get(workload.id)
        if decider is None:
            decider = self._create(observation)
            self._deciders[workload.id] = decider
        second = math.floor(now + _TIME_SLACK_S)
        sample = observation.signal(Signal.LOAD)
        if sample.fresh and math.isfinite(sample.last):
            decider.stable.record(second, sample.last)
            decider.panic.record(second, sample.last)
        if now + _TIME_SLACK_S < decider.next_tick_s:
            detail = f"no KPA tick until {decider.next_tick_s:g} s"
            return _verdict.steady(observation, Reason.AT_DESIRED, detail), state
        decider.next_tick_s = now + self.config.tick_s
        return self._scale(workload, observation, decider, second), state

    def _create(self, observation: model.Observation) -> _Decider:
        """`newAutoscaler`: over more than one ready pod, start in panic holding that count."""
        ready = observation.serving
        config = self.config
        return _Decider(
            stable=WindowBuckets(round(config.stable_window_s)),
            panic=WindowBuckets(config.panic_window_s),
            next_tick_s=observation.now_s + config.tick_s,
            panic_since_s=observation.now_s if ready > 1 else None,
            max_panic_pods=max(0, ready),
        )

    def _scale(
        self,
        workload: ports.Workload,
        observation: model.Observation,
        decider: _Decider,
        second: int,
    ) -> Decision:
        """`autoscaler.Scale`, then the PA reconciler's min/max bounds."""
        config, now = self.config, observation.now_s
        if decider.stable.is_empty(second):
            return _verdict.hold(
                observation, Reason.MISSING_DATA, "no data to scale on in the stable window"
            )
        observed_stable = decider.stable.average(second)
        observed_panic = decider.panic.average(second)
        ready = float(max(1, observation.serving))
        max_up = math.ceil(config.max_scale_up_rate * ready)
        max_down = math.floor(ready / config.max_scale_down_rate)
        dspc = math.ceil(observed_stable / self.target_value)
        dppc = math.ceil(observed_panic / self.target_value)
        stable_count = min(max(dspc, max_down), max_up)
        panic_count = min(max(dppc, max_down), max_up)

        over_threshold = dppc / ready >= config.panic_threshold
        if over_threshold:
            decider.panic_since_s = now  # enter, or extend the panic
        elif (
            decider.panic_since_s is not None
            and decider.panic_since_s + config.stable_window_s < now
        ):
            decider.panic_since_s = None
            decider.max_panic_pods = 0

        panicking = decider.panic_since_s is not None
        desired, held = stable_count, False
        if panicking:
            desired = max(desired, panic_count)
            decider.max_panic_pods = max(decider.max_panic_pods, desired)
            held = desired < decider.max_panic_pods
            desired = decider.max_panic_pods
        detail = (
            f"stable {observed_stable:.3g} {self.metric.unit} asks for {dspc},"
            f" panic {observed_panic:.3g} asks"
            f" for {dppc} at {self.target_value:.3g} per pod over {int(ready)} ready"
            f"; {'panic' if panicking else 'stable'} mode"
        )
        votes = _verdict.load_vote(observed_stable / (self.target_value * ready), dspc, "stable")

        lo, hi = workload.policy.min_replicas, workload.policy.max_replicas
        bound: Bound | None = None
        if desired < lo:
            desired, bound = lo, Bound.MIN
        elif desired > hi:
            desired, bound = hi, Bound.MAX
        if desired == 0:  # handleScaleToZero with enable-scale-to-zero off
            desired, bound = 1, Bound.MIN
        current = observation.replicas
        if panicking and desired == current and held:
            detail += f"; no scale-down in panic mode (holding {decider.max_panic_pods})"
            return _verdict.hold(
                observation, Reason.BURST_HOLD, detail, contributions=votes, bound=bound
            )
        if desired > current:
            reason = Reason.BURST if panicking else Reason.ABOVE_TARGET
        elif desired < current:
            reason = Reason.BELOW_TARGET
        else:
            reason = Reason.AT_DESIRED
        return _verdict.decision(
            observation, desired, reason, detail, contributions=votes, bound=bound
        )


def _floor_digits(value: float) -> float:
    """`roundToNDigits(6, v)`: floor to 6 decimals."""
    scale = 10.0**_PRECISION_DIGITS
    return math.floor(value * scale) / scale
