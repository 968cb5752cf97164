"""Queueing formulas for sizing to a latency SLO (docs/architecture.md, "The replica count").

A service of `n` replicas, each completing at most `capacity_rps` requests per second in
`slots` concurrent requests (a batching server), is taken as an M/G/c queue with
`c = n x slots` servers of rate `capacity_rps / slots` each, fed at `arrival_rps`:

- Erlang C gives the probability that a request waits, `C(c, a)` with the offered load
  `a = arrival_rps x slots / capacity_rps` (in busy slots);
- Allen-Cunneen scales the M/M/c wait by the burstiness `g = (ca^2 + cs^2) / 2` (the squared
  coefficients of variation of the inter-arrival and service times; 1 for Poisson arrivals and
  exponential service);
- the wait of the requests that do wait is taken as exponential with that mean, so the `q`
  quantile of the wait is `g / (n x capacity_rps - arrival_rps) x ln(C / (1 - q))`, zero when
  fewer than `1 - q` of the requests wait at all.

Every function is vectorised over the replica count: `replicas_for_wait` evaluates all candidate
counts in one pass, with the Erlang B recursion replaced by the Poisson form
`B = pmf(c) / cdf(c)` through `scipy.special`.

Pure: numpy and scipy only, no I/O, no clock.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def erlang_c(servers: FloatArray, offered: float) -> FloatArray:
    """Probability that an arrival waits, for each count of `servers` (1 where `offered` is not
    below it: the queue grows without bound)."""
    # Imported at the first use: scipy.special is about 14 MB of the process's memory, which a
    # fleet without a latency SLO never needs.
    from scipy import special

    servers = np.asarray(servers, dtype=np.float64)
    if offered <= 0:
        return np.zeros_like(servers)
    # Erlang B as the Poisson pmf over its cdf, in logs so large counts do not overflow.
    log_pmf = servers * math.log(offered) - offered - special.gammaln(servers + 1.0)
    cdf = special.gammaincc(servers + 1.0, offered)
    with np.errstate(divide="ignore", invalid="ignore"):
        blocking = np.exp(log_pmf) / cdf
        waiting = servers * blocking / (servers - offered * (1.0 - blocking))
    stable = servers > offered
    return np.where(stable, np.clip(np.nan_to_num(waiting, nan=1.0), 0.0, 1.0), 1.0)


def mean_queue(*, replicas: int, slots: int, arrival_rps: float, capacity_rps: float) -> float:
    """Requests waiting on average in the M/M/c model (Poisson arrivals, exponential service);
    inf when the replicas cannot keep up."""
    servers = replicas * slots
    offered = arrival_rps * slots / capacity_rps
    if offered >= servers:
        return math.inf
    wait = float(erlang_c(np.array([float(servers)]), offered)[0])
    return wait * offered / (servers - offered)


def wait_quantile_s(
    replicas: FloatArray,
    *,
    slots: int,
    arrival_rps: float,
    capacity_rps: float,
    burstiness: float,
    quantile: float,
) -> FloatArray:
    """The `quantile` of the time a request waits before service, per replica count (inf where
    the replicas cannot keep up)."""
    replicas = np.asarray(replicas, dtype=np.float64)
    offered = arrival_rps * slots / capacity_rps
    waiting = erlang_c(replicas * slots, offered)
    spare_rps = replicas * capacity_rps - arrival_rps
    with np.errstate(divide="ignore", invalid="ignore"):
        tail = np.log(np.maximum(waiting, 1e-300) / (1.0 - quantile))
        wait_s = burstiness / spare_rps * np.maximum(tail, 0.0)
    return np.where(spare_rps > 0, wait_s, math.inf)


def replicas_for_wait(
    *,
    slots: int,
    arrival_rps: float,
    capacity_rps: float,
    burstiness: float,
    quantile: float,
    budget_s: float,
    most: int,
) -> int | None:
    """The fewest replicas, up to `most`, whose `quantile` wait is within `budget_s`; None when
    even `most` is not enough."""
    if arrival_rps <= 0:
        return 0
    fewest = max(1, math.floor(arrival_rps / capacity_rps) + 1)
    if fewest > most:
        return None
    # In chunks as wide as the least count: the answer is rarely more than twice it, and a
    # service bounded at thousands of replicas must not cost thousands of evaluations a tick.
    width = max(16, fewest)
    start = fewest
    while start <= most:
        candidates = np.arange(start, min(most, start + width - 1) + 1, dtype=np.float64)
        waits = wait_quantile_s(
            candidates,
            slots=slots,
            arrival_rps=arrival_rps,
            capacity_rps=capacity_rps,
            burstiness=burstiness,
            quantile=quantile,
        )
        within = np.flatnonzero(waits <= budget_s)
        if within.size:
            return int(candidates[within[0]])
        start += width
    return None
