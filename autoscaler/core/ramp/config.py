"""One service's ramp settings (`RampConfig`), checked when built, and their fingerprint.

Pure: no I/O, no clock, no logging.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass


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
        for names, holds, rule in _RULES:
            for name in names:
                _require(holds(getattr(self, name)), f"{name} {rule}")
        limit = self.max_p95_latency_s
        _require(limit is None or _positive(limit), "max_p95_latency_s must be positive")
        _require(
            math.isfinite(self.min_dwell_ratio) and 0 < self.min_dwell_ratio <= 1,
            "min_dwell_ratio must lie in (0, 1]",
        )


def _positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


def _not_negative(value: float) -> bool:
    return math.isfinite(value) and value >= 0


_RULES: tuple[tuple[tuple[str, ...], Callable[[float], bool], str], ...] = (
    (
        (
            "step_interval_s",
            "warmup_deadline_s",
            "probe_interval_s",
            "settle_timeout_s",
            "warmup_latency_ratio",
            "max_p95_ratio",
        ),
        _positive,
        "must be positive",
    ),
    (
        ("drain_grace_s", "propagation_s", "max_error_rate", "error_rate_slack"),
        _not_negative,
        "must not be negative",
    ),
    (
        ("min_requests", "max_step_extensions", "baseline_pods"),
        _not_negative,
        "must not be negative",
    ),
    (("warmup_requests", "max_failures"), lambda n: n >= 1, "must be at least 1"),
)
"""(fields, the rule each must keep, the rule in words)."""


def fingerprint(config: RampConfig) -> str:
    """A short stable digest of the settings: a hold ends when it changes."""
    return hashlib.sha256(repr(config).encode()).hexdigest()[:16]


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)
