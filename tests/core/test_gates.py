"""`core.gates`: which warm-up gates fail open, grouped per Deployment."""

from __future__ import annotations

from autoscaler.core import gates


def gate(
    deployment: str, pod: str, custody: gates.Custody, namespace: str = "ml"
) -> gates.ClosedGate:
    return gates.ClosedGate(namespace, deployment, pod, custody)


def test_gates_no_ramp_answers_for_open_in_one_batch_per_deployment() -> None:
    """The pods of each Deployment no ramp drives form one opening, by name; a ramp's are left."""
    found = gates.openings(
        [
            gate("chat", "chat-b", gates.Custody.NOT_MANAGED),
            gate("ramped", "ramped-a", gates.Custody.RAMP),
            gate("chat", "chat-a", gates.Custody.NOT_MANAGED),
            gate("embed", "embed-a", gates.Custody.SERVICE_DRY_RUN, namespace="ai"),
        ]
    )

    assert [(o.namespace, o.deployment, o.pods, o.custody) for o in found] == [
        ("ai", "embed", ("embed-a",), gates.Custody.SERVICE_DRY_RUN),
        ("ml", "chat", ("chat-a", "chat-b"), gates.Custody.NOT_MANAGED),
    ]
    assert "2 pod(s)" in found[1].message
    assert "chat-a, chat-b" in found[1].message
    assert "not managed" in found[1].message


def test_nothing_opens_when_only_ramps_wait() -> None:
    """Gates a ramp answers for, or none at all, give no opening."""
    assert gates.openings([gate("chat", "chat-a", gates.Custody.RAMP)]) == []
    assert gates.openings([]) == []


def test_every_custody_says_why() -> None:
    """Each custody has its own reason in the Event's and the condition's messages."""
    whys = {custody.why for custody in gates.Custody}
    assert len(whys) == len(gates.Custody)
    opening = gates.Opening("ml", "chat", ("chat-a",), gates.Custody.DRY_RUN)
    assert "dry-run" in opening.condition_message()
