"""The annotation contract: defaults, every key's valid and invalid values, rules across keys."""

from collections.abc import Mapping
from typing import Any

import pytest

from autoscaler import metricnames
from autoscaler.contract import annotations as ann
from autoscaler.contract.annotations import (
    PREFIX,
    Invalid,
    Mode,
    Placement,
    PolicyName,
    Server,
    ServiceConfig,
    TrafficRouter,
)
from autoscaler.core import model

MINIMAL = {"enabled": "true", "max-replicas": "10", "target-qps-per-replica": "5"}


def keys(settings: Mapping[str, str]) -> dict[str, str]:
    return {PREFIX + key: value for key, value in settings.items()}


def parse(overrides: Mapping[str, str | None] = {}, *, namespace: str = "ml") -> Any:
    """Parses MINIMAL with `overrides` (None removes a key)."""
    settings: dict[str, str] = dict(MINIMAL)
    for key, value in overrides.items():
        if value is None:
            settings.pop(key, None)
        else:
            settings[key] = value
    return ann.parse(keys(settings), namespace=namespace)


def ok(overrides: Mapping[str, str | None] = {}) -> ServiceConfig:
    result = parse(overrides)
    assert isinstance(result, ServiceConfig), str(result)
    return result


def messages(overrides: Mapping[str, str | None]) -> list[str]:
    result = parse(overrides)
    assert isinstance(result, Invalid), result
    return [p.message for p in result.problems]


def test_defaults_follow_the_design() -> None:
    """A minimal opt-in gets every default of docs/annotations.md."""
    config = ok()
    assert config.enabled is True
    assert config.mode is Mode.ACTIVE
    assert config.policy_name is PolicyName.DEFAULT
    assert config.policy == model.PolicyConfig(
        max_replicas=10,
        min_replicas=2,
        target_load_per_replica=5.0,
        target_queue_per_replica=None,
        target_gpu_utilization_pct=75.0,
        deadband_ratio=0.1,
        scale_up_cooldown_s=60.0,
        scale_down_cooldown_s=300.0,
        scale_down_max_ratio=0.2,
        burst=model.BurstConfig(threshold_ratio=1.5),
        lookahead=model.LookaheadConfig(),
        queue_drain=model.QueueDrainConfig(),
        forecast=model.ForecastConfig(),
        gpu_veto_projected=True,
        burst_backlog_ahead=True,
        burst_release=True,
    )
    assert (config.window_s, config.half_life_s) == (300.0, 30.0)
    assert config.server is Server.VLLM
    assert config.metrics == metricnames.PRESETS["vllm"]
    assert config.traffic == ann.TrafficConfig(
        router=TrafficRouter.NONE,
        steps_pct=(10, 30, 50, 100),
        step_interval_s=30.0,
        max_error_rate=0.01,
        max_p95_latency_s=None,
        max_p95_ratio=1.2,
    )
    assert config.warmup == ann.WarmupConfig(path=None, port=None, requests=3, deadline_s=600.0)
    assert config.placement is Placement.AUTO
    assert config.model_memory_mib is None
    assert config.project == "ml"


def test_every_design_key_is_a_setting() -> None:
    """Every key of the docs/annotations.md table (and `policy`, `paused`, `paused-replicas`) is a
    setting, and no other."""
    expected = {
        "enabled", "mode", "paused", "paused-replicas", "policy", "forecast", "min-replicas",
        "max-replicas", "server",
        "target-qps-per-replica", "target-queue-per-replica", "target-gpu-utilization",
        "target-kv-cache-utilization", "target-tokens-per-replica", "target-ttft-p95",
        "target-tpot-p95", "prompt-token-weight", "target-p95-latency", "target-p95-queue-delay",
        "service-time", "replica-capacity",
        "metric-requests", "metric-queue", "metric-errors", "metric-latency",
        "window", "half-life", "deadband", "scale-up-cooldown", "scale-down-cooldown",
        "scale-down-max-ratio", "traffic-router", "traffic-steps", "traffic-step-interval",
        "max-error-rate", "max-p95-latency", "max-p95-ratio", "warmup-path", "warmup-port",
        "warmup-requests", "warmup-deadline", "placement", "model-memory", "project",
        "model", "model-size-gib",
        "standby-replicas", "standby-max-replicas",
    }  # fmt: skip
    assert set(ann.SETTING_KEYS) == {PREFIX + key for key in expected}


def test_every_field_has_a_description() -> None:
    """Every field of the model documents its meaning for the README."""
    for name, info in ann.Annotations.model_fields.items():
        assert info.description, name


def test_seed_policy_has_no_burst_or_lookahead() -> None:
    """`policy: seed` builds the plain policy through `core.policy.seed`."""
    config = ok({"policy": "seed"})
    assert config.policy_name is PolicyName.SEED
    assert config.policy.burst is None
    assert config.policy.lookahead is None


VALID: list[tuple[str, str, Any, Any]] = [
    ("enabled", "false", lambda c: c.enabled, False),
    ("mode", "dry-run", lambda c: c.mode, Mode.DRY_RUN),
    ("mode", "active", lambda c: c.mode, Mode.ACTIVE),
    ("policy", "default", lambda c: c.policy_name, PolicyName.DEFAULT),
    ("min-replicas", "1", lambda c: c.policy.min_replicas, 1),
    ("min-replicas", "10", lambda c: c.policy.min_replicas, 10),
    ("min-replicas", "007", lambda c: c.policy.min_replicas, 7),
    ("max-replicas", "10000", lambda c: c.policy.max_replicas, 10000),
    ("server", "tgi", lambda c: c.metrics, metricnames.PRESETS["tgi"]),
    ("server", "triton", lambda c: c.metrics, metricnames.PRESETS["triton"]),
    ("server", "sglang", lambda c: c.metrics, metricnames.PRESETS["sglang"]),
    ("target-qps-per-replica", "0.5", lambda c: c.policy.target_load_per_replica, 0.5),
    ("target-qps-per-replica", "12", lambda c: c.policy.target_load_per_replica, 12.0),
    ("target-queue-per-replica", "3", lambda c: c.policy.target_queue_per_replica, 3.0),
    ("target-gpu-utilization", "80", lambda c: c.policy.target_gpu_utilization_pct, 80.0),
    ("target-gpu-utilization", "100", lambda c: c.policy.target_gpu_utilization_pct, 100.0),
    ("target-gpu-utilization", "62.5%", lambda c: c.policy.target_gpu_utilization_pct, 62.5),
    ("window", "10s", lambda c: c.window_s, 10.0),
    ("window", "1h", lambda c: c.window_s, 3600.0),
    ("window", "90", lambda c: c.window_s, 90.0),
    ("window", "2m30s", lambda c: c.window_s, 150.0),
    ("half-life", "1.5s", lambda c: c.half_life_s, 1.5),
    ("half-life", "1m", lambda c: c.half_life_s, 60.0),
    ("deadband", "0", lambda c: c.policy.deadband_ratio, 0.0),
    ("deadband", "0.25", lambda c: c.policy.deadband_ratio, 0.25),
    ("scale-up-cooldown", "0", lambda c: c.policy.scale_up_cooldown_s, 0.0),
    ("scale-up-cooldown", "1h30m", lambda c: c.policy.scale_up_cooldown_s, 5400.0),
    ("scale-up-cooldown", "24h", lambda c: c.policy.scale_up_cooldown_s, 86400.0),
    ("scale-down-cooldown", "0s", lambda c: c.policy.scale_down_cooldown_s, 0.0),
    ("scale-down-cooldown", "45", lambda c: c.policy.scale_down_cooldown_s, 45.0),
    ("scale-down-max-ratio", "1", lambda c: c.policy.scale_down_max_ratio, 1.0),
    ("scale-down-max-ratio", "0.05", lambda c: c.policy.scale_down_max_ratio, 0.05),
    ("traffic-router", "gateway-api", lambda c: c.traffic.router, TrafficRouter.GATEWAY_API),
    ("traffic-router", "istio", lambda c: c.traffic.router, TrafficRouter.ISTIO),
    ("traffic-router", "smi", lambda c: c.traffic.router, TrafficRouter.SMI),
    ("traffic-steps", "100", lambda c: c.traffic.steps_pct, (100,)),
    ("traffic-steps", "5, 25,100", lambda c: c.traffic.steps_pct, (5, 25, 100)),
    ("traffic-step-interval", "1s", lambda c: c.traffic.step_interval_s, 1.0),
    ("max-error-rate", "0", lambda c: c.traffic.max_error_rate, 0.0),
    ("max-error-rate", "1", lambda c: c.traffic.max_error_rate, 1.0),
    ("max-p95-latency", "250ms", lambda c: c.traffic.max_p95_latency_s, 0.25),
    ("max-p95-latency", "2.5", lambda c: c.traffic.max_p95_latency_s, 2.5),
    ("max-p95-ratio", "1", lambda c: c.traffic.max_p95_ratio, 1.0),
    ("max-p95-ratio", "1.5", lambda c: c.traffic.max_p95_ratio, 1.5),
    ("warmup-path", "/v1/models", lambda c: c.warmup.path, "/v1/models"),
    ("warmup-path", "/", lambda c: c.warmup.path, "/"),
    ("warmup-path", "/a%20b/c:d@e", lambda c: c.warmup.path, "/a%20b/c:d@e"),
    ("warmup-requests", "1", lambda c: c.warmup.requests, 1),
    ("warmup-deadline", "6h", lambda c: c.warmup.deadline_s, 21600.0),
    ("warmup-deadline", "90s", lambda c: c.warmup.deadline_s, 90.0),
    ("placement", "whole", lambda c: c.placement, Placement.WHOLE),
    ("model-memory", "12Gi", lambda c: c.model_memory_mib, 12288),
    ("model-memory", "24000Mi", lambda c: c.model_memory_mib, 24000),
    ("model-memory", "1.5Gi", lambda c: c.model_memory_mib, 1536),
    ("model-memory", "16G", lambda c: c.model_memory_mib, 15259),
    ("model-memory", "1Mi", lambda c: c.model_memory_mib, 1),
    ("project", "team-a.b_c", lambda c: c.project, "team-a.b_c"),
    ("project", "X", lambda c: c.project, "X"),
]


@pytest.mark.parametrize(("key", "value", "read", "expected"), VALID)
def test_valid_value_is_parsed(key: str, value: str, read: Any, expected: Any) -> None:
    """A valid annotation value lands in the config with its unit converted."""
    assert read(ok({key: value})) == expected


INVALID: list[tuple[str, str]] = [
    ("enabled", "True"),
    ("enabled", "yes"),
    ("enabled", "1"),
    ("enabled", ""),
    ("mode", "dryrun"),
    ("mode", "ACTIVE"),
    ("policy", "fast"),
    ("min-replicas", "abc"),
    ("min-replicas", "0"),
    ("min-replicas", "00"),
    ("min-replicas", "2.5"),
    ("min-replicas", "-1"),
    ("min-replicas", "+2"),
    ("min-replicas", " 2"),
    ("min-replicas", "2 "),
    ("min-replicas", "1e1"),
    ("min-replicas", "10001"),
    ("min-replicas", "1234567890123"),
    ("max-replicas", "0"),
    ("max-replicas", "10001"),
    ("max-replicas", "ten"),
    ("server", "VLLM"),
    ("server", "openai"),
    ("target-qps-per-replica", "0"),
    ("target-qps-per-replica", "-1"),
    ("target-qps-per-replica", "nan"),
    ("target-qps-per-replica", "inf"),
    ("target-qps-per-replica", "1e3"),
    ("target-qps-per-replica", ".5"),
    ("target-qps-per-replica", "5."),
    ("target-queue-per-replica", "0.0"),
    ("target-gpu-utilization", "0"),
    ("target-gpu-utilization", "101"),
    ("target-gpu-utilization", "75%%"),
    ("target-gpu-utilization", "0.75x"),
    ("window", "5s"),
    ("window", "2h"),
    ("window", "1 minute"),
    ("window", "-5m"),
    ("window", "5d"),
    ("window", "5m5m"),
    ("window", "1s1h"),
    ("window", "5M"),
    ("window", "ms"),
    ("window", ""),
    ("half-life", "0"),
    ("half-life", "500ms"),
    ("deadband", "1"),
    ("deadband", "1.5"),
    ("deadband", "-0.1"),
    ("scale-up-cooldown", "25h"),
    ("scale-up-cooldown", "-1s"),
    ("scale-down-cooldown", "1 minute"),
    ("scale-down-cooldown", "2d"),
    ("scale-down-max-ratio", "0"),
    ("scale-down-max-ratio", "1.1"),
    ("traffic-router", "linkerd"),
    ("traffic-steps", "10,30,50"),
    ("traffic-steps", "30,10,100"),
    ("traffic-steps", "10,10,100"),
    ("traffic-steps", "0,100"),
    ("traffic-steps", "101"),
    ("traffic-steps", "10;100"),
    ("traffic-steps", "10,30,50,100,"),
    ("traffic-steps", "10.5,100"),
    ("traffic-steps", ""),
    ("traffic-step-interval", "0s"),
    ("traffic-step-interval", "2h"),
    ("max-error-rate", "1.5"),
    ("max-error-rate", "-0.1"),
    ("max-p95-latency", "0"),
    ("max-p95-latency", "2h"),
    ("max-p95-ratio", "0.9"),
    ("max-p95-ratio", "101"),
    ("warmup-path", "health"),
    ("warmup-path", "//evil.example/x"),
    ("warmup-path", "http://evil.example/x"),
    ("warmup-path", "/a?b=c"),
    ("warmup-path", "/a#frag"),
    ("warmup-path", "/a/../b"),
    ("warmup-path", "/%2e%2e/b"),
    ("warmup-path", "/a b"),
    ("warmup-path", "/a\r\nHost: evil"),
    ("warmup-path", "/a%0d%0aHost:%20evil"),
    ("warmup-path", "/a%3fq=1"),
    ("warmup-path", "/a\\b"),
    ("warmup-path", "/%zz"),
    ("warmup-path", "/" + "a" * 1024),
    ("warmup-port", "0"),
    ("warmup-port", "65536"),
    ("warmup-port", "http"),
    ("warmup-requests", "0"),
    ("warmup-requests", "1001"),
    ("warmup-deadline", "5s"),
    ("warmup-deadline", "7h"),
    ("placement", "gpu"),
    ("model-memory", "12GB"),
    ("model-memory", "12gi"),
    ("model-memory", "0"),
    ("model-memory", "12000"),
    ("model-memory", "512Ki"),
    ("model-memory", "5Ti"),
    ("model-memory", "1e9"),
    ("model-memory", "100m"),
    ("model-memory", "-1Gi"),
    ("model-memory", "12 Gi"),
    ("project", ""),
    ("project", "-team"),
    ("project", "team-"),
    ("project", "a" * 64),
    ("project", "team/a"),
    ("project", "équipe"),
]


@pytest.mark.parametrize(("key", "value"), INVALID)
def test_invalid_value_names_key_value_and_rule(key: str, value: str) -> None:
    """An invalid value is one problem naming the full key, the quoted value and the rule."""
    assert messages({key: value}) == [
        f"{PREFIX}{key}={ann.quote(value)}: {ann.RULES[PREFIX + key]}"
    ]


def test_min_replicas_message_reads_plainly() -> None:
    """The message for a non-number count says what a count must be."""
    assert messages({"min-replicas": "abc"}) == [
        f'{PREFIX}min-replicas="abc": must be a whole number from 1 to 10000 (not 0: a service '
        "at 0 replicas has no pods, so no metrics, and would hold there on missing data forever)"
    ]


def test_min_replicas_of_zero_is_refused_with_the_reason() -> None:
    """Zero replicas is refused until scale-to-zero has a wake-up signal, and the rule says why."""
    (message,) = messages({"min-replicas": "0"})
    assert message.startswith(f'{PREFIX}min-replicas="0": must be a whole number from 1 to ')
    assert "no pods, so no metrics" in message


def test_duration_message_rejects_words() -> None:
    """`1 minute` is not a duration, and the message shows how to write one."""
    assert messages({"scale-down-cooldown": "1 minute"}) == [
        f'{PREFIX}scale-down-cooldown="1 minute": must be a duration such as 30s, 5m, 1h30m '
        "or 250ms (or plain seconds), from 0s to 24h"
    ]


def test_min_above_max_is_a_problem() -> None:
    """min-replicas above max-replicas names both keys and the bound."""
    assert messages({"min-replicas": "5", "max-replicas": "3"}) == [
        f'{PREFIX}min-replicas="5": must be <= {PREFIX}max-replicas (3)'
    ]


def test_max_replicas_is_required() -> None:
    """Without max-replicas the service is invalid, and the message says what to write."""
    assert messages({"max-replicas": None}) == [
        f"{PREFIX}max-replicas: required; must be a whole number from 1 to 10000"
    ]


def test_enabled_is_required() -> None:
    """Without enabled the annotations are not a valid opt-in."""
    assert messages({"enabled": None}) == [f'{PREFIX}enabled: required; must be "true" or "false"']


def test_a_target_is_required() -> None:
    """With no capacity target there is nothing to scale on."""
    others = (
        f"{PREFIX}target-queue-per-replica, {PREFIX}target-kv-cache-utilization, "
        f"{PREFIX}target-tokens-per-replica"
    )
    assert messages({"target-qps-per-replica": None}) == [
        f"{PREFIX}target-qps-per-replica: required unless one of {others} is set"
    ]


def test_queue_target_alone_is_enough() -> None:
    """A saturation target alone is a complete configuration."""
    config = ok({"target-qps-per-replica": None, "target-queue-per-replica": "4"})
    assert config.policy.target_load_per_replica is None
    assert config.policy.target_queue_per_replica == 4.0


def test_every_problem_is_reported_at_once() -> None:
    """Several bad values give several problems, not just the first."""
    found = messages({"min-replicas": "x", "window": "y", "mode": "z"})
    assert [m.split("=")[0] for m in found] == [
        f"{PREFIX}mode",
        f"{PREFIX}min-replicas",
        f"{PREFIX}window",
    ]


def test_unknown_key_suggests_the_nearest() -> None:
    """A misspelt key is reported with the key it most likely meant."""
    assert messages({"max-replica": "3"}) == [
        f"{PREFIX}max-replica: unknown key; did you mean {PREFIX}max-replicas?"
    ]


def test_unknown_key_suggestion_ignores_case() -> None:
    """A key in the wrong case is matched to the right one."""
    assert messages({"Half-Life": "30s"}) == [
        f"{PREFIX}Half-Life: unknown key; did you mean {PREFIX}half-life?"
    ]


def test_unknown_key_without_a_near_match() -> None:
    """A key like no other gets no suggestion."""
    assert messages({"zzzzzz": "1"}) == [f"{PREFIX}zzzzzz: unknown key"]


def test_controller_keys_and_other_prefixes_are_ignored() -> None:
    """status, state and annotations outside the prefix never make a service invalid."""
    result = ann.parse(
        keys(MINIMAL)
        | {
            ann.STATUS_KEY: "{not json",
            ann.STATE_KEY: "\x00",
            "deployment.kubernetes.io/revision": "3",
            "autoscaler.dsec.io.other/x": "y",
        },
        namespace="ml",
    )
    assert isinstance(result, ServiceConfig)


def test_metric_names_rejected_for_presets() -> None:
    """metric-* keys are refused for a preset server instead of silently ignored."""
    assert messages({"server": "tgi", "metric-queue": "my_queue"}) == [
        f'{PREFIX}metric-queue="my_queue": only for {PREFIX}server=custom; '
        "server tgi has its own metric names"
    ]


def test_custom_server_needs_the_metrics_its_targets_use() -> None:
    """server custom requires the metric behind each target and behind the ramp's gates."""
    found = messages(
        {"server": "custom", "target-queue-per-replica": "2", "traffic-router": "istio"}
    )
    assert found == [
        f"{PREFIX}metric-requests: required with server custom and {PREFIX}target-qps-per-replica",
        f"{PREFIX}metric-queue: required with server custom and {PREFIX}target-queue-per-replica",
        f"{PREFIX}metric-errors: required with server custom and {PREFIX}traffic-router",
        f"{PREFIX}metric-latency: required with server custom and {PREFIX}traffic-router",
    ]


def test_custom_server_uses_the_given_names() -> None:
    """Validated custom names become the service's metric series, without label matchers."""
    config = ok(
        {
            "server": "custom",
            "metric-requests": "app:requests_total",
            "metric-queue": "queue_depth",
            "metric-errors": "app_errors_total",
            "metric-latency": "app_latency_seconds",
            "traffic-router": "smi",
        }
    )
    assert config.metrics == metricnames.MetricNames(
        requests="app:requests_total",
        queue="queue_depth",
        errors="app_errors_total",
        latency="app_latency_seconds",
    )


def test_custom_server_with_only_the_load_metric() -> None:
    """A custom server with a load target and no ramp needs only metric-requests."""
    config = ok({"server": "custom", "metric-requests": "reqs"})
    assert config.metrics.requests == "reqs"
    assert config.metrics.queue is None
    assert config.metrics.errors is None


@pytest.mark.parametrize(
    "value", ['up{namespace="x"} or vector(1)', "1abc", "a-b", "a b", "a" * 201, "a\nb", ""]
)
def test_custom_metric_name_must_be_a_name(value: str) -> None:
    """Anything but a Prometheus metric name is refused where a metric name belongs."""
    found = messages({"server": "custom", "metric-requests": value})
    assert len(found) == 1
    assert found[0].startswith(f"{PREFIX}metric-requests={ann.quote(value)}: must be a Prometheus")


def test_warmup_port_needs_a_path() -> None:
    """A warm-up port alone does nothing and is refused."""
    assert messages({"warmup-port": "8080"}) == [
        f'{PREFIX}warmup-port="8080": has no effect without {PREFIX}warmup-path'
    ]
    assert ok({"warmup-port": "8080", "warmup-path": "/health"}).warmup.port == 8080


@pytest.mark.parametrize("placement", ["mig", "shared"])
def test_pinned_sliced_placement_needs_model_memory(placement: str) -> None:
    """MIG or shared placement without the model's memory cannot pick a slice."""
    assert messages({"placement": placement}) == [
        f"{PREFIX}model-memory: required with placement {placement}: "
        "it decides which GPUs fit the model"
    ]
    assert ok({"placement": placement, "model-memory": "10Gi"}).model_memory_mib == 10240


def test_opted_in_is_exact() -> None:
    """Only the exact text `true` opts a Deployment in."""
    assert ann.opted_in({ann.ENABLED_KEY: "true"})
    for value in ("True", "yes", "false", " true"):
        assert not ann.opted_in({ann.ENABLED_KEY: value})
    assert not ann.opted_in({})


def test_presets_are_valid_metric_names() -> None:
    """Every preset names series that pass the same grammar as custom names."""
    for names in metricnames.PRESETS.values():
        for name in (names.requests, names.queue, names.errors):
            assert name is not None
            assert metricnames.METRIC_NAME.fullmatch(name), name
        assert names.latency is None or metricnames.METRIC_NAME.fullmatch(names.latency)
        assert names.error_label is None or metricnames.METRIC_NAME.fullmatch(names.error_label)


def test_every_preset_server_has_the_adapters_names() -> None:
    """Each `server` choice but `custom` maps to exactly one entry of the one presets table."""
    presets = {s.value for s in Server if s is not Server.CUSTOM}
    assert presets == set(metricnames.PRESETS)
    for server in presets:
        assert ok({"server": server}).metrics is metricnames.PRESETS[server]


def test_paused_is_a_pause_at_the_current_count() -> None:
    """`paused: "true"` pauses with no count; `"false"` (or no key) does not pause."""
    assert parse({"paused": "true"}).policy.pause == model.Pause(replicas=None)
    assert parse({"paused": "false"}).policy.pause is None
    assert parse().policy.pause is None


@pytest.mark.parametrize("count", ["0", "1", "11", "10000"])
def test_paused_replicas_take_any_count_outside_the_bounds_too(count: str) -> None:
    """`paused-replicas` accepts 0 and counts above max-replicas (10): the pause sets them."""
    assert parse({"paused-replicas": count}).policy.pause == model.Pause(replicas=int(count))


def test_paused_replicas_win_over_paused() -> None:
    """With both keys, the count of `paused-replicas` applies, as in KEDA."""
    config = parse({"paused": "true", "paused-replicas": "3"})
    assert config.policy.pause == model.Pause(replicas=3)
    assert parse({"paused": "false", "paused-replicas": "3"}).policy.pause == model.Pause(3)


@pytest.mark.parametrize(
    ("key", "value", "rule"),
    [
        ("paused", "yes", 'must be "true" or "false"'),
        ("paused", "True", 'must be "true" or "false"'),
        ("paused-replicas", "-1", "must be a whole number from 0 to 10000"),
        ("paused-replicas", "1.5", "must be a whole number from 0 to 10000"),
        ("paused-replicas", "10001", "must be a whole number from 0 to 10000"),
        ("paused-replicas", "", "must be a whole number from 0 to 10000"),
    ],
)
def test_bad_pause_values_name_the_key_value_and_rule(key: str, value: str, rule: str) -> None:
    """A bad pause value is an `InvalidConfig` problem naming the key, the value and the rule."""
    result = parse({key: value})
    assert isinstance(result, Invalid)
    (problem,) = result.problems
    assert problem.message == f'{PREFIX}{key}="{value}": {rule}'


def test_the_ramp_settings_are_the_core_s_from_the_parse_on() -> None:
    """Router `none` is gate only, no warm-up path means warm once running, and the rest map
    one to one onto the ramp's core settings."""
    config = ok({"traffic-steps": "20,100", "max-error-rate": "0.05", "warmup-deadline": "2m"})
    assert config.ramp == ann.ramp_config(config.traffic, config.warmup)
    assert config.ramp.gate_only
    assert not config.ramp.warmup_probe
    assert config.ramp.steps_pct == (20, 100)
    assert config.ramp.max_error_rate == 0.05
    assert config.ramp.warmup_deadline_s == 120.0
    probed = ok({"traffic-router": "istio", "warmup-path": "/v1/models"})
    assert not probed.ramp.gate_only
    assert probed.ramp.warmup_probe


def test_ramp_settings_the_core_refuses_are_invalid_at_parse_time() -> None:
    """Settings past the contract's own checks that the ramp refuses make the service invalid,
    naming the key, instead of failing at every tick of the ramp."""
    valid = ann.Annotations.model_validate(MINIMAL)
    unchecked = valid.model_copy(update={"traffic_steps_pct": (50, 30)})

    result = ann._service(unchecked, namespace="ml")

    assert isinstance(result, Invalid)
    (problem,) = result.problems
    assert problem.key == PREFIX + "traffic-steps"
    assert "steps_pct must increase" in problem.rule


def test_the_model_and_its_size_are_parsed_strictly() -> None:
    """`model` takes a model id and `model-size-gib` a positive size; anything else is named."""
    found = parse({"model": "meta-llama/Llama-3.1-8B", "model-size-gib": "16"})
    assert isinstance(found, ServiceConfig)
    assert (found.model, found.model_size_gib) == ("meta-llama/Llama-3.1-8B", 16.0)
    bad = parse({"model": "two words", "model-size-gib": "0"})
    assert isinstance(bad, ann.Invalid)
    assert {p.key for p in bad.problems} == {PREFIX + "model", PREFIX + "model-size-gib"}
