"""The scale target model: kinds, the Scale read from an object, and label selectors."""

import hypothesis
import pytest
from hypothesis import strategies as st

from autoscaler.contract import annotations, targets


def test_parse_kinds_keeps_the_table_order() -> None:
    """Kinds named in any order and case come back in the table's order."""
    kinds = targets.parse_kinds(["Rollouts", " statefulsets ", "deployments"])
    assert kinds == (targets.DEPLOYMENTS, targets.STATEFULSETS, targets.ROLLOUTS)


def test_parse_kinds_names_an_unknown_kind_and_the_known_ones() -> None:
    """An unknown kind is a ValueError that names it and lists the kinds there are."""
    with pytest.raises(ValueError, match=r"'cronjobs'.*deployments, statefulsets"):
        targets.parse_kinds(["deployments", "cronjobs"])


def test_parse_kinds_refuses_none() -> None:
    """An empty list of kinds is a ValueError."""
    with pytest.raises(ValueError, match="no workload kind"):
        targets.parse_kinds([" ", ""])


def test_default_kinds_cover_the_four_and_only_the_crds_are_custom() -> None:
    """By default every kind is watched, and only LeaderWorkerSets and Rollouts may be absent."""
    kinds = targets.parse_kinds(targets.DEFAULT_KINDS)
    assert [k.kind for k in kinds] == ["Deployment", "StatefulSet", "LeaderWorkerSet", "Rollout"]
    assert [k.custom for k in kinds] == [False, False, True, True]
    assert targets.LEADER_WORKER_SETS.api_version == "leaderworkerset.x-k8s.io/v1"
    assert targets.ROLLOUTS.resource == "rollouts.argoproj.io"


def test_scale_of_a_statefulset_serialises_its_label_selector() -> None:
    """A StatefulSet's Scale carries its replicas and its spec.selector as text."""
    sts = {
        "spec": {
            "replicas": 3,
            "selector": {
                "matchLabels": {"app": "llm", "tier": "gpu"},
                "matchExpressions": [
                    {"key": "zone", "operator": "In", "values": ["b", "a"]},
                    {"key": "canary", "operator": "DoesNotExist"},
                ],
            },
        },
        "status": {"replicas": 2},
    }
    scale = targets.scale_of(targets.STATEFULSETS, sts)
    assert scale == targets.Scale(3, 2, "app=llm,tier=gpu,zone in (a,b),!canary")


def test_scale_of_a_leaderworkerset_reads_the_leader_selector_text() -> None:
    """A LeaderWorkerSet's Scale takes its selector text from status.hpaPodSelector."""
    lws = {
        "spec": {"replicas": 2, "selector": {"matchLabels": {"ignored": "yes"}}},
        "status": {"replicas": 2, "hpaPodSelector": "lws/name=m,lws/worker-index=0"},
    }
    scale = targets.scale_of(targets.LEADER_WORKER_SETS, lws)
    assert scale == targets.Scale(2, 2, "lws/name=m,lws/worker-index=0")


def test_scale_of_an_object_without_counts_or_status_uses_the_api_defaults() -> None:
    """Absent spec.replicas reads as 1, absent status as 0 replicas and no selector."""
    assert targets.scale_of(targets.ROLLOUTS, {"spec": {}}) == targets.Scale(1, 0, "")
    assert targets.scale_of(targets.ROLLOUTS, {"spec": {"replicas": True}}).spec_replicas == 1


def test_templates_of_a_leaderworkerset_are_its_leader_and_worker_templates() -> None:
    """A LeaderWorkerSet has two pod templates; a missing leader template is skipped."""
    worker = {"metadata": {"labels": {"role": "worker"}}}
    lws = {"spec": {"leaderWorkerTemplate": {"workerTemplate": worker, "size": 4}}}
    assert targets.templates_of(targets.LEADER_WORKER_SETS, lws) == [worker]


@pytest.mark.parametrize(
    ("text", "labels", "selected"),
    [
        ("app=llm", {"app": "llm"}, True),
        ("app==llm,tier!=cpu", {"app": "llm", "tier": "gpu"}, True),
        ("app=llm,tier!=cpu", {"app": "llm", "tier": "cpu"}, False),
        ("zone in (a, b),!canary", {"zone": "b"}, True),
        ("zone in (a,b),!canary", {"zone": "b", "canary": "1"}, False),
        ("zone notin (a,b)", {}, True),
        ("example.com/role", {"example.com/role": ""}, True),
        ("example.com/role", {}, False),
        ("app=", {"app": ""}, True),
        ("", {"app": "llm"}, False),
    ],
)
def test_selector_matches_as_the_api_does(
    text: str, labels: dict[str, str], selected: bool
) -> None:
    """A parsed selector selects the labels the API server's would (an empty one: none)."""
    assert targets.parse_selector(text).matches(labels) is selected


@pytest.mark.parametrize("text", ["app in (a", "=x", "app in ()", "a b", "app=(x)"])
def test_a_malformed_selector_is_a_value_error(text: str) -> None:
    """A selector that cannot be read is a ValueError quoting it."""
    with pytest.raises(ValueError, match="label selector"):
        targets.parse_selector(text)


_label = st.from_regex(r"[a-z][a-z0-9]{0,5}", fullmatch=True)


@hypothesis.given(
    st.dictionaries(_label, _label, max_size=4),
    st.dictionaries(_label, st.lists(_label, min_size=1, max_size=3), max_size=3),
    st.dictionaries(_label, _label, max_size=6),
)
def test_a_formatted_label_selector_reads_back_to_the_same_choice(
    match: dict[str, str], within: dict[str, list[str]], labels: dict[str, str]
) -> None:
    """A LabelSelector formatted as text and parsed again selects the same labels."""
    selector = {
        "matchLabels": match,
        "matchExpressions": [{"key": k, "operator": "In", "values": v} for k, v in within.items()],
    }
    expected = all(labels.get(k) == v for k, v in match.items()) and all(
        labels.get(k) in v for k, v in within.items()
    )
    parsed = targets.parse_selector(targets.format_selector(selector))
    assert parsed.matches(labels) is (expected and bool(match or within))


def test_of_finds_a_kind_by_its_group_and_name() -> None:
    """A kind is found by its apiVersion's group and its kind; others are not scalable here."""
    assert targets.of("apps/v1", "StatefulSet") is targets.STATEFULSETS
    assert targets.of("argoproj.io/v1alpha1", "Rollout") is targets.ROLLOUTS
    assert targets.of("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet") is (
        targets.LEADER_WORKER_SETS
    )
    assert targets.of("v1", "Pod") is None
    assert targets.of("example.com/v1", "StatefulSet") is None


def _gated_template() -> dict[str, object]:
    gate = {"conditionType": annotations.WARM_GATE}
    return {"metadata": {"labels": {"app": "m"}}, "spec": {"readinessGates": [gate]}}


def test_unsupported_refuses_placement_tiers_and_the_gate_on_other_kinds_only() -> None:
    """Another kind asking for a placement ladder or the warm-up gate gets a problem for each,
    naming the key and the value; a Deployment or `placement: whole` gets none."""
    sts = {"spec": {"template": _gated_template()}}
    notes = {targets.PLACEMENT_KEY: "mig"}
    problems = targets.unsupported(targets.STATEFULSETS, sts, notes)
    assert [(p.key, p.value) for p in problems] == [
        (targets.PLACEMENT_KEY, "mig"),
        (annotations.WARM_GATE, "readinessGates"),
    ]
    assert "Deployment-only" in problems[0].rule
    assert targets.unsupported(targets.DEPLOYMENTS, sts, notes) == []
    plain = {"spec": {"template": {"metadata": {"labels": {"app": "m"}}}}}
    whole = {targets.PLACEMENT_KEY: "whole"}
    assert targets.unsupported(targets.STATEFULSETS, plain, whole) == []


def test_a_warming_label_on_a_worker_template_is_the_gate_too() -> None:
    """A LeaderWorkerSet's worker template with the warming label opts into the gate."""
    worker = {"metadata": {"labels": {annotations.WARMING_LABEL: "true"}}}
    lws = {"spec": {"leaderWorkerTemplate": {"workerTemplate": worker}}}
    (problem,) = targets.unsupported(targets.LEADER_WORKER_SETS, lws, {})
    assert problem.key == annotations.WARM_GATE
