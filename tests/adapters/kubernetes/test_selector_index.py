"""The index of the pod selectors of workloads other than Deployments, by label."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.adapters.kubernetes import cluster
from autoscaler.contract import targets

KEYS = ["app", "tier", "lws"]
VALUES = ["a", "b", "c"]
NAMESPACES = ["ns-a", "ns-b"]

requirement = st.one_of(
    st.builds(
        targets.Requirement,
        st.sampled_from(KEYS),
        st.sampled_from(["in", "notin"]),
        st.frozensets(st.sampled_from(VALUES), min_size=1, max_size=3),
    ),
    st.builds(targets.Requirement, st.sampled_from(KEYS), st.sampled_from(["exists", "!exists"])),
)
selector = st.builds(targets.Selector, st.lists(requirement, max_size=3).map(tuple))
workload = st.tuples(st.sampled_from(NAMESPACES), st.sampled_from(["w0", "w1", "w2", "w3"]))
labels = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=3)


@settings(max_examples=300, deadline=None)
@given(
    changes=st.lists(st.tuples(workload, st.none() | selector), max_size=12),
    pods=st.lists(st.tuples(st.sampled_from(NAMESPACES), labels), min_size=1, max_size=6),
)
def test_a_pods_labels_find_the_selectors_that_select_it_as_matching_each_would(
    changes: list[tuple[tuple[str, str], targets.Selector | None]],
    pods: list[tuple[str, dict[str, str]]],
) -> None:
    """Selectors filed, replaced and removed in any order: a pod's labels find exactly the
    workloads of its namespace whose selector matches them (the empty selector none)."""
    index = cluster._Selectors()
    held: dict[tuple[str, str], targets.Selector] = {}
    for key, chosen in changes:
        if chosen is None:
            index.remove(key)
            held.pop(key, None)
        else:
            index.put(key, chosen)
            held[key] = chosen
        assert bool(index) == bool(held)
        for namespace, pod_labels in pods:
            expected = {k for k, s in held.items() if k[0] == namespace and s.matches(pod_labels)}
            assert set(index.matching(namespace, pod_labels)) == expected
    for key in list(held):
        index.remove(key)
    assert not index
    assert not index._by_label
    assert not index._everywhere
