"""Shared helpers that turn a baseline's replica count into the project's typed `Decision`.

Pure: no I/O, no clock, no logging.
"""

from __future__ import annotations

from collections.abc import Mapping

from autoscaler.core import model
from autoscaler.core.model import Bound, Contribution, Decision, Kind, Reason, Signal


def decision(
    observation: model.Observation,
    desired: int,
    reason: Reason,
    detail: str,
    *,
    contributions: Mapping[Signal, Contribution] | None = None,
    bound: Bound | None = None,
) -> Decision:
    """A decision whose kind follows from `desired` against the current replica count."""
    current = observation.replicas
    if desired > current:
        kind = Kind.SCALE_UP
    elif desired < current:
        kind = Kind.SCALE_DOWN
    else:
        kind = Kind.STEADY
    return Decision(
        current=current,
        desired=desired,
        kind=kind,
        reason=reason,
        detail=detail,
        contributions=contributions or {},
        bound=bound,
    )


def hold(
    observation: model.Observation,
    reason: Reason,
    detail: str,
    *,
    contributions: Mapping[Signal, Contribution] | None = None,
    bound: Bound | None = None,
) -> Decision:
    """A change was wanted but the baseline's own rules keep the current count."""
    return _unchanged(observation, Kind.HOLD, reason, detail, contributions, bound)


def steady(
    observation: model.Observation,
    reason: Reason,
    detail: str,
    *,
    contributions: Mapping[Signal, Contribution] | None = None,
    bound: Bound | None = None,
) -> Decision:
    """Nothing to do: the count stays as it is."""
    return _unchanged(observation, Kind.STEADY, reason, detail, contributions, bound)


def _unchanged(
    observation: model.Observation,
    kind: Kind,
    reason: Reason,
    detail: str,
    contributions: Mapping[Signal, Contribution] | None,
    bound: Bound | None,
) -> Decision:
    return Decision(
        current=observation.replicas,
        desired=observation.replicas,
        kind=kind,
        reason=reason,
        detail=detail,
        contributions=contributions or {},
        bound=bound,
    )


def load_vote(ratio: float, desired: int | None, estimator: str) -> dict[Signal, Contribution]:
    """The one signal every baseline scales on: the load (requests per second)."""
    return {Signal.LOAD: Contribution(ratio, desired, estimator)}
