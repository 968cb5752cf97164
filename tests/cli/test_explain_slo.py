"""`explain` on a decision the latency SLO drove."""

from __future__ import annotations

import json

from autoscaler.contract import codec
from autoscaler.contract.annotations import PREFIX, STATUS_KEY
from autoscaler.core import model, policy
from tests.cli.test_controller_commands import MANAGED, explained
from tests.core import builders


def test_explain_shows_the_slo_s_vote_its_reason_and_its_model() -> None:
    """The explanation names the `slo` reason, the `slo` estimator and the model's numbers."""
    slo = model.SloConfig(
        target_latency_s=5.0, quantile=0.95, service_time_s=2.0, replica_capacity_rps=1.0
    )
    config = policy.default(max_replicas=10, min_replicas=1, target_load_per_replica=0.75, slo=slo)
    observation = builders.observation(load=1.5, queue=None, replicas=2, serving=2)
    decision, _ = policy.decide(config, observation, builders.state())
    status = codec.status_document(decision, time_s=1_700_000_000.0)
    notes = {
        **MANAGED,
        PREFIX + "target-p95-latency": "5s",
        PREFIX + "service-time": "2s",
        PREFIX + "replica-capacity": "1",
        STATUS_KEY: json.dumps(status),
    }

    code, out, _ = explained(notes)

    assert code == 0
    assert "  reason         slo" in out.splitlines()
    assert "slo: p95 latency 5 s at 1.5 rps needs" in out
    load_line = next(line for line in out.splitlines() if line.strip().startswith("load"))
    assert load_line.split()[-1] == "slo"
