"""What the loop talks to, as Protocols. Adapters (real systems) and `sim` (the virtual cluster)
implement them; the loop never names a concrete one.

Ports carry the project's own values, never library types. Reads from caches are plain methods;
anything that waits on the network is a coroutine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from autoscaler.core import model, policy


@dataclass(frozen=True, slots=True)
class Workload:
    """One managed service as the cluster sees it at this tick."""

    id: model.ServiceId
    policy: model.PolicyConfig
    half_life_s: float
    """Smoothing half-life for this service's signals; `inf` for a plain window mean."""
    replicas: int
    """Replicas asked for (the Deployment's spec)."""
    serving: int
    """Pods warm and in the stable traffic set."""
    startup_s: float | None = None
    """Recently observed time from pod creation to serving."""
    state: model.PolicyState | None = None
    """Policy state persisted on the object, for resuming after a restart."""


class Cluster(Protocol):
    def workloads(self) -> Sequence[Workload]:
        """The managed services, from caches: never a list call per tick."""
        ...

    async def scale(self, service: model.ServiceId, replicas: int) -> None:
        """Set the replica count; raises `ActuationError` when it cannot."""
        ...

    async def publish(
        self, service: model.ServiceId, decision: model.Decision, state: model.PolicyState
    ) -> None:
        """Make a decision visible (status, events, persisted state); called only on change."""
        ...


class MetricsSource(Protocol):
    async def sample(self, workloads: Sequence[Workload], now_s: float) -> npt.NDArray[np.float64]:
        """One sample per workload and signal: shape (len(workloads), len(model.Signal)).

        NaN marks a missing or stale value; a source that cannot answer at all raises
        `ObservationError`. Never zero for "no data".
        """
        ...


class Policy(Protocol):
    def decide(
        self,
        workload: Workload,
        observation: model.Observation,
        state: model.PolicyState,
    ) -> tuple[model.Decision, model.PolicyState]: ...


class CorePolicy:
    """The project's policy (`core.policy.decide`) behind the `Policy` port."""

    def decide(
        self,
        workload: Workload,
        observation: model.Observation,
        state: model.PolicyState,
    ) -> tuple[model.Decision, model.PolicyState]:
        return policy.decide(workload.policy, observation, state)
