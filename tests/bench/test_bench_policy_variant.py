"""`bench.policy_variant`: the default policy with other fields, for one bench run."""

from __future__ import annotations

import argparse

import pytest

from autoscaler.core import model, policy
from autoscaler.experiment import sweep
from autoscaler.sim import policies
from bench import policy_variant


def test_default_with_sets_the_fields_and_restores_the_policy() -> None:
    """Inside, `policy.default` builds with the given fields; afterwards as shipped."""
    with policy_variant.default_with({"deadband_ratio": 0.05}):
        config = policy.default(max_replicas=10, target_load_per_replica=1.0)
        assert config.deadband_ratio == 0.05
        assert config.burst is not None  # the rest of the default policy is kept
    assert policy.default(max_replicas=10, target_load_per_replica=1.0).deadband_ratio == 0.1


def test_caller_overrides_win_over_the_variant() -> None:
    """A field the caller passes (as an annotation would) wins over the variant's."""
    with policy_variant.default_with({"deadband_ratio": 0.05}):
        config = policy.default(max_replicas=10, target_load_per_replica=1.0, deadband_ratio=0.2)
    assert config.deadband_ratio == 0.2


def test_slo_fields_apply_to_the_slo_the_caller_gives() -> None:
    """`slo.NAME` sets a field of the SLO the caller passes, keeping the caller's others."""
    slo = model.SloConfig(target_latency_s=5.0, replica_capacity_rps=1.0)
    with policy_variant.default_with({"slo.fit_min_queue": 2.0, "deadband_ratio": 0.05}):
        config = policy.default(max_replicas=10, target_load_per_replica=1.0, slo=slo)
        plain = policy.default(max_replicas=10, target_load_per_replica=1.0)
    assert config.slo == model.SloConfig(
        target_latency_s=5.0, replica_capacity_rps=1.0, fit_min_queue=2.0
    )
    assert (config.deadband_ratio, plain.slo) == (0.05, None)


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("scale_down_cooldown_s=120", ("scale_down_cooldown_s", 120)),
        ("burst=none", ("burst", None)),
        ("slo.fit_settle_s=none", ("slo.fit_settle_s", None)),
    ],
)
def test_parse_field_reads_json_values(text: str, parsed: tuple[str, object]) -> None:
    """A field's value is JSON, or `none`."""
    assert policy_variant.parse_field(text) == parsed


@pytest.mark.parametrize(
    "text", ["no_such_field=1", "deadband_ratio", "deadband_ratio=0.x", "slo.no_such_field=1"]
)
def test_parse_field_rejects_unknown_names_and_bad_values(text: str) -> None:
    """A name that is not a PolicyConfig field, or a value that is not JSON, is an error."""
    with pytest.raises(argparse.ArgumentTypeError):
        policy_variant.parse_field(text)


@pytest.mark.parametrize(
    "name",
    ["target_queue_per_replica", "target_load_per_replica", "min_replicas", "max_replicas", "slo"],
)
def test_parse_field_refuses_what_the_simulation_sets_itself(name: str) -> None:
    """A field the simulation passes for every run would never take the variant's value: it is
    refused, naming the field, rather than run as a variant that is the shipped policy."""
    with pytest.raises(argparse.ArgumentTypeError, match=name):
        policy_variant.parse_field(f"{name}=none")


def test_what_the_simulation_sets_is_what_it_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The refused names are exactly what a simulated default service is built with (so a
    new one cannot slip past the check)."""
    seen: set[str] = set()
    shipped = policy.default

    def recording(*, max_replicas: int, **overrides: object) -> model.PolicyConfig:
        seen.update({"max_replicas", *overrides})
        return shipped(max_replicas=max_replicas, **overrides)

    monkeypatch.setattr(policy, "default", recording)
    policies.default_config(sweep.BASE)
    assert seen == policies.SET_BY_THE_SIMULATION


def test_more_than_one_job_is_refused() -> None:
    """Worker processes would build the unchanged policy, so `--jobs 2` is refused."""
    with pytest.raises(SystemExit):
        policy_variant.main(["--set", "deadband_ratio=0.05", "--", "--jobs", "2"])
