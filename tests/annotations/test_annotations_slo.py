"""The latency SLO's annotations: `target-p95-latency`, `target-p95-queue-delay`,
`service-time` and `replica-capacity`."""

from __future__ import annotations

from autoscaler.contract.annotations import PREFIX
from autoscaler.core import model
from tests.annotations.test_annotations_parse import messages, ok


def test_no_slo_annotation_means_no_slo_vote() -> None:
    """Without an SLO key the policy has no SLO vote."""
    assert ok().policy.slo is None


def test_an_end_to_end_slo_carries_the_service_time_and_capacity() -> None:
    """`target-p95-latency` with `service-time` and `replica-capacity` is the SLO's config."""
    config = ok(
        {"target-p95-latency": "5s", "service-time": "2s", "replica-capacity": "1.5"}
    ).policy.slo
    assert config == model.SloConfig(
        target_latency_s=5.0, quantile=0.95, service_time_s=2.0, replica_capacity_rps=1.5
    )


def test_a_queueing_delay_slo_needs_no_service_time() -> None:
    """`target-p95-queue-delay` budgets the wait alone; the capacity is left to be measured."""
    config = ok({"target-p95-queue-delay": "500ms"}).policy.slo
    assert config == model.SloConfig(target_latency_s=0.5)


def test_an_end_to_end_slo_without_a_service_time_names_the_missing_key() -> None:
    """`target-p95-latency` alone is refused, naming `service-time`."""
    (message,) = messages({"target-p95-latency": "5s"})
    assert message.startswith(f"{PREFIX}service-time: required with {PREFIX}target-p95-latency")


def test_a_service_time_past_the_slo_is_refused() -> None:
    """A request that cannot meet the SLO even unqueued is a configuration error."""
    (message,) = messages({"target-p95-latency": "2s", "service-time": "3s"})
    assert f"{PREFIX}service-time" in message
    assert "must be below" in message


def test_both_slo_forms_at_once_are_refused() -> None:
    """Only one of the two SLO forms may be set; both keys are named."""
    found = messages(
        {"target-p95-latency": "5s", "service-time": "1s", "target-p95-queue-delay": "1s"}
    )
    assert len(found) == 2
    assert all("only one of" in m for m in found)


def test_an_slo_with_the_seed_policy_is_refused() -> None:
    """The seed policy stays the plain formula: an SLO there is an error, not ignored."""
    (message,) = messages({"target-p95-queue-delay": "1s", "policy": "seed"})
    assert "only with" in message
    assert "policy default" in message


def test_a_capacity_without_an_slo_has_no_effect_and_says_so() -> None:
    """`replica-capacity` alone is refused as having no effect."""
    (message,) = messages({"replica-capacity": "2"})
    assert message.startswith(f"{PREFIX}replica-capacity")
    assert "has no effect" in message
