"""Baseline policies for the benchmark: what a user would run instead of this autoscaler.

Each module reproduces one upstream autoscaler from its source, with its shipped defaults, behind
the `ports.Policy` port, so the simulator runs it through the real loop exactly like ours:
`hpa` (Kubernetes HorizontalPodAutoscaler on a per-pod custom metric), `keda` (KEDA's Prometheus
scaler feeding that controller an External metric), `kpa` (the Knative Pod Autoscaler, on
concurrency by default) and `oracle` (perfect foresight: the floor on GPU time). Each module
docstring names the upstream files and defaults it reproduces and every simplification.
`registry.make` builds one by name; `REGISTRY` lists the names. `Metric` says which of the
servers' signals a baseline's one metric is (`RATE`, requests per second, or `CONCURRENCY`,
running plus waiting requests): the caller feeds it as the LOAD signal, and the baseline names
it in its decisions.

Like `core`, this package is pure: values in, decisions out. It performs no I/O, reads no clock
(time is `observation.now_s`), knows nothing of asyncio, does not log, and never imports an
adapter or the simulator. A baseline keeps its own memory per service (keyed by the workload id)
and hands back the `PolicyState` it is given unchanged.
"""

from autoscaler.baselines.metric import Metric
from autoscaler.baselines.registry import REGISTRY, make

CONCURRENCY = Metric.CONCURRENCY
RATE = Metric.RATE

__all__ = ["CONCURRENCY", "RATE", "REGISTRY", "Metric", "make"]
