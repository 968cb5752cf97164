"""The equal-SLO search (docs/benchmark.md): which utilisation targets to try, and which one to
keep.

A policy's SLO misses grow with its utilisation target (less headroom per replica) while its
GPU-hours fall. `next_target` bisects a grid of targets for the boundary between the settings
whose misses stay within the limit and those whose misses do not, starting from whatever has been
tried (the benchmark starts from the policy's default target). `cheapest` keeps, among the
settings tried, the one with the fewest GPU-hours that meets the limit; None when none does.

Bisection assumes misses do not fall as the target rises. Where a policy breaks that (a noisy
trace, an oscillation at one setting), the search still ends and `cheapest` still only returns a
setting that was run and met the limit: at worst a cheaper qualifying setting goes untried.

Pure: numbers in, numbers out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

SLO_MISS_LIMIT_PCT = 1.0
"""A setting qualifies when at most this share of requests misses the SLO or is dropped."""


@dataclass(frozen=True, slots=True)
class Trial:
    """One policy run at one utilisation target."""

    utilisation: float
    """Load target per replica as a fraction of mu."""
    slo_miss_pct: float
    gpu_hours: float


def meets(trial: Trial, limit_pct: float = SLO_MISS_LIMIT_PCT) -> bool:
    return trial.slo_miss_pct <= limit_pct


def next_target(
    grid: Sequence[float], trials: Sequence[Trial], *, limit_pct: float = SLO_MISS_LIMIT_PCT
) -> float | None:
    """The next target to try, or None once the boundary is pinned between neighbours.

    The targets are `grid` together with every target tried. The search keeps the highest tried
    target that meets the limit (`lo`; none yet: below the lowest) and the lowest failing one
    above it (`hi`; none yet: above the highest), and tries the target halfway between them.
    """
    points = sorted(set(grid) | {t.utilisation for t in trials})
    index = {u: i for i, u in enumerate(points)}
    lo = max((index[t.utilisation] for t in trials if meets(t, limit_pct)), default=-1)
    failing = (index[t.utilisation] for t in trials if not meets(t, limit_pct))
    hi = min((i for i in failing if i > lo), default=len(points))
    if hi - lo <= 1:
        return None
    return points[(lo + hi) // 2]


def cheapest(trials: Iterable[Trial], *, limit_pct: float = SLO_MISS_LIMIT_PCT) -> Trial | None:
    """The qualifying trial with the fewest GPU-hours (the higher target on a tie); None when no
    trial meets the limit."""
    qualifying = [t for t in trials if meets(t, limit_pct)]
    if not qualifying:
        return None
    return min(qualifying, key=lambda t: (t.gpu_hours, -t.utilisation))
