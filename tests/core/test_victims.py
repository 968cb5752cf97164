"""The one scale-down victim order (`core.victims`), and the three places that read through it."""

from __future__ import annotations

import math
import random

from hypothesis import given
from hypothesis import strategies as st

from autoscaler.core import placement, ramp, victims
from autoscaler.core.victims import Candidate, Stage


def names(candidates: list[Candidate]) -> list[str]:
    return [c.name for c in victims.order(candidates, lambda c: c)]


def test_each_criterion_decides_only_where_the_ones_before_it_tie() -> None:
    """Stage, then tier, then deletion cost, then load, then slice, then age, then name."""
    ordered = [
        Candidate("pending", stage=Stage.PENDING, tier="whole", deletion_cost=9),
        Candidate("starting", stage=Stage.STARTING, tier="shared"),
        Candidate("warming", stage=Stage.WARMING, tier="whole", in_flight=0.0),
        Candidate("shared", tier="shared", deletion_cost=5, in_flight=100.0),
        Candidate("mig-cheap", tier="mig-3g.40gb", deletion_cost=-1, in_flight=50.0),
        Candidate("mig-idle", tier="mig-3g.40gb", in_flight=0.0, slice_size=3),
        Candidate("mig-busy-small", tier="mig-1g.10gb", in_flight=7.0, slice_size=1),
        Candidate("mig-busy-large", tier="mig-3g.40gb", in_flight=7.0, slice_size=3),
        Candidate("whole-unknown-load", tier="whole"),
        Candidate("whole-unknown-load-newer", tier="whole", created_s=10.0),
    ]
    shuffled = list(ordered)
    random.Random(7).shuffle(shuffled)
    assert names(shuffled) == [
        "pending",
        "starting",
        "warming",
        "shared",
        "mig-cheap",
        "mig-idle",
        "mig-busy-small",
        "mig-busy-large",
        "whole-unknown-load-newer",
        "whole-unknown-load",
    ]


def test_an_unknown_load_goes_after_any_known_one() -> None:
    """A missing in-flight count is never read as an idle pod."""
    assert names([Candidate("unknown"), Candidate("busy", in_flight=1e9)]) == ["busy", "unknown"]


def test_pods_created_at_the_same_time_go_newest_serial_first() -> None:
    """The creation serial breaks a tie in age, the newest first."""
    assert names([Candidate("a", serial=1), Candidate("b", serial=2)]) == ["b", "a"]


@given(
    st.lists(
        st.builds(
            Candidate,
            name=st.text(min_size=1, max_size=3),
            stage=st.sampled_from(Stage),
            tier=st.sampled_from(["whole", "shared", "mig-1g.10gb", "mig-3g.40gb"]),
            deletion_cost=st.integers(-3, 3),
            in_flight=st.sampled_from([math.nan, 0.0, 1.0, 5.0]),
            created_s=st.sampled_from([0.0, 1.0]),
        ),
        max_size=12,
        unique_by=lambda c: c.name,  # pod names are unique within a service
    )
)
def test_the_order_does_not_depend_on_the_order_given(candidates: list[Candidate]) -> None:
    """Any arrangement of the same pods gives the same order of their descriptions."""
    forward = victims.order(candidates, lambda c: c)
    backward = victims.order(reversed(candidates), lambda c: c)
    assert [repr(c) for c in forward] == [repr(c) for c in backward]


def test_the_ramp_and_the_placement_plan_retire_tiers_in_the_same_order() -> None:
    """The ramp drains a shared pod before a MIG pod before a whole one, as the plan retires
    tiers."""
    pods = [
        ramp.Pod(name, True, True, False, True, tier=tier, in_flight=0.0)
        for name, tier in (("w", "whole"), ("m", "mig-1g.10gb"), ("s", "shared"))
    ]
    drained = [p.tier for p in ramp.victim_order(pods)]
    need = placement.Need(memory_mib=1000)
    node = placement.NodeCapacity("n", "A100", 81920, 0, mig_free={"1g.10gb": 0})
    snapshot = placement.Snapshot((node,))
    assert placement.ladder(need, snapshot) == ("whole", "mig-1g.10gb", "shared")
    current = {t: placement.TierCount(1, 1) for t in ("whole", "mig-1g.10gb", "shared")}
    retired: list[str] = []
    for desired in (2, 1, 0):
        kept = placement.plan(need, snapshot, current, desired).replicas
        retired += [t for t in current if kept.get(t, 0) == 0 and t not in retired]
    assert drained == retired == ["shared", "mig-1g.10gb", "whole"]
