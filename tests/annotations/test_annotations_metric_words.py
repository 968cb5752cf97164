"""Metric names that match the grammar but that PromQL reads as a keyword or a number."""

import pytest

from autoscaler import metricnames
from autoscaler.contract import annotations as ann
from autoscaler.contract.annotations import PREFIX

BASE = {
    ann.ENABLED_KEY: "true",
    PREFIX + "max-replicas": "10",
    PREFIX + "target-qps-per-replica": "5",
    PREFIX + "target-queue-per-replica": "4",
    PREFIX + "server": "custom",
    PREFIX + "metric-requests": "requests_total",
    PREFIX + "metric-queue": "queue_depth",
}
RESERVED = sorted(metricnames.RESERVED_WORDS)
"""Every reserved word, each also in upper case and in mixed case (the lexer ignores case)."""
SPELLINGS = [w for word in RESERVED for w in (word, word.upper(), word.capitalize())]
NEAR = ["nan_total", "inf:x", "bool_x", "on_x", "xnan", "Info", "ignoring2", "group_left:x",
        "atan", "sum", "and", "by", "offset", "fill", "rate", "time"]  # fmt: skip
"""Names that look like a reserved word but are not one, and keywords PromQL takes as names."""


def test_the_reserved_words_are_prometheus_s_own() -> None:
    """The list is the lexer's keywords and numbers that the grammar refuses as a metric name."""
    expected = {"atan2", "bool", "on", "ignoring", "group_left", "group_right", "inf", "nan"}
    assert set(metricnames.RESERVED_WORDS) == expected


@pytest.mark.parametrize("key", ["metric-requests", "metric-queue"])
@pytest.mark.parametrize("word", SPELLINGS)
def test_a_reserved_word_as_metric_name_is_refused_naming_key_value_and_rule(
    key: str, word: str
) -> None:
    """A reserved word is refused with one problem that names the key, the value and the rule."""
    result = ann.parse(BASE | {PREFIX + key: word}, namespace="ns")

    assert isinstance(result, ann.Invalid), result
    (problem,) = result.problems
    assert problem.message == f'{PREFIX}{key}="{word}": {ann.RULES[PREFIX + key]}'
    assert "not a word PromQL reserves (atan2, bool, group_left" in problem.message


@pytest.mark.parametrize("word", SPELLINGS)
def test_a_reserved_word_never_makes_metric_names(word: str) -> None:
    """`MetricNames`, which the adapter queries, refuses a reserved word in every field."""
    with pytest.raises(ValueError, match="word of PromQL's grammar"):
        metricnames.MetricNames(requests=word, queue="q")
    with pytest.raises(ValueError, match="word of PromQL's grammar"):
        metricnames.MetricNames(requests="r", queue="q", latency=word)


@pytest.mark.parametrize("name", NEAR)
def test_names_near_a_reserved_word_are_accepted(name: str) -> None:
    """A longer name that contains a reserved word, or a keyword PromQL reads as a name, passes."""
    result = ann.parse(BASE | {PREFIX + "metric-requests": name}, namespace="ns")

    assert isinstance(result, ann.ServiceConfig), result
    assert result.metrics.requests == name
