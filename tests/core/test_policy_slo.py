"""The latency SLO's vote in the default policy (`model.SloConfig`)."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.core import model, policy
from autoscaler.core.model import Kind, Reason, Signal
from tests.core import builders
from tests.core.builders import estimate

# A replica completes 1 request/s, 2 at once, each in 2 s unqueued; 99 % within 5 s.
SLO = model.SloConfig(
    target_latency_s=5.0, quantile=0.99, service_time_s=2.0, replica_capacity_rps=1.0
)


def slo_config(**overrides: object) -> model.PolicyConfig:
    """A default-policy config with a load target of 0.75 requests/s per replica and `SLO`."""
    fields: dict[str, object] = {
        "min_replicas": 1,
        "target_load_per_replica": 0.75,
        "target_queue_per_replica": 2.0,
        "slo": SLO,
    }
    fields.update(overrides)
    return policy.default(max_replicas=100, **fields)


def test_a_small_service_gets_the_headroom_its_slo_needs() -> None:
    """At 1.5 requests/s the 75 % target asks for 2 replicas, the SLO for more, and wins."""
    observation = builders.observation(load=1.5, queue=0.0, replicas=2, serving=2, gpu=10.0)
    decision, _ = policy.decide(slo_config(), observation, builders.state())
    assert (decision.kind, decision.reason) == (Kind.SCALE_UP, Reason.SLO)
    assert decision.desired > 2
    assert decision.contributions[Signal.LOAD].estimator == "slo"
    assert "slo: p99 latency 5 s at 1.5 rps needs" in decision.detail


def test_the_slo_is_a_floor_under_the_target_not_a_ceiling() -> None:
    """At 30 requests/s the SLO needs fewer than the 40 of the 75 % target: the target holds."""
    observation = builders.observation(load=30.0, queue=0.0, replicas=40, serving=40)
    decision, _ = policy.decide(slo_config(), observation, builders.state())
    assert decision.desired == 40
    assert decision.contributions[Signal.LOAD].estimator == "mean"
    assert "slo: p99 latency 5 s at 30 rps needs 32" in decision.detail


def test_at_a_full_utilisation_target_the_slo_sizes_the_service() -> None:
    """With the load target at the replica's capacity, 30 requests/s get the SLO's 32."""
    config = slo_config(target_load_per_replica=1.0)
    observation = builders.observation(load=30.0, queue=0.0, replicas=40, serving=40)
    decision, _ = policy.decide(config, observation, builders.state())
    assert (decision.kind, decision.desired) == (Kind.SCALE_DOWN, 32)


def test_a_missing_load_holds_and_the_slo_does_not_vote() -> None:
    """Without a fresh load the service holds; the SLO never reads missing as zero."""
    observation = builders.observation(load=builders.stale(), queue=0.0)
    decision, _ = policy.decide(slo_config(), observation, builders.state())
    assert decision.kind is Kind.HOLD
    assert "slo" not in decision.detail
    assert decision.contributions[Signal.LOAD].estimator == "missing"


def test_without_a_capacity_the_vote_waits_until_the_service_saturates() -> None:
    """With no configured capacity and no saturation the vote abstains and says why."""
    config = slo_config(slo=dataclasses.replace(SLO, replica_capacity_rps=None))
    observation = builders.observation(load=1.5, queue=0.0, replicas=2, serving=2)
    decision, _ = policy.decide(config, observation, builders.state())
    assert decision.contributions[Signal.LOAD].estimator == "mean"
    assert "slo: replica capacity not measured yet" in decision.detail


def test_a_saturated_service_measures_its_capacity() -> None:
    """With every replica holding waiting requests the served rate per replica is its capacity."""
    config = slo_config(slo=dataclasses.replace(SLO, replica_capacity_rps=None))
    observation = builders.observation(load=4.0, queue=12.0, replicas=4, serving=4)
    decision, _ = policy.decide(config, observation, builders.state())
    assert "1 rps per replica" in decision.detail
    assert decision.kind is Kind.SCALE_UP


def test_a_queue_longer_than_the_model_s_raises_the_burstiness_and_the_vote() -> None:
    """A queue four times what Poisson arrivals would give makes the SLO ask for more."""
    config = slo_config(target_load_per_replica=1.0)
    smooth = builders.observation(load=16.0, queue=0.5, replicas=18, serving=18)
    bursty = dataclasses.replace(
        smooth, signals={**smooth.signals, Signal.SATURATION: estimate(8.0)}
    )
    calm, _ = policy.decide(config, smooth, builders.state())
    rough, _ = policy.decide(config, bursty, builders.state())
    assert "burstiness 1.00" in calm.detail
    assert "burstiness 1.00" not in rough.detail
    assert rough.contributions[Signal.LOAD].desired > calm.contributions[Signal.LOAD].desired


def test_the_seed_policy_has_no_slo_vote() -> None:
    """`policy.seed` stays the plain formula."""
    config = policy.seed(max_replicas=100, target_load_per_replica=0.75, min_replicas=1)
    observation = builders.observation(load=1.5, replicas=2, serving=2)
    decision, _ = policy.decide(config, observation, builders.state())
    assert config.slo is None
    assert "slo" not in decision.detail


@settings(max_examples=200, deadline=None)
@given(
    load=st.floats(0.0, 60.0),
    more=st.floats(0.0, 30.0),
    queue=st.floats(0.0, 40.0),
    serving=st.integers(1, 60),
    capacity=st.floats(0.5, 4.0),
    target=st.floats(0.3, 1.0),
    burstiness=st.floats(0.5, 4.0),
)
def test_more_load_never_asks_for_fewer_replicas_with_an_slo(
    load: float,
    more: float,
    queue: float,
    serving: int,
    capacity: float,
    target: float,
    burstiness: float,
) -> None:
    """With the SLO's vote, a configured capacity and a given burstiness, more load on the same
    queue never asks for fewer replicas."""
    # Left out: a capacity measured from the load moves with it, and a burstiness fitted to a
    # queue that stays put while the load rises reads the traffic as smoother.
    fixed = dataclasses.replace(
        SLO, replica_capacity_rps=capacity, min_burstiness=burstiness, max_burstiness=burstiness
    )
    config = slo_config(target_load_per_replica=target, slo=fixed)

    def wanted(rate: float) -> int:
        observation = builders.observation(
            load=rate, queue=queue, replicas=serving, serving=serving
        )
        decision, _ = policy.decide(config, observation, builders.state())
        return max(c.desired or 0 for c in decision.contributions.values())

    assert wanted(load) <= wanted(load + more)


# The fit on samples at the serving count (`SloConfig.fit_settle_s`, 120 s by default).
WHOLE_WINDOW = dataclasses.replace(SLO, fit_settle_s=None)


def ticks(
    config: model.PolicyConfig,
    state: model.PolicyState,
    *,
    serving: int,
    load: float,
    queue: model.SignalEstimate,
    seconds: range,
) -> tuple[list[model.Decision], model.PolicyState]:
    """The decisions of one tick per second in `seconds` after `NOW_S` at a fixed observation,
    each tick handed the state the last one left."""
    decisions = []
    for second in seconds:
        observation = builders.observation(
            load=load,
            queue=queue,
            replicas=serving,
            serving=serving,
            now_s=builders.NOW_S + second,
        )
        decision, state = policy.decide(config, observation, state)
        decisions.append(decision)
    return decisions, state


def burstiness_of(decision: model.Decision) -> str:
    return decision.detail.partition("burstiness ")[2][:4]


def test_the_fit_does_not_read_the_queue_the_last_count_left_behind() -> None:
    """After the serving count changes, the last fit holds until the samples at the new count
    span the settling time, and those samples alone are fitted."""
    config = slo_config(target_load_per_replica=1.0)
    earlier = model.SloFit(16, builders.NOW_S - 900.0, builders.NOW_S - 1.0, 2.5, 14.0, 1.5)
    # The smoothed mean still holds the 16 replicas' queue (8 waiting); the newest samples do
    # not: 3 waiting against the model's 3.1 at 18 replicas and 16 requests/s.
    queue = estimate(8.0, last=3.0)
    decisions, state = ticks(
        config,
        builders.state(slo_fit=earlier),
        serving=18,
        load=16.0,
        queue=queue,
        seconds=range(130),
    )
    assert {burstiness_of(d) for d in decisions[:120]} == {"1.50"}
    assert "held until 120 s at 18 serving (0 s)" in decisions[0].detail
    assert burstiness_of(decisions[-1]) == "1.00"
    assert "held" not in decisions[-1].detail
    assert state.slo_fit is not None
    assert (state.slo_fit.serving, state.slo_fit.burstiness) == (18, 1.0)
    whole, _ = ticks(
        slo_config(target_load_per_replica=1.0, slo=WHOLE_WINDOW),
        builders.state(),
        serving=18,
        load=16.0,
        queue=queue,
        seconds=range(1),
    )
    assert burstiness_of(whole[0]) == "2.57"  # the smoothed mean's 8 against the model's 3.1


def test_the_last_fit_holds_while_the_model_gives_nothing_to_go_on() -> None:
    """Where the model expects under one waiting request the last fit holds, not the floor."""
    earlier = model.SloFit(22, builders.NOW_S - 900.0, builders.NOW_S - 1.0, 2.0, 17.0, 2.2)
    decisions, state = ticks(
        slo_config(target_load_per_replica=1.0),
        builders.state(slo_fit=earlier),
        serving=22,
        load=16.0,  # the model's queue: 0.08 requests
        queue=estimate(4.3),
        seconds=range(130),
    )
    assert {burstiness_of(d) for d in decisions} == {"2.20"}
    assert state.slo_fit is not None
    assert state.slo_fit.burstiness == 2.2
    whole, _ = ticks(
        slo_config(target_load_per_replica=1.0, slo=WHOLE_WINDOW),
        builders.state(),
        serving=22,
        load=16.0,
        queue=estimate(4.3),
        seconds=range(1),
    )
    assert burstiness_of(whole[0]) == "1.00"


def test_before_the_first_fit_the_smoothed_mean_is_fitted() -> None:
    """A new service (or a restarted controller) fits the smoothed mean until its first fit
    on samples at one count; a tick without a fresh queue sample adds none."""
    decisions, state = ticks(
        slo_config(target_load_per_replica=1.0),
        builders.state(),
        serving=18,
        load=16.0,
        queue=builders.stale(8.0),
        seconds=range(130),
    )
    assert state.slo_fit is not None
    assert state.slo_fit.burstiness is None
    assert state.slo_fit.sampled_s == state.slo_fit.since_s == builders.NOW_S
    assert {burstiness_of(d) for d in decisions} == {"1.00"}  # a stale queue: nothing to go on
    fresh, _ = ticks(
        slo_config(target_load_per_replica=1.0),
        builders.state(),
        serving=18,
        load=16.0,
        queue=estimate(8.0),
        seconds=range(1),
    )
    assert burstiness_of(fresh[0]) == "2.57"


def test_fitting_the_whole_window_keeps_no_fit() -> None:
    """With `fit_settle_s` None the fit reads the smoothed mean each tick and remembers
    nothing."""
    _, state = ticks(
        slo_config(target_load_per_replica=1.0, slo=WHOLE_WINDOW),
        builders.state(),
        serving=18,
        load=16.0,
        queue=estimate(8.0),
        seconds=range(3),
    )
    assert state == builders.state()
