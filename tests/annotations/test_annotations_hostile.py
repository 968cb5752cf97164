"""Hostile annotation values: refused, and never shown raw or at length in a message."""

from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler import metricnames
from autoscaler.contract import annotations as ann
from autoscaler.contract.annotations import PREFIX

BASE = {
    ann.ENABLED_KEY: "true",
    PREFIX + "max-replicas": "10",
    PREFIX + "target-qps-per-replica": "5",
    PREFIX + "server": "custom",
    PREFIX + "metric-requests": "requests_total",
}

MESSAGE_MAX = 400
"""Longest message any value may produce: key, 80 escaped characters, length note, rule."""


def problems(key: str, value: str) -> list[str]:
    result = ann.parse(BASE | {PREFIX + key: value}, namespace="ns")
    assert isinstance(result, ann.Invalid), result
    return [p.message for p in result.problems]


def assert_safe(message: str) -> None:
    assert message.isprintable(), message
    assert len(message) <= MESSAGE_MAX, len(message)


def test_promql_where_a_metric_name_belongs_is_refused_and_escaped() -> None:
    """A query in a metric-name annotation is refused; its quotes are escaped in the message."""
    (message,) = problems("metric-requests", 'up{namespace="x"} or vector(1)')
    assert message.startswith(
        f'{PREFIX}metric-requests="up{{namespace=\\"x\\"}} or vector(1)": must be a Prometheus'
    )
    assert_safe(message)


def test_newline_in_a_value_is_escaped() -> None:
    """A newline cannot forge a second log line."""
    (message,) = problems("max-replicas", '3\nlevel=error msg="forged"')
    assert message.startswith(f'{PREFIX}max-replicas="3\\nlevel=error msg=\\"forged\\"": ')
    assert "\n" not in message
    assert_safe(message)


def test_ten_kilobyte_value_is_truncated() -> None:
    """A 10 kB value shows 80 characters and its length, not the whole text."""
    (message,) = problems("metric-queue", "a" * 10_240)
    assert f'="{"a" * 80}..." (10240 characters): ' in message
    assert_safe(message)


def test_ten_kilobyte_metric_name_is_refused_quickly() -> None:
    """A long value is refused by its length before any pattern looks at it."""
    (message,) = problems("metric-requests", "a" * 10_240)
    assert "(10240 characters)" in message


def test_control_and_bidi_characters_are_escaped() -> None:
    """NUL, escape sequences and bidi overrides appear as escapes, never raw."""
    (message,) = problems("project", "a\x00b\x1b[31mc\u202ed")
    assert '="a\\x00b\\x1b[31mc\\u202ed": ' in message
    assert_safe(message)


def test_printable_unicode_is_shown_but_refused() -> None:
    """Letters from other scripts are refused and shown as themselves."""
    (message,) = problems("project", "模型")
    assert message.startswith(f'{PREFIX}project="模型": must be a Kubernetes label value')


def test_other_scripts_digits_are_not_numbers() -> None:
    """Digits of other scripts, which int() accepts, are not whole numbers here."""
    for value in ("\u0663", "\uff13", "\U0001d7d1"):  # Arabic-Indic, fullwidth, bold 3
        (message,) = problems("max-replicas", value)
        assert "must be a whole number" in message


def test_hostile_unknown_key_is_escaped() -> None:
    """An unknown key is shown escaped too: keys come from the same untrusted text."""
    result = ann.parse(BASE | {PREFIX + "x\ny": "1"}, namespace="ns")
    assert isinstance(result, ann.Invalid)
    assert [p.message for p in result.problems] == [f'"{PREFIX}x\\ny": unknown key']


def test_problem_repr_is_escaped() -> None:
    """Even repr() of a problem, as a careless log call would print it, is escaped."""
    problem = ann.Problem(PREFIX + "mode", "a\nb", "must be one of: active, dry-run")
    assert "\n" not in repr(problem)


@settings(max_examples=300)
@given(st.sampled_from(sorted(ann.SETTING_KEYS)), st.text(max_size=300))
def test_any_text_in_any_key_never_raises_and_stays_safe(key: str, value: str) -> None:
    """Whatever the text, parse returns a config or printable, bounded problems; it never raises."""
    result = ann.parse(BASE | {key: value}, namespace="ns")
    if isinstance(result, ann.Invalid):
        assert result.problems
        for problem in result.problems:
            assert_safe(problem.message)
        return
    names = result.metrics
    for name in (names.requests, names.queue, names.errors, names.latency):
        if name is not None:
            assert metricnames.METRIC_NAME.fullmatch(name)
    assert result.project.isprintable()


@settings(max_examples=200)
@given(st.text(max_size=100), st.text(max_size=100))
def test_any_unknown_key_is_reported_safely(suffix: str, value: str) -> None:
    """Arbitrary keys under the prefix are either settings or safely reported unknown keys."""
    key = PREFIX + suffix
    result = ann.parse(BASE | {key: value}, namespace="ns")
    if key in ann.SETTING_KEYS or key in ann.CONTROLLER_KEYS:
        return
    assert isinstance(result, ann.Invalid)
    for problem in result.problems:
        assert_safe(problem.message)


def test_quote_escapes_quotes_and_backslashes() -> None:
    """Quotes and backslashes in a value cannot end the quoted text early."""
    assert ann.quote('a"b\\c') == '"a\\"b\\\\c"'


def test_quote_cuts_between_escapes() -> None:
    """Truncation never splits an escape sequence."""
    quoted = ann.quote("\x00" * 100)
    assert quoted == '"' + "\\x00" * 20 + '..." (100 characters)'
