"""GPU health: which nodes' GPUs placement leaves out, and why (docs/operations.md, "GPU health").

Two rules, each on what DCGM reports for a node's cards:

- XID errors: any card of the node reported a new XID error (`DCGM_FI_DEV_XID_ERRORS`, the code
  of the last one the driver logged, changed to a non-zero code) within the XID window. An XID
  error means a card the driver had to reset, lost off the bus or saw corrupt memory on: new
  replicas there may never become ready.
- Memory full: a card of the node has had more than `memory_ratio` of its framebuffer in use
  (`FB_USED / (FB_USED + FB_FREE)`) for the whole memory window. Another model's copy or a leak
  holds it; a new replica would fail to load.

A node with no reading, or a reading that misses one rule's data, is not excluded by that rule:
missing data excludes nothing. Exclusion is not a cordon or a taint: the node keeps what runs on
it, placement only stops counting its GPUs as free, and the node comes back as soon as its
readings clear.

Pure: readings in, exclusions out. The adapters read DCGM's series and carry out the result.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass


class Reason(enum.Enum):
    """Why a node's GPUs are excluded (the `reason` label of the metric and the Event)."""

    XID_ERRORS = "xid_errors"
    MEMORY_FULL = "memory_full"


@dataclass(frozen=True, slots=True)
class Rules:
    """The thresholds of the two rules (settings `AUTOSCALER_GPU__HEALTH_*`)."""

    xid_window_s: float = 600.0
    """How far back an XID error still excludes its node, seconds."""
    memory_ratio: float = 0.95
    """Share of a card's framebuffer in use above which the card counts as full."""
    memory_window_s: float = 600.0
    """How long a card must stay full before its node is excluded, seconds."""

    def __post_init__(self) -> None:
        if not (self.xid_window_s > 0 and math.isfinite(self.xid_window_s)):
            raise ValueError(f"xid_window_s must be > 0 and finite, not {self.xid_window_s!r}")
        if not 0 < self.memory_ratio <= 1:
            raise ValueError(f"memory_ratio must be in (0, 1], not {self.memory_ratio!r}")
        if not (self.memory_window_s > 0 and math.isfinite(self.memory_window_s)):
            raise ValueError(
                f"memory_window_s must be > 0 and finite, not {self.memory_window_s!r}"
            )


DEFAULT_RULES = Rules()


@dataclass(frozen=True, slots=True)
class Reading:
    """What DCGM reported for one node's cards; None where it reported nothing."""

    xid_error: float | None = None
    """The highest new XID error code any of its cards reported within the XID window (0: none)."""
    memory_ratio: float | None = None
    """The framebuffer share in use of its fullest card, at its lowest over the memory window;
    None unless the card has samples over the whole window."""


Exclusions = Mapping[str, frozenset[Reason]]
"""Node name -> why its GPUs are left out (never an empty set)."""


def reasons(reading: Reading, rules: Rules) -> frozenset[Reason]:
    """Why one node's GPUs are left out; empty when they are not."""
    found: set[Reason] = set()
    xid = reading.xid_error
    if xid is not None and math.isfinite(xid) and xid != 0:
        found.add(Reason.XID_ERRORS)
    ratio = reading.memory_ratio
    if ratio is not None and math.isfinite(ratio) and ratio > rules.memory_ratio:
        found.add(Reason.MEMORY_FULL)
    return frozenset(found)


def exclusions(readings: Mapping[str, Reading], rules: Rules) -> dict[str, frozenset[Reason]]:
    """The nodes whose GPUs placement leaves out, with their reasons."""
    out: dict[str, frozenset[Reason]] = {}
    for node, reading in readings.items():
        found = reasons(reading, rules)
        if found:
            out[node] = found
    return out


@dataclass(frozen=True, slots=True)
class Change:
    """What changed between two judgements: a Warning Event per new (node, reason), a log line
    per cleared one."""

    raised: tuple[tuple[str, Reason], ...]
    cleared: tuple[tuple[str, Reason], ...]


def compare(before: Exclusions, after: Exclusions) -> Change:
    """The (node, reason) pairs that appear in `after` only, and those in `before` only, sorted."""

    def pairs(excluded: Exclusions) -> set[tuple[str, Reason]]:
        return {(node, reason) for node, found in excluded.items() for reason in found}

    old, new = pairs(before), pairs(after)

    def key(pair: tuple[str, Reason]) -> tuple[str, str]:
        return pair[0], pair[1].value

    return Change(
        raised=tuple(sorted(new - old, key=key)), cleared=tuple(sorted(old - new, key=key))
    )
