"""The registry the simulator uses to offer the baselines by name."""

from __future__ import annotations

import numpy as np
import pytest

from autoscaler import baselines
from autoscaler.baselines import hpa, keda, kpa, oracle


def test_registry_names_the_four_baselines() -> None:
    """`hpa`, `keda`, `kpa` and `oracle` are offered, nothing else."""
    assert sorted(baselines.REGISTRY) == ["hpa", "keda", "kpa", "oracle"]


@pytest.mark.parametrize(
    ("name", "kind"), [("hpa", hpa.Hpa), ("keda", keda.Keda), ("kpa", kpa.Kpa)]
)
def test_make_builds_each_controller_with_its_target(name: str, kind: type) -> None:
    """`make` returns the named baseline carrying the given target."""
    policy = baselines.make(name, target=7.5)
    assert isinstance(policy, kind)
    assert policy.target == 7.5


def test_make_passes_options_through() -> None:
    """Options past the common ones reach the constructor."""
    policy = baselines.make("keda", target=1.0, use_cached_metrics=True)
    assert isinstance(policy, keda.Keda)
    assert policy.use_cached_metrics


def test_oracle_target_is_a_utilisation_of_mu() -> None:
    """The oracle's target over mu is its target utilisation."""
    policy = baselines.make("oracle", target=0.75, arrivals=np.ones(10), mu=1.0, startup_s=65.0)
    assert isinstance(policy, oracle.Oracle)
    assert policy.target_utilisation == pytest.approx(0.75)


def test_oracle_without_the_trace_is_refused() -> None:
    """The oracle cannot be built without arrivals, mu and start-up delay."""
    with pytest.raises(ValueError, match="arrivals"):
        baselines.make("oracle", target=0.75)


def test_unknown_name_is_refused() -> None:
    """A name outside the registry raises and lists the known ones."""
    with pytest.raises(ValueError, match="hpa, keda, kpa, oracle"):
        baselines.make("vpa", target=1.0)
