"""Placement tiers by name, and the one order of them.

A tier is `whole` (a card), `mig-<g>g.<mem>gb` (a MIG slice of that profile) or `shared` (a
time-sliced card). `preference` is the ladder's order, best first: placement fills tiers in it,
and every scale-down (the plan's retirement of tiers, the ramp's and the simulator's choice of
victims, `core.victims`) empties them in the reverse.

Pure: no I/O, no clock, no logging.
"""

from __future__ import annotations

import re

WHOLE = "whole"
SHARED = "shared"
MIG_PREFIX = "mig-"

_MIG_PROFILE = re.compile(r"^(?P<g>[1-9]\d*)g\.(?P<mem>[1-9]\d*)gb(?:\+[a-z0-9]+)*$")


def mig_tier(profile: str) -> str:
    """The tier name of a MIG profile: `3g.40gb` -> `mig-3g.40gb`."""
    parse_mig_profile(profile)
    return MIG_PREFIX + profile


def mig_profile(tier: str) -> str | None:
    """The MIG profile of a tier name (`mig-3g.40gb` -> `3g.40gb`), None for other tiers."""
    return tier[len(MIG_PREFIX) :] if tier.startswith(MIG_PREFIX) else None


def parse_mig_profile(profile: str) -> tuple[int, int]:
    """`<g>g.<mem>gb` -> (compute slices, memory in GB as named); `ValueError` otherwise."""
    match = _MIG_PROFILE.match(profile)
    if match is None:
        raise ValueError(f"not a MIG profile (want <g>g.<mem>gb, e.g. 3g.40gb): {profile!r}")
    return int(match["g"]), int(match["mem"])


def preference(tier: str) -> int:
    """The ladder's order of tiers, best first: `whole` 0, any `mig-*` 1, `shared` 2.

    The one tier order of the project: placement fills tiers in this order, and every
    scale-down (the plan's, the ramp's choice of victims) empties them in the reverse.
    `ValueError` for a name that is not a tier (`is_tier`).
    """
    if tier == WHOLE:
        return 0
    if tier.startswith(MIG_PREFIX):
        parse_mig_profile(tier[len(MIG_PREFIX) :])
        return 1
    if tier == SHARED:
        return 2
    raise ValueError(f"unknown placement tier {tier!r}")


def is_tier(name: str) -> bool:
    """Whether `name` is a placement tier: `whole`, `shared` or `mig-<g>g.<mem>gb`."""
    try:
        preference(name)
    except ValueError:
        return False
    return True
