"""The cache-aware placement rules: model identity, retention, the warm map, hits and ranking."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autoscaler.core import cache, placement

VLLM = "vllm/vllm-openai:v0.6.3"


def test_annotation_names_the_model_over_the_template() -> None:
    """The `model` annotation is the identity whatever the template says."""
    containers = [cache.Container(VLLM, ("--model", "a/b"))]
    found = cache.identify(containers, annotated="org/llama", size_gib=16.0)
    assert found == cache.Model("org/llama", 16.0)


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        (("--model", "meta-llama/Llama-3.1-8B"), {}, "meta-llama/Llama-3.1-8B"),
        (("--model=org/m",), {}, "org/m"),
        (("python", "-m", "srv", "--model-id", "org/m"), {}, "org/m"),
        (("--model-path", "/models/m"), {}, "/models/m"),
        (("vllm", "serve", "org/m", "--port", "8000"), {}, "org/m"),
        ((), {"HF_MODEL_ID": "org/m"}, "org/m"),
        (("--port", "8000"), {"MODEL": "org/m"}, "org/m"),
    ],
)
def test_template_names_the_model_by_argument_or_environment(
    args: tuple[str, ...], env: dict[str, str], named: str
) -> None:
    """The identity is the image and the model the arguments or the environment name."""
    found = cache.identify([cache.Container(VLLM, args, env)])
    assert found is not None
    assert found.identity == f"{VLLM} {named}"


def test_template_without_a_model_is_its_image() -> None:
    """A template that names no model is identified by its first container's image."""
    found = cache.identify([cache.Container("org/baked:1"), cache.Container("sidecar:2")])
    assert found is not None
    assert found.identity == "org/baked:1"
    assert cache.identify([]) is None


def test_a_flag_without_a_value_names_nothing() -> None:
    """`--model` followed by another flag is not read as a model name."""
    assert cache.model_named_by(cache.Container(VLLM, ("--model", "--port", "1"))) is None


@given(st.text(min_size=1, max_size=300))
def test_key_is_label_safe(identity: str) -> None:
    """Every identity gives a key that is a valid label name part."""
    key = cache.key(identity)
    assert 1 <= len(key) <= 63
    assert key[0].isalnum()
    assert key[-1].isalnum()
    assert all(c.isalnum() or c in "-._" for c in key)
    assert key.isascii()


def test_key_reads_as_the_model_and_separates_identities() -> None:
    """The key starts with the model's own name and differs between two identities."""
    a = cache.key(f"{VLLM} meta-llama/Llama-3.1-8B-Instruct")
    b = cache.key("vllm/vllm-openai:v0.7.0 meta-llama/Llama-3.1-8B-Instruct")
    assert a.startswith("llama-3.1-8b-instruct-")
    assert a != b


def test_retention_is_shorter_for_bigger_models_and_clipped() -> None:
    """Retention is base * reference / size, within its bounds, and base without a size."""
    config = cache.Retention(base_s=3600, reference_gib=16, min_s=600, max_s=7200)
    assert cache.retention_s(config, 32.0) == 1800
    assert cache.retention_s(config, 16.0) == 3600
    assert cache.retention_s(config, 4.0) == 7200
    assert cache.retention_s(config, 1000.0) == 600
    assert cache.retention_s(config, None) == 3600


@given(st.floats(0.01, 10_000), st.floats(0.01, 10_000))
def test_retention_never_grows_with_size(a: float, b: float) -> None:
    """A bigger model is never retained longer than a smaller one."""
    config = cache.Retention()
    small, big = sorted((a, b))
    assert cache.retention_s(config, big) <= cache.retention_s(config, small)


def test_retention_refuses_bounds_upside_down() -> None:
    """A minimum above the maximum is refused."""
    with pytest.raises(ValueError, match="min_s"):
        cache.Retention(min_s=10, max_s=5)


M = cache.ModelKey("m-1")


def test_node_is_warm_from_ready_until_retention_after_its_pod_goes() -> None:
    """A node stays warm while its pod runs and for the retention after, then is forgotten."""
    warm = cache.observe({}, M, running={"a": 100.0}, now_s=100.0, retention_s=50.0)
    assert warm[M, "a"] == cache.Warmth(100.0, math.inf)
    warm = cache.observe(warm, M, running={}, now_s=400.0, retention_s=50.0)
    assert warm[M, "a"] == cache.Warmth(100.0, 450.0)
    assert cache.warm_nodes(warm, M, now_s=449.0) == {"a"}
    kept, gone = cache.expire(warm, 450.0)
    assert kept == {}
    assert gone == 1


def test_warmth_returns_without_a_gap_keeps_its_start() -> None:
    """A pod that becomes Ready on a node still warm keeps the node's first warm time."""
    warm = {(M, "a"): cache.Warmth(100.0, 450.0)}
    warm = cache.observe(warm, M, running={"a": 300.0}, now_s=300.0, retention_s=50.0)
    assert warm[M, "a"] == cache.Warmth(100.0, math.inf)
    expired = {(M, "a"): cache.Warmth(100.0, 200.0)}
    again = cache.observe(expired, M, running={"a": 300.0}, now_s=300.0, retention_s=50.0)
    assert again[M, "a"] == cache.Warmth(300.0, math.inf)


def test_other_models_are_untouched() -> None:
    """Seeing one model's pods changes nothing about another model's nodes."""
    other = cache.ModelKey("other-2")
    warm = {(other, "a"): cache.Warmth(0.0, math.inf)}
    assert cache.observe(warm, M, running={}, now_s=10.0, retention_s=5.0) == warm


def test_hit_needs_the_node_warm_when_the_pod_was_created() -> None:
    """A pod created on a node already warm is a hit; one created earlier or elsewhere misses."""
    warm = {(M, "a"): cache.Warmth(100.0, 450.0)}
    assert cache.is_hit(warm, M, node="a", created_s=200.0)
    assert not cache.is_hit(warm, M, node="a", created_s=50.0)
    assert not cache.is_hit(warm, M, node="a", created_s=460.0)
    assert not cache.is_hit(warm, M, node="b", created_s=200.0)


def test_label_value_round_trips_through_a_restart() -> None:
    """A label written for a warm node is read back as warm until the same second."""
    assert cache.label_value(cache.Warmth(1.0, math.inf)) == "1"
    assert cache.label_value(cache.Warmth(1.0, 1000.5)) == "1001"
    assert cache.relearn("1001", now_s=0.0, retention_s=9.0) == cache.Warmth(-math.inf, 1001.0)
    assert cache.relearn("1", now_s=10.0, retention_s=9.0) == cache.Warmth(-math.inf, 19.0)
    assert cache.relearn("soon", now_s=10.0, retention_s=9.0) is None


def test_rank_puts_warm_nodes_first_keeping_order() -> None:
    """Warm nodes come first; each group keeps its order."""
    assert cache.rank(["a", "b", "c", "d"], {"d", "b"}) == ("b", "d", "a", "c")


def test_split_gives_the_median_of_each_kind() -> None:
    """Hits and misses each get the median of their newest starts."""
    starts = [
        cache.Start(1.0, 100.0, hit=False),
        cache.Start(2.0, 120.0, hit=False),
        cache.Start(3.0, 8.0, hit=True),
        cache.Start(4.0, 10.0, hit=True),
        cache.Start(5.0, 12.0, hit=True),
    ]
    found = cache.split(starts, recent=2)
    assert found == cache.StartupSplit(hit_s=11.0, miss_s=110.0, hits=3, misses=2)
    assert cache.split([], recent=5) == cache.StartupSplit()


def _node(name: str, whole: int) -> placement.NodeCapacity:
    return placement.NodeCapacity(
        name=name, product="A100", card_memory_mib=40_000, whole_free=whole
    )


def test_plan_takes_the_room_of_warm_nodes_first() -> None:
    """A scale-up counts its new replicas with room on warm nodes and says so."""
    snapshot = placement.Snapshot((_node("a", 4), _node("b", 1)))
    need = placement.Need(memory_mib=None)
    current = {placement.WHOLE: placement.TierCount(replicas=1, serving=1)}
    found = placement.plan(need, snapshot, current, 4, warm={"b", "gone"})
    assert found.replicas == {placement.WHOLE: 4}
    assert found.warm == 1
    assert "1 new on nodes warm for the model" in found.reason
    cold = placement.plan(need, snapshot, current, 4)
    assert cold.warm == 0
    assert cold.replicas == found.replicas
