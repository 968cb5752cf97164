"""The simulator's inputs and outputs: one `SimParams` in, one `SimResult` out.

Every policy in a comparison runs on the same `SimParams` (capacity model, trace, seed); all of
it is written into `summary.json` so a result can be reproduced.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

TIMESERIES_COLUMNS = (
    "t_s",
    "arrivals",
    "served",
    "dropped",
    "replicas_desired",
    "replicas_total",
    "replicas_serving",
    "capacity_rps",
    "p95_latency_s",
    "gpu_cost",
)
"""Columns of `timeseries.csv`, one row per simulated second (DESIGN §6). `gpu_cost` is the
GPU-hours spent in that second by pods holding a GPU (starting, warming or serving)."""

SUMMARY_KEYS = frozenset(
    {
        "requests",
        "served",
        "dropped",
        "queued_at_end",
        "slo_misses",
        "slo_miss_pct",
        "p95_latency_s",
        "gpu_hours",
        "scale_events",
        "mean_replicas",
        "max_replicas_seen",
        "simulated_s",
        "params",
    }
)
"""Keys of `summary.json`: the run's totals, and `params`, everything it was run with."""


@dataclass(frozen=True, slots=True)
class SimParams:
    """A simulation run. Times in seconds, rates in requests per second."""

    policy: str = "default"
    """Policy name: `seed` (DESIGN §3.3 as written) or `default` (ours)."""
    rate_scale: float = 1.0
    """Multiplies every trace count (fluid arrivals: fractions are kept)."""
    min_replicas: int = 2
    max_replicas: int = 64
    initial_replicas: int | None = None
    """Replicas (already serving) at t=0; None means enough for the trace's first minute."""
    seed: int = 0

    # Capacity model (DESIGN §6).
    replica_capacity_rps: float = 1.0
    """mu: requests per second one serving replica completes at most."""
    target_utilisation: float = 0.75
    """Load target per replica as a fraction of mu."""
    target_queue_per_replica: float | None = 2.0
    """Saturation target (waiting requests per serving replica); None to leave it unused."""
    service_time_s: float = 2.0
    """Latency of a request that does not wait."""
    slo_latency_s: float = 5.0
    """A request whose latency exceeds this misses the SLO."""
    queue_timeout_s: float = 60.0
    """A request still waiting after this is dropped (and misses the SLO)."""

    # Pod life cycle.
    startup_s: float = 60.0
    """Median time from pod creation to the model loaded (pending excluded)."""
    startup_sigma: float = 0.2
    """Log-normal spread of the start-up time (0 for a fixed delay)."""
    warmup_s: float = 5.0
    """Time a started pod spends warming (probe requests) before it serves."""
    gpus: int | None = None
    """GPUs in the cluster, one per replica; None means never short of GPUs."""
    gpus_per_node: int = 8

    # What Prometheus would give.
    scrape_interval_s: float = 5.0
    rate_window_s: float = 30.0

    # Smoothing (DESIGN §3.2).
    half_life_s: float = 30.0

    @property
    def target_load_per_replica(self) -> float:
        return self.target_utilisation * self.replica_capacity_rps

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class SimResult:
    params: SimParams
    timeseries: dict[str, npt.NDArray[np.float64]]
    """One array per `TIMESERIES_COLUMNS` entry, all the same length."""
    scale_events: list[tuple[float, int, int]] = field(default_factory=list)
    """(t_s, replicas before, replicas after) for every change of the desired count."""
    summary: dict[str, Any] = field(default_factory=dict)
    """One value per `SUMMARY_KEYS` entry."""


def rate_scale_for_mean_replicas(
    arrivals: npt.NDArray[np.float64], mean_replicas: float, params: SimParams
) -> float:
    """The rate scale at which the trace's mean load needs `mean_replicas` at the load target."""
    mean = float(np.mean(arrivals)) if len(arrivals) else 0.0
    if not (mean > 0 and math.isfinite(mean)):
        raise ValueError("the trace has no arrivals to scale")
    return mean_replicas * params.target_load_per_replica / mean
