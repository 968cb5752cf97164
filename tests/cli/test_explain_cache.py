"""`explain` on a service whose start-up the controller splits by cache hit and miss."""

from __future__ import annotations

import io
import json
from typing import Any

from autoscaler import explain
from autoscaler.contract import codec
from autoscaler.contract.annotations import STATUS_KEY
from autoscaler.core import cache, policy
from tests.cli.test_controller_commands import MANAGED, explained
from tests.core import builders


def _status() -> dict[str, Any]:
    config = policy.default(max_replicas=10, min_replicas=1, target_load_per_replica=10.0)
    observation = builders.observation(load=15.0, queue=None, replicas=2, serving=2)
    decision, _ = policy.decide(config, observation, builders.state())
    status = codec.status_document(decision, time_s=1_700_000_000.0)
    split = cache.StartupSplit(hit_s=8.04, miss_s=131.0, hits=3, misses=2)
    status["startup"] = codec.startup_document(split)
    return status


def test_explain_shows_the_start_up_by_cache_hit_and_miss() -> None:
    """The explanation gives the median start-up of cache hits and misses and their counts."""
    code, out, _ = explained({**MANAGED, STATUS_KEY: json.dumps(_status())})

    assert code == 0
    line = next(line for line in out.splitlines() if line.strip().startswith("start-up"))
    assert "cache hit 8.0 s (3 pods), miss 131.0 s (2 pods)" in line


def test_explain_names_the_label_of_the_warm_nodes_of_a_named_model() -> None:
    """A service with the `model` annotation is told which node label marks its warm nodes."""
    notes = {**MANAGED, "autoscaler.dsec.io/model": "org/chat-model"}
    code, out, _ = explained(notes)
    assert code == 0
    label = cache.Model("org/chat-model").label
    assert f"  model          org/chat-model: warm nodes carry {label}" in out.splitlines()


def test_explain_json_carries_the_start_up_split() -> None:
    """The JSON output has the split under the decision's `startup` key."""
    deployment = {
        "metadata": {
            "name": "chat",
            "namespace": "ml",
            "annotations": {**MANAGED, STATUS_KEY: json.dumps(_status())},
        },
        "spec": {"replicas": 2},
    }
    out = io.StringIO()
    assert explain.main("ml", "chat", deployment, out, io.StringIO(), json_output=True) == 0
    document = json.loads(out.getvalue())
    found = next(v for v in document.values() if isinstance(v, dict) and "startup" in v)
    assert found["startup"] == {"hitSeconds": 8.0, "missSeconds": 131.0, "hits": 3, "misses": 2}
