"""Value parsers for annotations: each has its rule in plain words.

The same text goes into error messages and into the reference table, so the two cannot drift
apart. Every value is parsed strictly (no float for a count, no `yes` for `true`); a parser
raises a pydantic error carrying the rule, never another exception.
"""

from __future__ import annotations

import enum
import itertools
import math
import re
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Generic, TypeVar

from pydantic_core import PydanticCustomError

from autoscaler import metricnames

T = TypeVar("T")

_NUMBER = r"[0-9]{1,12}(?:\.[0-9]{1,12})?"
# [0-9], never \d: \d matches other scripts' digits, which int() and Decimal() accept.
_DECIMAL = re.compile(_NUMBER)
_WHOLE = re.compile(r"[0-9]{1,9}")
_DURATION = re.compile(
    rf"(?:(?P<h>{_NUMBER})h)?(?:(?P<m>{_NUMBER})m(?!s))?(?:(?P<s>{_NUMBER})s)?(?:(?P<ms>{_NUMBER})ms)?"
)
_DURATION_UNITS_S = {"h": Decimal(3600), "m": Decimal(60), "s": Decimal(1), "ms": Decimal("0.001")}
_QUANTITY = re.compile(rf"(?P<number>{_NUMBER})(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?")
_QUANTITY_BYTES = {
    None: 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
_MIB = 2**20
_METRIC_NAME_MAX = 200
_LABEL_VALUE = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_MODEL_ID = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.:/@+=]{0,252}[A-Za-z0-9])?")
_MODEL_ID_MAX = 254
_STEPS = re.compile(r"[0-9]{1,3}(?: *, *[0-9]{1,3}){0,99}")
_PATH_CHARS = re.compile(r"/(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/]|%[0-9A-Fa-f]{2})*")
_PATH_MAX = 1024
_MAX_TEXT = 64
"""Longest value any numeric parser looks at; longer text is rejected before any regex."""


def fail(rule: str) -> PydanticCustomError:
    return PydanticCustomError("annotation", rule)


def text(raw: object, rule: str, *, limit: int = _MAX_TEXT) -> str:
    if not isinstance(raw, str) or len(raw) > limit:
        raise fail(rule)
    return raw


def format_duration(seconds: float) -> str:
    """Go-style text for a duration: `30s`, `5m`, `1h30m`, `250ms`, `1m0.5s`."""
    ms = round(seconds * 1000)
    if not math.isclose(ms / 1000, seconds, rel_tol=0, abs_tol=1e-9):
        return f"{Decimal(repr(seconds)).normalize():f}s"
    if ms == 0:
        return "0s"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    out = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "")
    if rest and not out and rest < 1000:
        return f"{rest}ms"
    if rest:
        out += f"{(Decimal(rest) / 1000).normalize():f}s"
    return out


def parse_duration(text: str) -> float | None:
    """Seconds for `30s`, `5m`, `1h30m`, `250ms`, `1.5h` or a plain number of seconds; else None.

    Units run from hours down to milliseconds, each at most once (Go accepts `5m5m`; a typo
    more likely than a wish). Days are not a unit, as in Go.
    """
    if len(text) > _MAX_TEXT:
        return None
    if _DECIMAL.fullmatch(text):
        return float(Decimal(text))
    match = _DURATION.fullmatch(text)
    if match is None or not any(match.groupdict().values()):
        return None
    total = sum(
        (Decimal(v) * _DURATION_UNITS_S[unit] for unit, v in match.groupdict().items() if v),
        Decimal(0),
    )
    return float(total)


def format_quantity(mib: int) -> str:
    """Kubernetes quantity text for a size in MiB: `12Gi`, `1Ti`, `1500Mi`."""
    for suffix, size in (("Ti", 2**20), ("Gi", 2**10)):
        if mib % size == 0:
            return f"{mib // size}{suffix}"
    return f"{mib}Mi"


def parse_quantity_bytes(text: str) -> int | None:
    """Bytes (rounded up) in a Kubernetes memory quantity like `12Gi`, `24000Mi`, `16G`; else None.

    Plain numbers are bytes, as in Kubernetes. Exponent forms (`12e9`) and milli (`m`) are not
    accepted: neither is a sensible way to write a model's memory.
    """
    if len(text) > _MAX_TEXT:
        return None
    match = _QUANTITY.fullmatch(text)
    if match is None:
        return None
    return math.ceil(Decimal(match["number"]) * _QUANTITY_BYTES[match["suffix"]])


def parse_quantity_mib(text: str) -> int | None:
    """MiB (rounded up) in a Kubernetes memory quantity; None when it is not one."""
    size = parse_quantity_bytes(text)
    return None if size is None else -(-size // _MIB)


@dataclass(frozen=True, slots=True)
class Parser(Generic[T]):
    """Turns one annotation value (a string) into a typed value, or raises with `rule`."""

    rule: str
    convert: Callable[[str], T | None]
    """Returns None for text that breaks the rule."""
    show: Callable[[T], str]
    """The canonical annotation text of a value, for defaults in the reference."""
    limit: int = _MAX_TEXT

    def __call__(self, raw: object) -> T:
        value = self.convert(text(raw, self.rule, limit=self.limit))
        if value is None:
            raise fail(self.rule)
        return value


def flag() -> Parser[bool]:
    table = {"true": True, "false": False}
    return Parser('must be "true" or "false"', table.get, lambda v: "true" if v else "false")


def choice(choices: type[enum.Enum]) -> Parser[Any]:
    table = {member.value: member for member in choices}
    names = ", ".join(table)
    return Parser(f"must be one of: {names}", table.get, lambda v: str(v.value))


def whole(lo: int, hi: int, *, why: str = "") -> Parser[int]:
    def convert(text: str) -> int | None:
        if not _WHOLE.fullmatch(text):
            return None
        value = int(text)
        return value if lo <= value <= hi else None

    rule = f"must be a whole number from {lo} to {hi}" + (f" ({why})" if why else "")
    return Parser(rule, convert, str)


class Auto(enum.Enum):
    """The value `auto`: the controller chooses."""

    AUTO = "auto"


def whole_or_auto(lo: int, hi: int) -> Parser[int | Auto]:
    count = whole(lo, hi)

    def convert(text: str) -> int | Auto | None:
        return Auto.AUTO if text == Auto.AUTO.value else count.convert(text)

    def show(value: int | Auto) -> str:
        return value.value if isinstance(value, Auto) else str(value)

    return Parser(f'must be "auto" or a whole number from {lo} to {hi}', convert, show)


def number(
    lo: float,
    hi: float | None,
    *,
    lo_open: bool = False,
    hi_open: bool = False,
    percent: bool = False,
) -> Parser[float]:
    def convert(text: str) -> float | None:
        if percent and text.endswith("%"):
            text = text[:-1]
        if not _DECIMAL.fullmatch(text):
            return None
        value = float(Decimal(text))
        above = value > lo if lo_open else value >= lo
        below = hi is None or (value < hi if hi_open else value <= hi)
        return value if above and below else None

    low = f"> {lo:g}" if lo_open else f">= {lo:g}"
    if hi is None:
        bounds = low
    elif not lo_open and not hi_open:
        bounds = f"from {lo:g} to {hi:g}"
    else:
        bounds = f"{low} and {'<' if hi_open else '<='} {hi:g}"
    kind = "a number of percent" if percent else "a decimal number"
    return Parser(f"must be {kind} {bounds}", convert, lambda v: f"{v:g}")


def fraction() -> Parser[float]:
    """A share in (0, 1]: a ratio (`0.8`) or a percentage with its sign (`80%`)."""

    def convert(text: str) -> float | None:
        percent = text.endswith("%")
        digits = text[:-1] if percent else text
        if not _DECIMAL.fullmatch(digits):
            return None
        value = Decimal(digits) / (100 if percent else 1)
        return float(value) if 0 < value <= 1 else None

    return Parser(
        "must be a ratio > 0 and <= 1 (0.8) or a percentage > 0 and <= 100 with % (80%)",
        convert,
        lambda v: f"{v:g}",
    )


def duration(lo_s: float, hi_s: float, *, zero: bool = False) -> Parser[float]:
    def convert(text: str) -> float | None:
        seconds = parse_duration(text)
        if seconds is None:
            return None
        if seconds == 0:
            return 0.0 if zero else None
        return seconds if lo_s <= seconds <= hi_s else None

    lo = "0s" if zero else format_duration(lo_s)
    rule = (
        "must be a duration such as 30s, 5m, 1h30m or 250ms (or plain seconds), "
        f"from {lo} to {format_duration(hi_s)}"
    )
    return Parser(rule, convert, format_duration)


def quantity(lo_mib: int, hi_mib: int) -> Parser[int]:
    def convert(text: str) -> int | None:
        # Bounds on bytes, not rounded MiB: `12000` (bytes, meant as MiB) must not pass as 1Mi.
        size = parse_quantity_bytes(text)
        if size is None or not lo_mib * _MIB <= size <= hi_mib * _MIB:
            return None
        return -(-size // _MIB)

    rule = (
        "must be a Kubernetes memory quantity such as 12Gi or 24000Mi, "
        f"from {format_quantity(lo_mib)} to {format_quantity(hi_mib)}"
    )
    return Parser(rule, convert, format_quantity)


def metric_name() -> Parser[str]:
    def convert(text: str) -> str | None:
        return text if metricnames.is_metric_name(text) else None

    reserved = ", ".join(sorted(metricnames.RESERVED_WORDS))
    rule = (
        "must be a Prometheus metric name: a letter, _ or : followed by letters, digits, _ or :, "
        f"at most {_METRIC_NAME_MAX} characters (a name, not a query), and not a word PromQL "
        f"reserves ({reserved}; in any case)"
    )
    return Parser(rule, convert, str, limit=_METRIC_NAME_MAX)


def label_value() -> Parser[str]:
    def convert(text: str) -> str | None:
        return text if _LABEL_VALUE.fullmatch(text) else None

    rule = (
        "must be a Kubernetes label value: 1 to 63 letters, digits, -, _ or ., "
        "starting and ending with a letter or digit"
    )
    return Parser(rule, convert, str)


def model_id() -> Parser[str]:
    def convert(text: str) -> str | None:
        return text if _MODEL_ID.fullmatch(text) else None

    rule = (
        f"must be a model id such as meta-llama/Llama-3.1-8B-Instruct: 1 to {_MODEL_ID_MAX} "
        "letters, digits and - _ . : / @ + =, starting and ending with a letter or digit"
    )
    return Parser(rule, convert, str, limit=_MODEL_ID_MAX)


def steps() -> Parser[tuple[int, ...]]:
    def convert(text: str) -> tuple[int, ...] | None:
        if not _STEPS.fullmatch(text):
            return None
        steps = tuple(int(part) for part in text.split(","))
        increasing = all(a < b for a, b in itertools.pairwise(steps))
        if not increasing or steps[0] < 1 or steps[-1] != 100:
            return None
        return steps

    rule = (
        "must be percentages like 10,30,50,100: whole numbers from 1, strictly increasing, "
        "ending at 100"
    )
    return Parser(rule, convert, lambda v: ",".join(map(str, v)), limit=400)


def url_path() -> Parser[str]:
    def convert(text: str) -> str | None:
        if not _PATH_CHARS.fullmatch(text) or text.startswith("//"):
            return None
        decoded = urllib.parse.unquote(text)
        if any(not ch.isprintable() or ch in "\\?#" for ch in decoded):
            return None
        if any(segment in (".", "..") for segment in decoded.split("/")):
            return None
        return text

    rule = (
        "must be an absolute URL path such as /health: starting with a single /, at most "
        f"{_PATH_MAX} characters of letters, digits, -._~!$&'()*+,;=:@/ or %XX escapes; "
        "no scheme, host, query, fragment, . or .. segment, or control character"
    )
    return Parser(rule, convert, str, limit=_PATH_MAX)
