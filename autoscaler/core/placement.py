"""The placement ladder (docs/architecture.md, "The placement ladder"): which GPU tier each replica
of a service runs on.

A service's replicas run on one of three kinds of GPU resource, best first:

- `whole`: whole cards (`nvidia.com/gpu`); the service owner's own Deployment;
- `mig-<profile>`: a MIG slice (`nvidia.com/mig-<g>g.<mem>gb`, mixed strategy), one sibling
  Deployment per profile;
- `shared`: a time-sliced card (`nvidia.com/gpu.shared`, renamed by default), one sibling.

`plan` turns the total replica count the policy asked for into a count per tier, from what the
cluster has free (a `Snapshot`), what each tier runs now and the namespace's GPU quota:

- **Scale-up** keeps the pods there are and places the new ones: on whole cards while any are
  free; on MIG only when the model's memory need (with headroom) is below a quarter of a card,
  on the smallest profile that fits; on a time-sliced card last, only when the card's free
  memory fits the model. What fits nowhere is left pending on `whole` (where the cluster
  autoscaler can add a node) and counted in `Plan.unplaced`. The `placement` annotation
  (`Need.mode`) restricts the ladder to one tier.
- **Scale-down** empties `shared`, then the MIG tiers (smallest slice first), then `whole`.
  A serving replica is removed only while the serving count stays at the total asked for, so
  the pods retired are the ones that cost no capacity (not yet serving, or stuck pending).
- **Move-up**: when the total is steady, whole cards are free and lower tiers hold replicas,
  the plan starts whole replicas on top of the total (a surge), and retires the lower-tier ones
  only once the new whole replicas are serving. The surge is the plan's total above `desired`;
  the caller keeps asking for the same `desired` (the policy's total, not the sum over tiers)
  and the next plans retire the lower tiers as `TierCount.serving` rises.
- **Warm nodes first**: within a tier, new replicas take the room of the nodes that hold the
  model's weights (`warm`, from `core.cache`) before any other; `Plan.warm` counts the new
  replicas that have such room, for the scheduler to honour through the pods' preferred node
  affinity (docs/architecture.md, "Cache-aware placement").
- **Quota**: never ask for replicas the namespace's ResourceQuota would refuse; `admissible`
  says how many the quota admits in all, for the policy to cap its scale-up (docs/architecture.md,
  "The placement ladder").

Upkeep, the decisions besides a scale, each returned as data for the caller to carry out:
`unsatisfiable` (no GPU in the cluster could ever run the model: hold it at its size),
`replan` (the tiers are not settled: distribute the policy's total again) and `tend_siblings`
(rewrite a tier Deployment built from an older template, delete one idle for long enough).

`core_weight` and `tier_fraction` weigh GPU time for accounting (docs/architecture.md,
"Accounting").

Pure and deterministic: no I/O, no clock, no Kubernetes types. The Kubernetes adapter builds the
`Snapshot` from its caches; the simulator builds it from its virtual nodes.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from autoscaler.core import victims
from autoscaler.core.tiers import MIG_PREFIX as MIG_PREFIX
from autoscaler.core.tiers import SHARED as SHARED
from autoscaler.core.tiers import WHOLE as WHOLE
from autoscaler.core.tiers import is_tier as is_tier
from autoscaler.core.tiers import mig_profile as mig_profile
from autoscaler.core.tiers import mig_tier as mig_tier
from autoscaler.core.tiers import parse_mig_profile as parse_mig_profile
from autoscaler.core.tiers import preference as preference


class Mode(enum.Enum):
    """Which tiers a service may use (the `placement` annotation): the ladder, or one tier."""

    AUTO = "auto"
    WHOLE = WHOLE
    MIG = "mig"
    SHARED = SHARED


MIG_MAX_CARD_RATIO = 0.25
"""A model goes on a MIG slice only when its need with headroom is below this share of a card."""

GPU = "nvidia.com/gpu"
GPU_SHARED = "nvidia.com/gpu.shared"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
QUOTA_PREFIX = "requests."
"""ResourceQuota keys for extended resources: `requests.nvidia.com/gpu` and so on."""

_MIB_PER_GB = 1e9 / 2**20
"""MIG profile names count decimal gigabytes; GFD's `.memory` label, when present, is exact."""
_MIG_SLICES_PER_CARD = 7
_MIG_SLICES_BY_PRODUCT = {"A30": 4}
"""Compute slices per card where it is not 7 (the A100/H100/H200/B200 layout)."""


def mig_profile_memory_mib(profile: str) -> int:
    """Slice memory from the profile name alone, rounded down (names count decimal GB, so
    `1g.10gb` -> 9536 MiB; the real slice holds a little more, never less)."""
    return math.floor(parse_mig_profile(profile)[1] * _MIB_PER_GB)


def resource_of(tier: str) -> str:
    """The extended resource a tier's pods request: `nvidia.com/gpu`, `nvidia.com/mig-<p>` or
    `nvidia.com/gpu.shared`."""
    preference(tier)
    if tier == WHOLE:
        return GPU
    if tier == SHARED:
        return GPU_SHARED
    return MIG_RESOURCE_PREFIX + tier[len(MIG_PREFIX) :]


@dataclass(frozen=True, slots=True)
class NodeCapacity:
    """What one node has free for new GPU pods, per tier (docs/architecture.md,
    "The placement ladder")."""

    name: str
    product: str
    """GFD `nvidia.com/gpu.product` ("" when unknown)."""
    card_memory_mib: int
    """GFD `nvidia.com/gpu.memory` (0 when unknown: no MIG or shared placement then)."""
    whole_free: int
    """Free whole cards (allocatable minus requested `nvidia.com/gpu`); 0 when that resource is
    time-shared (`nvidia.com/gpu.replicas` > 1 or a `-SHARED` product)."""
    mig_free: Mapping[str, int] = field(default_factory=dict)
    """MIG profile (`3g.40gb`) -> free slices (`nvidia.com/mig-<profile>`)."""
    mig_memory_mib: Mapping[str, int] = field(default_factory=dict)
    """Profile -> slice memory (GFD `nvidia.com/mig-<profile>.memory`, else parsed from the
    profile name with `mig_profile_memory_mib`)."""
    shared_free: int = 0
    """Free `nvidia.com/gpu.shared`."""
    shared_replicas: int = 1
    """Time-slicing replicas per card: a share is 1/shared_replicas of a card."""
    shared_free_memory_mib: int | None = None
    """Free memory of the node's most free time-sliced card (DCGM `FB_FREE`) when known; None
    falls back to a fair share, `card_memory_mib / shared_replicas`, for each share."""
    usable: bool = True
    """False when the node is cordoned or its GPUs report faults: nothing is placed on it."""

    def __post_init__(self) -> None:
        counts = [self.whole_free, self.shared_free, self.card_memory_mib, *self.mig_free.values()]
        if any(c < 0 for c in counts):
            raise ValueError(f"node {self.name}: free counts and memory must be >= 0")
        if self.shared_replicas < 1:
            raise ValueError(f"node {self.name}: shared_replicas must be >= 1")
        for profile in self.mig_free:
            parse_mig_profile(profile)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Free GPU capacity of the cluster's nodes at one tick."""

    nodes: tuple[NodeCapacity, ...] = ()


@dataclass(frozen=True, slots=True)
class Need:
    """What one replica of the service needs (the `placement` and `model-memory` annotations)."""

    memory_mib: int | None
    """GPU memory the model needs; None when unknown (whole cards only then)."""
    mode: Mode = Mode.AUTO
    """`AUTO` (the ladder), or `WHOLE`, `MIG`, `SHARED` to keep to that tier."""
    headroom_ratio: float = 0.1
    """Memory added on top of `memory_mib` before it is compared with a slice or a share."""
    cards: int = 1
    """Whole cards one replica requests; a model on more than one card never leaves `whole`."""

    def __post_init__(self) -> None:
        if self.memory_mib is not None and self.memory_mib <= 0:
            raise ValueError("memory_mib must be > 0 (None when unknown)")
        if not (math.isfinite(self.headroom_ratio) and self.headroom_ratio >= 0):
            raise ValueError("headroom_ratio must be >= 0")
        if self.cards < 1:
            raise ValueError("cards must be >= 1")

    @property
    def padded_mib(self) -> float | None:
        """The memory need with headroom; None when unknown."""
        if self.memory_mib is None:
            return None
        return self.memory_mib * (1.0 + self.headroom_ratio)


@dataclass(frozen=True, slots=True)
class TierCount:
    """One tier of a service now."""

    replicas: int
    """Replicas asked for (the tier Deployment's spec)."""
    serving: int
    """Of those, pods warm and in the stable traffic set."""
    pending: int = 0
    """Of those, pods not bound to a node yet: they take the tier's free capacity first, and
    the ones beyond it are stuck (moved down the ladder when a lower tier has room, or removed
    first on a scale-down)."""

    def __post_init__(self) -> None:
        if not (0 <= self.serving <= self.replicas and 0 <= self.pending <= self.replicas):
            raise ValueError("need 0 <= serving, pending <= replicas")


@dataclass(frozen=True, slots=True)
class Quota:
    """The namespace's ResourceQuota for GPU resources (several quotas: the tightest of each).

    Keys are quota resource names: `requests.nvidia.com/gpu`, `requests.nvidia.com/mig-3g.40gb`,
    `requests.nvidia.com/gpu.shared`. A resource without a `hard` entry is not capped; one with
    a `hard` entry but no `used` entry is treated as full (the quota controller has not counted
    it yet: unknown is never read as zero).
    """

    hard: Mapping[str, int] = field(default_factory=dict)
    used: Mapping[str, int] = field(default_factory=dict)

    def room(self, resource: str) -> float:
        """How much more of `resource` the quota admits (inf when uncapped)."""
        key = QUOTA_PREFIX + resource
        hard = self.hard.get(key)
        if hard is None:
            return math.inf
        used = self.used.get(key)
        if used is None:
            return 0
        return max(0, hard - used)


@dataclass(frozen=True, slots=True)
class Plan:
    """Replicas per tier for one service, and why."""

    replicas: Mapping[str, int]
    """Target replicas per tier; tiers that exist now and should be emptied are listed with 0."""
    unplaced: int
    """Wanted replicas that fit nowhere: left pending (on `whole`, or on the tier `mode` keeps
    to) or, when no tier can take them at all, not asked for."""
    admissible: int | None
    """The quota's cap on the total (`admissible()`); None when no quota applies."""
    reason: str
    """A sentence: why this distribution (fallbacks, quota, nothing fits, a move-up)."""
    warm: int = 0
    """Of the new replicas, how many have room on a node warm for the model."""

    @property
    def total(self) -> int:
        return sum(self.replicas.values())


# -- Capacity ---------------------------------------------------------------------------------


def _fits_mig(need: Need, node: NodeCapacity, profile: str) -> bool:
    padded = need.padded_mib
    if padded is None or node.card_memory_mib <= 0 or need.cards != 1:
        return False
    if not padded < MIG_MAX_CARD_RATIO * node.card_memory_mib:
        return False
    return padded <= _slice_memory_mib(node, profile)


def _slice_memory_mib(node: NodeCapacity, profile: str) -> int:
    memory = node.mig_memory_mib.get(profile)
    return memory if memory is not None and memory > 0 else mig_profile_memory_mib(profile)


def _shared_slots(need: Need, node: NodeCapacity) -> int:
    """Shares of this node the model fits on (each holds a copy of the model)."""
    padded = need.padded_mib
    if padded is None or need.cards != 1 or node.shared_free <= 0:
        return 0
    if node.shared_free_memory_mib is not None:
        return min(node.shared_free, math.floor(node.shared_free_memory_mib / padded))
    if node.card_memory_mib <= 0:
        return 0
    return node.shared_free if padded <= node.card_memory_mib / node.shared_replicas else 0


def free_by_tier(need: Need, snapshot: Snapshot) -> dict[str, int]:
    """Replicas of this model each tier's free capacity could take, ignoring mode and quota.

    MIG tiers appear only for profiles the model fits on (a slice never too small); a tier
    with no room for the model is absent or 0.
    """
    free: dict[str, int] = {WHOLE: 0}
    for node in snapshot.nodes:
        if not node.usable:
            continue
        free[WHOLE] += node.whole_free // need.cards
        for profile, count in node.mig_free.items():
            if count > 0 and _fits_mig(need, node, profile):
                tier = MIG_PREFIX + profile
                free[tier] = free.get(tier, 0) + count
        shares = _shared_slots(need, node)
        if shares > 0:
            free[SHARED] = free.get(SHARED, 0) + shares
    return free


def _mig_order(need: Need, snapshot: Snapshot) -> list[str]:
    """MIG tiers some usable node offers (free or not) and the model fits on, smallest slice
    first (ties by name)."""
    sizes: dict[str, int] = {}
    for node in snapshot.nodes:
        if not node.usable:
            continue
        for profile in node.mig_free:
            if _fits_mig(need, node, profile):
                size = _slice_memory_mib(node, profile)
                sizes[profile] = min(size, sizes.get(profile, size))
    return [MIG_PREFIX + p for p in sorted(sizes, key=lambda p: (sizes[p], p))]


def _allowed(need: Need, tier: str) -> bool:
    if need.cards > 1:  # a slice or a share is part of one card
        return tier == WHOLE
    if need.mode is Mode.AUTO:
        return True
    if need.mode is Mode.MIG:
        return tier.startswith(MIG_PREFIX)
    return tier == str(need.mode.value)


def ladder(need: Need, snapshot: Snapshot) -> tuple[str, ...]:
    """The tiers this service may use, best first: its mode's, and of MIG only the profiles
    some usable node offers and the model fits on. Replicas on a tier outside it are the first
    to go on a scale-down, and move to one inside it when there is room."""
    return tuple(_ladder(need, snapshot))


def _ladder(need: Need, snapshot: Snapshot) -> list[str]:
    tiers = [WHOLE, *_mig_order(need, snapshot), SHARED]
    return [t for t in tiers if _allowed(need, t)]


def waiting_tier(need: Need, snapshot: Snapshot) -> str | None:
    """Where replicas that fit nowhere wait: `whole`, or the tier `mode` keeps to (under `mig`,
    the smallest profile the model fits on that some node offers); None when there is none."""
    return _fallback(need, _ladder(need, snapshot), snapshot)


def _fallback(need: Need, ladder: list[str], snapshot: Snapshot) -> str | None:
    if WHOLE in ladder:
        return WHOLE
    if SHARED in ladder:
        return SHARED if need.padded_mib is not None else None
    fitting = _mig_order(need, snapshot)  # a MIG tier some node offers and the model fits on
    return fitting[0] if fitting else None


# -- Planning ---------------------------------------------------------------------------------


@dataclass(slots=True)
class _Work:
    """A plan under construction."""

    target: dict[str, int]
    room: dict[str, int]
    """Free capacity left per tier, in replicas of this model."""
    quota_room: dict[str, float]
    """Quota left per tier, in replicas."""
    notes: list[str] = field(default_factory=list)
    unfit: int = 0
    """Wanted replicas no tier can take, not even as pending (not asked for)."""
    warm_room: dict[str, int] = field(default_factory=dict)
    """Free capacity per tier on the nodes warm for the model, taken first."""
    warm: int = 0
    """New replicas placed in `warm_room`."""

    def take(self, tier: str, wanted: int, *, pend: bool = False) -> int:
        """Put up to `wanted` more replicas on `tier`: within free capacity (or beyond it, as
        pending, when `pend`), and always within quota."""
        room = wanted if pend else min(wanted, self.room.get(tier, 0))
        quota = self.quota_room.get(tier, math.inf)
        taken = max(0, int(min(room, quota)))
        if taken:
            self.target[tier] = self.target.get(tier, 0) + taken
            self.room[tier] = max(0, self.room.get(tier, 0) - taken)
            on_warm = min(taken, self.warm_room.get(tier, 0))
            self.warm += on_warm
            self.warm_room[tier] = self.warm_room.get(tier, 0) - on_warm
            if quota != math.inf:
                self.quota_room[tier] = quota - taken
        return taken


def plan(
    need: Need,
    snapshot: Snapshot,
    current: Mapping[str, TierCount],
    desired: int,
    quota: Quota | None = None,
    *,
    warm: Collection[str] = (),
) -> Plan:
    """Replicas per tier that bring the service to `desired` (see the module docstring).

    `current` maps tier -> what it runs now (absent tiers run nothing). `desired` is the total
    the policy asked for; a move-up's surge is the plan's total above it, and the caller keeps
    passing the policy's total (not the sum over tiers) while the surge settles. `warm` names
    the nodes that hold the model's weights: their room is taken first within each tier.
    """
    if desired < 0:
        raise ValueError("desired must be >= 0")
    for tier in current:
        preference(tier)
    ladder = _ladder(need, snapshot)
    free = free_by_tier(need, snapshot)
    pending = {t: c.pending for t, c in current.items()}
    room = {t: max(0, free.get(t, 0) - pending.get(t, 0)) for t in ladder}
    stuck = {t: max(0, c.pending - free.get(t, 0)) for t, c in current.items()}
    quota_room = {t: _quota_replicas(need, quota, t) for t in ladder}
    work = _Work({t: c.replicas for t, c in current.items()}, room, quota_room)
    if warm:
        hot = frozenset(warm)
        warm_free = free_by_tier(need, Snapshot(tuple(n for n in snapshot.nodes if n.name in hot)))
        work.warm_room = {t: min(room[t], warm_free.get(t, 0)) for t in ladder}
    total = sum(c.replicas for c in current.values())
    fallback = _fallback(need, ladder, snapshot)

    if desired > total:
        _move_stuck_down(work, ladder, stuck)
        _scale_up(work, need, ladder, fallback, desired - total)
    elif desired < total:
        _scale_down(work, ladder, current, stuck, desired)
    else:
        _move_stuck_down(work, ladder, stuck)
        _move_up(work, ladder, current)

    for tier in current:
        work.target.setdefault(tier, 0)
    unplaced = _count_unplaced(work.target, current, free) + work.unfit
    cap = admissible(need, snapshot, current, quota)
    notes = work.notes or [_steady_note(work.target)]
    if work.warm:
        notes.append(f"{work.warm} new on nodes warm for the model")
    target = dict(sorted(work.target.items(), key=_tier_key))
    return Plan(target, unplaced, cap, "; ".join(notes), warm=work.warm)


def _quota_replicas(need: Need, quota: Quota | None, tier: str) -> float:
    if quota is None:
        return math.inf
    per_replica = need.cards if tier == WHOLE else 1
    room = quota.room(resource_of(tier))
    return room if room == math.inf else math.floor(room / per_replica)


def _scale_up(
    work: _Work, need: Need, ladder: list[str], fallback: str | None, wanted: int
) -> None:
    left = wanted
    placed: dict[str, int] = {}
    for tier in ladder:
        taken = work.take(tier, left)
        if taken:
            placed[tier] = taken
            left -= taken
    if any(t != WHOLE for t in placed) and WHOLE in ladder:
        why = "over quota" if work.room.get(WHOLE, 0) > 0 else "full"
        work.notes.append(f"whole cards {why}: " + _describe(placed, skip=WHOLE))
    if left and fallback is None:
        work.unfit += left
        work.notes.append(f"{left} fit no tier that placement {need.mode.value} allows")
        return
    if left and fallback is not None:
        pended = work.take(fallback, left, pend=True)
        left -= pended
        if pended:
            work.notes.append(f"{pended} fit nowhere and wait on {fallback}")
    if left:
        refused = [t for t in ladder if work.quota_room.get(t, math.inf) <= 0]
        if refused:
            work.notes.append(f"quota refuses {left} more ({_resources(refused)} exhausted)")


def _move_stuck_down(work: _Work, ladder: list[str], stuck: Mapping[str, int]) -> None:
    """Pods pending on a tier with no room left move to a lower tier that has room."""
    for tier, count in sorted(stuck.items(), key=_tier_key):
        if count <= 0 or tier not in ladder:
            continue
        rank = preference(tier)
        moved = 0
        for lower in ladder:
            if preference(lower) > rank and count - moved > 0:
                moved += work.take(lower, count - moved)
        if moved:
            work.target[tier] -= moved
            work.notes.append(f"{moved} pending on {tier} moved down the ladder")


def _move_up(work: _Work, ladder: list[str], current: Mapping[str, TierCount]) -> None:
    """Start better-tier replicas for lower-tier ones (retired later by `_scale_down`)."""
    for tier in _retire_order(current):
        movable = work.target.get(tier, 0) - current[tier].pending
        if movable <= 0:
            continue
        better = [t for t in ladder if _better(t, tier) or tier not in ladder]
        started: dict[str, int] = {}
        for up in better:
            if movable <= 0 or up == tier:
                continue
            taken = work.take(up, movable)
            if taken:
                started[up] = taken
                movable -= taken
        if started:
            work.notes.append(f"moving up from {tier}: starting " + _describe(started))


def _scale_down(
    work: _Work,
    ladder: list[str],
    current: Mapping[str, TierCount],
    stuck: Mapping[str, int],
    desired: int,
) -> None:
    """Remove down to `desired`: stuck pods first, then the worst tier first, and a serving
    pod only while the serving count stays at `desired` or above."""
    excess = sum(work.target.values()) - desired
    removed: dict[str, int] = {}
    for tier in _retire_order(stuck):
        n = min(excess, stuck[tier])
        if n > 0:
            work.target[tier] -= n
            removed[tier] = n
            excess -= n
    serving = sum(c.serving for c in current.values())
    spare = max(0, serving - desired)
    # A tier the ladder no longer offers goes first; `sorted` keeps the retire order within.
    order = sorted(_retire_order(current), key=lambda t: t in ladder)
    for tier in order:
        if excess <= 0:
            break
        count = current[tier]
        left = work.target[tier]
        idle = max(0, left - count.serving)  # not serving: removed first, at no cost
        n = min(excess, left, idle + spare)
        if n > 0:
            work.target[tier] -= n
            removed[tier] = removed.get(tier, 0) + n
            excess -= n
            spare -= max(0, n - idle)
        if work.target[tier] > 0 and excess > 0:
            # This tier's serving pods must stay until better ones serve: keep the rest too.
            work.notes.append(
                f"{excess} above {desired} kept until the replicas replacing {tier} serve"
            )
            break
    if removed:
        work.notes.insert(0, "removing " + _describe(removed))


def _count_unplaced(
    target: Mapping[str, int], current: Mapping[str, TierCount], free: Mapping[str, int]
) -> int:
    """Replicas the plan keeps beyond the capacity their tier has (bound pods plus free)."""
    unplaced = 0
    for tier, count in target.items():
        now = current.get(tier, TierCount(0, 0))
        bound = now.replicas - now.pending
        unplaced += max(0, count - bound - free.get(tier, 0))
    return unplaced


def admissible(
    need: Need,
    snapshot: Snapshot,
    current: Mapping[str, TierCount],
    quota: Quota | None,
) -> int | None:
    """The most replicas in all that the namespace's quota admits; None when it caps nothing.

    The replicas there are, plus what each tier's quota still admits: the tier that takes what
    fits nowhere (`whole` under `auto`) up to its quota, every other tier up to the lesser of
    its quota and its free capacity. None when the waiting tier's quota is unlimited (or there
    is no quota at all).
    """
    if quota is None:
        return None
    ladder = _ladder(need, snapshot)
    fallback = _fallback(need, ladder, snapshot)
    rooms = {t: _quota_replicas(need, quota, t) for t in ladder}
    if all(r == math.inf for r in rooms.values()):
        return None
    if fallback is not None and rooms[fallback] == math.inf:
        return None
    free = free_by_tier(need, snapshot)
    extra = 0.0
    for tier, room in rooms.items():
        if tier == fallback:
            extra += room
        else:
            pend = current[tier].pending if tier in current else 0
            extra += min(room, max(0, free.get(tier, 0) - pend))
    total = sum(c.replicas for c in current.values())
    return total + int(extra)


# -- Upkeep: what a service's tiers need besides a scale ----------------------------------------


def unsatisfiable(need: Need, totals: Snapshot) -> str | None:
    """Why no GPU in the cluster could ever run one replica; None when one could, or when the
    cluster shows no GPU node at all (nothing to judge by).

    `totals` is every node as if nothing ran on it: a full cluster is not an unsatisfiable one.
    A service this names is held at its size, with the sentence as its reason.
    """
    if not totals.nodes or (need.memory_mib is None and need.mode in (Mode.AUTO, Mode.WHOLE)):
        return None
    fits = free_by_tier(need, totals)
    below = any(count > 0 for tier, count in fits.items() if tier != WHOLE)
    memory = need.memory_mib
    if need.mode in (Mode.AUTO, Mode.WHOLE):
        assert memory is not None
        cards = [n.card_memory_mib for n in totals.nodes if n.whole_free > 0]
        if any(m == 0 or m * need.cards >= memory for m in cards):
            return None
        if need.mode is Mode.AUTO and below:
            return None
        largest = max((n.card_memory_mib for n in totals.nodes), default=0)
        return (
            f"model-memory {memory} MiB exceeds every GPU card in the cluster (largest "
            f"{largest} MiB{f' x {need.cards}' if need.cards > 1 else ''})"
        )
    if need.mode is Mode.MIG:
        if any(tier.startswith(MIG_PREFIX) and n > 0 for tier, n in fits.items()):
            return None
        return (
            f"placement mig: no MIG slice in the cluster fits model-memory {memory} MiB with "
            f"{need.headroom_ratio:.0%} headroom (and below a quarter of its card)"
        )
    if fits.get(SHARED, 0) > 0:
        return None
    return (
        f"placement shared: no time-sliced GPU in the cluster has room for model-memory "
        f"{memory} MiB with {need.headroom_ratio:.0%} headroom"
    )


class Chore(enum.Enum):
    """What the upkeep of a service's tiers does."""

    SYNC = "sync"
    """Rewrite a tier Deployment's pod template from the owner's current one."""
    DELETE = "delete"
    """Delete a tier Deployment that has stayed empty for the idle grace."""
    REPLAN = "replan"
    """Distribute the policy's total over the tiers again."""


@dataclass(frozen=True, slots=True)
class Upkeep:
    """One chore for one service's tiers, to be carried out by the caller."""

    chore: Chore
    target: str = ""
    """The tier Deployment (`SYNC`, `DELETE`)."""
    desired: int = 0
    """The policy's total to distribute (`REPLAN`)."""


@dataclass(frozen=True, slots=True)
class Sibling:
    """A tier Deployment below `whole`, as the caller sees it now."""

    uid: str
    """What stays the same for as long as this Deployment exists (a new one of the same name
    starts its idle time again)."""
    name: str
    replicas: int
    """Its spec's replicas."""
    pods: int
    """Pods it owns, in any phase."""
    template_current: bool
    """Whether it was built from the owner's pod template as it is now."""


def tend_siblings(
    siblings: Iterable[Sibling],
    *,
    empty_since: Mapping[str, float],
    now_s: float,
    idle_grace_s: float,
) -> tuple[list[Upkeep], dict[str, float]]:
    """The chores a service's tier Deployments need, and since when each empty one is empty.

    A sibling built from an older template is rewritten; one at 0 replicas without pods since
    `idle_grace_s` (by `empty_since`, uid -> seconds, as this function returned it last time)
    is deleted. The dict returned holds the siblings empty now, keyed by uid: one that is not
    empty any more starts from nothing next time.
    """
    chores: list[Upkeep] = []
    still_empty: dict[str, float] = {}
    for sibling in siblings:
        if not sibling.template_current:
            chores.append(Upkeep(Chore.SYNC, sibling.name))
        if sibling.replicas == 0 and sibling.pods == 0:
            since = still_empty[sibling.uid] = empty_since.get(sibling.uid, now_s)
            if now_s - since >= idle_grace_s:
                chores.append(Upkeep(Chore.DELETE, sibling.name))
    return chores, still_empty


def as_written(specs: Mapping[str, int], written: Mapping[str, int]) -> bool:
    """Whether the tiers ask for what the caller last wrote (tiers at 0 count as absent)."""
    return {t: n for t, n in specs.items() if n} == {t: n for t, n in written.items() if n}


def reported_replicas(
    specs: Mapping[str, int], *, written: Mapping[str, int] | None, asked: int | None
) -> int:
    """The replicas to report to the policy: while the tiers are as last written, the total it
    asked for (a move up the ladder surges above it for a while, which is not news to it);
    otherwise what the tiers ask for."""
    total = sum(specs.values())
    if asked is None or written is None or not as_written(specs, written):
        return total
    return min(total, asked)


def replan(
    need: Need,
    snapshot: Snapshot,
    current: Mapping[str, TierCount],
    *,
    asked: int,
    quota: Quota | None,
    written: Mapping[str, int] | None,
) -> Upkeep | None:
    """A `REPLAN` when a plan for `asked` now would change the tiers; None when they are settled.

    Only a service that may be unsettled is planned again: replicas below `whole` (a move back
    up), pods stuck pending, or fewer replicas than asked for after the caller's own write (a
    count changed by hand before any write is the policy's to see, not this). Nothing is
    re-planned while the tiers differ from `written`, the caller's last write: it has not
    landed yet, and writing again before it has would repeat it.
    """
    specs = {t: c.replicas for t, c in current.items()}
    if written is not None and not as_written(specs, written):
        return None
    below = any(t != WHOLE and c.replicas for t, c in current.items())
    stuck = any(c.pending for c in current.values())
    short = written is not None and sum(specs.values()) < asked
    if not (below or stuck or short):
        return None
    planned = plan(need, snapshot, current, asked, quota)
    if all(specs.get(t, 0) == n for t, n in planned.replicas.items()):
        return None
    return Upkeep(Chore.REPLAN, desired=asked)


# -- Accounting (docs/architecture.md) --------------------------------------------------------

DEFAULT_CORE_WEIGHTS: Mapping[str, float] = {"RTX 4090": 12.0, "A100-40GB": 30.0, "A800-80GB": 54.0}
"""Core-hours per card-hour by card product (the seeds' example table)."""

UNKNOWN_CORE_WEIGHT = 1.0
"""The weight of a card the table does not name and whose memory is not known either: a
card-hour counts as one core-hour, so the GPU time still shows and an unknown card is never
free."""

DEFAULT_CORE_WEIGHT_PER_GIB = 0.75
"""Core-hours per card-hour per GiB of card memory, for a card the table does not name: the
A100-40GB's row (30 / 40 GiB). The table's cards sit between 0.5 (RTX 4090, 24 GiB) and 0.75
per GiB, so an unnamed card is priced like the dearest of them per GiB: an H100-80GB weighs
60, an L40S (48 GiB) 36, a T4 (16 GiB) 12."""

_MIB_PER_GIB = 1024


def _tokens(product: str) -> frozenset[str]:
    return frozenset(t for t in re.split(r"[^A-Z0-9]+", product.upper()) if t)


def core_weight(
    product: str,
    weights: Mapping[str, float] = DEFAULT_CORE_WEIGHTS,
    *,
    card_memory_mib: int = 0,
    per_gib: float = DEFAULT_CORE_WEIGHT_PER_GIB,
) -> float:
    """Core-hours per card-hour of a card product, matched on name tokens.

    GFD products read like `NVIDIA-A100-SXM4-40GB` or `NVIDIA-GeForce-RTX-4090`: a table key
    matches when every one of its tokens (split on anything not a letter or digit, case
    ignored) is a token of the product, so `A100-40GB` matches the SXM4 and PCIe cards but not
    `A100-SXM4-80GB`. The most specific key (most tokens) wins, then the name. A product no key
    matches weighs `per_gib` per GiB of `card_memory_mib` (GFD's `nvidia.com/gpu.memory`), and
    `UNKNOWN_CORE_WEIGHT` when that is not known either.
    """
    product_tokens = _tokens(product)
    best: tuple[int, str] | None = None
    for key in weights:
        key_tokens = _tokens(key)
        if key_tokens and key_tokens <= product_tokens:
            candidate = (-len(key_tokens), key)
            if best is None or candidate < best:
                best = candidate
    if best is not None:
        return float(weights[best[1]])
    if card_memory_mib > 0:
        return per_gib * card_memory_mib / _MIB_PER_GIB
    return UNKNOWN_CORE_WEIGHT


def tier_fraction(tier: str, node: NodeCapacity) -> float:
    """The part of a card one replica of `tier` holds on `node`: whole 1; a MIG slice its
    compute slices over the card's (`3g.40gb` -> 3/7; an A30 has 4); a share 1/replicas."""
    if tier == WHOLE:
        return 1.0
    if tier == SHARED:
        return 1.0 / max(1, node.shared_replicas)
    profile = mig_profile(tier)
    if profile is None:
        raise ValueError(f"unknown placement tier {tier!r}")
    slices = parse_mig_profile(profile)[0]
    per_card = _MIG_SLICES_PER_CARD
    tokens = _tokens(node.product)
    for product, count in _MIG_SLICES_BY_PRODUCT.items():
        if product in tokens:
            per_card = count
    return min(1.0, slices / per_card)


# -- Helpers ----------------------------------------------------------------------------------


def _tier_key(item: tuple[str, int]) -> tuple[int, str]:
    return preference(item[0]), item[0]


def _retire_order(tiers: Iterable[str]) -> list[str]:
    """Worst first, in the scale-down victim order: shared, then MIG by slice size ascending,
    then whole."""

    def describe(tier: str) -> victims.Candidate:
        preference(tier)  # an unknown tier is an error, not the last to go
        profile = mig_profile(tier)
        size = parse_mig_profile(profile)[0] if profile is not None else 0
        return victims.Candidate(tier, tier=tier, slice_size=size)

    return victims.order(tiers, describe)


def _better(a: str, b: str) -> bool:
    return preference(a) < preference(b)


def _describe(counts: Mapping[str, int], *, skip: str | None = None) -> str:
    parts = [f"{n} on {t}" for t, n in sorted(counts.items(), key=_tier_key) if t != skip and n]
    return ", ".join(parts)


def _resources(tiers: Iterable[str]) -> str:
    return ", ".join(QUOTA_PREFIX + resource_of(t) for t in tiers)


def _steady_note(target: Mapping[str, int]) -> str:
    placed = {t: n for t, n in target.items() if n}
    return ("as placed: " + _describe(placed)) if placed else "no replicas"
