"""The LLM servers' votes: KV-cache usage, tokens per second, TTFT and TPOT."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autoscaler.core import model, policy
from autoscaler.core.model import Kind, Reason, Signal, SignalEstimate
from tests.core import builders
from tests.core.builders import estimate, stale


def llm(**signals: float | SignalEstimate) -> model.Observation:
    """4 serving replicas at their load target (40 rps) with the token signals given."""
    base = builders.observation()
    merged = dict(base.signals)
    for name, value in signals.items():
        merged[Signal[name.upper()]] = (
            value if isinstance(value, SignalEstimate) else estimate(value)
        )
    return dataclasses.replace(base, signals=merged)


def decide(config: model.PolicyConfig, obs: model.Observation) -> model.Decision:
    return policy.decide(config, obs, builders.state())[0]


def test_a_full_kv_cache_scales_up_at_a_flat_request_rate() -> None:
    """KV-cache usage 0.95 against a 0.6 target asks for ceil(4 x 0.95 / 0.6) = 7 replicas."""
    decision = decide(builders.config(target_kv_cache_ratio=0.6), llm(kv_cache=0.95))

    assert decision.kind is Kind.SCALE_UP
    assert decision.desired == 7
    assert decision.detail == "kv_cache ratio 1.58 asks for 7"
    vote = decision.contributions[Signal.KV_CACHE]
    assert vote.desired == 7
    assert vote.ratio == 0.95 / 0.6
    assert decision.contributions[Signal.LOAD].desired == 4


def test_the_token_rate_votes_like_the_load_counted_in_tokens() -> None:
    """Longer answers at the same request rate: 9,000 generated tokens/s against 1,500 per
    replica asks for 6."""
    decision = decide(
        builders.config(target_tokens_per_replica=1500.0), llm(tokens=9000.0, prompt_tokens=0.0)
    )

    assert decision.kind is Kind.SCALE_UP
    assert decision.desired == 6
    assert decision.contributions[Signal.TOKENS].estimate == 9000.0


def test_a_prompt_token_counts_as_its_weight_of_a_generated_one() -> None:
    """2,000 generated and 20,000 prompt tokens/s at a weight of 0.2 are 6,000 generated-token
    equivalents: 4 replicas at 1,500 each, where counting every prompt token whole asks for
    15."""
    config = builders.config(target_tokens_per_replica=1500.0, prompt_token_weight=0.2)
    decision = decide(config, llm(tokens=2000.0, prompt_tokens=20_000.0))

    vote = decision.contributions[Signal.TOKENS]
    assert vote.estimate == pytest.approx(6000.0)
    assert vote.desired == 4
    whole = decide(
        dataclasses.replace(config, prompt_token_weight=1.0),
        llm(tokens=2000.0, prompt_tokens=20_000.0),
    )
    assert whole.contributions[Signal.TOKENS].desired == 15


def test_the_default_weight_counts_a_prompt_token_as_a_fifth_of_a_generated_one() -> None:
    """Unset, the weight is 0.2: a long-prompt shift asks for a fifth of what its prompt tokens
    would ask counted whole."""
    config = builders.config(target_tokens_per_replica=1000.0)
    decision = decide(config, llm(tokens=1000.0, prompt_tokens=50_000.0))

    assert config.prompt_token_weight == model.DEFAULT_PROMPT_TOKEN_WEIGHT == 0.2
    assert decision.contributions[Signal.TOKENS].desired == 11


def test_a_missing_prompt_rate_holds_the_token_vote() -> None:
    """Generated tokens without the prompt rate beside them are not read as a prompt rate of
    zero: the token vote is missing."""
    config = builders.config(target_tokens_per_replica=1000.0)
    decision = decide(config, llm(tokens=9000.0, prompt_tokens=stale()))

    assert decision.contributions[Signal.TOKENS].estimator == "missing"
    assert decision.contributions[Signal.TOKENS].desired is None


def test_token_signals_without_targets_do_not_vote() -> None:
    """A service without token targets decides as before, whatever its servers export."""
    config = builders.config()
    plain = decide(config, builders.observation())
    with_tokens = decide(config, llm(kv_cache=1.0, tokens=1e6, ttft=60.0, tpot=5.0))

    assert with_tokens == plain
    assert set(with_tokens.contributions) == {Signal.LOAD}


def test_a_missing_token_signal_holds_a_scale_down_and_is_never_zero() -> None:
    """A low load with the KV-cache series gone is not read as an empty cache: no scale-down."""
    config = builders.config(target_kv_cache_ratio=0.8)
    decision = decide(config, llm(load=10.0, kv_cache=stale(0.1)))

    assert decision.kind is Kind.HOLD
    assert decision.reason is Reason.MISSING_DATA
    assert "kv_cache" in decision.detail
    assert decision.contributions[Signal.KV_CACHE].desired is None


def test_ttft_above_its_target_asks_for_more_at_most_twice_the_serving() -> None:
    """A P95 TTFT five times its target asks for 8 replicas of 4, not 20."""
    decision = decide(builders.config(target_ttft_p95_s=0.5), llm(ttft=2.5))

    assert decision.kind is Kind.SCALE_UP
    assert decision.desired == 8
    vote = decision.contributions[Signal.TTFT]
    assert vote.ratio == 5.0
    assert vote.estimator == "p95"


def test_tpot_a_little_above_target_asks_in_proportion() -> None:
    """A P95 TPOT 1.2 times its target asks for ceil(4 x 1.2) = 5 replicas."""
    decision = decide(builders.config(target_tpot_p95_s=0.05), llm(tpot=0.06))

    assert decision.desired == 5
    assert decision.contributions[Signal.TPOT].desired == 5


def test_a_latency_near_its_target_keeps_a_scale_down_back() -> None:
    """With the load at a quarter of target, a TTFT at 95 % of its target holds the count."""
    config = builders.config(target_ttft_p95_s=1.0)
    near = decide(config, llm(load=10.0, ttft=0.95))
    far = decide(config, llm(load=10.0, ttft=0.2))

    assert near.kind is Kind.STEADY
    assert near.reason is Reason.IN_DEADBAND
    assert "ttft" in near.detail
    assert far.kind is Kind.SCALE_DOWN


def test_a_latency_above_target_waits_for_the_scale_up_cooldown() -> None:
    """The TTFT vote obeys the scale-up cooldown like every vote."""
    config = builders.config(target_ttft_p95_s=0.5)
    recent = builders.state(last_scale_up_s=builders.NOW_S - 10.0)
    decision, _ = policy.decide(config, llm(ttft=1.0), recent)

    assert decision.kind is Kind.HOLD
    assert decision.reason is Reason.COOLDOWN


def test_a_token_target_alone_is_enough_to_scale_on() -> None:
    """A service may scale on tokens per second with no request or queue target."""
    config = builders.config(target_load_per_replica=None, target_tokens_per_replica=1000.0)
    decision = decide(config, llm(tokens=6000.0, prompt_tokens=0.0))

    assert decision.desired == 6
    assert set(decision.contributions) == {Signal.TOKENS}


@given(
    usage=st.floats(0.0, 1.0),
    more=st.floats(0.0, 1.0),
    target=st.floats(0.05, 1.0),
)
def test_the_kv_cache_vote_is_monotonic_in_usage(usage: float, more: float, target: float) -> None:
    """More KV cache in use never asks for fewer replicas."""
    config = builders.config(target_kv_cache_ratio=target, target_load_per_replica=None)
    low = decide(config, llm(kv_cache=usage)).contributions[Signal.KV_CACHE].desired
    high = decide(config, llm(kv_cache=min(1.0, usage + more))).contributions[Signal.KV_CACHE]
    assert low is not None
    assert high.desired is not None
    assert high.desired >= low


@pytest.mark.parametrize("bad", [0.0, 1.5, math.nan])
def test_a_kv_cache_target_outside_zero_to_one_is_refused(bad: float) -> None:
    """The core refuses a KV-cache target outside (0, 1]."""
    with pytest.raises(ValueError, match="target_kv_cache_ratio"):
        builders.config(target_kv_cache_ratio=bad)


def test_a_queue_behind_saturated_servers_raises_the_token_vote() -> None:
    """Token counters count what saturated servers processed: 600 requests waiting at 40 served
    per second, drained over 30 s, raise the token vote by the same 50 % as the request
    demand (1,500 generated-token equivalents per second to 2,250)."""
    config = builders.config(
        target_tokens_per_replica=500.0,
        prompt_token_weight=0.2,
        queue_drain=model.QueueDrainConfig(drain_s=30.0, confidence_z=0.0),
    )
    observation = llm(tokens=500.0, prompt_tokens=5000.0, saturation=600.0)

    vote = decide(config, observation).contributions[Signal.TOKENS]

    assert vote.estimator == "queue-demand"
    assert vote.estimate == pytest.approx(1500.0 * 1.5)
    assert vote.desired == 5


def test_an_empty_queue_leaves_the_token_vote_at_the_served_rate() -> None:
    """With nothing waiting the token vote is the weighted rate the servers report."""
    config = builders.config(
        target_tokens_per_replica=500.0,
        prompt_token_weight=0.2,
        queue_drain=model.QueueDrainConfig(drain_s=30.0, confidence_z=0.0),
    )
    vote = decide(config, llm(tokens=500.0, prompt_tokens=5000.0, saturation=0.0)).contributions[
        Signal.TOKENS
    ]

    assert vote.estimator == "mean"
    assert vote.estimate == pytest.approx(1500.0)
