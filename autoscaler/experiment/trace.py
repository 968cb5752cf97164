"""Request traces: `t_seconds,requests` CSV files (gzip allowed), one row per second.

`load` reads and validates a trace strictly and returns the per-second request counts as a
float64 array indexed by `t_seconds`. Anything it cannot replay exactly as written raises
`errors.TraceError` naming the file, the 1-based line and the field: a gap in time is an error,
never silently filled, and a count is never guessed.

`bundled` finds a trace shipped with the package (the demo's).

`load_per_request` reads a per-request trace, one row per request with its prompt and output
token counts (`TIMESTAMP,ContextTokens,GeneratedTokens`, the Azure LLM inference trace's own
columns), under the same strict rules; `per_second` sums it into requests, prompt tokens and
output tokens per second, what the simulator's token mode replays. `bundled_per_request` finds
the bundled one.

It does no simulation and no logging.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import gzip
import io
import math
import zlib
from dataclasses import dataclass
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
"""Name of each bundled trace -> the attribution its licence asks for. Both files of
`azure_llm_2023_conv` come from Azure/AzurePublicDataset `data/AzureLLMInferenceTrace_conv.csv`
(Patel et al., "Splitwise", ISCA 2024), licensed CC-BY-4.0 (`traces/LICENSE-azure-CC-BY-4.0.txt`):
`.requests.csv.gz` reduced to requests per second, `.per_request.csv.gz` the source's rows
unchanged."""
_BUNDLED_SUFFIX = ".requests.csv.gz"
_PER_REQUEST_SUFFIX = ".per_request.csv.gz"

PER_REQUEST_HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_TIMESTAMP, _PROMPT, _OUTPUT = PER_REQUEST_HEADER
MAX_TOKENS_PER_REQUEST = 10_000_000
"""The most tokens a request's prompt or output may hold: far above any model's context window;
a larger count is a corrupt file."""

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
    return _bundled(name, _BUNDLED_SUFFIX, "trace")


@dataclass(frozen=True, slots=True)
class PerRequest:
    """A per-request trace: one entry per request, in arrival order."""

    arrival_s: npt.NDArray[np.float64]
    """Arrival time, seconds after the first request."""
    prompt_tokens: npt.NDArray[np.float64]
    output_tokens: npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class TokenTrace:
    """A per-request trace summed per second: index = second since the first request."""

    requests: npt.NDArray[np.float64]
    prompt_tokens: npt.NDArray[np.float64]
    """Prompt tokens of the requests that arrived in that second (their sum)."""
    output_tokens: npt.NDArray[np.float64]
    """Output tokens of the requests that arrived in that second (their sum)."""


def load_per_request(path: str | Path) -> PerRequest:
    """Read a per-request trace (`TIMESTAMP,ContextTokens,GeneratedTokens`).

    `TIMESTAMP` is `YYYY-MM-DD HH:MM:SS[.fraction]`; rows must not go back in time. Token
    counts are whole numbers, the prompt's at least 1, the output's at least 0, neither above
    `MAX_TOKENS_PER_REQUEST`. Raises `TraceError` naming the file, the 1-based line and the
    field for anything else, and for the file problems `load` reports.
    """
    name = str(path)
    text = _read_text(Path(path), name)
    if not text.strip():
        raise errors.TraceError(name, None, None, "empty file")
    header, _, body = text.replace("\r\n", "\n").partition("\n")
    fields = tuple(f.strip() for f in header.split(","))
    if fields != PER_REQUEST_HEADER:
        shown = header if len(header) <= 60 else header[:57] + "..."
        expected = ",".join(PER_REQUEST_HEADER)
        raise errors.TraceError(name, 1, None, f"unknown header {shown!r}: expected {expected!r}")
    lines = body.rstrip().split("\n") if body.strip() else []
    if not lines:
        raise errors.TraceError(name, None, None, "no data rows after the header")
    arrival = np.empty(len(lines), dtype=np.float64)
    prompt = np.empty(len(lines), dtype=np.float64)
    output = np.empty(len(lines), dtype=np.float64)
    first: datetime.datetime | None = None
    for i, line in enumerate(lines):
        lineno = i + 2
        if not line.strip():
            raise errors.TraceError(name, lineno, None, "empty line")
        row = line.split(",")
        if len(row) != len(PER_REQUEST_HEADER):
            raise errors.TraceError(
                name,
                lineno,
                None,
                f"expected 3 fields ({','.join(PER_REQUEST_HEADER)}), got {len(row)}",
            )
        at = _timestamp(name, lineno, row[0])
        first = first or at
        arrival[i] = (at - first).total_seconds()
        if i and arrival[i] < arrival[i - 1]:
            raise errors.TraceError(
                name, lineno, _TIMESTAMP, f"goes back in time: {row[0].strip()} is earlier"
            )
        prompt[i] = _tokens(name, lineno, _PROMPT, row[1], least=1)
        output[i] = _tokens(name, lineno, _OUTPUT, row[2], least=0)
    return PerRequest(arrival, prompt, output)


def per_second(requests: PerRequest) -> TokenTrace:
    """Requests, prompt tokens and output tokens that arrived in each second."""
    second = np.floor(requests.arrival_s).astype(np.int64)
    n = int(second[-1]) + 1 if len(second) else 0
    return TokenTrace(
        requests=np.bincount(second, minlength=n).astype(np.float64),
        prompt_tokens=np.bincount(second, weights=requests.prompt_tokens, minlength=n).astype(
            np.float64
        ),
        output_tokens=np.bincount(second, weights=requests.output_tokens, minlength=n).astype(
            np.float64
        ),
    )


def bundled_per_request(name: str = DEFAULT_BUNDLED) -> Path:
    """The path of a per-request trace shipped with the package."""
    return _bundled(name, _PER_REQUEST_SUFFIX, "per-request trace")


def _bundled(name: str, suffix: str, what: str) -> Path:
    traces = resources.files(__package__ or "autoscaler.experiment").joinpath("traces")
    resource = traces.joinpath(name + suffix)
    if not resource.is_file():
        known = sorted(
            entry.name.removesuffix(suffix)
            for entry in traces.iterdir()
            if entry.name.endswith(suffix)
        )
        raise errors.ConfigError(f"no bundled {what} {name!r} (bundled: {', '.join(known)})")
    return _extracted.enter_context(resources.as_file(resource))


def _timestamp(name: str, lineno: int, text: str) -> datetime.datetime:
    value = text.strip()
    whole, _, fraction = value.partition(".")
    try:
        at = datetime.datetime.strptime(whole, "%Y-%m-%d %H:%M:%S")
        if fraction and not fraction.isdigit():
            raise ValueError(fraction)
    except ValueError:
        raise errors.TraceError(
            name, lineno, _TIMESTAMP, f"not a time 'YYYY-MM-DD HH:MM:SS[.fraction]': {value!r}"
        ) from None
    if fraction:
        at += datetime.timedelta(microseconds=round(float("0." + fraction) * 1e6))
    return at


def _tokens(name: str, lineno: int, field: str, text: str, *, least: int) -> float:
    count = _number(name, lineno, field, text)
    if not count.is_integer():
        raise errors.TraceError(name, lineno, field, f"not a whole token count: {text.strip()}")
    if count < least:
        raise errors.TraceError(name, lineno, field, f"{text.strip()} is below {least}")
    if count > MAX_TOKENS_PER_REQUEST:
        raise errors.TraceError(
            name,
            lineno,
            field,
            f"{text.strip()} is above the limit of {MAX_TOKENS_PER_REQUEST:,} tokens per request",
        )
    return count


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
