"""The token mode: continuous batching against prefill, decode and KV-cache limits, and its
signals."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autoscaler import errors
from autoscaler.core import model
from autoscaler.experiment import run
from autoscaler.sim import policies as sim_policies
from autoscaler.sim import tokens, world
from autoscaler.sim.params import TOKEN_SUMMARY_KEYS, SimParams


def steady(
    rate: float, prompt: float, output: float, seconds: int
) -> tuple[np.ndarray, tokens.TokenMix]:
    arrivals = np.full(seconds, rate)
    return arrivals, tokens.TokenMix(arrivals * prompt, arrivals * output)


def replay(
    rate: float,
    prompt: float,
    output: float,
    *,
    replicas: float,
    seconds: int = 300,
    config: tokens.TokenConfig | None = None,
) -> tuple[tokens.TokenTraffic, tokens.TokenSecond]:
    arrivals, mix = steady(rate, prompt, output, seconds)
    traffic = tokens.TokenTraffic(arrivals, mix, config)
    second = traffic.step(replicas)
    for _ in range(seconds - 1):
        second = traffic.step(replicas)
    return traffic, second


def test_a_lone_request_waits_for_its_prefill_and_one_decode_step() -> None:
    """A request on an idle replica gets its first token after its prefill and one step."""
    config = tokens.TokenConfig()
    traffic = tokens.TokenTraffic(
        np.array([1.0]), tokens.TokenMix(np.array([1000.0]), np.array([10.0]))
    )
    second = traffic.step(1.0)
    expected = 1000 / config.prefill_tokens_per_s + config.decode_step_s
    assert second.p95_latency_s == pytest.approx(expected)
    assert second.served == 1.0
    assert second.slo_misses == 0.0


def test_one_request_decodes_at_the_calibrated_single_stream_rate() -> None:
    """With nothing else running, a request decodes at about 75 tokens per second."""
    traffic = tokens.TokenTraffic(
        np.array([1.0, 0.0, 0.0]), tokens.TokenMix(np.array([10.0, 0, 0]), np.array([500.0, 0, 0]))
    )
    traffic.step(1.0)
    second = traffic.step(1.0)
    assert second.generation_tokens == pytest.approx(75.0, rel=0.02)
    assert second.tpot_s == pytest.approx(1 / 75, rel=0.02)


def test_requests_wait_while_the_kv_cache_is_full() -> None:
    """A cache that holds ten requests keeps the rest waiting, and the wait misses the SLO."""
    config = tokens.TokenConfig(kv_cache_tokens=10 * 1100.0)
    traffic, second = replay(4.0, 1000.0, 100.0, replicas=1.0, seconds=120, config=config)
    assert second.kv_usage_ratio == pytest.approx(1.0, abs=0.02)
    assert second.running == pytest.approx(10.0, abs=0.1)
    assert traffic.queue > 10
    assert traffic.slo_misses > 0.3 * traffic.arrived


def test_long_prompts_at_the_same_request_rate_miss_the_ttft_slo() -> None:
    """The same request rate meets the TTFT SLO with short prompts and misses it with long
    ones."""
    short, _ = replay(3.0, 500.0, 200.0, replicas=1.0)
    long, _ = replay(3.0, 4000.0, 200.0, replicas=1.0)
    assert short.slo_misses == 0.0
    assert long.slo_misses > 0.5 * long.arrived
    assert long.latency_quantile(0.95) > short.latency_quantile(0.95) * 10


def test_more_cache_in_the_batch_slows_every_decode_step() -> None:
    """The time per output token grows with the tokens cached in the batch."""
    _, light = replay(2.0, 200.0, 200.0, replicas=1.0, seconds=60)
    _, heavy = replay(2.0, 4000.0, 200.0, replicas=1.0, seconds=60)
    assert heavy.tpot_s > light.tpot_s


def test_without_replicas_nothing_is_served_and_waiting_requests_drop() -> None:
    """With no replica, requests wait, then drop at the timeout, each one a miss, and those
    already past the TTFT SLO at the end are unmet."""
    config = tokens.TokenConfig(queue_timeout_s=10.0)
    traffic, second = replay(2.0, 100.0, 10.0, replicas=0.0, seconds=30, config=config)
    assert traffic.served == 0.0
    assert traffic.dropped == pytest.approx(2.0 * 19, abs=2.0)
    assert traffic.slo_misses == pytest.approx(traffic.dropped)
    assert math.isnan(second.kv_usage_ratio)
    # Those still waiting arrived from 19 s on; the ones older than the 2 s SLO are unmet.
    assert traffic.unmet_at_end() == pytest.approx(2.0 * (30 - 2 - 19))


@pytest.mark.parametrize(
    ("arrivals", "prompt", "output", "problem"),
    [
        ([1.0, 2.0], [10.0], [1.0, 1.0], "one value per second"),
        ([1.0], [-1.0], [1.0], "prompt must be finite"),
        ([1.0], [10.0], [math.nan], "output must be finite"),
        ([2.0], [1.0], [1.0], "at least one prompt token"),
    ],
    ids=["shape", "negative", "nan", "empty-prompt"],
)
def test_bad_token_mix_is_rejected(
    arrivals: list[float], prompt: list[float], output: list[float], problem: str
) -> None:
    """A token mix that cannot be replayed raises ValueError saying why."""
    mix = tokens.TokenMix(np.array(prompt), np.array(output))
    with pytest.raises(ValueError, match=problem):
        tokens.TokenTraffic(np.array(arrivals), mix)


def test_token_config_rejects_non_positive_rates() -> None:
    """A zero prefill rate is a configuration error naming the field."""
    with pytest.raises(ValueError, match="prefill_tokens_per_s"):
        tokens.TokenConfig(prefill_tokens_per_s=0.0)


def test_token_mode_excludes_the_per_pod_model() -> None:
    """Token mode with a ramp is refused: it models every replica alike."""
    with pytest.raises(ValueError, match="no ramp"):
        SimParams(tokens=tokens.TokenConfig(), ramp="istio")


def test_world_needs_a_token_mix_in_token_mode_only() -> None:
    """A token-mode service without a mix, or a request-mode one with a mix, is refused."""
    arrivals, mix = steady(1.0, 100.0, 10.0, 10)
    sim = world.World(SimParams(tokens=tokens.TokenConfig()))
    with pytest.raises(ValueError, match="token_mix"):
        sim.add_service("a/b", arrivals)
    plain = world.World(SimParams())
    with pytest.raises(ValueError, match="token_mix"):
        plain.add_service("a/b", arrivals, token_mix=mix)


def test_world_exports_vllm_token_signals() -> None:
    """A token-mode service's scrapes give the KV-cache usage, token rates, TTFT and TPOT; a
    request-mode service has none (NaN, never zero)."""
    arrivals, mix = steady(3.0, 1000.0, 100.0, 200)
    params = SimParams(tokens=tokens.TokenConfig(), replica_capacity_rps=3.0, initial_replicas=2)
    sim = world.World(params)
    sid = sim.add_service("llm/chat", arrivals, params, token_mix=mix)
    plain = sim.add_service("llm/plain", arrivals, SimParams(), replicas=2)
    sim.advance(120.0)
    signals = sim.metrics.token_signals(sid, 120.0)
    assert signals.prompt_tokens_per_s == pytest.approx(3000.0, rel=0.05)
    assert signals.generation_tokens_per_s == pytest.approx(300.0, rel=0.05)
    assert 0.0 < signals.kv_cache_usage_ratio < 0.5
    assert 0.1 < signals.ttft_p95_s < 0.5
    assert 0.01 < signals.tpot_p95_s < 0.05
    assert all(math.isnan(v) for v in sim.metrics.token_signals(plain, 120.0))


def test_a_metrics_outage_hides_the_token_signals_too() -> None:
    """While the source is off, reading the token signals raises as sampling does."""
    arrivals, mix = steady(1.0, 100.0, 10.0, 60)
    params = SimParams(tokens=tokens.TokenConfig())
    sim = world.World(params)
    sid = sim.add_service("llm/chat", arrivals, params, token_mix=mix)
    sim.metrics.switch_off(10.0, 20.0)
    sim.advance(15.0)
    with pytest.raises(errors.ObservationError):
        sim.metrics.token_signals(sid, 15.0)


def test_simulate_in_token_mode_counts_ttft_misses_and_tokens() -> None:
    """A run in token mode reports the tokens served and counts TTFT misses as SLO misses."""
    arrivals, mix = steady(6.0, 1500.0, 150.0, 600)
    params = SimParams(
        policy="seed",
        tokens=tokens.TokenConfig(),
        replica_capacity_rps=3.0,
        initial_replicas=1,
        min_replicas=1,
        max_replicas=1,
    )
    result = run.simulate(arrivals, params, token_mix=mix)
    summary = result.summary
    assert summary.keys() >= TOKEN_SUMMARY_KEYS
    assert summary["tokens"]["prompt_tokens"] == pytest.approx(1500.0 * summary["served"])
    assert summary["slo_misses"] > 0.5 * summary["requests"]
    assert summary["params"]["tokens"]["kv_cache_tokens"] == tokens.TokenConfig().kv_cache_tokens
    assert model.ServiceId("sim/inference") == run.SERVICE


def test_the_default_policy_sizes_for_the_ttft_slo_in_token_mode() -> None:
    """In token mode the default policy's SLO is the TTFT SLO, sized as a wait, whatever the
    time a request spends in the server."""
    params = SimParams(tokens=tokens.TokenConfig(slo_ttft_s=2.0), service_time_s=7.6)
    config = sim_policies.default_config(params)
    assert config.slo == model.SloConfig(
        target_latency_s=2.0,
        quantile=sim_policies.SLO_QUANTILE,
        replica_capacity_rps=params.replica_capacity_rps,
    )


TOKEN_TARGETS = model.PolicyConfig(
    max_replicas=20,
    target_load_per_replica=3.0,
    target_kv_cache_ratio=0.8,
    target_tokens_per_replica=3000.0,
    target_ttft_p95_s=2.0,
    target_tpot_p95_s=0.05,
)


async def test_the_batched_sample_carries_the_token_signals_to_the_loop() -> None:
    """The loop's one query per tick reads the token signals in their `Signal` columns for a
    token-mode service with token targets, and NaN for a request-mode one."""
    arrivals, mix = steady(3.0, 1000.0, 100.0, 200)
    params = SimParams(tokens=tokens.TokenConfig(), replica_capacity_rps=3.0, initial_replicas=2)
    sim = world.World(params)
    sid = sim.add_service("llm/chat", arrivals, params, token_mix=mix, policy_config=TOKEN_TARGETS)
    sim.add_service("llm/plain", arrivals, SimParams(), replicas=2)
    sim.advance(120.0)

    values = await sim.metrics.sample(sim.cluster.workloads(), 120.0)

    signals = sim.metrics.token_signals(sid, 120.0)
    chat, plain = values
    assert chat[model.Signal.KV_CACHE] == signals.kv_cache_usage_ratio
    assert chat[model.Signal.TOKENS] == signals.generation_tokens_per_s
    assert chat[model.Signal.PROMPT_TOKENS] == signals.prompt_tokens_per_s
    assert chat[model.Signal.TTFT] == signals.ttft_p95_s
    assert chat[model.Signal.TPOT] == signals.tpot_p95_s
    assert np.isnan(plain[list(model.TOKEN_SIGNALS + model.LATENCY_SIGNALS)]).all()
    assert not np.isnan(plain[model.Signal.LOAD])


async def test_a_token_mode_service_without_token_targets_reads_no_token_signal() -> None:
    """A token-mode server's series are there, but a service that sets no token target reads
    none of them, as in a cluster, where no query names its pods for them."""
    arrivals, mix = steady(3.0, 1000.0, 100.0, 200)
    params = SimParams(tokens=tokens.TokenConfig(), replica_capacity_rps=3.0, initial_replicas=2)
    sim = world.World(params)
    sid = sim.add_service("llm/chat", arrivals, params, token_mix=mix)
    sim.advance(120.0)

    (chat,) = await sim.metrics.sample(sim.cluster.workloads(), 120.0)

    assert np.isfinite(sim.metrics.token_signals(sid, 120.0).kv_cache_usage_ratio)
    assert np.isnan(chat[list(model.LLM_SIGNALS)]).all()
    assert not np.isnan(chat[model.Signal.LOAD])


def test_a_warm_started_token_service_reads_its_token_rates_from_the_first_scrape() -> None:
    """A service that was running before the simulation reads its opening token rates at the
    first scrape after the start, not a rate that climbs from zero while the window fills."""
    arrivals, mix = steady(3.0, 1000.0, 100.0, 200)
    params = SimParams(tokens=tokens.TokenConfig(), replica_capacity_rps=3.0, initial_replicas=2)
    sim = world.World(params)
    sid = sim.add_service("llm/chat", arrivals, params, token_mix=mix)
    sim.advance(sim.metrics.scrape_interval_s)

    signals = sim.metrics.token_signals(sid, sim.metrics.scrape_interval_s)

    assert signals.prompt_tokens_per_s == pytest.approx(3000.0, rel=0.1)
    assert signals.generation_tokens_per_s == pytest.approx(300.0, rel=0.1)


def test_a_fresh_token_service_starts_its_counters_from_zero() -> None:
    """Without a warm start the counters have no history: the first rate reads low."""
    arrivals, mix = steady(3.0, 1000.0, 100.0, 200)
    params = SimParams(tokens=tokens.TokenConfig(), replica_capacity_rps=3.0, initial_replicas=2)
    sim = world.World(params)
    sid = sim.add_service("llm/chat", arrivals, params, token_mix=mix, warm_start=False)
    sim.advance(sim.metrics.scrape_interval_s)

    signals = sim.metrics.token_signals(sid, sim.metrics.scrape_interval_s)

    assert signals.prompt_tokens_per_s < 0.5 * 3000.0
