"""The token-mix scenarios: a constant request rate whose prompts grow where the mix shifts."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
import pytest
import structlog

from autoscaler.core import model
from autoscaler.experiment import sweep
from autoscaler.sim import policies as sim_policies
from bench import tokens


@pytest.fixture(autouse=True)
def _registry() -> Iterator[None]:
    """The policies this bench registers, and the quiet logs of its worker set-up, leave with
    each test, so no other test sees them."""
    kept = dict(sim_policies._REGISTRY)
    yield
    sim_policies._REGISTRY.clear()
    sim_policies._REGISTRY.update(kept)
    structlog.reset_defaults()


MU_RPS = 3.74
CAPACITY = tokens.Capacity(
    MU_RPS, 7.63, tokens_per_s=780.0, prompt_tokens_per_s=4306.0, kv_usage_ratio=0.8
)
"""What `measure_capacity` finds on the stable mix."""
BASE = dataclasses.replace(
    sweep.BASE, tokens=tokens.TOKEN_CONFIG, replica_capacity_rps=MU_RPS, service_time_s=7.63
)


def per_request_prompt(built: tokens.TokenScenario, start: int, end: int) -> float:
    return float(
        built.mix.prompt_tokens[start:end].sum() / built.scenario.arrivals[start:end].sum()
    )


def test_scenarios_are_seeded() -> None:
    """Two builds give the same arrivals and token counts."""
    first, again = tokens.build(MU_RPS), tokens.build(MU_RPS)
    for name, built in first.items():
        np.testing.assert_array_equal(built.scenario.arrivals, again[name].scenario.arrivals)
        np.testing.assert_array_equal(built.mix.prompt_tokens, again[name].mix.prompt_tokens)


def test_the_request_rate_stays_constant_while_the_mix_shifts() -> None:
    """Every scenario has the same mean request rate before and during its shift."""
    built = tokens.build(MU_RPS)
    rate = tokens.STABLE_REPLICAS * 0.75 * MU_RPS
    for scenario in built.values():
        arrivals = scenario.scenario.arrivals
        assert abs(arrivals[:900].mean() - rate) < 0.05 * rate
        assert abs(arrivals[1800:2700].mean() - rate) < 0.05 * rate


def test_long_prompts_arrive_only_in_the_shift_scenarios() -> None:
    """Prompts grow by thousands of tokens in the RAG and code windows, not in the stable mix."""
    built = tokens.build(MU_RPS)
    stable = built["tokens-stable"]
    before = per_request_prompt(stable, 0, 900)
    assert abs(per_request_prompt(stable, 1800, 2700) - before) < 0.1 * before
    rag = built["tokens-rag"]
    assert per_request_prompt(rag, 1800, 2700) - per_request_prompt(rag, 0, 900) > 1500
    code = built["tokens-code"]
    assert per_request_prompt(code, 2400, 3600) > 2 * per_request_prompt(code, 0, 900)
    code_output = code.mix.output_tokens[2400:].sum() / code.scenario.arrivals[2400:].sum()
    stable_output = stable.mix.output_tokens[2400:].sum() / stable.scenario.arrivals[2400:].sum()
    assert code_output < 0.6 * stable_output


def test_token_signals_see_the_code_shift_that_request_signals_miss() -> None:
    """On the code shift at a flat request rate, ours with token signals adds replicas in time
    and misses fewer TTFTs than ours on request signals."""
    tokens.register_tokens_policy(CAPACITY)
    built = tokens.build(MU_RPS, duration_s=2400)
    tokens.start_worker({"tokens-code": built["tokens-code"]}, CAPACITY)

    plain = tokens.search("tokens-code", "default", "cold", BASE, None)
    with_tokens = tokens.search("tokens-code", tokens.TOKENS_POLICY, "cold", BASE, None)

    assert with_tokens.default.slo_miss_pct < 1.0
    assert plain.default.slo_miss_pct > 5.0


def test_weighing_prompt_tokens_apart_pays_less_for_the_code_shift() -> None:
    """On the code shift (prompts three times longer), counting a prompt token as its weight of
    a generated one costs fewer GPU-hours than counting every token alike, within the SLO."""
    built = tokens.build(MU_RPS, duration_s=2400)
    runs = {}
    for weight in (model.DEFAULT_PROMPT_TOKEN_WEIGHT, 1.0):
        tokens.start_worker({"tokens-code": built["tokens-code"]}, CAPACITY, weight)
        runs[weight] = tokens.search("tokens-code", tokens.TOKENS_POLICY, "cold", BASE, None)

    weighed, alike = runs[model.DEFAULT_PROMPT_TOKEN_WEIGHT].default, runs[1.0].default
    assert weighed.slo_miss_pct < 1.0
    assert weighed.gpu_hours < 0.9 * alike.gpu_hours
