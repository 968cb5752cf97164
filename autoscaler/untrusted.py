"""JSON text that someone else may have written, bounded before it is parsed.

The controller keeps its memory in annotations on the tenants' Deployments (`state`, `status`,
`ramp`), and anyone allowed to edit a Deployment can write there: that text is hostile input.
`loads` reads it as JSON or raises `UntrustedJsonError` (a `ValueError`) naming the rule the
text breaks, and never costs more than a bounded amount of time and memory:

- more than `limit_bytes` of UTF-8: refused before any other look;
- arrays and objects nested deeper than `max_depth`: refused by a scan of the brackets outside
  strings, before `json.loads`, which recurses once per level (100,000 `[` would raise
  `RecursionError`, or exhaust the C stack);
- a number no float holds: an integer beyond 2^53 (past it floats skip integers, and a
  400-digit one overflows), a float that overflows to infinity (`1e400`), NaN and Infinity;
- the same key twice in one object (which one wins would be a guess);
- anything else that is not JSON.

A value never appears in the error: the caller shows it through `annotations.quote`. A reader
that names a part of the document in its own error does so through `excerpt`, which is short.
Pure: no I/O, no logging; the core reads its ramp state through it.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Final, NoReturn

MAX_DEPTH: Final = 8
"""Arrays and objects inside each other; the controller's own documents use at most 3."""
MAX_INT: Final = 2**53
"""Largest integer magnitude accepted: every integer up to it is exactly a float."""

_MAX_INT_DIGITS: Final = len(str(MAX_INT))
_TOKENS: Final = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)|[\[\]{}]', re.DOTALL)
"""A whole string (skipped: its brackets are text), or one bracket. A string left open runs to
the end of the text in one match, so no later quote starts another scan to the end."""


class UntrustedJsonError(ValueError):
    """JSON text that breaks `rule`: too long, too deep, an unrepresentable number, not JSON."""

    def __init__(self, rule: str) -> None:
        super().__init__(rule)
        self.rule = rule


def loads(text: str, *, limit_bytes: int, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON value in `text`; `UntrustedJsonError` for anything the module docstring refuses."""
    # surrogatepass: a lone surrogate (a JSON "\ud800" in the object that carried the text)
    # is counted, not raised on.
    size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    if size > limit_bytes:
        raise UntrustedJsonError(f"longer than {limit_bytes} bytes")
    _check_depth(text, max_depth)
    try:
        return json.loads(
            text,
            parse_int=_integer,
            parse_float=_float,
            parse_constant=_constant,
            object_pairs_hook=_object,
        )
    except UntrustedJsonError:
        raise
    except json.JSONDecodeError as e:
        raise UntrustedJsonError(f"not JSON: {e}") from None
    except RecursionError:  # the depth scan should have refused it already
        raise UntrustedJsonError(f"nested deeper than {max_depth} arrays or objects") from None


def excerpt(value: object, *, limit: int = 40) -> str:
    """`repr(value)` cut after `limit` characters: a part of a hostile document in a message."""
    shown = repr(value)
    return shown if len(shown) <= limit else f"{shown[:limit]}... ({len(shown)} characters)"


def _check_depth(text: str, max_depth: int) -> None:
    if text.count("[") + text.count("{") <= max_depth:
        return
    depth = 0
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > max_depth:
                raise UntrustedJsonError(f"nested deeper than {max_depth} arrays or objects")
        elif token in "]}":
            depth = max(0, depth - 1)


def _integer(digits: str) -> int:
    if len(digits.lstrip("-")) > _MAX_INT_DIGITS or abs(value := int(digits)) > MAX_INT:
        raise UntrustedJsonError(f"has an integer beyond 2^53 ({len(digits)} characters)")
    return value


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise UntrustedJsonError(f"has a number too large for a float ({len(text)} characters)")
    return value


def _constant(name: str) -> NoReturn:
    raise UntrustedJsonError(f"has {name}, which is not a JSON number")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document = dict(pairs)
    if len(document) != len(pairs):
        raise UntrustedJsonError("has the same key twice in one object")
    return document
