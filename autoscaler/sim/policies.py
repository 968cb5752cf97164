"""The policies the simulator runs, by name: the registry behind `simulate --policy NAME`.

An entry builds two things from `SimParams`: the service's `PolicyConfig` (bounds, targets,
the policy's own knobs), which the cluster reports in every `ports.Workload`, and the
`ports.Policy` that decides with it. The decider also gets the (rate-scaled) trace, so a
perfect-foresight oracle fits the same shape. Add a policy with `register`; nothing else in
the simulator changes.

Besides ours (`seed`, `default`), the baselines of `autoscaler.baselines` are registered, each as
upstream ships it, with the same bounds as ours, and each on the signal its users give it
(`PolicyEntry.load`: the query the service's LOAD signal reads, `metrics.LoadQuery`):

- `hpa`: the HorizontalPodAutoscaler on the per-pod request rate, `AverageValue` target
  `params.target_load_per_replica`. Its floor is our `min_replicas`, not HPA's own default of 1,
  so both pay for the same idle floor.
- `hpa-conc`: the same HPA on the per-pod concurrency (`vllm:num_requests_running +
  vllm:num_requests_waiting` through prometheus-adapter), `AverageValue` target the concurrency
  one replica carries at the load target (`concurrency_target`: target load x service time,
  Little's law).
- `keda`: KEDA's Prometheus scaler on the request rate, with upstream's default
  `useCachedMetrics: false`: the HPA queries Prometheus afresh at every 15 s sync (the 30 s
  `pollingInterval` only drives activation, which is off with a floor of at least 1).
- `keda-conc`: the same scaler whose query is the concurrency, threshold `concurrency_target`.
- `kpa`: the Knative Pod Autoscaler on concurrency, Knative's default metric, with the
  concurrency at the load target as its `target` annotation; Knative's own `target-utilization`
  (0.7) applies on top, so it aims at 70 % of that target per pod.
- `oracle`: perfect foresight of the rate-scaled trace, with mu = `replica_capacity_rps` and the
  start-up delay `startup_s + warmup_s`. Two allowances make it the floor rather than a
  caricature. It reads the arrival rate as a centred `ORACLE_RATE_WINDOW_S` mean, not
  single-second counts: the SLO lets a request wait `slo_latency_s - service_time_s`, which
  absorbs the noise within a second, while sizing for every one-second peak costs 30 to 50 %
  more GPU time, more than a reactive policy spends on a flat load. And it looks
  `startup_hold_s` further ahead, because the simulator draws each start-up log-normally around
  `startup_s`: with the median alone, half the pods it asks for just in time come late.

The served rate cannot exceed what the serving replicas complete, so a policy on it alone sees an
overload only as "at capacity"; the concurrency keeps growing with the queue. Baselines scale on
their one signal; their `PolicyConfig` is the seed policy's, of which they read the bounds.

It must not run anything: it only builds values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

from autoscaler import baselines, ports
from autoscaler.core import model, policy
from autoscaler.sim.metrics import LoadQuery
from autoscaler.sim.params import SimParams

FloatArray = npt.NDArray[np.float64]
ConfigFactory = Callable[[SimParams], model.PolicyConfig]
DeciderFactory = Callable[[SimParams, FloatArray], ports.Policy]


def core_decider(params: SimParams, arrivals: FloatArray) -> ports.Policy:
    """The project's own decision function (`core.policy.decide`)."""
    return ports.CorePolicy()


@dataclass(frozen=True, slots=True)
class PolicyEntry:
    config: ConfigFactory
    decider: DeciderFactory = core_decider
    about: str = ""
    load: LoadQuery = LoadQuery.SERVED_RATE
    """What the service's LOAD signal reads for this policy."""


TARGET_FIELDS = ("min_replicas", "target_load_per_replica", "target_queue_per_replica")
"""The `PolicyConfig` fields every simulated policy is built with from the run's `SimParams`
(the sweep's targets and the floor), as a service owner's annotations would set them."""
SET_BY_THE_SIMULATION = frozenset({"max_replicas", "slo", *TARGET_FIELDS})
"""Every `PolicyConfig` field the simulation passes to `policy.default` itself: a caller's
default for one of them never reaches a simulated service."""


def _targets(params: SimParams) -> dict[str, object]:
    return {name: getattr(params, name) for name in TARGET_FIELDS}


def seed_config(params: SimParams) -> model.PolicyConfig:
    return policy.seed(max_replicas=params.max_replicas, **_targets(params))


def default_config(params: SimParams) -> model.PolicyConfig:
    return policy.default(
        max_replicas=params.max_replicas, slo=slo_config(params), **_targets(params)
    )


def slo_config(params: SimParams) -> model.SloConfig:
    """The simulation's SLO as the service owner would annotate it: the latency limit at the
    quantile the benchmark holds every policy to (at most 1 % over it), the latency of a request
    that does not wait, and the replica's capacity (the same mu the other policies' targets are
    fractions of). In token mode the SLO is on the time to first token, a wait before the
    first output rather than a request's whole latency: it is sized as a queueing delay."""
    if params.tokens is not None:
        return model.SloConfig(
            target_latency_s=params.tokens.slo_ttft_s,
            quantile=SLO_QUANTILE,
            replica_capacity_rps=params.replica_capacity_rps,
        )
    return model.SloConfig(
        target_latency_s=params.slo_latency_s,
        quantile=SLO_QUANTILE,
        service_time_s=params.service_time_s,
        replica_capacity_rps=params.replica_capacity_rps,
    )


SLO_QUANTILE = 0.99


def hpa_decider(params: SimParams, arrivals: FloatArray) -> ports.Policy:
    return baselines.make("hpa", target=params.target_load_per_replica)


def keda_decider(params: SimParams, arrivals: FloatArray) -> ports.Policy:
    return baselines.make("keda", target=params.target_load_per_replica, use_cached_metrics=False)


def hpa_concurrency_decider(params: SimParams, arrivals: FloatArray) -> ports.Policy:
    return baselines.make("hpa", target=concurrency_target(params), metric=baselines.CONCURRENCY)


def keda_concurrency_decider(params: SimParams, arrivals: FloatArray) -> ports.Policy:
    return baselines.make(
        "keda",
        target=concurrency_target(params),
        use_cached_metrics=False,
        metric=baselines.CONCURRENCY,
    )


def kpa_decider(params: SimParams, arrivals: FloatArray) -> ports.Policy:
    return baselines.make("kpa", target=concurrency_target(params), metric=baselines.CONCURRENCY)


def concurrency_target(params: SimParams, utilisation: float | None = None) -> float:
    """Requests in service on one replica loaded to `utilisation` of mu (default: the load
    target): the rate it takes times the time each stays (Little's law), `u x mu x service
    time`. With no queue this is what `vllm:num_requests_running` reads per pod."""
    u = params.target_utilisation if utilisation is None else utilisation
    return u * params.replica_capacity_rps * params.service_time_s


ORACLE_RATE_WINDOW_S = 30
"""The oracle sizes for the arrival rate averaged over this many seconds around each second."""


def oracle_decider(params: SimParams, arrivals: FloatArray) -> ports.Policy:
    return baselines.make(
        "oracle",
        target=params.target_load_per_replica,
        arrivals=centred_mean(arrivals, ORACLE_RATE_WINDOW_S),
        mu=params.replica_capacity_rps,
        startup_s=params.startup_s + params.warmup_s,
        hold_s=startup_hold_s(params),
    )


def startup_hold_s(params: SimParams) -> float:
    """How much later than its median a slow start-up comes: the log-normal draw's 97.7th
    percentile (two sigmas) minus the median."""
    return params.startup_s * (math.exp(2.0 * params.startup_sigma) - 1.0)


def centred_mean(values: FloatArray, window_s: int) -> FloatArray:
    """The mean of each second's `window_s` neighbourhood (fewer seconds at the ends)."""
    values = np.asarray(values, dtype=np.float64)
    if window_s <= 1 or len(values) == 0:
        return values
    before = window_s // 2
    after = window_s - before - 1
    sums = np.concatenate(([0.0], np.cumsum(values)))
    index = np.arange(len(values))
    lo = np.maximum(index - before, 0)
    hi = np.minimum(index + after + 1, len(values))
    means: FloatArray = (sums[hi] - sums[lo]) / (hi - lo)
    return means


_REGISTRY: dict[str, PolicyEntry] = {
    "seed": PolicyEntry(
        seed_config, about="the plain rule (docs/architecture.md): smoothed mean, deadband"
    ),
    "default": PolicyEntry(default_config, about="seed plus the burst path and look-ahead"),
    "hpa": PolicyEntry(
        seed_config, hpa_decider, about="Kubernetes HPA, shipped defaults, our min replicas"
    ),
    "hpa-conc": PolicyEntry(
        seed_config,
        hpa_concurrency_decider,
        about="Kubernetes HPA on running + waiting requests per pod",
        load=LoadQuery.CONCURRENCY,
    ),
    "keda": PolicyEntry(
        seed_config, keda_decider, about="KEDA Prometheus scaler, fresh query every HPA sync"
    ),
    "keda-conc": PolicyEntry(
        seed_config,
        keda_concurrency_decider,
        about="KEDA Prometheus scaler on running + waiting requests",
        load=LoadQuery.CONCURRENCY,
    ),
    "kpa": PolicyEntry(
        seed_config,
        kpa_decider,
        about="Knative KPA on concurrency, its 0.7 utilisation on top",
        load=LoadQuery.CONCURRENCY,
    ),
    "oracle": PolicyEntry(
        seed_config, oracle_decider, about="perfect foresight of the trace and start-up delay"
    ),
}


REGISTRY: Mapping[str, PolicyEntry] = MappingProxyType(_REGISTRY)
"""The registered policies by name, read-only (`register` adds to it)."""


def names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def lookup(name: str) -> PolicyEntry:
    """The entry for `name`; `ValueError` naming the valid ones when there is none."""
    try:
        return _REGISTRY[name]
    except KeyError:
        valid = ", ".join(sorted(_REGISTRY))
        raise ValueError(f"unknown policy {name!r}; valid policies: {valid}") from None


def register(name: str, entry: PolicyEntry, *, replace: bool = False) -> None:
    if name in _REGISTRY and not replace:
        raise ValueError(f"policy {name!r} is already registered")
    _REGISTRY[name] = entry
