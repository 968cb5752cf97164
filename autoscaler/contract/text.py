"""How annotation text reaches a message, and what is wrong with it.

Annotation values are untrusted text: they only ever appear in a log line, an Event or a
command's output through `escape` or `quote`, which escape control characters and truncate. A
`Problem` names one key, its value and the rule it breaks; `Invalid` is every problem of one
Deployment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

QUOTE_LIMIT = 80
"""Characters of an offending value shown in a message (after escaping)."""

_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_PLAIN_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,252}")


def _escape_char(ch: str) -> str:
    if ch in _ESCAPES:
        return _ESCAPES[ch]
    if ch.isprintable():
        return ch
    # Control, format (bidi overrides), separator and unassigned characters never pass raw.
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _escaped(text: str, limit: int) -> tuple[str, bool]:
    """`text` escaped and cut to `limit` characters, never inside an escape; and whether cut."""
    pieces: list[str] = []
    used = 0
    for ch in text:
        piece = _escape_char(ch)
        if used + len(piece) > limit:
            return "".join(pieces), True
        pieces.append(piece)
        used += len(piece)
    return "".join(pieces), False


def escape(text: str, *, limit: int = QUOTE_LIMIT) -> str:
    """`text` with control characters, quotes and backslashes escaped, cut after `limit`.

    A cut text ends in `...` and says how long the original was, so a 10 kB value costs a log
    line about 100 characters.
    """
    shown, cut = _escaped(text, limit)
    return f"{shown}... ({len(text)} characters)" if cut else shown


def quote(value: str, *, limit: int = QUOTE_LIMIT) -> str:
    """`value` escaped (see `escape`) in double quotes: how a value appears in a message."""
    shown, cut = _escaped(value, limit)
    return f'"{shown}..." ({len(value)} characters)' if cut else f'"{shown}"'


def show_key(key: str) -> str:
    """An annotation key for a message: as is when it is plain, else quoted."""
    return key if _PLAIN_KEY.fullmatch(key) else quote(key)


# ---------------------------------------------------------------------------------------------
# Problems


@dataclass(frozen=True, slots=True, repr=False)
class Problem:
    """One thing wrong with a Deployment's annotations: which key, which value, which rule.

    `key` and `value` are the raw text; only `message` (and `str`) is fit for logs and Events.
    """

    key: str
    value: str | None
    rule: str

    @property
    def message(self) -> str:
        if self.value is None:
            return f"{show_key(self.key)}: {self.rule}"
        return f"{show_key(self.key)}={quote(self.value)}: {self.rule}"

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"Problem({self.message!r})"


@dataclass(frozen=True, slots=True)
class Invalid:
    """The annotations cannot be used: the service is skipped with an `InvalidConfig` Event."""

    problems: tuple[Problem, ...]

    def __str__(self) -> str:
        return "; ".join(p.message for p in self.problems)
