"""The LLM servers' annotations: `target-kv-cache-utilization`, `target-tokens-per-replica`,
`target-ttft-p95`, `target-tpot-p95` and `prompt-token-weight`."""

from __future__ import annotations

import pytest

from autoscaler.contract.annotations import PREFIX
from autoscaler.core import model
from tests.contract.test_annotations_parse import messages, ok

SHARE_RULE = "must be a ratio > 0 and <= 1 (0.8) or a percentage > 0 and <= 100 with % (80%)"


@pytest.mark.parametrize("text", ["0.8", "80%", "80.0%", "0.80"])
def test_the_kv_cache_target_is_a_ratio_or_a_percentage(text: str) -> None:
    """`0.8` and `80%` are the same KV-cache target."""
    config = ok({"target-kv-cache-utilization": text}).policy
    assert config.target_kv_cache_ratio == pytest.approx(0.8)


@pytest.mark.parametrize("text", ["80", "1.5", "0", "0%", "120%", "-0.5", "high", "0.8 "])
def test_a_bad_kv_cache_target_names_the_key_the_value_and_the_rule(text: str) -> None:
    """A bare 80 (percent without its sign), a ratio above 1 or words are refused."""
    (message,) = messages({"target-kv-cache-utilization": text})
    assert message.startswith(f"{PREFIX}target-kv-cache-utilization")
    assert SHARE_RULE in message


def test_the_token_and_latency_targets_reach_the_policy() -> None:
    """Tokens per second and the two P95 durations become the policy's targets."""
    config = ok(
        {
            "target-tokens-per-replica": "2500",
            "target-ttft-p95": "800ms",
            "target-tpot-p95": "0.05",
        }
    ).policy
    assert config.target_tokens_per_replica == 2500.0
    assert config.target_ttft_p95_s == pytest.approx(0.8)
    assert config.target_tpot_p95_s == pytest.approx(0.05)


def test_no_token_annotation_means_no_token_vote() -> None:
    """Without the keys the policy has no token target."""
    config = ok().policy
    assert config.target_kv_cache_ratio is None
    assert config.target_tokens_per_replica is None
    assert config.target_ttft_p95_s is None
    assert config.target_tpot_p95_s is None


def test_a_kv_cache_target_alone_is_a_complete_configuration() -> None:
    """A service may scale on its KV cache with no request target."""
    config = ok({"target-qps-per-replica": None, "target-kv-cache-utilization": "70%"}).policy
    assert config.target_load_per_replica is None
    assert config.target_kv_cache_ratio == pytest.approx(0.7)


def test_a_latency_target_alone_is_not_enough() -> None:
    """TTFT only scales up: a service needs a capacity target too."""
    (message,) = messages({"target-qps-per-replica": None, "target-ttft-p95": "1s"})
    assert message.startswith(f"{PREFIX}target-qps-per-replica: required unless one of")


def test_a_target_the_server_does_not_export_is_refused() -> None:
    """TGI has no KV-cache gauge nor TTFT histogram: the keys are refused, naming the server."""
    problems = messages(
        {"server": "tgi", "target-kv-cache-utilization": "0.8", "target-ttft-p95": "1s"}
    )
    rule = "`server: tgi` does not export the signal this target reads"
    assert problems == [
        f'{PREFIX}target-kv-cache-utilization="0.8": {rule}',
        f'{PREFIX}target-ttft-p95="1s": {rule}',
    ]


def test_tgi_scales_on_tokens_and_tpot() -> None:
    """TGI's token histograms and per-token latency are read."""
    config = ok({"server": "tgi", "target-tokens-per-replica": "900", "target-tpot-p95": "40ms"})
    assert config.policy.target_tokens_per_replica == 900.0
    assert config.metrics.prompt_tokens == ("tgi_request_input_length_sum",)


def test_a_custom_server_has_no_token_series() -> None:
    """`server: custom` names no token series, so its token targets are refused."""
    problems = messages(
        {"server": "custom", "metric-requests": "my_requests_total", "target-tpot-p95": "50ms"}
    )
    assert problems == [
        f'{PREFIX}target-tpot-p95="50ms": needs a server preset that exports the signal '
        "(`server: custom` names none)"
    ]


def test_a_ttft_target_feeds_the_slo_sizing_of_the_default_policy() -> None:
    """With `policy: default` the TTFT target is also the SLO's queueing delay, with the
    replica's capacity when given."""
    config = ok({"target-ttft-p95": "1s", "replica-capacity": "3.5"}).policy
    assert config.slo == model.SloConfig(target_latency_s=1.0, replica_capacity_rps=3.5)
    assert config.target_ttft_p95_s == 1.0


def test_the_seed_policy_keeps_the_ttft_vote_alone() -> None:
    """`policy: seed` has no SLO sizing: the TTFT target only votes."""
    config = ok({"policy": "seed", "target-ttft-p95": "1s"}).policy
    assert config.slo is None
    assert config.target_ttft_p95_s == 1.0


def test_an_explicit_latency_slo_wins_over_the_ttft_target() -> None:
    """`target-p95-queue-delay` sets the SLO sizing; the TTFT target still votes on its own."""
    config = ok({"target-p95-queue-delay": "300ms", "target-ttft-p95": "1s"}).policy
    assert config.slo == model.SloConfig(target_latency_s=0.3)
    assert config.target_ttft_p95_s == 1.0


def test_the_prompt_token_weight_reaches_the_policy() -> None:
    """`prompt-token-weight` beside a tokens target sets how much a prompt token counts."""
    config = ok({"target-tokens-per-replica": "2000", "prompt-token-weight": "0.15"}).policy
    assert config.prompt_token_weight == pytest.approx(0.15)


def test_an_unset_prompt_token_weight_is_the_default() -> None:
    """Without the key a prompt token counts as the default share of a generated one."""
    config = ok({"target-tokens-per-replica": "2000"}).policy
    assert config.prompt_token_weight == model.DEFAULT_PROMPT_TOKEN_WEIGHT


@pytest.mark.parametrize("text", ["0", "1.5", "-0.2", "a fifth"])
def test_a_bad_prompt_token_weight_names_the_key_the_value_and_the_rule(text: str) -> None:
    """A weight of zero, above one or in words is refused."""
    (message,) = messages({"target-tokens-per-replica": "2000", "prompt-token-weight": text})
    assert message.startswith(f"{PREFIX}prompt-token-weight")
    assert "must be a decimal number > 0 and <= 1" in message


def test_a_prompt_token_weight_without_a_tokens_target_is_refused() -> None:
    """The weight means nothing without `target-tokens-per-replica`: the key, its value and
    the rule are named."""
    (message,) = messages({"prompt-token-weight": "0.2"})
    assert message.startswith(f"{PREFIX}prompt-token-weight")
    assert "0.2" in message
    assert f"has no effect without {PREFIX}target-tokens-per-replica" in message
