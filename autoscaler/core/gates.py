"""Which warm-up gates fail open: pods that the `autoscaler.dsec.io/warm` readiness gate keeps
out of their Service while no ramp will ever open it.

A pod that carries the gate is Ready only once its `warm` condition is True. For an active,
managed, gated service the ramp sets it (`core.ramp`); for every other Deployment nothing
would, and its rollouts would stall: the controller opens the gate itself as soon as the pod's
containers are ready. That is every Deployment in dry-run (the controller's or the service's
`mode: dry-run`), opted out or never opted in (`enabled` not "true", or the annotations
removed), with annotations the contract refuses, or whose pod template no longer carries the
gate (pods of an older template). Failing open is the safe side for the invalid case too: the
controller cannot tell what a broken configuration meant, and a pod held out of its Service
forever is an outage, while a pod let in unwarmed is only slower for its first requests.

`openings(gates)` groups the gates to open by Deployment, each with the message of its Event.

Pure: no I/O, no clock, no logging. Which pods qualify (gate closed, containers ready) is read
by the adapter; the rule of who answers for them is here.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["REASON", "ClosedGate", "Custody", "Opening", "openings"]

REASON = "GateOpened"
"""The reason of the Normal Event posted on the Deployment whose pods' gates were opened."""


class Custody(enum.Enum):
    """Who answers for a gated pod's `warm` condition."""

    RAMP = "ramp"
    """An active, managed service whose template is gated: the ramp decides, never this."""
    DRY_RUN = "dry-run"
    """The controller runs in dry-run: no ramp writes anything."""
    SERVICE_DRY_RUN = "service-dry-run"
    """The service's `mode: dry-run`: its ramp only logs."""
    NOT_MANAGED = "not-managed"
    """No `enabled: "true"`: opted out, or its annotations removed."""
    INVALID = "invalid"
    """Opted in with annotations the contract refuses: the service is skipped."""
    NOT_GATED = "not-gated"
    """Managed, but its pod template no longer carries the gate: a pod of an older template."""

    @property
    def why(self) -> str:
        return _WHY[self]


_WHY = {
    Custody.RAMP: "the ramp decides",
    Custody.DRY_RUN: "the autoscaler runs in dry-run",
    Custody.SERVICE_DRY_RUN: "the service is in dry-run (autoscaler.dsec.io/mode)",
    Custody.NOT_MANAGED: "the Deployment is not managed by the autoscaler",
    Custody.INVALID: "the Deployment's autoscaler annotations are invalid, so it is not managed",
    Custody.NOT_GATED: "the Deployment's pod template no longer carries the gate",
}


@dataclass(frozen=True, slots=True)
class ClosedGate:
    """A pod whose containers are ready and whose `warm` condition is not True."""

    namespace: str
    deployment: str
    """The Deployment the pod's service is (a placement tier's pods count as its owner's)."""
    pod: str
    custody: Custody


@dataclass(frozen=True, slots=True)
class Opening:
    """The gates to open on one Deployment's pods, and the message of its one Event."""

    namespace: str
    deployment: str
    pods: tuple[str, ...]
    custody: Custody

    @property
    def message(self) -> str:
        return (
            f"Opened the warm-up gate of {len(self.pods)} pod(s) once their containers were "
            f"ready ({', '.join(self.pods)}): {self.custody.why}"
        )

    def condition_message(self) -> str:
        """The message of the `warm` condition set on each pod."""
        return f"opened without a warm-up: {self.custody.why}"


def openings(gates: Iterable[ClosedGate]) -> list[Opening]:
    """The gates no ramp answers for, one `Opening` per Deployment (pods by name); those of a
    ramping service are left to the ramp."""
    grouped: dict[tuple[str, str, Custody], list[str]] = {}
    for gate in gates:
        if gate.custody is Custody.RAMP:
            continue
        grouped.setdefault((gate.namespace, gate.deployment, gate.custody), []).append(gate.pod)
    return [
        Opening(namespace, deployment, tuple(sorted(pods)), custody)
        for (namespace, deployment, custody), pods in sorted(
            grouped.items(), key=lambda item: item[0][:2]
        )
    ]
