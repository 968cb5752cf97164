"""KEDA with the Prometheus scaler: the HPA controller fed an External metric.

A `ScaledObject` with one `prometheus` trigger whose query is the service's request rate
(`sum(rate(<requests counter>[...]))`, `metric.Metric.RATE`) or its concurrency
(`sum(vllm:num_requests_running + vllm:num_requests_waiting)`, `CONCURRENCY`) and
`threshold: <target>`. KEDA creates an HPA with an
`External` metric of target type `AverageValue` (its default `metricType`) and serves the value
through its metrics server. Reproduced from kedacore/keda:

- `pkg/scalers/prometheus_scaler.go`: `ExecutePromQuery` (an empty result, NaN or Inf reads as 0
  while `ignoreNullValues` is true, its default), `GetMetricsAndActivity` (the value as a
  milli-quantity, `GenerateMetricInMili` in `pkg/scalers/scaler.go`: truncated here as in most
  releases; the newest rounds through a string, a sub-milli difference),
  `GetMetricSpecForScaling` (External, `AverageValue` = threshold).
- `pkg/scaling/scale_handler.go` `GetScaledObjectMetrics`: the HPA's request queries Prometheus
  afresh unless the trigger sets `useCachedMetrics: true` (default false); then it reads the value
  the operator stored at its last poll (`pkg/scaling/cache/scalers_cache.go`), if any.
- `apis/keda/v1alpha1/scaledobject_types.go`: `defaultHPAMinReplicas = 1` (the HPA's min is
  `minReplicaCount` or 1); the ScaledObject specification: `pollingInterval` defaults to 30 s.
- No `advanced.horizontalPodAutoscalerConfig.behavior`: the HPA takes the legacy path.

and the HPA side from kubernetes/kubernetes `pkg/controller/podautoscaler/replica_calculator.go`
`GetExternalPerPodMetricReplicas`: `ratio = total / (target x statusReplicas)`; outside the
tolerance, `desired = ceil(total / target)`. There is no per-pod readiness here: every pod the
Deployment has (`status.replicas`, modelled as `observation.replicas`) divides the total. Sync
period, tolerance, stabilisation and rate rules are those of `hpa.Hpa`.

Modelling choices: the query result is `observation.signal(LOAD).last`, the raw sample of this
tick. A NaN sample is read as an empty query result (0 with `ignore_null_values`), since the
observation cannot tell an empty result from an unreachable Prometheus. With
`use_cached_metrics=True` the operator polls every `polling_interval_s` from the first tick on
and the HPA reads that cached value, up to 30 s old. Activation and scale to zero are off: the
HPA floor is `max(1, min_replicas)`, and KEDA's operator never acts between 1 and N replicas.

Pure: no I/O, no clock (time is `observation.now_s`), no asyncio, no logging.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autoscaler import ports
from autoscaler.baselines import hpa
from autoscaler.baselines.metric import Metric
from autoscaler.core import model
from autoscaler.core.model import Signal

DEFAULT_POLLING_INTERVAL_S = 30.0
"""`pollingInterval` of a ScaledObject."""

_TIME_SLACK_S = 1e-6


@dataclass(slots=True)
class _Poll:
    next_s: float
    value: float | None = None
    """The value stored at the last poll (`scaledObjectsMetricCache`); None before the first."""


class Keda(hpa.Hpa):
    """KEDA's HPA on the Prometheus scaler's value, `AverageValue` target `target` per pod."""

    def __init__(
        self,
        *,
        target: float,
        metric: Metric = Metric.RATE,
        use_cached_metrics: bool = False,
        polling_interval_s: float = DEFAULT_POLLING_INTERVAL_S,
        ignore_null_values: bool = True,
        config: hpa.HpaConfig | None = None,
    ) -> None:
        super().__init__(target=target, metric=metric, config=config)
        if not polling_interval_s > 0:
            raise ValueError("polling_interval_s must be > 0")
        self.use_cached_metrics = use_cached_metrics
        self.polling_interval_s = polling_interval_s
        self.ignore_null_values = ignore_null_values
        self._polls: dict[model.ServiceId, _Poll] = {}

    def _observe(self, workload: ports.Workload, observation: model.Observation) -> None:
        """The operator's scale loop: one query every polling interval, cached when asked to."""
        now = observation.now_s
        poll = self._polls.get(workload.id)
        if poll is None:
            poll = _Poll(next_s=now)
            self._polls[workload.id] = poll
        if now + _TIME_SLACK_S >= poll.next_s:
            poll.next_s = now + self.polling_interval_s
            if self.use_cached_metrics:
                poll.value = self._query(observation)

    def _bounds(self, workload: ports.Workload) -> tuple[int, int]:
        lo, hi = super()._bounds(workload)
        return max(1, lo), hi

    def _propose(
        self, workload: ports.Workload, observation: model.Observation
    ) -> hpa.Proposal | str:
        """`GetExternalPerPodMetricReplicas` on the query result (cached or fresh)."""
        poll = self._polls.get(workload.id)
        cached = poll.value if poll is not None else None
        value = cached if cached is not None else self._query(observation)
        if math.isnan(value):
            return "unable to get external metric: prometheus query returned no value"
        usage_milli = int(value * 1000.0)
        status_replicas = observation.replicas
        target_milli = self._target_milli
        ratio = usage_milli / (target_milli * status_replicas) if status_replicas > 0 else math.inf
        replicas = status_replicas
        within = hpa.within_tolerance(ratio, self.config.tolerance)
        if not within:
            replicas = math.ceil(usage_milli / target_milli)
        source = "cached" if cached is not None else "fresh"
        detail = (
            f"external metric {value:.3g} {self.metric.unit} ({source})"
            f" over {status_replicas} pods:"
            f" ratio {ratio:.2f} asks for {replicas}"
        )
        return hpa.Proposal(replicas, ratio, within, detail)

    def _query(self, observation: model.Observation) -> float:
        """`ExecutePromQuery`: the sample, 0 for an empty result when nulls are ignored."""
        est = observation.signal(Signal.LOAD)
        value = est.last if est.fresh else math.nan
        if not math.isfinite(value):
            return 0.0 if self.ignore_null_values else math.nan
        return value
