"""The policies the simulator runs, by name: the registry behind `simulate --policy NAME`.

An entry builds two things from `SimParams`: the service's `PolicyConfig` (bounds, targets,
the policy's own knobs), which the cluster reports in every `ports.Workload`, and the
`ports.Policy` that decides with it. The decider also gets the (rate-scaled) trace, so a
perfect-foresight oracle fits the same shape. Add a policy with `register`; nothing else in
the simulator changes.

It must not run anything: it only builds values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

from autoscaler import ports
from autoscaler.core import model, policy
from autoscaler.sim.params import SimParams

FloatArray = npt.NDArray[np.float64]
ConfigFactory = Callable[[SimParams], model.PolicyConfig]
DeciderFactory = Callable[[SimParams, FloatArray], ports.Policy]


def core_decider(params: SimParams, arrivals: FloatArray) -> ports.Policy:
    """The project's own decision function (`core.policy.decide`)."""
    return ports.CorePolicy()


@dataclass(frozen=True, slots=True)
class PolicyEntry:
    config: ConfigFactory
    decider: DeciderFactory = core_decider
    about: str = ""


def _targets(params: SimParams) -> dict[str, object]:
    return {
        "min_replicas": params.min_replicas,
        "target_load_per_replica": params.target_load_per_replica,
        "target_queue_per_replica": params.target_queue_per_replica,
    }


def seed_config(params: SimParams) -> model.PolicyConfig:
    return policy.seed(max_replicas=params.max_replicas, **_targets(params))


def default_config(params: SimParams) -> model.PolicyConfig:
    return policy.default(max_replicas=params.max_replicas, **_targets(params))


_REGISTRY: dict[str, PolicyEntry] = {
    "seed": PolicyEntry(seed_config, about="DESIGN §3.3 as written: smoothed mean, deadband"),
    "default": PolicyEntry(default_config, about="seed plus the burst path and look-ahead"),
}


REGISTRY: Mapping[str, PolicyEntry] = MappingProxyType(_REGISTRY)
"""The registered policies by name, read-only (`register` adds to it)."""


def names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def lookup(name: str) -> PolicyEntry:
    """The entry for `name`; `ValueError` naming the valid ones when there is none."""
    try:
        return _REGISTRY[name]
    except KeyError:
        valid = ", ".join(sorted(_REGISTRY))
        raise ValueError(f"unknown policy {name!r}; valid policies: {valid}") from None


def register(name: str, entry: PolicyEntry, *, replace: bool = False) -> None:
    if name in _REGISTRY and not replace:
        raise ValueError(f"policy {name!r} is already registered")
    _REGISTRY[name] = entry
