"""The checks: the warming set's share of the traffic at a step, the health gate that judges a
step (`judge`, `complete`, `blame`), and the warm-up probe's verdict on one pod (`warm`).

Pure: no I/O, no clock, no logging.
"""

from __future__ import annotations

import enum
import math
import statistics
from collections.abc import Mapping, Sequence

from autoscaler.core.ramp.config import RampConfig
from autoscaler.core.ramp.inputs import Health, Probed


class Verdict(enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    WAIT = "wait"
    """Not enough to judge yet: extend the step."""
    HOLD = "hold"
    """Nothing to judge on, even after the extensions."""


def share_pct(step_pct: int, warming: int, stable: int) -> int:
    """The warming set's weight at a step: its fair share `step x K / (N + K)`, rounded down,
    at least 1 when there is anything to give, all of it when there is no stable pod."""
    if step_pct <= 0 or warming <= 0:
        return 0
    if stable <= 0:
        return 100
    return max(1, step_pct * warming // (stable + warming))


def judge(
    config: RampConfig, warming: Health, stable: Health, *, final: bool
) -> tuple[Verdict, str]:
    """The health gate: the cohort against the absolute limits and against the serving pods.

    `final` is the last extension: too few requests no longer wait (see the package's docstring).
    """
    requests = warming.requests
    if math.isnan(requests):
        return (Verdict.HOLD if final else Verdict.WAIT), "no request count for the new pods"
    if requests < config.min_requests and not final:
        return Verdict.WAIT, f"{requests:g} requests on the new pods, fewer than the gate needs"
    if requests <= 0:
        return Verdict.PASS, "no request reached the new pods; nothing to judge"
    errors_compared, errors = _error_problems(config, warming, stable)
    latency_compared, latency = _latency_problems(config, warming, stable)
    problems = errors + latency
    compared = errors_compared + latency_compared
    if problems:
        return Verdict.FAIL, "; ".join(problems)
    if not compared:
        verdict = Verdict.HOLD if final else Verdict.WAIT
        return verdict, "neither the error rate nor the P95 latency of the new pods is known"
    return Verdict.PASS, (
        f"{requests:g} requests, error rate {_fmt(warming.error_rate)}, P95 {_fmt(warming.p95_s)} s"
    )


def _error_problems(config: RampConfig, warming: Health, stable: Health) -> tuple[int, list[str]]:
    """The comparisons of the cohort's error rate made (0 or 1), and the limits it breaks."""
    if math.isnan(warming.error_rate):
        return 0, []
    problems = []
    if warming.error_rate > config.max_error_rate:
        problems.append(
            f"error rate {warming.error_rate:.4f} above the limit {config.max_error_rate:g}"
        )
    elif (
        not math.isnan(stable.error_rate)
        and warming.error_rate > stable.error_rate + config.error_rate_slack
    ):
        problems.append(
            f"error rate {warming.error_rate:.4f} above the serving pods' {stable.error_rate:.4f}"
        )
    return 1, problems


def _latency_problems(config: RampConfig, warming: Health, stable: Health) -> tuple[int, list[str]]:
    """The comparisons of the cohort's P95 made (0 to 2), and the limits it breaks."""
    if math.isnan(warming.p95_s):
        return 0, []
    compared = 0
    problems = []
    limit = config.max_p95_latency_s
    if limit is not None:
        compared += 1
        if warming.p95_s > limit:
            problems.append(f"P95 {warming.p95_s:.3f} s above the limit {limit:g} s")
    if not math.isnan(stable.p95_s):
        compared += 1
        if warming.p95_s > config.max_p95_ratio * stable.p95_s:
            problems.append(
                f"P95 {warming.p95_s:.3f} s above {config.max_p95_ratio:g} x the serving pods' "
                f"{stable.p95_s:.3f} s"
            )
    return compared, problems


def complete(warming: Health, stable: Health) -> bool:
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


def baseline_latency(probes: Mapping[str, Probed], stable: Sequence[str]) -> float | None:
    """Median probe latency of the serving pods probed last tick; None without one."""
    latencies: list[float] = []
    for name in stable:
        result = probes.get(name)
        if result is not None and result.failed == 0:
            latencies.extend(result.latencies_s)
    return statistics.median(latencies) if latencies else None


def warm(config: RampConfig, result: Probed, baseline_s: float | None) -> tuple[bool, str]:
    """Whether one pod's probes say it is warm, and what they showed: every probe answered,
    their median latency within `warmup_latency_ratio` of the serving pods' (`baseline_s`) or
    under `max_p95_latency_s`; success alone without either reference."""
    asked = result.ok + result.failed
    if result.ok < config.warmup_requests or result.failed:
        return False, f"{result.ok} of {asked} probes answered"
    if not result.latencies_s:
        return False, "probes answered without a latency"
    median = statistics.median(result.latencies_s)
    said = f"{result.ok} of {asked} probes answered, median {median:.3f} s"
    limits = []
    if baseline_s is not None:
        limits.append((config.warmup_latency_ratio * baseline_s, "the serving pods'"))
    if config.max_p95_latency_s is not None:
        limits.append((config.max_p95_latency_s, "the limit"))
    if not limits:
        return True, said
    for limit, what in limits:
        if median <= limit:
            return True, f"{said}, within {what} {limit:.3f} s"
    return False, f"{said}, above {limits[0][1]} {limits[0][0]:.3f} s"


def _fmt(value: float) -> str:
    return "unknown" if math.isnan(value) else f"{value:.4g}"
