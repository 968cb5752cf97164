"""The routers' shared helpers: names, weights, the owner's Service, and spec comparison."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autoscaler.adapters.mesh import _objects


def svc(name: str, selector: dict[str, str] | None, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"selector": selector, **spec}}


@given(st.integers(0, 100))
def test_split_sums_to_100(pct: int) -> None:
    """Every whole percentage splits into two weights summing to 100."""
    stable, warming = _objects.split(pct)
    assert (stable + warming, warming) == (100, pct)


@given(st.text("abcdefghij-.", min_size=1, max_size=300))
def test_bounded_names_fit_and_keep_their_suffix(base: str) -> None:
    """A long name is cut to the limit and still ends with its suffix."""
    name = _objects.bounded_name(base, "-warming", 63)
    assert len(name) <= 63
    assert name.endswith("-warming")
    if len(base) <= 55:
        assert name == base + "-warming"


def test_distinct_long_names_stay_distinct() -> None:
    """Two long bases sharing a prefix get different bounded names."""
    one = _objects.bounded_name("x" * 70 + "a", "-stable", 63)
    two = _objects.bounded_name("x" * 70 + "b", "-stable", 63)
    assert one != two


def test_the_owners_service_is_the_most_specific_clusterip_selector() -> None:
    """Subset selectors only; ClusterIP over headless; more labels over fewer; ours never."""
    labels = {"app": "web", "model": "llama"}
    services = [
        svc("all", {}),
        svc("none", None),
        svc("other", {"app": "other"}),
        svc("wider", {"app": "web", "model": "llama", "extra": "x"}),
        svc("b-app", {"app": "web"}),
        svc("a-headless", {"app": "web", "model": "llama"}, clusterIP="None"),
        svc("z-both", {"app": "web", "model": "llama"}),
        {
            "metadata": {
                "name": "a-ours",
                "labels": {_objects.MANAGED_BY_LABEL: "inference-autoscaler"},
            },
            "spec": {"selector": {"app": "web"}},
        },
    ]
    chosen = _objects.choose_service(services, labels)
    assert chosen is not None
    assert chosen["metadata"]["name"] == "z-both"
    assert _objects.choose_service(services[:4], labels) is None


@pytest.mark.parametrize(
    ("stored", "wanted", "held"),
    [
        ({"a": 1, "b": 2}, {"a": 1}, True),
        ({"a": [{"x": 1, "default": 0}]}, {"a": [{"x": 1}]}, True),
        ({"a": [{"x": 1}, {"x": 2}]}, {"a": [{"x": 1}]}, False),
        ({"a": {"x": 1}}, {"a": {"x": 2}}, False),
        ({}, {"a": None}, False),
    ],
)
def test_contains_allows_defaults_but_not_differences(
    stored: dict[str, Any], wanted: dict[str, Any], held: bool
) -> None:
    """Extra keys in maps are defaults; list lengths and values must match."""
    assert _objects.contains(stored, wanted) is held


@pytest.mark.parametrize(
    ("found", "kept"),
    [
        ({"s": 70, "w": 30}, (70, 30)),
        ({"s": 70}, (100, 0)),
        ({"s": 70, "w": 40}, (100, 0)),
        ({"s": 110, "w": -10}, (100, 0)),
    ],
)
def test_only_a_whole_stored_split_is_kept(found: dict[str, int], kept: tuple[int, int]) -> None:
    """Ensure keeps stored weights only when both are there and sum to 100."""
    assert _objects.kept_split(found, "s", "w") == kept


def test_the_routed_port_is_the_http_one() -> None:
    """By name or appProtocol, else the first port."""
    owner = _objects.OwnerService(
        "web",
        {"app": "web"},
        ({"name": "grpc", "port": 1}, {"name": "metrics", "port": 2, "appProtocol": "http"}),
    )
    assert owner.http_port() == {"name": "metrics", "port": 2, "appProtocol": "http"}
    assert _objects.OwnerService("web", {}, ({"port": 3}, {"port": 4})).http_port() == {"port": 3}
    assert _objects.OwnerService("web", {}, ()).http_port() is None
