"""Request traces: `t_seconds,requests` CSV files (gzip allowed), one row per second.

`load` reads and validates a trace strictly and returns the per-second request counts as a
float64 array indexed by `t_seconds`. Anything it cannot replay exactly as written raises
`errors.TraceError` naming the file, the 1-based line and the field: a gap in time is an error,
never silently filled, and a count is never guessed.

`bundled` finds a trace shipped with the package (the demo's).

It does no simulation and no logging.
"""

from __future__ import annotations

import atexit
import contextlib
import gzip
import io
import math
import zlib
from importlib import resources
from pathlib import Path

import numpy as np
import numpy.typing as npt

from autoscaler import errors

HEADER = ("t_seconds", "requests")
_T, _REQUESTS = HEADER
_GZIP_MAGIC = b"\x1f\x8b"

MAX_REQUESTS_PER_S = 1_000_000.0
"""The largest count a row may hold: far above any one service's traffic, and low enough that
the simulator's sums and replica counts stay exact. A larger count is a corrupt or mis-scaled
file, never a load to replay."""

DEFAULT_BUNDLED = "azure_llm_2023_conv"
BUNDLED_ATTRIBUTION = {
    "azure_llm_2023_conv": "Azure LLM inference trace 2023 (conversation), Microsoft, CC-BY-4.0",
}
"""Name of each bundled trace -> the attribution its licence asks for."""
_BUNDLED_SUFFIX = ".requests.csv.gz"

# Bundled traces stay extracted (only ever needed for a zipped install) until the process ends.
_extracted = contextlib.ExitStack()
atexit.register(_extracted.close)


def load(path: str | Path) -> npt.NDArray[np.float64]:
    """Read a trace: request counts per second, index = `t_seconds`.

    Raises `TraceError` for a missing or unreadable file, bad gzip or text encoding, an empty
    file, a missing or unknown header, a row with the wrong number of fields, a value that is
    not a finite number (NaN, inf), a negative count or one above `MAX_REQUESTS_PER_S`, a
    `t_seconds` that is not an integer, does not start at 0 or does not increase by exactly 1
    per row, and a file without data rows.
    """
    name = str(path)
    text = _read_text(Path(path), name)
    if not text.strip():
        raise errors.TraceError(name, None, None, "empty file")
    text = text.replace("\r\n", "\n")
    header, _, body = text.partition("\n")
    _check_header(name, header)
    body = body.rstrip()
    if not body:
        raise errors.TraceError(name, None, None, "no data rows after the header")
    counts = _parse_fast(body)
    if counts is None:
        # Something is wrong (or unusual): walk the rows to find the first bad line and say why.
        counts = _parse_checked(name, body)
    return counts


def bundled(name: str = DEFAULT_BUNDLED) -> Path:
    """The path of a trace shipped with the package, e.g. the demo's `azure_llm_2023_conv`."""
    traces = resources.files(__package__ or "autoscaler.experiment").joinpath("traces")
    resource = traces.joinpath(name + _BUNDLED_SUFFIX)
    if not resource.is_file():
        known = sorted(
            entry.name.removesuffix(_BUNDLED_SUFFIX)
            for entry in traces.iterdir()
            if entry.name.endswith(_BUNDLED_SUFFIX)
        )
        raise errors.ConfigError(f"no bundled trace {name!r} (bundled: {', '.join(known)})")
    return _extracted.enter_context(resources.as_file(resource))


def _read_text(path: Path, name: str) -> str:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise errors.TraceError(name, None, None, "no such file") from None
    except IsADirectoryError:
        raise errors.TraceError(name, None, None, "is a directory, not a file") from None
    except OSError as e:
        raise errors.TraceError(name, None, None, f"cannot read: {e.strerror or e}") from e
    if raw.startswith(_GZIP_MAGIC):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:
            raise errors.TraceError(name, None, None, f"not a valid gzip file ({e})") from e
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise errors.TraceError(name, line, None, "not UTF-8 text") from e


def _check_header(name: str, header: str) -> None:
    fields = tuple(f.strip() for f in header.split(","))
    if fields == HEADER:
        return
    expected = ",".join(HEADER)
    if all(_is_number(f) for f in fields):
        raise errors.TraceError(name, 1, None, f"missing header: expected {expected!r}")
    shown = header if len(header) <= 60 else header[:57] + "..."
    raise errors.TraceError(name, 1, None, f"unknown header {shown!r}: expected {expected!r}")


def _parse_fast(body: str) -> npt.NDArray[np.float64] | None:
    """Parse and validate in C; None when anything is off, for `_parse_checked` to explain.

    Everything accepted here is accepted by `_parse_checked` too (same rules, same numbers).
    """
    try:
        table = np.loadtxt(
            io.StringIO(body), delimiter=",", comments=None, ndmin=2, dtype=np.float64
        )
    except ValueError:
        return None
    rows = body.count("\n") + 1  # loadtxt skips blank lines; the checked path rejects them
    if table.shape != (rows, 2):
        return None
    t, counts = table[:, 0], table[:, 1]
    # NaN fails both comparisons, and so is caught with the infinities.
    if not np.all((counts >= 0) & (counts <= MAX_REQUESTS_PER_S)):
        return None
    if not np.array_equal(t, np.arange(rows, dtype=np.float64)):
        return None
    return np.ascontiguousarray(counts)


def _parse_checked(name: str, body: str) -> npt.NDArray[np.float64]:
    """Parse row by row, raising at the first bad line (lines are 1-based; the header is 1)."""
    lines = body.split("\n")
    counts = np.empty(len(lines), dtype=np.float64)
    for i, line in enumerate(lines):
        lineno = i + 2
        if not line.strip():
            raise errors.TraceError(name, lineno, None, "empty line")
        fields = line.split(",")
        if len(fields) != 2:
            raise errors.TraceError(
                name,
                lineno,
                None,
                f"expected 2 fields ({','.join(HEADER)}), got {len(fields)}",
            )
        t = _number(name, lineno, _T, fields[0])
        if not t.is_integer():
            raise errors.TraceError(name, lineno, _T, f"not a whole second: {fields[0].strip()}")
        if t != i:
            raise errors.TraceError(name, lineno, _T, _sequence_problem(i, int(t)))
        count = _number(name, lineno, _REQUESTS, fields[1])
        if count < 0:
            raise errors.TraceError(name, lineno, _REQUESTS, f"negative count {fields[1].strip()}")
        if count > MAX_REQUESTS_PER_S:
            raise errors.TraceError(
                name,
                lineno,
                _REQUESTS,
                f"count {fields[1].strip()} is above the limit of "
                f"{MAX_REQUESTS_PER_S:,.0f} requests per second",
            )
        counts[i] = count
    return counts


def _number(name: str, lineno: int, field: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise errors.TraceError(name, lineno, field, f"not a number: {text.strip()!r}") from None
    if not math.isfinite(value):
        raise errors.TraceError(name, lineno, field, f"not a finite number: {text.strip()}")
    return value


def _sequence_problem(expected: int, got: int) -> str:
    if expected == 0:
        return f"the trace must start at t_seconds=0, got {got}"
    if got > expected:
        missing = got - expected
        return (
            f"gap: expected {expected}, got {got} ({missing} s missing; "
            "write a 0 row for each second without requests)"
        )
    return f"not increasing by 1: expected {expected}, got {got}"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
