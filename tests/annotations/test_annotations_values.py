"""Durations and memory quantities: the text forms service owners write, parsed exactly."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autoscaler.contract import annotations as ann
from autoscaler.contract import values


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("250ms", 0.25),
        ("1h2m3s4ms", 3723.004),
        ("1.5h", 5400.0),
        ("0.5s", 0.5),
        ("45", 45.0),
        ("2.5", 2.5),
        ("0", 0.0),
        ("0s", 0.0),
    ],
)
def test_duration_forms(text: str, seconds: float) -> None:
    """Go-style durations and plain seconds parse to seconds."""
    assert values.parse_duration(text) == seconds


@pytest.mark.parametrize(
    "text",
    [
        "1 minute",
        "5d",
        "-5m",
        "+5m",
        "5m5m",
        "1s1h",
        "ms",
        "h",
        "",
        "1.s",
        "PT5M",
        "5 m",
        "\uff15m",
    ],
)
def test_duration_rejects(text: str) -> None:
    """Words, days, signs, repeated or reordered units and other scripts' digits are refused."""
    assert values.parse_duration(text) is None


@given(st.integers(min_value=0, max_value=10 * 86_400_000))
def test_duration_round_trip(ms: int) -> None:
    """Every whole-millisecond duration prints to text that parses back to itself."""
    seconds = ms / 1000
    assert values.parse_duration(values.format_duration(seconds)) == seconds


@given(
    st.integers(min_value=0, max_value=99),
    st.integers(min_value=0, max_value=59),
    st.integers(min_value=0, max_value=59),
    st.integers(min_value=0, max_value=999),
)
def test_duration_components_add_up(h: int, m: int, s: int, ms: int) -> None:
    """Each unit present in the text contributes its value in seconds."""
    parts = [(h, "h"), (m, "m"), (s, "s"), (ms, "ms")]
    text = "".join(f"{n}{unit}" for n, unit in parts if n) or "0s"
    expected = h * 3600 + m * 60 + s + ms / 1000
    assert values.parse_duration(text) == pytest.approx(expected, abs=1e-9)


def test_format_duration_reads_like_go() -> None:
    """Durations print in the shortest Go-style spelling."""
    assert [values.format_duration(s) for s in (0, 0.25, 30, 60, 90, 300, 5400, 61.5)] == [
        "0s",
        "250ms",
        "30s",
        "1m",
        "1m30s",
        "5m",
        "1h30m",
        "1m1.5s",
    ]


_SUFFIX_BYTES = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}


@given(st.integers(min_value=0, max_value=10**6), st.sampled_from(sorted(_SUFFIX_BYTES)))
def test_quantity_is_bytes_rounded_up_to_mib(number: int, suffix: str) -> None:
    """A whole quantity with any suffix is its bytes, rounded up to whole MiB."""
    expected = math.ceil(number * _SUFFIX_BYTES[suffix] / 2**20)
    assert values.parse_quantity_mib(f"{number}{suffix}") == expected


@given(st.integers(min_value=1, max_value=4 * 2**20))
def test_quantity_round_trip(mib: int) -> None:
    """Every size in MiB prints as a quantity that parses back to itself."""
    assert values.parse_quantity_mib(values.format_quantity(mib)) == mib


def test_format_quantity_uses_the_largest_whole_unit() -> None:
    """Sizes print as Ti, Gi or Mi, whichever is whole."""
    assert [values.format_quantity(m) for m in (1, 1536, 12288, 2**20)] == [
        "1Mi",
        "1536Mi",
        "12Gi",
        "1Ti",
    ]


@pytest.mark.parametrize("text", ["12GB", "12gi", "1e9", "100m", "-1Gi", "12 Gi", "Gi", ".5Gi"])
def test_quantity_rejects(text: str) -> None:
    """Suffixes Kubernetes does not know, exponents, milli and signs are refused."""
    assert values.parse_quantity_mib(text) is None


@given(st.integers(min_value=1, max_value=86_400_000))
def test_cooldown_annotation_round_trip(ms: int) -> None:
    """A cooldown written with format_duration is read back as the same number of seconds."""
    text = values.format_duration(ms / 1000)
    result = ann.parse(
        {
            ann.ENABLED_KEY: "true",
            ann.PREFIX + "max-replicas": "3",
            ann.PREFIX + "target-qps-per-replica": "1",
            ann.PREFIX + "scale-up-cooldown": text,
        },
        namespace="ns",
    )
    assert isinstance(result, ann.ServiceConfig), str(result)
    assert result.policy.scale_up_cooldown_s == ms / 1000
