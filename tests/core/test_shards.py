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
