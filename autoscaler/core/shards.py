"""Which bucket Lease answers for a service: a stable hash of its `namespace/name`.

Several controller replicas split the services into `buckets` Leases, as Knative's autoscaler
does (knative.dev/pkg `hash` and `leaderelection`): each replica campaigns for every bucket,
leads some, and acts only on the services of the buckets it leads. The bucket of a service is
chosen from the bucket *names* by Knative's consistent subset choice with one pick:

- the service gets a start angle, FNV-1a (64 bit) of `key + "start-angle-salt"` modulo 2048;
- each bucket name gets an angle, FNV-1a of `name + key` modulo 2048 (re-hashed with its own
  hash in hex appended while it collides with another bucket's);
- the service belongs to the bucket whose angle is the first at or after its start angle,
  wrapping around.

Every replica computes the same answer from the same names, in any process and on any
machine (never Python's `hash`, which is salted per process). The names carry the count, so a
change of the count reshuffles the services; every replica must run with the same count.

Bucket names: one bucket is named as the single Lease always was (an upgrade from one replica
keeps its Lease); N > 1 are `<lease>.<i>-of-<N>` with two digits, as Knative names them.

The split (`split`): each replica aims at its fair share of the buckets, `buckets / replicas`,
the replicas counted from what the Leases show (their live holders, and the replicas that lead
none but asked for a bucket). Once every bucket is held, a replica that leads more than
`ceil(share)` gives its surplus up, one bucket at a time, the ones it prefers least first; a
replica that leads fewer than `ceil(share)` is eager for a free bucket, one at or above it
lets the others come first. A replica at `ceil(share)` gives one up too while another leads
fewer than `floor(share)` (13 of 3: 5/5/3 becomes 5/4/4), and a replica that leads none asks
the holder of the most buckets to count it. Once every replica leads `floor(share)` or
`ceil(share)`, nobody asks or gives: the split settles (3/3/3 of nine, 2/2/1/1 of six)
whatever the order the replicas came in.

It must not know about Leases, the API or time: it maps names to names, and holders to a plan.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import math
from collections.abc import Collection, Sequence
from typing import Final

_FNV_OFFSET: Final = 0xCBF29CE484222325
_FNV_PRIME: Final = 0x100000001B3
_MASK: Final = (1 << 64) - 1
_UNIVERSE: Final = 1 << 11
"""Angles lie in [0, 2048), which divides 2^64 evenly (no bias)."""
_START_SALT: Final = "start-angle-salt"
MEMO_LIMIT: Final = 1 << 16
"""Services whose bucket is remembered; far more than one controller manages."""
MAX_BUCKETS: Final = 99
"""Two digits in a bucket's name, and far fewer angles than the universe holds."""


def fnv1a_64(data: bytes) -> int:
    """The 64-bit FNV-1a hash of `data`, as Go's `hash/fnv.New64a`."""
    value = _FNV_OFFSET
    for byte in data:
        value = ((value ^ byte) * _FNV_PRIME) & _MASK
    return value


def bucket_names(lease_name: str, buckets: int) -> tuple[str, ...]:
    """The Lease names of `buckets` buckets; one bucket keeps the plain `lease_name`."""
    if not 1 <= buckets <= MAX_BUCKETS:
        raise ValueError(f"buckets must be within 1..{MAX_BUCKETS}, not {buckets}")
    if buckets == 1:
        return (lease_name,)
    return tuple(f"{lease_name}.{i:02d}-of-{buckets:02d}" for i in range(buckets))


def _angles(names: Sequence[str], key: str) -> list[tuple[int, int]]:
    """(angle, bucket index) of every bucket for `key`, sorted by angle, none shared."""
    taken: dict[int, int] = {}
    for index, name in enumerate(names):
        data = (name + key).encode()
        hashed = fnv1a_64(data)
        angle = hashed % _UNIVERSE
        while angle in taken:  # two names on one angle: about 1 in 2048 per pair
            data += format(hashed, "x").encode()
            hashed = fnv1a_64(data)
            angle = hashed % _UNIVERSE
        taken[angle] = index
    return sorted(taken.items())


def owner(names: Sequence[str], key: str) -> int:
    """The index in `names` of the bucket that answers for `key` (a `namespace/name`)."""
    if len(names) == 1:
        return 0
    start = fnv1a_64((key + _START_SALT).encode()) % _UNIVERSE
    angles = _angles(names, key)
    at = bisect.bisect_left(angles, (start, -1))
    return angles[at % len(angles)][1]


@dataclasses.dataclass(frozen=True, slots=True)
class Buckets:
    """The bucket names of one controller and the bucket of each service, memoised."""

    names: tuple[str, ...]
    _memo: dict[str, int] = dataclasses.field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def named(cls, lease_name: str, buckets: int) -> Buckets:
        return cls(bucket_names(lease_name, buckets))

    def __len__(self) -> int:
        return len(self.names)

    def of(self, key: str) -> int:
        """The bucket index of the service `key`; the same in every replica."""
        index = self._memo.get(key)
        if index is None:
            if len(self._memo) >= MEMO_LIMIT:  # services come and go: start again
                self._memo.clear()
            index = self._memo[key] = owner(self.names, key)
        return index


def preference(identity: str, names: Sequence[str]) -> list[int]:
    """Bucket indices in the order a replica named `identity` first campaigns for them.

    Replicas that start together try their first choices at once and the rest a retry apart,
    so each comes away with some buckets instead of the quickest taking all of them.
    """
    return sorted(range(len(names)), key=lambda i: (fnv1a_64((identity + names[i]).encode()), i))


@dataclasses.dataclass(frozen=True, slots=True)
class Split:
    """What one replica should do about the split of the buckets, from what the Leases show."""

    replicas: int
    """The live replicas counted, this one included."""
    led: int
    """The buckets this replica leads."""
    ceiling: int
    """`ceil(buckets / replicas)`: more than this is a surplus to give up."""
    floor: int
    """`floor(buckets / replicas)`."""
    surplus: tuple[int, ...]
    """Buckets to give up, every bucket being held: those over `ceiling`, or one at `ceiling`
    while another live replica leads fewer than `floor`; the least preferred first. One at a
    time: only the first is given up before the Leases are read again."""
    ask: int | None
    """A bucket of the replica that leads the most, on which this replica, leading none though
    every bucket is held and its floor is one or more, asks to be counted (that replica then
    gives one up). None when asking would change nothing."""

    @property
    def eager(self) -> bool:
        """Whether this replica takes a free bucket as soon as it may: it leads fewer than
        `ceiling`."""
        return self.led < self.ceiling


def split(
    me: str,
    holders: Sequence[str | None],
    *,
    candidates: Collection[str] = (),
    preferred: Sequence[int] | None = None,
) -> Split:
    """The plan of the replica `me`, given each bucket's live holder (None: free or expired)
    and the replicas that asked to be counted though they lead none (`candidates`).

    `preferred` is `me`'s order of preference over the buckets (`preference`); its surplus is
    taken from the end of it. Pure: the same holders give the same plan in every replica.
    """
    count = len(holders)
    live = {h for h in holders if h is not None} | set(candidates) | {me}
    replicas = len(live)
    ceiling = math.ceil(count / replicas)
    floor = count // replicas
    led_by = collections.Counter(h for h in holders if h is not None)
    mine = [i for i, h in enumerate(holders) if h == me]
    every_held = all(h is not None for h in holders)
    lowest = min(led_by[r] for r in live)
    # Over the ceiling; or at it while another is under the floor (13 of 3: 5/5/3 becomes 5/4/4).
    over = len(mine) - ceiling
    if over == 0 and ceiling > floor and lowest < floor:
        over = 1
    surplus: tuple[int, ...] = ()
    if every_held and over > 0:
        order = list(range(count)) if preferred is None else list(preferred)
        ranked = sorted(mine, key=order.index, reverse=True)
        surplus = tuple(ranked[:over])
    ask = None
    if every_held and not mine and count > 1 and floor >= 1:
        # Counted, this replica is under the floor: the one that leads the most gives one up.
        most = max(led_by.values())
        busiest = min(h for h, n in led_by.items() if n == most)
        ask = holders.index(busiest)
    return Split(
        replicas=replicas, led=len(mine), ceiling=ceiling, floor=floor, surplus=surplus, ask=ask
    )
