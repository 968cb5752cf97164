"""The placement ladder and GPU accounting (docs/architecture.md, "The placement ladder" and
"Accounting"): examples, then properties."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from autoscaler.core import placement
from autoscaler.core.placement import (
    SHARED,
    WHOLE,
    Need,
    NodeCapacity,
    Plan,
    Quota,
    Snapshot,
    TierCount,
)

GIB = 1024
A100_80 = "NVIDIA-A100-SXM4-80GB"
RTX_4090 = "NVIDIA-GeForce-RTX-4090"
MIG_3G = placement.mig_tier("3g.40gb")
MIG_2G = placement.mig_tier("2g.20gb")
MIG_1G = placement.mig_tier("1g.10gb")


def whole_node(
    name: str, free: int, *, product: str = A100_80, memory: int = 80 * GIB
) -> NodeCapacity:
    return NodeCapacity(name=name, product=product, card_memory_mib=memory, whole_free=free)


def mig_node(name: str, **free: int) -> NodeCapacity:
    """An A100-80GB node in mixed MIG mode; `free` by profile, `_` for `.` (`g3_40gb`)."""
    profiles = {_profile(key): count for key, count in free.items()}
    return NodeCapacity(
        name=name, product=A100_80, card_memory_mib=80 * GIB, whole_free=0, mig_free=profiles
    )


def _profile(key: str) -> str:
    # g3_40gb -> 3g.40gb
    slices, memory = key[1:].split("_")
    return f"{slices}g.{memory}"


def shared_node(name: str, free: int, *, free_memory_mib: int | None) -> NodeCapacity:
    """An RTX 4090 time-sliced four ways."""
    return NodeCapacity(
        name=name,
        product=RTX_4090 + "-SHARED",
        card_memory_mib=24 * GIB,
        whole_free=0,
        shared_free=free,
        shared_replicas=4,
        shared_free_memory_mib=free_memory_mib,
    )


def counts(**tiers: int) -> dict[str, TierCount]:
    """All serving, nothing pending: `whole=3, mig_3g=2, shared=1`."""
    names = {"whole": WHOLE, "shared": SHARED, "mig_3g": MIG_3G, "mig_2g": MIG_2G, "mig_1g": MIG_1G}
    return {names[k]: TierCount(n, n) for k, n in tiers.items()}


def fragmented() -> Snapshot:
    """One whole card free, and four time-sliced GPUs with 8 GiB free each."""
    sliced = tuple(shared_node(f"s{i}", 3, free_memory_mib=8 * GIB) for i in range(4))
    return Snapshot((whole_node("w", 1), *sliced))


# Examples: scale-up -------------------------------------------------------------------------


def test_scale_up_fills_whole_cards_then_shares_with_room_for_the_model() -> None:
    """A 6 GiB model going 2 -> 7 takes the free card, then one share on each of four GPUs."""
    result = placement.plan(Need(6 * GIB), fragmented(), counts(whole=2), 7)
    assert result.replicas == {WHOLE: 3, SHARED: 4}
    assert result.unplaced == 0
    assert result.reason == "whole cards full: 4 on shared"


def test_a_model_larger_than_the_free_share_memory_waits_on_whole() -> None:
    """An 8 GiB model needs 8.8 GiB with headroom: no 8 GiB share takes it, so it waits."""
    result = placement.plan(Need(8 * GIB), fragmented(), counts(whole=2), 5)
    assert result.replicas == {WHOLE: 5}
    assert result.unplaced == 2
    assert "2 fit nowhere and wait on whole" in result.reason


def test_free_memory_bounds_how_many_copies_share_a_card() -> None:
    """Three free shares but 8 GiB free take only two copies of a 3 GiB model."""
    snapshot = Snapshot((shared_node("s", 3, free_memory_mib=8 * GIB),))
    result = placement.plan(Need(3 * GIB), snapshot, {}, 3)
    assert result.replicas == {WHOLE: 1, SHARED: 2}
    assert result.unplaced == 1


def test_without_free_memory_a_share_holds_its_fair_part_of_the_card() -> None:
    """Unknown free memory: a four-way share of a 24 GiB card holds 6 GiB, not 6.6 with headroom."""
    snapshot = Snapshot((shared_node("s", 4, free_memory_mib=None),))
    assert placement.plan(Need(5 * GIB), snapshot, {}, 2).replicas == {SHARED: 2}
    assert placement.plan(Need(6 * GIB), snapshot, {}, 2).replicas == {WHOLE: 2}


def test_a_small_model_goes_on_a_mig_slice_of_an_a100() -> None:
    """A 12 GiB model (13.2 with headroom, under a quarter of 80 GiB) takes free 3g.40gb slices."""
    snapshot = Snapshot((mig_node("a", g3_40gb=2), mig_node("b", g3_40gb=2)))
    result = placement.plan(Need(12 * GIB), snapshot, counts(whole=2), 5)
    assert result.replicas == {WHOLE: 2, MIG_3G: 3}
    assert result.unplaced == 0


def test_mig_takes_the_smallest_profile_that_fits_first() -> None:
    """A 12 GiB model skips 1g.10gb, fills 2g.20gb, then goes to 3g.40gb."""
    snapshot = Snapshot((mig_node("a", g1_10gb=4, g2_20gb=1, g3_40gb=2),))
    result = placement.plan(Need(12 * GIB), snapshot, {}, 3)
    assert result.replicas == {MIG_2G: 1, MIG_3G: 2}


def test_a_model_over_a_quarter_of_the_card_never_goes_on_mig() -> None:
    """A 20 GiB model (22 with headroom, over 80/4) would fit a 3g.40gb slice but waits on whole."""
    snapshot = Snapshot((mig_node("a", g3_40gb=2),))
    result = placement.plan(Need(20 * GIB), snapshot, {}, 2)
    assert result.replicas == {WHOLE: 2}
    assert result.unplaced == 2


def test_gfd_slice_memory_overrides_the_profile_name() -> None:
    """A slice GFD reports at 9 GiB does not take 9.2 GiB, which its name (9.3 GiB) would."""
    node = NodeCapacity(
        "a", A100_80, 80 * GIB, 0, mig_free={"1g.10gb": 1}, mig_memory_mib={"1g.10gb": 9 * GIB}
    )
    result = placement.plan(Need(int(8.8 * GIB), headroom_ratio=0.05), Snapshot((node,)), {}, 1)
    assert result.replicas == {WHOLE: 1}


def test_unknown_model_memory_keeps_to_whole_cards() -> None:
    """Without `model-memory` neither a slice nor a share is safe: everything goes whole."""
    snapshot = Snapshot((mig_node("a", g3_40gb=4), shared_node("s", 4, free_memory_mib=None)))
    result = placement.plan(Need(None), snapshot, {}, 3)
    assert result.replicas == {WHOLE: 3}
    assert result.unplaced == 3


def test_unusable_nodes_give_nothing() -> None:
    """A cordoned or faulty node's free cards are not counted."""
    node = NodeCapacity("w", A100_80, 80 * GIB, whole_free=4, usable=False)
    result = placement.plan(Need(None), Snapshot((node,)), {}, 2)
    assert result.unplaced == 2


def test_multi_card_replicas_need_their_cards_on_one_node() -> None:
    """Two nodes with one free card each take no replica that needs two cards."""
    snapshot = Snapshot((whole_node("a", 1), whole_node("b", 1), mig_node("m", g1_10gb=4)))
    result = placement.plan(Need(GIB, cards=2), snapshot, {}, 1)
    assert result.replicas == {WHOLE: 1}
    assert result.unplaced == 1


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("whole", {WHOLE: 3}),
        ("mig", {MIG_3G: 3}),
        ("shared", {SHARED: 3}),
    ],
)
def test_mode_keeps_to_one_tier(mode: str, expected: Mapping[str, int]) -> None:
    """`placement: whole|mig|shared` places only there, waiting there when it is full."""
    snapshot = Snapshot(
        (whole_node("w", 1), mig_node("m", g3_40gb=1), shared_node("s", 1, free_memory_mib=None))
    )
    result = placement.plan(Need(4 * GIB, mode=placement.Mode(mode)), snapshot, {}, 3)
    assert result.replicas == expected
    assert result.unplaced == 2


def test_mig_mode_with_no_fitting_profile_asks_for_nothing() -> None:
    """Under `placement: mig` with no slice the model fits, nothing is asked and all count."""
    snapshot = Snapshot((whole_node("w", 4),))
    result = placement.plan(Need(4 * GIB, mode=placement.Mode.MIG), snapshot, {}, 3)
    assert result.replicas == {}
    assert result.unplaced == 3
    assert "fit no tier that placement mig allows" in result.reason


# Examples: pending pods ---------------------------------------------------------------------


def test_pending_pods_take_free_capacity_before_new_ones() -> None:
    """Two pods pending on whole will take the two free cards: a new one goes to a share."""
    snapshot = Snapshot((whole_node("w", 2), shared_node("s", 2, free_memory_mib=None)))
    current = {WHOLE: TierCount(4, 2, pending=2)}
    result = placement.plan(Need(4 * GIB), snapshot, current, 5)
    assert result.replicas == {WHOLE: 4, SHARED: 1}
    assert result.unplaced == 0


def test_pods_stuck_pending_on_whole_move_down_when_a_share_frees() -> None:
    """Two pods pending on full whole cards move to shares once two are free."""
    snapshot = Snapshot((whole_node("w", 0), shared_node("s", 2, free_memory_mib=None)))
    current = {WHOLE: TierCount(4, 2, pending=2)}
    result = placement.plan(Need(4 * GIB), snapshot, current, 4)
    assert result.replicas == {WHOLE: 2, SHARED: 2}
    assert result.unplaced == 0
    assert "2 pending on whole moved down the ladder" in result.reason


def test_scale_down_removes_stuck_pods_first() -> None:
    """Going 5 -> 4, the pod stuck pending on whole goes before any serving share."""
    snapshot = Snapshot((whole_node("w", 0),))
    current = {WHOLE: TierCount(4, 3, pending=1), SHARED: TierCount(1, 1)}
    result = placement.plan(Need(4 * GIB), snapshot, current, 4)
    assert result.replicas == {WHOLE: 3, SHARED: 1}


# Examples: scale-down and move-up -----------------------------------------------------------


def test_scale_down_empties_shared_then_mig_then_whole() -> None:
    """Going 7 -> 2 removes the share, then the smaller MIG slice, the larger, then whole."""
    current = counts(whole=3, mig_3g=1, mig_2g=2, shared=1)
    full = Snapshot((mig_node("m", g2_20gb=0, g3_40gb=0),))
    steps = [placement.plan(Need(4 * GIB), full, current, n).replicas for n in (6, 4, 3, 2)]
    assert steps == [
        {WHOLE: 3, MIG_2G: 2, MIG_3G: 1, SHARED: 0},
        {WHOLE: 3, MIG_2G: 0, MIG_3G: 1, SHARED: 0},
        {WHOLE: 3, MIG_2G: 0, MIG_3G: 0, SHARED: 0},
        {WHOLE: 2, MIG_2G: 0, MIG_3G: 0, SHARED: 0},
    ]


def test_scale_down_removes_pods_not_yet_serving_before_serving_ones() -> None:
    """With 2 of 3 shares serving and 7 serving in all, going 8 -> 7 drops the warming share."""
    current = {WHOLE: TierCount(5, 5), SHARED: TierCount(3, 2)}
    result = placement.plan(Need(4 * GIB), Snapshot(), current, 7)
    assert result.replicas == {WHOLE: 5, SHARED: 2}


def test_move_up_starts_whole_replicas_then_retires_shares_as_they_serve() -> None:
    """Two whole cards free up under 3 whole + 2 shared: start 2 whole, retire a share per new
    whole replica serving, end on 5 whole."""
    need = Need(4 * GIB)
    freed = Snapshot((whole_node("w", 2),))
    start = {WHOLE: TierCount(3, 3), SHARED: TierCount(2, 2)}

    surge = placement.plan(need, freed, start, 5)
    assert surge.replicas == {WHOLE: 5, SHARED: 2}
    assert "moving up from shared: starting 2 on whole" in surge.reason

    bound = Snapshot((whole_node("w", 0),))  # the new pods took the cards
    starting = {WHOLE: TierCount(5, 3), SHARED: TierCount(2, 2)}
    waiting = placement.plan(need, bound, starting, 5)
    assert waiting.replicas == {WHOLE: 5, SHARED: 2}
    assert "kept until the replicas replacing shared serve" in waiting.reason

    one_serving = {WHOLE: TierCount(5, 4), SHARED: TierCount(2, 2)}
    assert placement.plan(need, bound, one_serving, 5).replicas == {WHOLE: 5, SHARED: 1}

    both = {WHOLE: TierCount(5, 5), SHARED: TierCount(1, 1)}
    assert placement.plan(need, bound, both, 5).replicas == {WHOLE: 5, SHARED: 0}

    done = {WHOLE: TierCount(5, 5), SHARED: TierCount(0, 0)}
    settled = placement.plan(need, bound, done, 5)
    assert settled.replicas == {WHOLE: 5, SHARED: 0}
    assert settled.reason == "as placed: 5 on whole"


def test_move_up_waits_for_the_total_to_be_steady() -> None:
    """During a scale-up the free card takes a new replica; nothing moves up at once."""
    snapshot = Snapshot((whole_node("w", 1),))
    result = placement.plan(Need(4 * GIB), snapshot, counts(whole=2, shared=2), 5)
    assert result.replicas == {WHOLE: 3, SHARED: 2}


def test_replicas_on_a_tier_the_mode_no_longer_allows_move_to_one_it_does() -> None:
    """After `placement` becomes `whole`, shared replicas are replaced by whole ones."""
    snapshot = Snapshot((whole_node("w", 4),))
    result = placement.plan(
        Need(4 * GIB, mode=placement.Mode.WHOLE), snapshot, counts(whole=1, shared=2), 3
    )
    assert result.replicas == {WHOLE: 3, SHARED: 2}


# Examples: quota ----------------------------------------------------------------------------


def _gpu_quota(hard: int, used: int, resource: str = "nvidia.com/gpu") -> Quota:
    key = "requests." + resource
    return Quota(hard={key: hard}, used={key: used})


def test_quota_stops_whole_and_the_rest_goes_down_the_ladder() -> None:
    """Room for one more whole card under the quota: the others go to shares, and it says so."""
    snapshot = Snapshot((whole_node("w", 4), shared_node("s", 2, free_memory_mib=None)))
    quota = _gpu_quota(hard=3, used=2)
    result = placement.plan(Need(4 * GIB), snapshot, counts(whole=2), 6, quota)
    assert result.replicas == {WHOLE: 3, SHARED: 2}
    assert result.admissible == 5
    assert result.reason == (
        "whole cards over quota: 2 on shared; "
        "quota refuses 1 more (requests.nvidia.com/gpu exhausted)"
    )


def test_quota_on_every_tier_asks_for_nothing_more() -> None:
    """With whole and shared both at their quota, a scale-up plans the current count."""
    snapshot = Snapshot((whole_node("w", 4), shared_node("s", 2, free_memory_mib=None)))
    quota = Quota(
        hard={"requests.nvidia.com/gpu": 2, "requests.nvidia.com/gpu.shared": 1},
        used={"requests.nvidia.com/gpu": 2, "requests.nvidia.com/gpu.shared": 1},
    )
    result = placement.plan(Need(4 * GIB), snapshot, counts(whole=2, shared=1), 6, quota)
    assert result.replicas == {WHOLE: 2, SHARED: 1}
    assert result.admissible == 3


def test_quota_without_used_counts_as_full() -> None:
    """A quota whose usage is not counted yet admits nothing: unknown is never zero."""
    quota = Quota(hard={"requests.nvidia.com/gpu": 8}, used={})
    snapshot = Snapshot((whole_node("w", 4),))
    assert placement.admissible(Need(None), snapshot, counts(whole=2), quota) == 2


def test_admissible_counts_capacity_below_the_waiting_tier() -> None:
    """Whole admits 1 more; MIG 2 (quota) of 3 free slices; shares 1 (uncapped, 1 free)."""
    snapshot = Snapshot((mig_node("m", g3_40gb=3), shared_node("s", 1, free_memory_mib=None)))
    quota = Quota(
        hard={"requests.nvidia.com/gpu": 4, "requests.nvidia.com/mig-3g.40gb": 2},
        used={"requests.nvidia.com/gpu": 3, "requests.nvidia.com/mig-3g.40gb": 0},
    )
    assert placement.admissible(Need(4 * GIB), snapshot, counts(whole=3), quota) == 3 + 1 + 2 + 1


def test_admissible_is_none_when_the_waiting_tier_is_uncapped() -> None:
    """A MIG-only quota caps nothing: what finds no slice waits on whole, which is free."""
    quota = _gpu_quota(hard=1, used=1, resource="nvidia.com/mig-3g.40gb")
    snapshot = Snapshot((mig_node("m", g3_40gb=3),))
    assert placement.admissible(Need(4 * GIB), snapshot, {}, quota) is None
    assert placement.admissible(Need(4 * GIB), snapshot, {}, None) is None


def test_quota_for_multi_card_replicas_counts_cards() -> None:
    """Five cards of quota left admit two replicas of a two-card model."""
    quota = _gpu_quota(hard=9, used=4)
    assert placement.admissible(Need(None, cards=2), Snapshot(), counts(whole=2), quota) == 4


# Examples: upkeep ---------------------------------------------------------------------------


def test_a_model_larger_than_every_card_is_unsatisfiable_and_says_so() -> None:
    """A model above every card's memory is refused with the largest card named."""
    totals = Snapshot((whole_node("w", 8),))
    assert placement.unsatisfiable(Need(memory_mib=200 * GIB), totals) == (
        "model-memory 204800 MiB exceeds every GPU card in the cluster (largest 81920 MiB)"
    )
    assert placement.unsatisfiable(Need(memory_mib=200 * GIB, cards=4), totals) is None
    assert placement.unsatisfiable(Need(memory_mib=60 * GIB), totals) is None


def test_unsatisfiable_judges_only_with_gpu_nodes_and_a_known_need() -> None:
    """No GPU node, or no model memory under auto, is never judged unsatisfiable."""
    assert placement.unsatisfiable(Need(memory_mib=200 * GIB), Snapshot()) is None
    assert placement.unsatisfiable(Need(memory_mib=None), Snapshot((whole_node("w", 1),))) is None


def test_a_pinned_tier_the_cluster_lacks_is_unsatisfiable() -> None:
    """`placement: mig` or `shared` without a fitting slice or share names the tier and rule."""
    totals = Snapshot((whole_node("w", 2), mig_node("m", g1_10gb=7)))
    mig = placement.unsatisfiable(Need(memory_mib=30 * GIB, mode=placement.Mode.MIG), totals)
    assert mig is not None
    assert mig.startswith("placement mig: no MIG slice in the cluster fits")
    shared = placement.unsatisfiable(Need(memory_mib=GIB, mode=placement.Mode.SHARED), totals)
    assert shared is not None
    assert shared.startswith("placement shared: no time-sliced GPU")
    assert (
        placement.unsatisfiable(Need(memory_mib=5 * GIB, mode=placement.Mode.MIG), totals) is None
    )


def test_a_service_below_whole_with_free_cards_is_replanned() -> None:
    """Replicas on a share while whole cards are free ask for a re-plan of the same total."""
    need = Need(memory_mib=6 * GIB)
    current = counts(whole=1, shared=1)
    written = {WHOLE: 1, SHARED: 1}
    action = placement.replan(need, fragmented(), current, asked=2, quota=None, written=written)
    assert action == placement.Upkeep(placement.Chore.REPLAN, desired=2)


def test_settled_tiers_and_unlanded_writes_are_not_replanned() -> None:
    """Whole replicas alone, a plan that changes nothing, or a write not landed: no re-plan."""
    need = Need(memory_mib=6 * GIB)
    full = Snapshot((whole_node("w", 0), shared_node("s", 3, free_memory_mib=8 * GIB)))

    def again(current: Mapping[str, TierCount], written: Mapping[str, int] | None) -> object:
        return placement.replan(need, full, current, asked=2, quota=None, written=written)

    assert again(counts(whole=2), {WHOLE: 2}) is None
    assert again(counts(whole=1, shared=1), {WHOLE: 1, SHARED: 1}) is None  # nowhere better
    assert again(counts(whole=1, shared=1), {WHOLE: 2}) is None  # the write has not landed
    assert (
        placement.replan(
            need, fragmented(), counts(whole=1, shared=1), asked=2, quota=None, written={WHOLE: 2}
        )
        is None
    )


def test_a_total_short_of_the_ask_is_replanned_only_after_an_own_write() -> None:
    """Fewer replicas than asked is re-planned after the caller's write, not before any."""
    need = Need(memory_mib=None)
    snapshot = Snapshot((whole_node("w", 2),))
    current = counts(whole=1)
    assert placement.replan(need, snapshot, current, asked=3, quota=None, written=None) is None
    action = placement.replan(need, snapshot, current, asked=3, quota=None, written={WHOLE: 1})
    assert action == placement.Upkeep(placement.Chore.REPLAN, desired=3)


def test_the_policy_sees_the_asked_total_while_a_move_up_surges() -> None:
    """While the tiers are as written the asked total is reported, else the tiers' sum."""
    specs = {WHOLE: 2, SHARED: 1, MIG_3G: 0}
    assert placement.reported_replicas(specs, written={WHOLE: 2, SHARED: 1}, asked=2) == 2
    assert placement.reported_replicas(specs, written={WHOLE: 1, SHARED: 1}, asked=2) == 3
    assert placement.reported_replicas(specs, written=None, asked=2) == 3
    assert placement.reported_replicas(specs, written={WHOLE: 2, SHARED: 1}, asked=None) == 3


def test_stale_siblings_are_synced_and_idle_ones_deleted_after_the_grace() -> None:
    """An old template is rewritten; an empty sibling goes once empty for the idle grace."""
    stale = placement.Sibling("u1", "web-shared", replicas=1, pods=1, template_current=False)
    empty = placement.Sibling("u2", "web-mig-3g.40gb", replicas=0, pods=0, template_current=True)

    chores, since = placement.tend_siblings(
        [stale, empty], empty_since={}, now_s=100.0, idle_grace_s=120.0
    )
    assert chores == [placement.Upkeep(placement.Chore.SYNC, "web-shared")]
    assert since == {"u2": 100.0}

    chores, since = placement.tend_siblings(
        [empty], empty_since=since, now_s=219.0, idle_grace_s=120.0
    )
    assert chores == []
    chores, since = placement.tend_siblings(
        [empty], empty_since=since, now_s=220.0, idle_grace_s=120.0
    )
    assert chores == [placement.Upkeep(placement.Chore.DELETE, "web-mig-3g.40gb")]
    assert since == {"u2": 100.0}


def test_a_sibling_that_fills_again_starts_its_idle_time_over() -> None:
    """Pods or replicas end the idle time: the next empty spell starts from zero."""
    empty = placement.Sibling("u", "web-shared", replicas=0, pods=0, template_current=True)
    busy = dataclasses.replace(empty, pods=1)
    _, since = placement.tend_siblings([empty], empty_since={}, now_s=0.0, idle_grace_s=60.0)
    _, since = placement.tend_siblings([busy], empty_since=since, now_s=30.0, idle_grace_s=60.0)
    assert since == {}
    chores, since = placement.tend_siblings(
        [empty], empty_since=since, now_s=70.0, idle_grace_s=60.0
    )
    assert chores == []
    assert since == {"u": 70.0}


# Examples: names and values -----------------------------------------------------------------


def test_tier_names_resources_and_ranks() -> None:
    """Each tier maps to its resource; whole ranks above MIG above shared."""
    assert placement.mig_tier("3g.40gb") == "mig-3g.40gb"
    assert placement.mig_profile("mig-3g.40gb") == "3g.40gb"
    assert placement.mig_profile(WHOLE) is None
    assert [placement.resource_of(t) for t in (WHOLE, MIG_3G, SHARED)] == [
        "nvidia.com/gpu",
        "nvidia.com/mig-3g.40gb",
        "nvidia.com/gpu.shared",
    ]
    assert [placement.preference(t) for t in (WHOLE, MIG_1G, SHARED)] == [0, 1, 2]
    assert placement.is_tier(MIG_1G)
    assert not placement.is_tier("mig-oops")
    assert placement.mig_profile_memory_mib("1g.10gb") == 9536
    assert placement.mig_tier("1g.10gb+me") == "mig-1g.10gb+me"


@pytest.mark.parametrize("bad", ["mig-3g", "gpu", "mig-0g.5gb", "", "3g.40gb"])
def test_unknown_tiers_are_refused(bad: str) -> None:
    """A tier name that is not whole, shared or mig-<g>g.<mem>gb raises ValueError."""
    assert not placement.is_tier(bad)
    with pytest.raises(ValueError, match=r"tier|MIG profile"):
        placement.preference(bad)


def test_bad_values_are_refused_with_the_rule() -> None:
    """Bad modes, memory and counts raise ValueError naming what is wrong."""
    with pytest.raises(ValueError, match="fastest"):
        placement.Mode("fastest")
    with pytest.raises(ValueError, match="memory_mib"):
        Need(0)
    with pytest.raises(ValueError, match="serving"):
        TierCount(1, 2)
    with pytest.raises(ValueError, match="MIG profile"):
        NodeCapacity("n", "", 0, 0, mig_free={"big": 1})
    with pytest.raises(ValueError, match=">= 0"):
        NodeCapacity("n", "", 0, -1)
    with pytest.raises(ValueError, match="desired"):
        placement.plan(Need(None), Snapshot(), {}, -1)


@pytest.mark.parametrize(
    ("product", "weight"),
    [
        ("NVIDIA-A100-SXM4-40GB", 30.0),
        ("NVIDIA-A100-PCIE-40GB", 30.0),
        ("NVIDIA A100 40GB PCIe", 30.0),
        ("NVIDIA-A100-SXM4-40GB-SHARED", 30.0),
        ("NVIDIA-GeForce-RTX-4090", 12.0),
        ("nvidia-geforce-rtx-4090", 12.0),
        ("NVIDIA-A800-80GB-PCIe", 54.0),
        ("NVIDIA-A100-SXM4-80GB", 1.0),  # the table names only the 40 GB A100
        ("NVIDIA-GeForce-RTX-40900", 1.0),  # tokens match whole, not as substrings
        ("", 1.0),
    ],
)
def test_core_weight_matches_gfd_products(product: str, weight: float) -> None:
    """GFD product strings find their table row by name tokens; unknown cards of unknown memory
    weigh 1."""
    assert placement.core_weight(product) == weight


def test_core_weight_prefers_the_most_specific_row() -> None:
    """`A100-80GB` beats `A100` for an 80 GB card; a custom table replaces the default."""
    weights = {"A100": 20.0, "A100-80GB": 40.0}
    assert placement.core_weight("NVIDIA-A100-SXM4-80GB", weights) == 40.0
    assert placement.core_weight("NVIDIA-A100-SXM4-40GB", weights) == 20.0


@pytest.mark.parametrize(
    ("product", "memory_mib", "weight"),
    [
        ("NVIDIA-H100-80GB-HBM3", 81559, 0.75 * 81559 / 1024),  # about 60
        ("NVIDIA-L4", 23034, 0.75 * 23034 / 1024),
        ("NVIDIA-GeForce-RTX-4090", 24564, 12.0),  # the table wins over the memory
        ("NVIDIA-H100-80GB-HBM3", 0, 1.0),  # no memory label: one core-hour per card-hour
    ],
)
def test_a_card_the_table_does_not_name_weighs_by_its_memory(
    product: str, memory_mib: int, weight: float
) -> None:
    """An unnamed card weighs `per_gib` per GiB of its memory, 1 when that is unknown too."""
    assert placement.core_weight(product, card_memory_mib=memory_mib) == pytest.approx(weight)
    assert placement.core_weight("NVIDIA-H100-80GB-HBM3", card_memory_mib=81920, per_gib=1.0) == 80


def test_tier_fraction_of_a_card() -> None:
    """Whole is 1, a 3g slice 3/7 (an A30's 2g slice 2/4), a four-way share 1/4."""
    a100 = whole_node("a", 0)
    a30 = whole_node("b", 0, product="NVIDIA-A30", memory=24 * GIB)
    assert placement.tier_fraction(WHOLE, a100) == 1.0
    assert placement.tier_fraction(MIG_3G, a100) == pytest.approx(3 / 7)
    assert placement.tier_fraction(placement.mig_tier("2g.12gb"), a30) == 0.5
    assert placement.tier_fraction(SHARED, shared_node("s", 0, free_memory_mib=None)) == 0.25
    with pytest.raises(ValueError, match="tier"):
        placement.tier_fraction("gpu", a100)


# Properties ---------------------------------------------------------------------------------

PROFILES = ("1g.10gb", "2g.20gb", "3g.40gb", "1g.5gb", "7g.80gb")
TIERS = (WHOLE, SHARED, *(placement.mig_tier(p) for p in PROFILES))


@st.composite
def nodes(draw: st.DrawFn) -> NodeCapacity:
    memory = draw(st.sampled_from([0, 24 * GIB, 40 * GIB, 80 * GIB]))
    replicas = draw(st.integers(1, 4))
    return NodeCapacity(
        name=f"n{draw(st.integers(0, 999))}",
        product=draw(st.sampled_from(["", A100_80, RTX_4090])),
        card_memory_mib=memory,
        whole_free=draw(st.integers(0, 3)),
        mig_free=draw(st.dictionaries(st.sampled_from(PROFILES), st.integers(0, 3), max_size=3)),
        shared_free=draw(st.integers(0, 4)),
        shared_replicas=replicas,
        shared_free_memory_mib=draw(st.none() | st.integers(0, 24 * GIB)),
        usable=draw(st.booleans()),
    )


@st.composite
def tier_counts(draw: st.DrawFn) -> TierCount:
    replicas = draw(st.integers(0, 5))
    serving = draw(st.integers(0, replicas))
    pending = draw(st.integers(0, replicas - serving))
    return TierCount(replicas, serving, pending)


@st.composite
def quotas(draw: st.DrawFn) -> Quota | None:
    if draw(st.booleans()):
        return None
    keys = st.sampled_from(["requests." + placement.resource_of(t) for t in TIERS])
    hard = draw(st.dictionaries(keys, st.integers(0, 12), max_size=3))
    used = {k: draw(st.integers(0, v + 2)) for k, v in hard.items() if draw(st.booleans()) or k}
    return Quota(hard=hard, used=used)


needs = st.builds(
    Need,
    memory_mib=st.none() | st.integers(GIB, 40 * GIB),
    mode=st.sampled_from(placement.Mode),
    headroom_ratio=st.sampled_from([0.0, 0.1, 0.25]),
    cards=st.sampled_from([1, 1, 1, 2]),
)
snapshots = st.builds(Snapshot, st.lists(nodes(), max_size=5).map(tuple))
currents = st.dictionaries(st.sampled_from(TIERS), tier_counts(), max_size=4)
settled_currents = st.dictionaries(
    st.sampled_from(TIERS), st.integers(0, 5).map(lambda n: TierCount(n, n)), max_size=4
)


def _share_mib(node: NodeCapacity) -> float:
    if node.shared_free_memory_mib is not None:
        return node.shared_free_memory_mib
    return node.card_memory_mib / node.shared_replicas


def _grown(result: Plan, current: Mapping[str, TierCount]) -> dict[str, int]:
    now = {t: c.replicas for t, c in current.items()}
    return {t: n - now.get(t, 0) for t, n in result.replicas.items() if n > now.get(t, 0)}


PROPERTY = settings(max_examples=100, deadline=None)


@PROPERTY
@given(needs, snapshots, currents, st.integers(0, 20), quotas())
def test_growth_never_exceeds_free_capacity_except_on_the_waiting_tier(
    need: Need, snapshot: Snapshot, current: dict[str, TierCount], desired: int, quota: Quota | None
) -> None:
    """A tier grows within its free room (less its pending pods), except the waiting tier, and
    every replica beyond a tier's bound pods plus free room is counted in `unplaced`."""
    result = placement.plan(need, snapshot, current, desired, quota)
    free = placement.free_by_tier(need, snapshot)
    waiting = placement.waiting_tier(need, snapshot)
    beyond = 0
    for tier, count in result.replicas.items():
        now = current.get(tier, TierCount(0, 0))
        if count > now.replicas and tier != waiting:
            assert count - now.replicas <= max(0, free.get(tier, 0) - now.pending)
        beyond += max(0, count - (now.replicas - now.pending) - free.get(tier, 0))
    assert result.unplaced >= beyond


@PROPERTY
@given(needs, snapshots, currents, st.integers(0, 20), quotas())
def test_a_model_never_grows_on_a_slice_or_share_too_small(
    need: Need, snapshot: Snapshot, current: dict[str, TierCount], desired: int, quota: Quota | None
) -> None:
    """Every MIG or shared tier that grows has a usable node whose slice or share fits the model
    with headroom, a MIG one under a quarter of that node's card."""
    result = placement.plan(need, snapshot, current, desired, quota)
    padded = need.padded_mib
    for tier in _grown(result, current):
        if tier == WHOLE:
            continue
        assert padded is not None
        assert need.cards == 1
        usable = [n for n in snapshot.nodes if n.usable]
        if tier == SHARED:
            if need.mode is not placement.Mode.SHARED:  # a restricted mode may wait on its tier
                assert any(n.shared_free > 0 and _share_mib(n) >= padded for n in usable)
            continue
        profile = placement.mig_profile(tier)
        assert profile is not None
        assert any(
            profile in n.mig_free
            and padded < n.card_memory_mib / 4
            and padded <= n.mig_memory_mib.get(profile, placement.mig_profile_memory_mib(profile))
            for n in usable
        )


@PROPERTY
@given(needs, snapshots, currents, st.integers(0, 20), quotas())
def test_growth_stays_within_the_quota(
    need: Need, snapshot: Snapshot, current: dict[str, TierCount], desired: int, quota: Quota | None
) -> None:
    """No tier grows past its quota room, and the total stays within `admissible`."""
    result = placement.plan(need, snapshot, current, desired, quota)
    for tier, grown in _grown(result, current).items():
        if quota is not None:
            per_replica = need.cards if tier == WHOLE else 1
            assert grown * per_replica <= quota.room(placement.resource_of(tier))
    total = sum(c.replicas for c in current.values())
    assert result.admissible == placement.admissible(need, snapshot, current, quota)
    if result.admissible is not None:
        assert result.total <= max(total, result.admissible)


@PROPERTY
@given(needs, snapshots, currents, st.integers(1, 10))
def test_scale_up_without_quota_reaches_the_total_and_keeps_every_pod(
    need: Need, snapshot: Snapshot, current: dict[str, TierCount], more: int
) -> None:
    """Without a quota a scale-up plans exactly `desired` (less only what no tier can take) and
    removes no pod that is bound."""
    desired = sum(c.replicas for c in current.values()) + more
    result = placement.plan(need, snapshot, current, desired)
    for tier, now in current.items():
        assert result.replicas[tier] >= now.replicas - now.pending
    fits_nowhere = desired - result.total
    assert fits_nowhere >= 0
    if need.mode in (placement.Mode.AUTO, placement.Mode.WHOLE):
        assert result.total == desired


@PROPERTY
@given(needs, snapshots, settled_currents, st.integers(1, 10), quotas())
def test_scale_up_prefers_the_better_tier(
    need: Need, snapshot: Snapshot, current: dict[str, TierCount], more: int, quota: Quota | None
) -> None:
    """When a lower tier gets new replicas, whole had no room left for them (free or quota)."""
    need = dataclasses.replace(need, mode=placement.Mode.AUTO)
    desired = sum(c.replicas for c in current.values()) + more
    result = placement.plan(need, snapshot, current, desired, quota)
    grown = _grown(result, current)
    if any(t != WHOLE for t in grown):
        room = placement.free_by_tier(need, snapshot)[WHOLE]
        whole_quota = math.inf if quota is None else quota.room("nvidia.com/gpu") // need.cards
        assert grown.get(WHOLE, 0) >= min(room, whole_quota)


@PROPERTY
@given(needs, snapshots, currents, st.integers(1, 10), quotas())
def test_scale_down_keeps_the_serving_count_and_retires_the_worst_tier_first(
    need: Need, snapshot: Snapshot, current: dict[str, TierCount], fewer: int, quota: Quota | None
) -> None:
    """A scale-down removes only pods whose loss keeps serving at min(desired, serving now), and
    a tier loses bound replicas only once every worse tier (off the ladder first) has none."""
    total = sum(c.replicas for c in current.values())
    assume(total > 0)
    desired = max(0, total - fewer)
    result = placement.plan(need, snapshot, current, desired, quota)
    assert desired <= result.total <= total
    serving_now = sum(c.serving for c in current.values())
    serving_after = sum(min(c.serving, result.replicas[t]) for t, c in current.items())
    assert serving_after >= min(desired, serving_now)
    order = placement.ladder(need, snapshot)

    def worth(tier: str) -> tuple[bool, int, int]:
        # The retire order: off the ladder, then shared, then MIG by slice size ascending, then
        # whole. (The ladder places on the smallest slice that fits first, for less waste; a
        # scale-down keeps the larger slice, which serves more.)
        profile = placement.mig_profile(tier)
        size = placement.parse_mig_profile(profile)[0] if profile is not None else 0
        return (tier in order, -placement.preference(tier), size)

    for tier, now in current.items():
        if result.replicas[tier] < now.replicas - now.pending:
            # Bound pods go from a tier only once every worse tier has none left to give.
            for worse, then in current.items():
                if worth(worse) < worth(tier):
                    assert result.replicas[worse] <= then.pending


@PROPERTY
@given(needs, snapshots, currents, quotas())
@example(
    need=Need(4 * GIB),
    snapshot=Snapshot((whole_node("w", 0), shared_node("s", 2, free_memory_mib=None))),
    current={WHOLE: TierCount(4, 2, pending=2)},
    quota=None,
)
def test_a_steady_total_only_adds_better_replicas(
    need: Need, snapshot: Snapshot, current: dict[str, TierCount], quota: Quota | None
) -> None:
    """At a steady total nothing bound is removed, and what is added either moves up the ladder
    or takes over pods stuck pending on a better tier."""
    total = sum(c.replicas for c in current.values())
    result = placement.plan(need, snapshot, current, total, quota)
    assert result.total >= total - sum(c.pending for c in current.values())
    for tier, now in current.items():
        assert result.replicas[tier] >= now.replicas - now.pending
    order = placement.ladder(need, snapshot)
    free = placement.free_by_tier(need, snapshot)
    held = [t for t, c in current.items() if c.replicas > 0]
    stuck = [t for t, c in current.items() if c.pending > free.get(t, 0)]
    for tier in _grown(result, current):
        assert tier in order
        moves_up = any(t not in order or order.index(t) > order.index(tier) for t in held)
        unsticks = any(t in order and order.index(t) < order.index(tier) for t in stuck)
        assert moves_up or unsticks


@PROPERTY
@given(needs, snapshots, currents, st.integers(0, 20), quotas(), st.randoms())
def test_plan_is_deterministic_in_the_order_of_its_inputs(
    need: Need,
    snapshot: Snapshot,
    current: dict[str, TierCount],
    desired: int,
    quota: Quota | None,
    rng: object,
) -> None:
    """Shuffling nodes and tiers changes nothing."""
    import random

    assert isinstance(rng, random.Random)
    nodes_ = list(snapshot.nodes)
    rng.shuffle(nodes_)
    tiers = list(current.items())
    rng.shuffle(tiers)
    one = placement.plan(need, snapshot, current, desired, quota)
    two = placement.plan(need, Snapshot(tuple(nodes_)), dict(tiers), desired, quota)
    assert one == two
