"""The virtual cluster described by GPU tier: the placement ladder, tier speeds, core-hours,
pending time and the GPU quota (docs/architecture.md, "The placement ladder" and "Accounting";
docs/simulator.md)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import structlog

from autoscaler import cli
from autoscaler.core import model, placement, policy
from autoscaler.experiment import run
from autoscaler.sim import world
from autoscaler.sim.cluster import Lifecycle, ServiceSpec, SimCluster
from autoscaler.sim.params import (
    FRAGMENTED,
    PLACEMENT_SUMMARY_KEYS,
    SUMMARY_KEYS,
    NodeSpec,
    SimParams,
)

GIB = 1024
FIXED = Lifecycle(startup_s=60.0, startup_sigma=0.0, warmup_s=5.0)
A100_40 = "NVIDIA-A100-SXM4-40GB"
A800_80 = "NVIDIA-A800-SXM4-80GB"
MIG_3G = placement.mig_tier("3g.40gb")


def whole_cards(n: int) -> NodeSpec:
    return NodeSpec("a100", A100_40, 40 * GIB, whole=n)


def mig_slices(n: int) -> NodeSpec:
    return NodeSpec("a800", A800_80, 80 * GIB, mig=(("3g.40gb", n),))


def shares(cards: int, *, free_mib: int) -> NodeSpec:
    """Time-sliced RTX 4090s, two of four shares taken, `free_mib` left on each card."""
    return NodeSpec(
        "rtx",
        "NVIDIA-GeForce-RTX-4090-SHARED",
        24 * GIB,
        shared_cards=cards,
        shared_replicas=4,
        shared_taken=2,
        shared_used_mib=24 * GIB - free_mib,
    )


SMALL_MODEL = placement.Need(6 * GIB)


def spec(name: str = "ns/model", *, need: placement.Need | None = SMALL_MODEL) -> ServiceSpec:
    config = policy.seed(max_replicas=50, target_load_per_replica=0.75)
    return ServiceSpec(model.ServiceId(name), config, lifecycle=FIXED, need=need)


def advance_to(cluster: SimCluster, t_s: float) -> None:
    while cluster.now_s < t_s - 1e-9:
        cluster.advance(1.0)


def tiers(cluster: SimCluster, service: model.ServiceId) -> dict[str, int]:
    return {t: c.replicas for t, c in cluster.tier_counts(service).items()}


# The cluster ---------------------------------------------------------------------------------


async def test_scale_up_goes_down_the_ladder_and_serves_at_each_tiers_speed() -> None:
    """Two whole cards, two 3g slices and one share with room: 5 replicas fill them in that
    order and serve 2 + 2 x 3/7 + 1/4 cards' worth."""
    cluster = SimCluster(nodes=(whole_cards(2), mig_slices(2), shares(2, free_mib=7 * GIB)))
    sid = cluster.add_service(spec()).spec.id
    await cluster.scale(sid, 5)
    state = cluster.service(sid)
    assert state.plan is not None
    assert state.plan.reason == "whole cards full: 2 on mig-3g.40gb, 1 on shared"
    advance_to(cluster, 70)

    assert tiers(cluster, sid) == {placement.WHOLE: 2, MIG_3G: 2, placement.SHARED: 1}
    assert cluster.counts(sid).serving == 5
    assert state.serving_speed == pytest.approx(2 + 2 * 3 / 7 + 1 / 4)


async def test_a_share_takes_only_as_many_copies_as_its_free_memory_holds() -> None:
    """Two free shares but 7 GiB free take one 6 GiB model; the second copy waits on whole."""
    cluster = SimCluster(nodes=(shares(1, free_mib=7 * GIB),))
    sid = cluster.add_service(spec()).spec.id
    await cluster.scale(sid, 2)

    assert tiers(cluster, sid) == {placement.WHOLE: 1, placement.SHARED: 1}
    assert cluster.counts(sid).pending == 1
    assert cluster.service(sid).plan is not None
    assert cluster.service(sid).plan.unplaced == 1  # type: ignore[union-attr]


async def test_whole_only_leaves_pods_pending_and_counts_the_time() -> None:
    """`placement: whole` on a full cluster leaves the third pod pending: 100 s pending."""
    cluster = SimCluster(nodes=(whole_cards(2), mig_slices(4)))
    sid = cluster.add_service(spec(need=placement.Need(6 * GIB, mode="whole"))).spec.id
    await cluster.scale(sid, 3)
    advance_to(cluster, 100)

    assert tiers(cluster, sid) == {placement.WHOLE: 3}
    assert cluster.counts(sid).pending == 1
    assert cluster.pending_seconds(sid) == pytest.approx(100.0)


async def test_pods_stuck_on_whole_move_to_a_slice_that_frees() -> None:
    """A pod pending on whole moves to a MIG slice as soon as another service releases it."""
    cluster = SimCluster(nodes=(whole_cards(1), mig_slices(1)))
    other = cluster.add_service(
        spec("ns/other", need=placement.Need(6 * GIB, mode="mig")), replicas=1
    )
    sid = cluster.add_service(spec()).spec.id
    assert tiers(cluster, other.spec.id) == {MIG_3G: 1}
    await cluster.scale(sid, 2)
    assert cluster.counts(sid).pending == 1

    await cluster.scale(other.spec.id, 0)
    advance_to(cluster, 1)

    assert tiers(cluster, sid) == {placement.WHOLE: 1, MIG_3G: 1}
    assert cluster.counts(sid).pending == 0


async def test_replicas_move_up_to_whole_cards_and_serving_never_drops() -> None:
    """When a whole card frees, a whole replica starts beside the share, and the share goes
    only once the whole replica serves: the serving count stays at 2 throughout."""
    cluster = SimCluster(nodes=(whole_cards(2), shares(1, free_mib=8 * GIB)))
    other = cluster.add_service(spec("ns/other", need=None), replicas=1)
    sid = cluster.add_service(spec(), replicas=2).spec.id
    assert tiers(cluster, sid) == {placement.WHOLE: 1, placement.SHARED: 1}

    await cluster.scale(other.spec.id, 0)
    serving = []
    for _ in range(80):
        cluster.advance(1.0)
        serving.append(cluster.counts(sid).serving)

    assert tiers(cluster, sid) == {placement.WHOLE: 2}
    assert min(serving) == 2
    assert cluster.counts(sid).holding_gpu == 2
    assert cluster.workloads()[1].replicas == 2


async def test_core_seconds_weigh_card_product_and_fraction() -> None:
    """An hour on an A100-40GB card (30) and on a 3g slice of an A800-80GB (54 x 3/7)."""
    cluster = SimCluster(nodes=(whole_cards(1), mig_slices(1)))
    sid = cluster.add_service(spec(), replicas=2).spec.id
    advance_to(cluster, 3600)

    assert cluster.core_seconds(sid) / 3600 == pytest.approx(30 + 54 * 3 / 7)
    assert cluster.gpu_seconds(sid) / 3600 == pytest.approx(2)
    assert cluster.tier_seconds(sid) == {placement.WHOLE: 3600.0, MIG_3G: 3600.0}
    assert cluster.workloads()[0].core_rate == pytest.approx(30 + 54 * 3 / 7)


async def test_tier_speeds_override_the_card_fraction() -> None:
    """A table saying a 3g slice serves 0.6 of a card replaces the default 3/7."""
    cluster = SimCluster(nodes=(mig_slices(1),), tier_speeds={"mig": 0.6})
    sid = cluster.add_service(spec(), replicas=1).spec.id
    assert cluster.service(sid).serving_speed == pytest.approx(0.6)


async def test_quota_caps_what_the_plan_asks_for_and_what_workloads_admit() -> None:
    """Quota for 3 whole cards: a scale to 5 asks for 3, and the workload admits 3."""
    cluster = SimCluster(nodes=(whole_cards(8),), quota={"requests.nvidia.com/gpu": 3})
    sid = cluster.add_service(spec(), replicas=1).spec.id
    await cluster.scale(sid, 5)

    assert tiers(cluster, sid) == {placement.WHOLE: 3}
    assert cluster.workloads()[0].admissible == 3
    assert cluster.workloads()[0].replicas == 5


async def test_the_fragmented_cluster_runs_out_of_each_tier_in_turn() -> None:
    """The `fragmented` preset holds 48 replicas of a 6 GiB model: 24 on whole cards, 8 on MIG
    slices and one share on each of the 16 RTX 4090s; the next two wait."""
    cluster = SimCluster(nodes=FRAGMENTED)
    sid = cluster.add_service(spec()).spec.id
    await cluster.scale(sid, 50)

    assert tiers(cluster, sid) == {placement.WHOLE: 26, MIG_3G: 8, placement.SHARED: 16}
    assert cluster.counts(sid).pending == 2


def test_plain_cluster_core_time_is_its_gpu_time() -> None:
    """On the plain model every card weighs 1: core-seconds equal GPU-seconds."""
    cluster = SimCluster(gpus=3, gpus_per_node=2)
    sid = cluster.add_service(spec(need=None), replicas=3).spec.id
    advance_to(cluster, 50)
    assert cluster.core_seconds(sid) == cluster.gpu_seconds(sid) == 150.0
    assert cluster.service(sid).serving_speed == 3.0


def test_bad_cluster_descriptions_are_refused() -> None:
    """Nodes with gpus, a need without tiers, and bad node counts raise ValueError."""
    with pytest.raises(ValueError, match="either nodes or gpus"):
        SimCluster(gpus=2, nodes=(whole_cards(1),))
    with pytest.raises(ValueError, match="described by tier"):
        SimCluster(gpus=2).add_service(spec())
    with pytest.raises(ValueError, match=">= 0"):
        NodeSpec("n", whole=-1)
    with pytest.raises(ValueError, match="shared_taken"):
        NodeSpec("n", shared_cards=1, shared_replicas=2, shared_taken=3)
    with pytest.raises(ValueError, match="placement"):
        SimParams(placement="best")
    with pytest.raises(ValueError, match="either nodes or gpus"):
        SimParams(gpus=4, nodes=(whole_cards(1),))


# Whole runs ----------------------------------------------------------------------------------


def busy_trace() -> np.ndarray:
    """Three replicas' worth, then eight from 2 min to 8 min, for 10 minutes."""
    rng = np.random.default_rng(3)
    rate = np.where((np.arange(600) >= 120) & (np.arange(600) < 480), 8.0, 3.0) * 0.75
    return rng.poisson(rate).astype(float)


TIERED = SimParams(
    startup_sigma=0.0,
    max_replicas=14,
    nodes=(whole_cards(4), mig_slices(8), shares(2, free_mib=8 * GIB)),
    model_memory_mib=6 * GIB,
)


def test_the_ladder_serves_what_whole_cards_alone_leave_pending() -> None:
    """On a cluster with 4 free cards, the ladder takes the load whole cards alone cannot:
    no pending time and fewer misses, for more core-hours; both use their tiers only."""
    whole = run.simulate(busy_trace(), TIERED)
    ladder = run.simulate(busy_trace(), dataclasses.replace(TIERED, placement="ladder"))

    for result in (whole, ladder):
        assert set(result.summary) == SUMMARY_KEYS | PLACEMENT_SUMMARY_KEYS
    w, lad = whole.summary, ladder.summary
    assert w["pending_replica_s"] > 1000
    assert lad["pending_replica_s"] == 0
    assert lad["slo_misses"] < w["slo_misses"] * 0.8
    assert lad["core_hours"] > w["core_hours"]
    assert set(w["placement"]["tier_replica_s"]) == {placement.WHOLE}
    assert MIG_3G in lad["placement"]["tier_replica_s"]


def test_the_plain_model_reports_core_hours_equal_to_gpu_hours() -> None:
    """Without a tiered cluster the new summary keys change nothing: core = GPU hours."""
    result = run.simulate(busy_trace(), SimParams(startup_sigma=0.0, max_replicas=20))
    s = result.summary
    assert set(s) == SUMMARY_KEYS
    assert s["core_hours"] == pytest.approx(s["gpu_hours"], rel=1e-12)
    assert s["pending_replica_s"] == 0


def test_the_policy_holds_at_the_gpu_quota_through_the_loop() -> None:
    """With quota for 5 cards the loop never asks past 5, however high the load goes."""
    params = dataclasses.replace(TIERED, gpu_quota=(("requests.nvidia.com/gpu", 5),))
    unbounded = run.simulate(busy_trace(), TIERED)
    result = run.simulate(busy_trace(), params)

    assert unbounded.timeseries["replicas_desired"].max() > 5
    assert result.timeseries["replicas_desired"].max() == 5


async def test_quota_decisions_carry_the_quota_reason() -> None:
    """The decisions that meet the quota say so, and none asks for more than it admits."""
    params = dataclasses.replace(
        TIERED, gpu_quota=(("requests.nvidia.com/gpu", 4),), initial_replicas=3
    )
    sim = world.World(params)
    sid = sim.add_service("sim/inference", busy_trace(), params)
    await run.drive(sim, until_s=300.0)

    decisions = [d for _, d in sim.cluster.service(sid).decisions]
    assert model.Reason.QUOTA in {d.reason for d in decisions}
    assert max(d.desired for d in decisions) == 4
    assert any("the GPU quota admits 4 replicas" in d.detail for d in decisions)


def test_simulate_command_runs_the_ladder_on_a_named_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`autoscaler simulate --placement ladder` runs on the fragmented cluster and says so in
    summary.json and in its table."""
    trace = tmp_path / "trace.csv"
    rows = "".join(f"{t},{c:g}\n" for t, c in enumerate(busy_trace()[:300]))
    trace.write_text("t_seconds,requests\n" + rows)
    out = tmp_path / "out"
    try:
        code = cli.main(
            ["simulate", "--trace", str(trace), "--placement", "ladder", "--out", str(out)]
        )
    finally:
        structlog.reset_defaults()

    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["params"]["placement"] == "ladder"
    assert summary["params"]["nodes"][0]["name"] == "a100"
    assert summary["params"]["model_memory_mib"] == 6 * GIB
    assert set(summary) >= SUMMARY_KEYS | PLACEMENT_SUMMARY_KEYS
    assert "| core-hours" in capsys.readouterr().out
