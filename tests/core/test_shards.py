"""`core.shards`: the bucket of each service, stable across processes and faithful to Knative."""

from __future__ import annotations

import collections
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autoscaler.core import shards

KNATIVE_BUCKETS = ("monsoon", "chubasco", "aguacero", "chaparrón")
"""The bucket set of knative.dev/pkg's `hash/bucketer_test.go`."""

keys = st.text(min_size=1, max_size=60)


def test_fnv1a_matches_the_reference_vectors() -> None:
    """FNV-1a 64 gives the published values for the empty string, "a" and "foobar"."""
    assert shards.fnv1a_64(b"") == 0xCBF29CE484222325
    assert shards.fnv1a_64(b"a") == 0xAF63DC4C8601EC8C
    assert shards.fnv1a_64(b"foobar") == 0x85944171F73967E8


def test_owner_agrees_with_knatives_bucket_set() -> None:
    """The keys of Knative's own tests land in the buckets its tests expect, whatever the
    order of the names."""
    for names in (KNATIVE_BUCKETS, tuple(reversed(KNATIVE_BUCKETS))):
        assert names[shards.owner(names, "hagel")] == "monsoon"
        assert names[shards.owner(names, "snow")] == "chubasco"
        assert names[shards.owner(names, "snow/hail")] == "monsoon"
    # Without chubasco, "hagel" stays where it was and "snow" moves.
    fewer = ("monsoon", "aguacero", "chaparrón")
    assert fewer[shards.owner(fewer, "hagel")] == "monsoon"
    assert fewer[shards.owner(fewer, "snow")] != "chubasco"


def test_the_bucket_is_the_same_in_another_process() -> None:
    """A fresh interpreter (another hash seed) puts each service in the same bucket."""
    names = shards.bucket_names("inference-autoscaler", 7)
    services = [f"ns-{i % 5}/model-{i}" for i in range(40)]
    here = [shards.owner(names, s) for s in services]
    script = (
        "import sys\n"
        "from autoscaler.core import shards\n"
        "names = shards.bucket_names('inference-autoscaler', 7)\n"
        "print(','.join(str(shards.owner(names, s)) for s in sys.argv[1:]))\n"
    )
    answer = subprocess.run(
        [sys.executable, "-c", script, *services],
        check=True,
        capture_output=True,
        text=True,
        env={"PYTHONHASHSEED": "12345", "PYTHONPATH": ":".join(sys.path)},
    )
    assert [int(i) for i in answer.stdout.strip().split(",")] == here


def test_one_bucket_keeps_the_single_lease_name() -> None:
    """One bucket is the Lease the controller always used; more are numbered as Knative's."""
    assert shards.bucket_names("inference-autoscaler", 1) == ("inference-autoscaler",)
    assert shards.bucket_names("ctl", 3) == ("ctl.00-of-03", "ctl.01-of-03", "ctl.02-of-03")
    with pytest.raises(ValueError, match="buckets"):
        shards.bucket_names("ctl", 0)
    with pytest.raises(ValueError, match="buckets"):
        shards.bucket_names("ctl", shards.MAX_BUCKETS + 1)


def test_services_spread_over_every_bucket() -> None:
    """Ten thousand services fill eight buckets within a third of the even share each."""
    buckets = shards.Buckets.named("inference-autoscaler", 8)
    counts = collections.Counter(buckets.of(f"team-{i % 37}/llm-{i}") for i in range(10_000))
    assert sorted(counts) == list(range(8))
    assert all(abs(n - 1250) < 1250 / 3 for n in counts.values()), counts


@given(keys, st.integers(min_value=1, max_value=12))
def test_every_service_has_exactly_one_bucket(key: str, count: int) -> None:
    """Each service maps to one valid bucket, the same one every time it is asked."""
    buckets = shards.Buckets.named("ctl", count)
    index = buckets.of(key)
    assert 0 <= index < count
    assert buckets.of(key) == index == shards.owner(buckets.names, key)


@given(st.text(min_size=1, max_size=30), st.integers(min_value=1, max_value=12))
def test_a_replicas_preference_lists_every_bucket_once(identity: str, count: int) -> None:
    """A replica's campaign order is a permutation of the buckets."""
    names = shards.bucket_names("ctl", count)
    assert sorted(shards.preference(identity, names)) == list(range(count))


def test_the_memo_of_buckets_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Services that come and go never grow the memo past its limit, and answers stay the same."""
    monkeypatch.setattr(shards, "MEMO_LIMIT", 10)
    buckets = shards.Buckets.named("ctl", 4)
    first = [buckets.of(f"ns/model-{i}") for i in range(25)]
    assert len(buckets._memo) <= 10
    assert [buckets.of(f"ns/model-{i}") for i in range(25)] == first


def test_a_replica_over_its_ceiling_gives_up_its_least_preferred_buckets() -> None:
    """With nine buckets and three live replicas, one leading five gives up the two it prefers
    least, first the last of its preference."""
    holders = ["a", "a", "b", "a", "c", "a", "b", "a", "c"]
    plan = shards.split("a", holders, preferred=[7, 0, 3, 5, 1, 2, 4, 6, 8])
    assert (plan.replicas, plan.ceiling, plan.floor, plan.led) == (3, 3, 3, 5)
    assert plan.surplus == (1, 5)
    assert not plan.eager
    assert plan.ask is None


def test_nothing_is_given_up_while_a_bucket_is_free() -> None:
    """A free (or expired) bucket stops every hand-over: one bucket moves at a time."""
    plan = shards.split("a", ["a", "a", "a", "a", "a", "a", "b", "c", None])
    assert plan.surplus == ()
    assert plan.eager is False


def test_a_replica_leading_none_asks_the_busiest_only_when_its_floor_is_one_or_more() -> None:
    """An idle replica asks on a bucket of the replica that leads the most when its own floor
    is at least one bucket, and not when there are more replicas than buckets."""
    asking = shards.split("c", ["a", "a", "b", "a", "a", "b"])
    assert (asking.replicas, asking.ceiling, asking.ask, asking.eager) == (3, 2, 0, True)
    five = shards.split("e", ["a", "b", "c", "d", "a", "b"])
    assert (five.replicas, five.floor, five.ask) == (5, 1, 0)
    spare = shards.split("e", ["a", "b", "c", "d"])
    assert (spare.replicas, spare.floor, spare.ask) == (5, 0, None)
    assert shards.split("b", ["a"]).ask is None  # one bucket: the base's single leader


def test_a_replica_at_its_ceiling_gives_one_up_to_a_replica_under_its_floor() -> None:
    """Thirteen buckets led 5/5/3: a replica at the ceiling gives one up, so that it ends
    5/4/4; led 5/4/4, nobody gives."""
    uneven = ["a"] * 5 + ["b"] * 5 + ["c"] * 3
    plan = shards.split("a", uneven, preferred=list(range(13)))
    assert (plan.ceiling, plan.floor, plan.surplus) == (5, 4, (4,))
    even = ["a"] * 5 + ["b"] * 4 + ["c"] * 4
    assert all(not shards.split(r, even).surplus for r in "abc")


def test_replicas_that_asked_are_counted_by_the_holder() -> None:
    """A holder counts the replicas that asked though they lead none, and gives up down to the
    ceiling that makes."""
    plan = shards.split("a", ["a"] * 9, candidates={"b", "c"}, preferred=list(range(9)))
    assert (plan.replicas, plan.ceiling) == (3, 3)
    assert plan.surplus == (8, 7, 6, 5, 4, 3)


@given(
    st.integers(min_value=1, max_value=24),
    st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=24),
    st.integers(min_value=1, max_value=6),
)
def test_handing_over_one_bucket_at_a_time_ends_in_an_even_split(
    count: int, start: list[int], replicas: int
) -> None:
    """From any assignment of the buckets to live replicas, giving each surplus bucket to an
    eager replica one at a time ends with every replica at the floor or the ceiling of its
    share, within as many moves as there are buckets, and then nothing moves."""
    names = [f"r{i}" for i in range(replicas)]
    holders: list[str | None] = [names[start[i % len(start)] % replicas] for i in range(count)]
    for _ in range(count + 1):
        plans = {name: shards.split(name, holders, candidates=names) for name in names}
        giver = next((n for n in names if plans[n].surplus), None)
        if giver is None:
            break
        bucket = plans[giver].surplus[0]
        holders[bucket] = None  # handed over: nothing more is given up meanwhile
        assert all(not shards.split(n, holders, candidates=names).surplus for n in names)
        taker = min((n for n in names if n != giver), key=lambda n: holders.count(n))
        assert shards.split(taker, holders, candidates=names).eager
        holders[bucket] = taker
    else:
        raise AssertionError(f"no even split after {count + 1} moves: {holders}")
    led = collections.Counter(holders)
    share = count / replicas
    assert all(int(share) <= led[n] <= -(-count // replicas) for n in names), led
    assert all(shards.split(n, holders, candidates=names).ask is None for n in names)
