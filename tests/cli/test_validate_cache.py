"""`autoscaler validate` on a Deployment that names its model for cache-aware placement."""

from __future__ import annotations

from autoscaler import validate
from autoscaler.contract import modelid
from autoscaler.core import cache

P = "autoscaler.dsec.io/"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
LABEL = cache.Model(MODEL).label

NAMED = f"""\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: chat
  namespace: ml
  annotations:
    {P}enabled: "true"
    {P}max-replicas: "8"
    {P}target-qps-per-replica: "4"
    {P}model: "{MODEL}"
spec:
  selector:
    matchLabels: {{app: chat}}
  template:
    metadata:
      labels: {{app: chat}}
    spec:
      containers:
        - name: vllm
          image: vllm/vllm-openai:v0.10.1
"""

PREFERRING = (
    NAMED
    + f"""\
      affinity:
        nodeAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
            - weight: 50
              preference:
                matchExpressions:
                  - key: {LABEL}
                    operator: Exists
"""
)


def test_a_named_model_without_the_affinity_term_gets_a_warning_with_the_term() -> None:
    """The warning names the model key and gives the term to add."""
    (finding,) = validate.lint_text(NAMED, source="chat.yaml")
    assert finding.severity is validate.Severity.WARNING
    assert f"{P}model is set" in finding.text
    assert LABEL in finding.text
    assert '"operator": "Exists"' in finding.text


def test_the_term_once_added_silences_it() -> None:
    """A template that prefers the model's warm nodes has nothing to fix."""
    assert validate.lint_text(PREFERRING, source="chat.yaml") == []
    assert modelid.prefers(modelid.with_preference({"spec": {}}, modelid.preference(LABEL)), LABEL)


def test_without_a_named_model_nothing_is_said() -> None:
    """A service that does not name its model is not asked for the term."""
    text = NAMED.replace(f'    {P}model: "{MODEL}"\n', "")
    assert validate.lint_text(text, source="chat.yaml") == []
