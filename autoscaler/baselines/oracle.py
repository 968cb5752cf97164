"""A perfect-foresight oracle: the lower bound on GPU time at (almost) no SLO misses.

It knows the whole arrival trace and the pod start-up delay, and ignores every observation but
the time. The rule, exactly:

    need(t)    = max { a(s) : s integer, t <= s <= t + ceil(lead + hold) }
    desired(t) = clamp(ceil((1 + margin) x need(t) / (mu x u)), min_replicas, max_replicas)

where `a(s)` is the arrival rate of trace second `s` (counted from `start_s`; 0 outside the
trace), `lead` the start-up delay (pod creation to serving: start-up plus warm-up), `hold` an
optional extra look-ahead, `mu` one replica's capacity and `u` the target utilisation (so
`mu x u` is the per-replica load target).

Why the window is [t, t + lead] and not only its end: a pod asked for at t serves from t + lead,
so the count at t must cover `a(t + lead)`; a pod released at t stops serving at once, so the
count at t must also cover every second until the pods asked for after t are ready. Looking only
at [t + lead, t + lead + hold] would release capacity the present load still needs. With a
Kubernetes-style scale-down (pods not serving yet go first) this is the smallest count that
never leaves a second under-served: capacity arrives just in time for a rise (the count goes up
exactly `lead + hold` seconds before it) and leaves the second a fall happens.

`hold` absorbs start-up times longer than `lead` (the simulator draws them from a distribution);
`margin` absorbs queueing at high utilisation (a fluid count at 100 % of mu still queues when
arrivals are bursty within a second). Both default to 0: the floor.

Pure: no I/O, no clock (time is `observation.now_s`), no asyncio, no logging.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from autoscaler import ports
from autoscaler.baselines import _verdict
from autoscaler.core import model
from autoscaler.core.model import Bound, Decision, Reason

# A need of exactly k replicas computed in floats may land a hair above k.
_CEIL_SLACK = 1e-9
_TIME_SLACK_S = 1e-6


class Oracle:
    """Asks at t for the replicas the peak arrivals of [t, t + lead + hold] need."""

    def __init__(
        self,
        arrivals_per_s: npt.ArrayLike,
        *,
        mu: float,
        target_utilisation: float,
        startup_s: float,
        hold_s: float = 0.0,
        margin_ratio: float = 0.0,
        start_s: float = 0.0,
    ) -> None:
        arrivals = np.asarray(arrivals_per_s, dtype=np.float64)
        if arrivals.ndim != 1:
            raise ValueError("arrivals_per_s must be one value per second")
        if not bool(np.all(np.isfinite(arrivals) & (arrivals >= 0))):
            raise ValueError("arrivals_per_s must be finite and >= 0")
        if not (math.isfinite(mu) and mu > 0):
            raise ValueError("mu must be > 0")
        if not 0 < target_utilisation <= 1:
            raise ValueError("target_utilisation must be in (0, 1]")
        if not (startup_s >= 0 and hold_s >= 0 and margin_ratio >= 0):
            raise ValueError("startup_s, hold_s and margin_ratio must be >= 0")
        self.mu = mu
        self.target_utilisation = target_utilisation
        self.target = mu * target_utilisation
        """Per-replica load target, requests per second."""
        self.lead_s = startup_s
        self.hold_s = hold_s
        self.margin_ratio = margin_ratio
        self.start_s = start_s
        self.horizon_s = math.ceil(startup_s + hold_s - _CEIL_SLACK)
        """How many whole seconds past now the peak looks."""
        self._arrivals = arrivals
        width = self.horizon_s + 1
        padded = np.concatenate([arrivals, np.zeros(width - 1)])
        self._peak = np.lib.stride_tricks.sliding_window_view(padded, width).max(axis=1)

    def peak_at(self, now_s: float) -> float:
        """The highest arrival rate in [now, now + horizon] (0 past the end of the trace)."""
        index = math.floor(now_s - self.start_s + _TIME_SLACK_S)
        n = len(self._arrivals)
        if 0 <= index < n:
            return float(self._peak[index])
        first, last = max(0, index), min(n - 1, index + self.horizon_s)
        if first > last:
            return 0.0
        return float(self._arrivals[first : last + 1].max())

    def replicas_at(self, now_s: float) -> int:
        """Replicas the peak needs at the target, before the service's bounds."""
        load = self.peak_at(now_s) * (1.0 + self.margin_ratio)
        return max(0, math.ceil(load / self.target - _CEIL_SLACK))

    def decide(
        self,
        workload: ports.Workload,
        observation: model.Observation,
        state: model.PolicyState,
    ) -> tuple[Decision, model.PolicyState]:
        now = observation.now_s
        peak = self.peak_at(now)
        wanted = self.replicas_at(now)
        lo, hi = workload.policy.min_replicas, workload.policy.max_replicas
        desired, bound = wanted, None
        if wanted < lo:
            desired, bound = lo, Bound.MIN
        elif wanted > hi:
            desired, bound = hi, Bound.MAX
        current = observation.replicas
        reason = (
            Reason.FORECAST
            if desired > current
            else Reason.BELOW_TARGET
            if desired < current
            else Reason.AT_DESIRED
        )
        detail = (
            f"peak {peak:.3g} rps in [{now:g}, {now + self.horizon_s:g}] s needs {wanted}"
            f" at {self.target:.3g} rps per replica"
        )
        votes = _verdict.load_vote(peak / (self.target * max(1, current)), wanted, "oracle")
        return (
            _verdict.decision(
                observation, desired, reason, detail, contributions=votes, bound=bound
            ),
            state,
        )
