"""The `forecast` key: the seasonal forecast on by default, off on request, anything else
refused with the key, the value and the rule."""

from autoscaler.contract import annotations as ann
from autoscaler.core import model

BASE = {"enabled": "true", "max-replicas": "10", "target-qps-per-replica": "5"}


def parse(**extra: str) -> ann.ServiceConfig | ann.Invalid:
    settings = {ann.PREFIX + k: v for k, v in {**BASE, **extra}.items()}
    return ann.parse(settings, namespace="team")


def test_the_default_policy_has_the_forecast_unless_switched_off() -> None:
    """Without the key the default policy carries the forecast; `off` removes it."""
    on = parse()
    off = parse(forecast="off")
    auto = parse(forecast="auto")
    assert isinstance(on, ann.ServiceConfig)
    assert isinstance(off, ann.ServiceConfig)
    assert isinstance(auto, ann.ServiceConfig)
    assert on.policy.forecast == model.ForecastConfig()
    assert auto.policy.forecast == model.ForecastConfig()
    assert off.policy.forecast is None
    assert off.policy.lookahead is not None


def test_the_seed_policy_never_forecasts() -> None:
    """The plain policy has no forecast, whatever the key says."""
    seed = parse(policy="seed", forecast="auto")
    assert isinstance(seed, ann.ServiceConfig)
    assert seed.policy.forecast is None


def test_a_bad_value_names_the_key_the_value_and_the_rule() -> None:
    """An unknown value is refused with the key, the value and the values allowed."""
    bad = parse(forecast="yes")
    assert isinstance(bad, ann.Invalid)
    (problem,) = bad.problems
    message = problem.message
    assert "autoscaler.dsec.io/forecast" in message
    assert '"yes"' in message
    assert "auto" in message
    assert "off" in message
