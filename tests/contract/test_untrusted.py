"""Hostile JSON text: refused by size, depth and number before it can cost more than its own."""

from __future__ import annotations

import time

import pytest

from autoscaler import untrusted

LIMIT = 64 * 1024


def refusal(text: str, *, limit_bytes: int = LIMIT) -> str:
    with pytest.raises(untrusted.UntrustedJsonError) as caught:
        untrusted.loads(text, limit_bytes=limit_bytes)
    assert isinstance(caught.value, ValueError)
    return caught.value.rule


def test_plain_json_reads_as_json() -> None:
    """The controller's own shapes read back unchanged, brackets inside strings included."""
    text = '{"a": [1, -2.5, {"b": "[[[{{{"}], "c": null, "d": true, "e": 9007199254740992}'
    assert untrusted.loads(text, limit_bytes=LIMIT) == {
        "a": [1, -2.5, {"b": "[[[{{{"}],
        "c": None,
        "d": True,
        "e": 2**53,
    }


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("9" * 400, "has an integer beyond 2^53 (400 characters)"),
        ('{"lastScaleUp": -' + "9" * 400 + "}", "has an integer beyond 2^53 (401 characters)"),
        ("9007199254740993", "has an integer beyond 2^53 (16 characters)"),
        ("1e400", "has a number too large for a float (5 characters)"),
        ("[-1e400]", "has a number too large for a float (6 characters)"),
        ("NaN", "has NaN, which is not a JSON number"),
        ('{"a": Infinity}', "has Infinity, which is not a JSON number"),
        ("[-Infinity]", "has -Infinity, which is not a JSON number"),
    ],
)
def test_numbers_no_float_holds_are_refused(text: str, rule: str) -> None:
    """Huge integers, overflowing floats, NaN and Infinity each name their rule."""
    assert refusal(text) == rule


def test_a_five_thousand_digit_integer_is_refused_by_its_length() -> None:
    """Past Python's own digit limit the refusal is still ours, not int()'s."""
    assert refusal("1" * 5000) == "has an integer beyond 2^53 (5000 characters)"


@pytest.mark.parametrize("opener", ["[", "{", '{"a":'])
def test_deep_nesting_is_refused_before_parsing(opener: str) -> None:
    """100,000 open brackets are refused by the depth scan, quickly and without recursion."""
    started = time.perf_counter()
    assert refusal(opener * 100_000, limit_bytes=10**6) == (
        "nested deeper than 8 arrays or objects"
    )
    assert time.perf_counter() - started < 1.0


def test_nesting_at_the_limit_is_read() -> None:
    """Eight levels read; nine do not."""
    assert untrusted.loads("[" * 8 + "]" * 8, limit_bytes=LIMIT) == [[[[[[[[]]]]]]]]
    assert refusal("[" * 9 + "]" * 9) == "nested deeper than 8 arrays or objects"


def test_brackets_inside_strings_do_not_count_as_depth() -> None:
    """A string full of brackets, escaped quotes included, is text."""
    text = '["' + '\\"[' * 1000 + '"]'
    assert untrusted.loads(text, limit_bytes=LIMIT) == ['"[' * 1000]


def test_an_unterminated_string_of_escaped_quotes_is_refused_quickly() -> None:
    """Quotes that never close cost one scan, not one per quote."""
    started = time.perf_counter()
    assert refusal('["' + '\\"' * 100_000, limit_bytes=10**6).startswith("not JSON: ")
    assert time.perf_counter() - started < 1.0


def test_oversize_text_is_refused_by_its_utf8_length() -> None:
    """The limit is in bytes: 100 two-byte characters break a 150-byte limit."""
    assert refusal('"' + "é" * 100 + '"', limit_bytes=150) == "longer than 150 bytes"
    assert untrusted.loads('"' + "e" * 100 + '"', limit_bytes=150) == "e" * 100


def test_a_lone_surrogate_is_counted_not_raised_on() -> None:
    """Text carrying an unpaired surrogate gets a JSON verdict, not a UnicodeEncodeError."""
    assert refusal("\ud800" * 10, limit_bytes=20) == "longer than 20 bytes"
    assert refusal("\ud800").startswith("not JSON: ")


def test_a_duplicate_key_is_refused() -> None:
    """Which of two equal keys wins would be a guess."""
    assert refusal('{"a": 1, "b": {"c": 1, "c": 2}}') == "has the same key twice in one object"


@pytest.mark.parametrize("text", ["", "not json", "{", '{"a" 1}', "[1,]", "\x00", '"\x00"'])
def test_text_that_is_not_json_is_refused(text: str) -> None:
    """Anything else that json.loads refuses is refused as not JSON."""
    assert refusal(text).startswith("not JSON: ")


def test_an_excerpt_is_short_and_says_how_long_the_whole_was() -> None:
    """A part of a hostile document in a message is its repr, cut after 40 characters."""
    assert untrusted.excerpt("idle") == "'idle'"
    assert untrusted.excerpt("x" * 1000) == "'" + "x" * 39 + "... (1002 characters)"
