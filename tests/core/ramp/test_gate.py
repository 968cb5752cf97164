"""The ramp's checks (`core.ramp.gate`): the fair share of a step, the health gate and the blame
after a failed one."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autoscaler.core import ramp
from autoscaler.core.ramp import Health, RampConfig, Verdict

from .world import HEALTH


@pytest.mark.parametrize(
    ("step", "warming", "stable", "share"),
    [
        (10, 1, 4, 2),  # 10 x 1/5
        (50, 2, 2, 25),
        (100, 1, 3, 25),
        (10, 1, 99, 1),  # 0.1 % rounds up to the 1 % floor
        (30, 0, 4, 0),  # nothing to give weight to
        (10, 3, 0, 100),  # no stable pod: all of it
    ],
)
def test_share_is_the_step_of_the_fair_share(step: int, warming: int, stable: int, share: int):
    """The warming weight is floor(p x K / (N + K)), never the absolute step."""
    assert ramp.share_pct(step, warming, stable) == share


@given(
    step=st.sampled_from([10, 30, 50, 100]),
    warming=st.integers(1, 500),
    stable=st.integers(1, 500),
)
def test_share_stays_within_the_fair_share_and_below_100(step: int, warming: int, stable: int):
    """With serving pods, the share is at least 1, at most max(1, fair share), below 100."""
    share = ramp.share_pct(step, warming, stable)
    assert 1 <= share < 100
    assert share <= max(1.0, step * warming / (stable + warming))


@pytest.mark.parametrize(
    ("warming", "final", "verdict"),
    [
        (Health(100, 0.0, 0.2), False, Verdict.PASS),
        (Health(100, 0.02, 0.2), False, Verdict.FAIL),  # above the absolute limit
        (Health(100, 0.009, 0.2), False, Verdict.FAIL),  # above the serving pods' + slack
        (Health(100, 0.005, 0.2), False, Verdict.PASS),  # within the slack
        (Health(100, 0.0, 0.25), False, Verdict.FAIL),  # 1.25 x the serving P95
        (Health(100, math.nan, 0.2), False, Verdict.PASS),  # no error metric (SGLang)
        (Health(100, math.nan, math.nan), False, Verdict.WAIT),
        (Health(100, math.nan, math.nan), True, Verdict.HOLD),
        (Health(10, 0.0, 0.2), False, Verdict.WAIT),
        (Health(10, 0.1, 0.2), True, Verdict.FAIL),
        (Health(0, math.nan, math.nan), True, Verdict.PASS),
        (Health(math.nan, 0.0, 0.2), False, Verdict.WAIT),
        (Health(math.nan, 0.0, 0.2), True, Verdict.HOLD),
    ],
)
def test_the_gate_compares_with_the_limits_and_the_serving_pods(
    warming: Health, final: bool, verdict: Verdict
) -> None:
    """Error rate and P95 against the limits and the serving pods, with a minimum count."""
    stable = Health(1000, 0.002, 0.2)
    assert ramp.judge(RampConfig(), warming, stable, final=final)[0] is verdict


def test_the_gate_applies_an_absolute_latency_limit() -> None:
    """With `max_p95_latency_s`, a P95 under the ratio but over the limit fails."""
    config = RampConfig(max_p95_latency_s=0.3)
    verdict, why = ramp.judge(config, Health(100, 0.0, 0.35), Health(100, 0.0, 0.3), final=False)
    assert verdict is Verdict.FAIL
    assert "above the limit 0.3 s" in why


def test_blame_names_the_pods_failing_alone() -> None:
    """`blame` reclaims the failing pods and those too thin to judge, and spares the pods that
    pass alone; without an answer, all go."""
    good, bad, thin = HEALTH["good"], HEALTH["erroring"], HEALTH["thin"]
    assert good is not None
    assert bad is not None
    assert thin is not None
    config = RampConfig()
    assert ramp.blame(config, ["a", "b"], {"a": good, "b": bad}) == (("b",), ("a",))
    assert ramp.blame(config, ["a", "b", "c"], {"a": good, "b": bad, "c": thin}) == (
        ("b", "c"),
        ("a",),
    )
    assert ramp.blame(config, ["a", "b"], {"a": good, "b": good}) == (("a", "b"), ())
    assert ramp.blame(config, ["a", "b"], {"b": bad}) == (("a", "b"), ())
