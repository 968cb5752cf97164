"""The fluid FIFO traffic model on cases computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.sim import traffic
from autoscaler.sim.traffic import Chunk, Traffic, TrafficConfig


def run(
    arrivals: list[float], capacity_rps: float | list[float], config: TrafficConfig
) -> tuple[Traffic, list[traffic.Second]]:
    """Step a queue through `arrivals` (and as many quiet seconds as capacities given)."""
    capacities = capacity_rps if isinstance(capacity_rps, list) else [capacity_rps] * len(arrivals)
    queue = Traffic(arrivals, config)
    return queue, [queue.step(c) for c in capacities]


def test_below_capacity_nothing_waits() -> None:
    """Traffic under capacity is served as it arrives, at the bare service time."""
    config = TrafficConfig(service_time_s=2.0, slo_latency_s=5.0)
    queue, seconds = run([3.0, 1.5, 0.0, 4.0], 4.0, config)

    assert [s.served for s in seconds] == [3.0, 1.5, 0.0, 4.0]
    assert all(s.queue == 0 and s.dropped == 0 and s.slo_misses == 0 for s in seconds)
    assert [s.p95_latency_s for s in seconds][:2] == [2.0, 2.0]
    assert math.isnan(seconds[2].p95_latency_s)
    assert queue.latency_quantile(0.95) == 2.0


def test_burst_over_capacity_queues_as_computed_by_hand() -> None:
    """Ten requests in one second on 4 rps wait 0.15 s per place in line, 1.5 s at most."""
    # Request k (of 10, arriving at k/10 s) is taken at k/4 s, so its wait is 0.15 k: uniform
    # from 0 to 1.5 s. Taken 4, 4 and 2 in the three seconds, with waits 0-0.6, 0.6-1.2 and
    # 1.2-1.5 s. With a 1 s service time and a 2 s SLO, those waiting over 1 s (k > 6.67) miss.
    config = TrafficConfig(service_time_s=1.0, slo_latency_s=2.0, queue_timeout_s=60.0)
    queue, seconds = run([10.0], [4.0, 4.0, 4.0, 4.0], config)

    assert [s.served for s in seconds] == pytest.approx([4.0, 4.0, 2.0, 0.0])
    assert [s.queue for s in seconds] == pytest.approx([6.0, 2.0, 0.0, 0.0])
    assert [s.p95_latency_s for s in seconds[:3]] == pytest.approx(
        [1.0 + 0.95 * 0.6, 1.0 + 0.6 + 0.95 * 0.6, 1.0 + 1.2 + 0.95 * 0.3]
    )
    assert [s.slo_misses for s in seconds] == pytest.approx([0.0, 4.0 * 0.2 / 0.6, 2.0, 0.0])
    assert queue.slo_misses == pytest.approx(10 - 10 / 1.5)
    assert queue.dropped == 0
    assert queue.latency_quantile(0.95) == pytest.approx(1.0 + 0.95 * 1.5, abs=1e-3)


def test_requests_past_the_timeout_are_dropped_and_miss() -> None:
    """On 1 rps, ten requests wait until the head reaches the 3 s timeout, then 6 drop."""
    # The head moves at 1/10 of the clock, so its wait grows at 0.9 s/s and reaches 3 s at
    # t = 10/3, with 10/3 requests served. From then on the replicas take requests exactly 3 s
    # old (1 per second) and the rest of that age, 9 per second, is dropped until the head
    # reaches the end of the first second at t = 4: 2/3 more served, 6 dropped.
    config = TrafficConfig(service_time_s=0.0, slo_latency_s=10.0, queue_timeout_s=3.0)
    queue, seconds = run([10.0], [1.0] * 5, config)

    assert queue.served == pytest.approx(4.0)
    assert queue.dropped == pytest.approx(6.0)
    assert [s.dropped for s in seconds] == pytest.approx([0, 0, 0, 6.0, 0])
    assert seconds[3].served == pytest.approx(1.0)
    assert seconds[3].slo_misses == pytest.approx(6.0)
    assert queue.slo_misses == pytest.approx(6.0)
    assert queue.queue == pytest.approx(0.0)


def test_without_serving_replicas_the_queue_grows_then_drops() -> None:
    """With no capacity nothing is served; each second's arrivals drop one timeout later."""
    config = TrafficConfig(service_time_s=1.0, slo_latency_s=2.0, queue_timeout_s=5.0)
    queue, seconds = run([2.0] * 8, [0.0] * 8, config)

    assert all(s.served == 0 and math.isnan(s.p95_latency_s) for s in seconds)
    assert [s.queue for s in seconds] == pytest.approx([2, 4, 6, 8, 10, 10, 10, 10])
    assert [s.dropped for s in seconds] == pytest.approx([0, 0, 0, 0, 0, 2, 2, 2])
    assert queue.slo_misses == pytest.approx(6.0)


def test_slo_wait_shorter_than_service_time_misses_everything() -> None:
    """When the service time alone exceeds the SLO, every request misses."""
    config = TrafficConfig(service_time_s=3.0, slo_latency_s=2.0)
    queue, _ = run([5.0, 5.0], 10.0, config)

    assert queue.slo_misses == pytest.approx(10.0)


def test_wait_quantile_mixes_chunks() -> None:
    """The quantile of a mixture of uniform chunks solves the piecewise-linear CDF."""
    chunks = [Chunk(5.0, 0.0, 0.0), Chunk(5.0, 1.0, 3.0)]

    assert traffic.wait_quantile(chunks, 0.4) == 0.0
    assert traffic.wait_quantile(chunks, 0.75) == pytest.approx(2.0)
    assert traffic.wait_quantile(chunks, 0.5) == pytest.approx(0.0)
    assert traffic.wait_quantile([Chunk(1.0, 2.0, 0.0)], 0.5) == pytest.approx(1.0)
    assert math.isnan(traffic.wait_quantile([], 0.95))


@settings(max_examples=60, deadline=None)
@given(
    arrivals=st.lists(st.floats(0, 30, allow_nan=False), min_size=1, max_size=40),
    capacities=st.lists(st.floats(0, 20, allow_nan=False), min_size=1, max_size=60),
    timeout_s=st.floats(0.5, 20),
)
def test_every_request_is_served_dropped_or_waiting(
    arrivals: list[float], capacities: list[float], timeout_s: float
) -> None:
    """Requests are conserved, waits stay within the timeout and capacity is never exceeded."""
    config = TrafficConfig(service_time_s=1.0, slo_latency_s=3.0, queue_timeout_s=timeout_s)
    queue, seconds = run(arrivals, capacities, config)

    arrived = sum(arrivals[: len(capacities)])
    total = queue.served + queue.dropped + queue.queue
    assert total == pytest.approx(arrived, rel=1e-9, abs=1e-6)
    for second, capacity in zip(seconds, capacities, strict=True):
        assert second.served <= capacity + 1e-6
        assert second.slo_misses <= second.served + second.dropped + 1e-6
        if second.served > 1e-9:
            assert 1.0 - 1e-6 <= second.p95_latency_s <= 1.0 + timeout_s + 1e-6
    assert queue.slo_misses <= arrived + 1e-6


def reference_waits(
    arrivals: list[float], capacities: list[float], *, slices: int = 100
) -> tuple[np.ndarray, np.ndarray]:
    """Waits of a discrete FIFO queue, each second's arrivals cut into `slices` requests.

    In "capacity time" C(t) (requests the replicas could have taken by t), a request is taken
    from max(C(arrival), where the previous one ended) for its own size: the Lindley recursion.
    Returns the waits (at each request's middle) and the request sizes.
    """
    cumulative = np.concatenate(([0.0], np.cumsum(capacities)))

    def capacity_time(t: float) -> float:
        k = min(int(t), len(capacities) - 1)
        return float(cumulative[k] + capacities[k] * (t - k))

    def inverse(y: float) -> float:
        k = max(int(np.searchsorted(cumulative, y, side="left")) - 1, 0)
        return float(k + (y - cumulative[k]) / capacities[k])

    waits, sizes = [], []
    done = 0.0
    for second, count in enumerate(arrivals):
        size = count / slices
        for i in range(slices):
            at = second + (i + 0.5) / slices
            start = max(capacity_time(at), done)
            done = start + size
            waits.append(inverse(start + size / 2) - at)
            sizes.append(size)
    return np.array(waits), np.array(sizes)


def weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    order = np.argsort(values)
    cumulative = np.cumsum(weights[order])
    index = int(np.searchsorted(cumulative, q * cumulative[-1]))
    return float(values[order][index])


def test_fluid_model_agrees_with_a_discrete_fifo_queue() -> None:
    """Served totals, SLO misses and the whole-run p95 match a discrete FIFO reference."""
    rng = np.random.default_rng(3)
    seconds = 300
    arrivals = rng.poisson(8, seconds).astype(float).tolist()
    capacities = (7.5 + 3 * np.sin(np.arange(seconds + 60) / 20)).tolist()
    config = TrafficConfig(service_time_s=0.5, slo_latency_s=2.0, queue_timeout_s=200.0)
    queue, _ = run(arrivals, capacities, config)
    waits, sizes = reference_waits(arrivals, capacities)

    assert queue.served == pytest.approx(sum(arrivals))
    assert queue.dropped == 0
    late = float(sizes[waits > config.slo_wait_s].sum())
    assert queue.slo_misses == pytest.approx(late, rel=0.02)
    p95 = 0.5 + weighted_quantile(waits, sizes, 0.95)
    assert queue.latency_quantile(0.95) == pytest.approx(p95, abs=2 * config.histogram_bin_s)


def test_config_rejects_a_zero_timeout() -> None:
    """A queue timeout must be positive."""
    with pytest.raises(ValueError, match="queue_timeout_s"):
        TrafficConfig(queue_timeout_s=0.0)


HAND = TrafficConfig(service_time_s=1.0, slo_latency_s=2.0, queue_timeout_s=60.0)
"""The hand-computed burst's model: a request may wait 1 s."""


def test_requests_waiting_at_the_end_miss_as_if_the_run_went_on() -> None:
    """A burst cut off after its first second has the misses the whole burst would have had."""
    queue, _ = run([10.0], [4.0], HAND)

    assert queue.slo_misses == 0
    assert queue.unmet_at_end() == pytest.approx(10 - 10 / 1.5)
    assert queue.queue == pytest.approx(6.0)


def test_requests_that_already_waited_past_the_slo_are_unmet() -> None:
    """Requests that waited longer than the SLO allows are unmet whatever the capacity left."""
    queue, _ = run([10.0], [0.0, 0.0, 1.0], HAND)

    assert queue.unmet_at_end() == pytest.approx(queue.queue)
    assert queue.queue > 8


def test_without_capacity_at_the_end_every_waiting_request_is_unmet() -> None:
    """No capacity in the last second leaves every waiting request unmet."""
    queue, _ = run([3.0], [0.0], HAND)

    assert queue.unmet_at_end() == pytest.approx(3.0)


def test_a_short_queue_at_the_end_that_is_served_in_time_is_not_unmet() -> None:
    """One request over a 4 rps capacity, waiting a quarter second, still meets the SLO."""
    queue, _ = run([5.0], [4.0], HAND)

    assert queue.queue == pytest.approx(1.0)
    assert queue.unmet_at_end() == 0


def test_split_traffic_counts_its_waiting_requests_as_the_plain_queue_does() -> None:
    """Alike servers on a split queue leave the same unmet requests as the plain queue."""
    split = traffic.SplitTraffic([10.0], HAND)
    split.step(traffic.ALL_STABLE, [traffic.Server("a", 4.0, 1.0)], [])

    assert split.unmet_at_end() == pytest.approx(10 - 10 / 1.5)
