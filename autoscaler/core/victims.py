"""Which pod a scale-down removes first: one order for the ramp's drain, the placement plan's
retirement of tiers and the simulator's ReplicaSet.

The least invested pod goes first, judged by, in turn:

1. how far along it is (`Stage`): a pending pod before one starting, before one warming up (or
   still being ramped), before one serving, before one waiting warm in the standby pool (the
   pool is kept whole when serving replicas go; a pool that shrinks names its surplus pods as
   warming);
2. its placement tier (`retire_rank`): `shared` first, then the MIG tiers, then `whole`, so the
   replicas that stay are on the best GPUs;
3. its `controller.kubernetes.io/pod-deletion-cost`, lowest first (as a ReplicaSet orders);
4. its load: the fewest requests in flight first, an unknown load counting as the most;
5. its MIG slice, the smallest first;
6. its age: the newest first;
7. its name, so that the order is total.

Each caller describes its own items as `Candidate`s and leaves at their default the criteria it
does not know (the ramp knows loads but not ages, the simulator ages but not loads, the placement
plan whole tiers rather than pods); a criterion at its default decides nothing.

Pure: no I/O, no clock, no logging.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from autoscaler.core import tiers

T = TypeVar("T")


class Stage(enum.IntEnum):
    """How far along a pod is; the value is its rank in the order."""

    PENDING = 0
    """Created, waiting for a GPU: costs nothing, serves nothing."""
    STARTING = 1
    """Holds a GPU and loads the model."""
    WARMING = 2
    """Running, warming up or being ramped: not (yet) in the serving set."""
    SERVING = 3
    STANDBY = 4
    """Warm and waiting in the standby pool: the spare capacity a scale-down of the serving
    replicas keeps."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """What the order reads about one item; the defaults decide nothing."""

    name: str
    stage: Stage = Stage.SERVING
    tier: str = "whole"
    deletion_cost: int = 0
    in_flight: float = math.nan
    """Queued plus running requests; NaN when unknown (never read as 0)."""
    slice_size: int = 0
    """The compute slices of its MIG profile (3 for `mig-3g.40gb`); 0 off MIG."""
    created_s: float = 0.0
    serial: int = 0
    """Creation order, to tell apart pods created at the same time."""


def retire_rank(tier: str) -> int:
    """The tier's place in the scale-down order, the reverse of `tiers.preference`: `shared` 0,
    any MIG tier 1, `whole` 2; a name that is no tier counts as `whole`."""
    return 2 - tiers.preference(tier) if tiers.is_tier(tier) else 2


def order(items: Iterable[T], describe: Callable[[T], Candidate]) -> list[T]:
    """`items` in the order a scale-down removes them, each read through `describe`."""

    def key(item: T) -> tuple[int, int, int, float, int, float, int, str]:
        c = describe(item)
        load = math.inf if math.isnan(c.in_flight) else c.in_flight
        return (
            c.stage,
            retire_rank(c.tier),
            c.deletion_cost,
            load,
            c.slice_size,
            -c.created_s,
            -c.serial,
            c.name,
        )

    return sorted(items, key=key)
