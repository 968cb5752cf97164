"""`explain` on a decision the KV-cache vote drove."""

from __future__ import annotations

import dataclasses
import json

from autoscaler.contract import codec
from autoscaler.contract.annotations import PREFIX, STATUS_KEY
from autoscaler.core import policy
from autoscaler.core.model import Signal
from tests.cli.test_controller_commands import MANAGED, explained
from tests.core import builders


def test_explain_shows_the_token_votes_beside_the_load() -> None:
    """The explanation lists the KV-cache and TTFT votes with their ratios and what they ask."""
    config = policy.default(
        max_replicas=10,
        target_load_per_replica=10.0,
        target_kv_cache_ratio=0.6,
        target_ttft_p95_s=1.0,
    )
    base = builders.observation()
    signals = {
        **base.signals,
        Signal.KV_CACHE: builders.estimate(0.9),
        Signal.TTFT: builders.estimate(0.5),
    }
    observation = dataclasses.replace(base, signals=signals)
    decision, _ = policy.decide(config, observation, builders.state())
    status = codec.status_document(decision, time_s=1_700_000_000.0)
    notes = {
        **MANAGED,
        PREFIX + "target-kv-cache-utilization": "60%",
        PREFIX + "target-ttft-p95": "1s",
        STATUS_KEY: json.dumps(status),
    }

    code, out, _ = explained(notes)

    assert code == 0
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("    ")}
    assert rows["kv_cache"][1:] == ["1.50", "3.60", "6", "mean"]
    assert rows["ttft"][1:] == ["0.50", "0.50", "0", "p95"]
    assert decision.desired == 6
