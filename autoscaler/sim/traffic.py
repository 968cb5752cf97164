"""Trace-driven traffic for one service: a fluid FIFO queue in front of its serving replicas.

Requests arrive from a per-second array (fluid: fractional counts are kept), spread uniformly
within their second. The serving replicas take them in arrival order at `capacity_rps`, given
anew for every second. A request's latency is `service_time_s` plus the time it waited; it
misses the SLO when that exceeds `slo_latency_s`. A request still waiting after
`queue_timeout_s` is dropped, which counts as a drop and as an SLO miss.

The model keeps one number for the queue: the arrival time of the oldest waiting request (the
head). Everything that arrived between the head and now is waiting. Within one second the head
moves through the arrival seconds at `capacity / density`, clamped between `now - timeout`
(older requests are dropped) and `now` (the queue is empty). Between two events (the head
entering the next arrival second, catching up with now, reaching the timeout, the end of the
second) the wait of the requests served grows linearly with the number served, so each such
piece is a "chunk" whose waits are uniform between two values: SLO misses and quantiles follow
analytically, never from a loop over requests. A quiet second with no queue is one chunk of
zero wait, which is the common case and the fast path.

`SplitTraffic` is the same fluid model when replicas differ or traffic is split
(docs/architecture.md, "The warm-up gate and the traffic ramp"; docs/simulator.md): two such queues,
one in front of the stable set and one in front of the warming set, each fed its share of the
arrivals and served by its own servers. A server has its own speed, service time and error ratio,
and takes the requests of its queue in proportion to its speed, so a slow server adds its extra
service time to the latency of its share. Requests routed to a set with no server at all are
rejected (an empty mesh subset answers 503).

It must not know about pods, metrics or the control loop: capacity comes in per second, and
servers are names with a speed.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

# Times are compared with this slack so float rounding never stalls the piecewise walk.
_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class TrafficConfig:
    """The latency model of one service (docs/simulator.md). Times in seconds."""

    service_time_s: float = 2.0
    """Latency of a request that does not wait."""
    slo_latency_s: float = 5.0
    """A request whose latency exceeds this misses the SLO."""
    queue_timeout_s: float = 60.0
    """A request still waiting after this is dropped."""
    histogram_bin_s: float = 0.05
    """Resolution of the whole-run latency histogram."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.service_time_s) and self.service_time_s >= 0):
            raise ValueError("service_time_s must be >= 0")
        if not self.slo_latency_s > 0:
            raise ValueError("slo_latency_s must be > 0")
        if not (math.isfinite(self.queue_timeout_s) and self.queue_timeout_s > 0):
            raise ValueError("queue_timeout_s must be finite and > 0")
        if not self.histogram_bin_s > 0:
            raise ValueError("histogram_bin_s must be > 0")

    @property
    def slo_wait_s(self) -> float:
        """The longest wait that still meets the SLO."""
        return self.slo_latency_s - self.service_time_s


class Second(NamedTuple):
    """What one simulated second did to the queue.

    A NamedTuple rather than a frozen dataclass: one is built per service per simulated second.
    """

    arrivals: float
    served: float
    """Requests taken by a replica during the second (they complete `service_time_s` later)."""
    dropped: float
    slo_misses: float
    """Requests served too late plus requests dropped."""
    queue: float
    """Requests waiting at the end of the second."""
    p95_latency_s: float
    """95th percentile latency of the requests served in this second; NaN when none were."""


class Chunk(NamedTuple):
    """Requests served together whose waits are spread uniformly from `first_s` to `last_s`."""

    mass: float
    first_s: float
    last_s: float


def _arrival_list(arrivals: Sequence[float] | FloatArray) -> list[float]:
    """Arrivals per second, checked (one finite value >= 0 per second), as a list: scalar reads
    from a list are several times faster than from an array."""
    values = np.asarray(arrivals, dtype=np.float64)
    if values.ndim != 1:
        raise ValueError("arrivals must be one value per second")
    if not bool(np.all(np.isfinite(values)) and np.all(values >= 0)):
        raise ValueError("arrivals must be finite and >= 0")
    return values.tolist()  # type: ignore[no-any-return]


class Traffic:
    """The queue of one service, moved forward one second at a time by `step`."""

    def __init__(
        self, arrivals: Sequence[float] | FloatArray, config: TrafficConfig | None = None
    ) -> None:
        self.config = config or TrafficConfig()
        self._arrivals = _arrival_list(arrivals)
        self._n = len(self._arrivals)
        self._t = 0
        self._head_s = 0.0
        self._capacity_rps = 0.0
        """What the servers could take in the last second simulated."""
        self.arrived = 0.0
        self.served = 0.0
        self.dropped = 0.0
        self.slo_misses = 0.0
        self._histogram = _WaitHistogram(self.config.queue_timeout_s, self.config.histogram_bin_s)

    @property
    def now_s(self) -> int:
        """Start of the next second `step` will simulate."""
        return self._t

    @property
    def queue(self) -> float:
        """Requests waiting now."""
        return max(0.0, self.arrived - self.served - self.dropped)

    def arrivals_at(self, second: int) -> float:
        return self._arrivals[second] if 0 <= second < self._n else 0.0

    def step(self, capacity_rps: float) -> Second:
        """Simulate the next second with replicas that can take `capacity_rps` requests/s."""
        if not capacity_rps >= 0:
            raise ValueError("capacity_rps must be >= 0")
        t = self._t
        self._t = t + 1
        self._capacity_rps = capacity_rps
        arrivals = self._arrivals[t] if t < self._n else 0.0
        self.arrived += arrivals
        config = self.config
        if self._head_s >= t - _EPS and capacity_rps >= arrivals:
            # The fast path: no queue and enough capacity, every request is taken as it
            # arrives (one chunk of zero wait).
            self._head_s = t + 1.0
            if not arrivals > 0:
                return Second(0.0, 0.0, 0.0, 0.0, 0.0, math.nan)
            self.served += arrivals
            self._histogram.add_zero(arrivals)
            late = arrivals if config.slo_wait_s < 0 else 0.0
            self.slo_misses += late
            return Second(arrivals, arrivals, 0.0, late, 0.0, config.service_time_s)

        # A capacity too small to divide by is no capacity.
        capacity = capacity_rps if capacity_rps > _EPS else 0.0
        chunks, dropped = self._walk(float(t), t + 1.0, capacity)
        slo_wait = config.slo_wait_s
        served = late = 0.0
        for chunk in chunks:
            served += chunk.mass
            late += chunk.mass * _fraction_above(chunk, slo_wait)
            self._histogram.add(chunk)
        self.served += served
        self.dropped += dropped
        self.slo_misses += late + dropped
        p95 = config.service_time_s + wait_quantile(chunks, 0.95) if served > 0 else math.nan
        return Second(arrivals, served, dropped, late + dropped, self.queue, p95)

    def unmet_at_end(self) -> float:
        """Requests waiting now that cannot meet the SLO any more: a run that ends here counts
        them as misses (the rule is `autoscaler.experiment.run_report`'s).

        The queue is served on, in order, at the last second's capacity and with nobody else
        arriving: a request whose wait then exceeds the SLO's, or that would reach the timeout,
        cannot meet the SLO. That covers a request whose wait
        already exceeds it, and one stuck behind too many others. With no capacity at the end,
        every waiting request is unmet. Nothing here changes the queue.
        """
        waiting = self.queue
        if not waiting > _EPS:
            return 0.0
        capacity = self._capacity_rps if self._capacity_rps > _EPS else 0.0
        if capacity <= 0:
            return waiting
        slo_wait = self.config.slo_wait_s
        # A copy whose arrivals stop now: only `_head_s` moves, and only on the copy.
        drain = copy.copy(self)
        drain._n = min(self._n, self._t)
        drain._arrivals = self._arrivals[: drain._n]
        unmet = 0.0
        tau = float(self._t)
        # Past the timeout every request left has been served or dropped.
        for _ in range(math.ceil(self.config.queue_timeout_s) + 1):
            if drain._head_s >= tau - _EPS:
                break
            chunks, dropped = drain._walk(tau, tau + 1.0, capacity)
            unmet += dropped + sum(c.mass * _fraction_above(c, slo_wait) for c in chunks)
            tau += 1.0
        return min(unmet, waiting)

    def latency_quantile(self, q: float) -> float:
        """The q-quantile latency over every request served so far; NaN when none was."""
        wait = self._histogram.quantile(q)
        return self.config.service_time_s + wait

    def take(self, capacity_rps: float, arrivals: float) -> tuple[list[Chunk], float]:
        """Simulate the next second of a queue fed as it goes: `arrivals` join it now, servers
        that can take `capacity_rps` requests/s serve it. Returns the chunks served (waits, not
        latencies) and the requests dropped.

        Only for a queue built without arrivals (`Traffic(())`); the caller accounts for
        latency and SLO misses, since the servers' service times may differ. A queue is driven
        by `step` or by `take`, never both.
        """
        if not (math.isfinite(arrivals) and arrivals >= 0):
            raise ValueError("arrivals must be finite and >= 0")
        if not capacity_rps >= 0:
            raise ValueError("capacity_rps must be >= 0")
        t = self._t
        if t != self._n:
            raise ValueError("take feeds a queue built without arrivals")
        self._arrivals.append(arrivals)
        self._n = t + 1
        self._t = t + 1
        self._capacity_rps = capacity_rps
        self.arrived += arrivals
        if self._head_s >= t - _EPS and capacity_rps >= arrivals:
            self._head_s = t + 1.0
            self.served += arrivals
            return ([Chunk(arrivals, 0.0, 0.0)] if arrivals > 0 else []), 0.0
        capacity = capacity_rps if capacity_rps > _EPS else 0.0
        chunks, dropped = self._walk(float(t), t + 1.0, capacity)
        self.served += sum(chunk.mass for chunk in chunks)
        self.dropped += dropped
        return chunks, dropped

    def _walk(self, tau: float, end: float, capacity: float) -> tuple[list[Chunk], float]:
        """Move the head through one second piece by piece; returns the chunks served and
        the requests dropped."""
        timeout = self.config.queue_timeout_s
        arrivals_now = self.arrivals_at(int(tau))
        head = self._head_s
        chunks: list[Chunk] = []
        dropped = 0.0
        while tau < end - _EPS:
            if head >= tau - _EPS:
                head = tau
                if capacity >= arrivals_now:
                    # The queue is empty and stays empty: served on arrival.
                    chunks.append(Chunk(arrivals_now * (end - tau), 0.0, 0.0))
                    head = tau = end
                    break
            second = math.floor(head + _EPS)
            density = self.arrivals_at(second)
            if head <= tau - timeout + _EPS and capacity < density:
                # The head is at the timeout: the replicas take requests of exactly that age
                # and the rest of that age is dropped; the head moves with the clock.
                head = tau - timeout
                piece = min(second + 1 - head, end - tau)
                if capacity > 0:
                    chunks.append(Chunk(capacity * piece, timeout, timeout))
                dropped += (density - capacity) * piece
                head, tau = head + piece, tau + piece
                continue
            if density <= 0:
                # Nobody arrived in that second: the head skips it at once.
                head = min(float(second + 1), tau)
                continue
            if capacity <= 0:
                # Nothing is served; the head waits until it reaches the timeout.
                piece = min(head + timeout - tau, end - tau)
                tau += max(piece, 0.0)
                continue
            speed = capacity / density
            piece = end - tau
            event = "end"
            to_next = (second + 1 - head) / speed
            if to_next < piece:
                piece, event = to_next, "next"
            if speed > 1:
                to_catch_up = (tau - head) / (speed - 1)
                if to_catch_up < piece:
                    piece, event = to_catch_up, "caught-up"
            elif speed < 1:
                to_timeout = (head + timeout - tau) / (1 - speed)
                if to_timeout < piece:
                    piece, event = max(to_timeout, 0.0), "timeout"
            wait_first = tau - head
            wait_last = wait_first + (1 - speed) * piece
            if piece > 0:
                chunks.append(Chunk(capacity * piece, wait_first, wait_last))
            tau += piece
            if event == "next":
                head = float(second + 1)
            elif event == "caught-up":
                head = tau
            elif event == "timeout":
                head = tau - timeout
            else:
                head += speed * piece
        self._head_s = head
        return chunks, dropped


@dataclass(frozen=True, slots=True)
class Server:
    """One replica as `SplitTraffic` sees it."""

    name: str
    rate_rps: float
    """Requests per second it completes at most."""
    service_time_s: float
    """Latency of a request it takes without waiting (never below the service's own)."""
    error_ratio: float = 0.0
    """Share of the requests it takes that fail."""


class Split(NamedTuple):
    """Where one second's arrivals go: shares of them, the rest is rejected."""

    stable: float
    """Share that joins the stable set's queue."""
    warming: float
    """Share that joins the warming set's queue."""


ALL_STABLE = Split(1.0, 0.0)


class ServerGroupSecond(NamedTuple):
    """What one second did for the servers of one set that share a service time and an error
    ratio: they take the set's requests in proportion to their speed."""

    warming_set: bool
    served: float
    failed: float
    latencies: tuple[Chunk, ...]
    """The served requests' latencies (wait plus service time), spread uniformly per chunk."""
    shares: dict[str, float]
    """Each server's share of `served` (and of `failed`, and of every chunk's mass)."""
    running_per_served: float
    """Requests in service per request served in a second (the service time, by Little's law)."""


class SplitSecond(NamedTuple):
    """What one second of `SplitTraffic` did: the fields of `Second`, plus failures."""

    arrivals: float
    served: float
    dropped: float
    rejected: float
    """Routed to a set without servers."""
    failed: float
    """Answered with an error: the servers' failures and the rejected requests."""
    slo_misses: float
    """Served too late, failed, rejected or dropped (each request once)."""
    queue: float
    p95_latency_s: float
    groups: tuple[ServerGroupSecond, ...]
    queues: tuple[float, float]
    """Requests waiting at the end of the second in front of the stable and warming sets."""


class SplitTraffic:
    """The queues of one service whose replicas differ or whose traffic is split between the
    stable and the warming set; moved forward one second at a time by `step`.

    It has the totals and `latency_quantile` of `Traffic`, plus `rejected` and `failed`.
    """

    def __init__(
        self, arrivals: Sequence[float] | FloatArray, config: TrafficConfig | None = None
    ) -> None:
        self.config = config or TrafficConfig()
        self._arrivals = _arrival_list(arrivals)
        self._n = len(self._arrivals)
        self._t = 0
        self._sets = (Traffic((), self.config), Traffic((), self.config))
        self.arrived = 0.0
        self.rejected = 0.0
        self.failed = 0.0
        self.slo_misses = 0.0
        # Latencies above the service's own service time, so a run where every server is alike
        # reports exactly what `Traffic` does.
        self._histogram = _WaitHistogram(self.config.queue_timeout_s, self.config.histogram_bin_s)

    @property
    def now_s(self) -> int:
        return self._t

    @property
    def served(self) -> float:
        return self._sets[0].served + self._sets[1].served

    @property
    def dropped(self) -> float:
        return self._sets[0].dropped + self._sets[1].dropped

    @property
    def queue(self) -> float:
        return self._sets[0].queue + self._sets[1].queue

    def arrivals_at(self, second: int) -> float:
        return self._arrivals[second] if 0 <= second < self._n else 0.0

    def unmet_at_end(self) -> float:
        """Requests waiting now, in front of either set, that cannot meet the SLO any more
        (`Traffic.unmet_at_end` for each queue, at its servers' last capacity and the service's
        own service time)."""
        return self._sets[0].unmet_at_end() + self._sets[1].unmet_at_end()

    def latency_quantile(self, q: float) -> float:
        """The q-quantile latency over every request served so far; NaN when none was."""
        return self.config.service_time_s + self._histogram.quantile(q)

    def step(
        self, split: Split, stable: Sequence[Server], warming: Sequence[Server]
    ) -> SplitSecond:
        """Simulate the next second: `split` routes the arrivals, the servers of each set
        serve its queue."""
        if not (
            split.stable >= 0 and split.warming >= 0 and split.stable + split.warming <= 1 + _EPS
        ):
            raise ValueError(f"split shares must be >= 0 and add up to at most 1: {split}")
        t = self._t
        self._t = t + 1
        arrivals = self._arrivals[t] if t < self._n else 0.0
        self.arrived += arrivals
        to_warming = arrivals * split.warming
        rest = 1.0 - split.stable - split.warming
        if rest > _EPS:
            to_stable, rejected = arrivals * split.stable, arrivals * rest
        else:  # every request is routed: none is lost to rounding
            to_stable, rejected = max(0.0, arrivals - to_warming), 0.0
        config = self.config
        base_s = config.service_time_s
        slo_s = config.slo_latency_s
        served = dropped = failed = late = 0.0
        groups: list[ServerGroupSecond] = []
        waits: list[Chunk] = []
        for warming_set, queue, servers, offered in (
            (False, self._sets[0], stable, to_stable),
            (True, self._sets[1], warming, to_warming),
        ):
            capacity = math.fsum(s.rate_rps for s in servers)
            chunks, lost = queue.take(capacity, offered)
            dropped += lost
            mass = math.fsum(c.mass for c in chunks)
            if not mass > 0:
                continue
            served += mass
            for (service_s, error_ratio), members in _alike(servers).items():
                rate = math.fsum(s.rate_rps for s in members)
                share = 1.0 if len(members) == len(servers) else rate / capacity
                extra_s = service_s - base_s
                group_served = mass * share
                group_failed = group_served * error_ratio
                group_late = 0.0
                latencies = []
                for c in chunks:
                    part = Chunk(c.mass * share, c.first_s + extra_s, c.last_s + extra_s)
                    waits.append(part)
                    self._histogram.add(part)
                    group_late += part.mass * _fraction_above(part, slo_s - base_s)
                    latencies.append(Chunk(part.mass, part.first_s + base_s, part.last_s + base_s))
                failed += group_failed
                # A late request that also failed is one miss.
                late += group_late * (1.0 - error_ratio) + group_failed
                shares = {s.name: s.rate_rps / rate for s in members}
                groups.append(
                    ServerGroupSecond(
                        warming_set, group_served, group_failed, tuple(latencies), shares, service_s
                    )
                )
        self.rejected += rejected
        self.failed += failed + rejected
        self.slo_misses += late + dropped + rejected
        p95 = base_s + wait_quantile(waits, 0.95) if served > 0 else math.nan
        return SplitSecond(
            arrivals,
            served,
            dropped,
            rejected,
            failed + rejected,
            late + dropped + rejected,
            self.queue,
            p95,
            tuple(groups),
            (self._sets[0].queue, self._sets[1].queue),
        )


def _alike(servers: Sequence[Server]) -> dict[tuple[float, float], list[Server]]:
    """Servers grouped by (service time, error ratio), in order of first appearance."""
    groups: dict[tuple[float, float], list[Server]] = {}
    for server in servers:
        groups.setdefault((server.service_time_s, server.error_ratio), []).append(server)
    return groups


def _fraction_above(chunk: Chunk, wait_s: float) -> float:
    """Share of the chunk's requests that waited longer than `wait_s`."""
    lo, hi = sorted((chunk.first_s, chunk.last_s))
    if hi <= wait_s:
        return 0.0
    if lo > wait_s or hi - lo < _EPS:
        return 1.0
    return (hi - wait_s) / (hi - lo)


def wait_quantile(chunks: Sequence[Chunk], q: float) -> float:
    """The q-quantile wait of the requests in `chunks` (waits uniform within each chunk)."""
    total = 0.0
    widest = 0.0
    for chunk in chunks:
        total += chunk.mass
        widest = max(widest, chunk.first_s, chunk.last_s)
    if not total > 0:
        return math.nan
    if widest <= 0:
        return 0.0
    target = q * total
    spans = [(min(c.first_s, c.last_s), max(c.first_s, c.last_s), c.mass) for c in chunks]
    if len(spans) == 1:
        lo, hi, _ = spans[0]
        return lo + q * (hi - lo)
    points = sorted({x for lo, hi, _ in spans for x in (lo, hi)})
    previous_x = points[0]
    previous_f = _mass_at_or_below(spans, previous_x, strict=False)
    if target <= previous_f:
        return previous_x
    for x in points[1:]:
        before = _mass_at_or_below(spans, x, strict=True)
        if target <= before:
            share = (target - previous_f) / (before - previous_f) if before > previous_f else 1.0
            return previous_x + share * (x - previous_x)
        at = _mass_at_or_below(spans, x, strict=False)
        if target <= at:
            return x
        previous_x, previous_f = x, at
    return points[-1]


def _mass_at_or_below(spans: list[tuple[float, float, float]], x: float, *, strict: bool) -> float:
    """Mass with wait <= x (< x for point masses when `strict`)."""
    total = 0.0
    for lo, hi, mass in spans:
        if hi - lo < _EPS:
            if lo < x or (not strict and lo <= x):
                total += mass
        elif x >= hi:
            total += mass
        elif x > lo:
            total += mass * (x - lo) / (hi - lo)
    return total


class _WaitHistogram:
    """The distribution of waits over a whole run, exact at the bin edges.

    A chunk adds a ramp to the cumulative distribution G(x) (mass with wait <= x): slope
    `mass / width` from its first to its last wait. Storing, per bin, the sum of slope changes
    `s` and of `s x position` lets G at every edge be rebuilt as `x * S1 - S2` from running
    sums, so adding a chunk costs O(1) whatever its width. Point masses (zero-width chunks)
    are kept per bin, and the zero-wait mass on its own, so a run without queueing reports
    exactly the service time.
    """

    def __init__(self, limit_s: float, bin_s: float) -> None:
        self._bin_s = bin_s
        self._bins = math.ceil(limit_s / bin_s) + 2
        self._slope = [0.0] * self._bins
        self._moment = [0.0] * self._bins
        self._point = [0.0] * self._bins
        self._zero = 0.0
        self.total = 0.0

    def _index(self, x: float) -> int:
        return min(max(int(x / self._bin_s), 0), self._bins - 1)

    def add_zero(self, mass: float) -> None:
        """Requests that did not wait at all."""
        self.total += mass
        self._zero += mass

    def add(self, chunk: Chunk) -> None:
        mass = chunk.mass
        if mass <= 0:
            return
        self.total += mass
        lo, hi = chunk.first_s, chunk.last_s
        if lo > hi:
            lo, hi = hi, lo
        if hi <= 0:
            self._zero += mass
        elif hi - lo < _EPS:
            self._point[self._index(lo)] += mass
        else:
            slope = mass / (hi - lo)
            i, j = self._index(lo), self._index(hi)
            self._slope[i] += slope
            self._moment[i] += slope * lo
            self._slope[j] -= slope
            self._moment[j] -= slope * hi

    def quantile(self, q: float) -> float:
        if not self.total > 0:
            return math.nan
        target = q * self.total
        if self._zero >= target:
            return 0.0
        edges = np.arange(self._bins + 1) * self._bin_s
        below = np.concatenate(([0.0], np.cumsum(self._slope)))
        moment = np.concatenate(([0.0], np.cumsum(self._moment)))
        points = np.concatenate(([0.0], np.cumsum(self._point)))
        cdf = self._zero + points + edges * below - moment
        j = int(np.searchsorted(cdf, target, side="left"))
        if j <= 0:
            return 0.0
        if j >= len(cdf):
            return float(edges[-1])
        lo_f, hi_f = float(cdf[j - 1]), float(cdf[j])
        share = (target - lo_f) / (hi_f - lo_f) if hi_f > lo_f else 1.0
        return float(edges[j - 1] + share * self._bin_s)
