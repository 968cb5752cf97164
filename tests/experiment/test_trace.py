"""Loading request traces: what is accepted, and exactly where a bad one is reported."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
from cli.builders import write_trace

from autoscaler import errors
from autoscaler.experiment import trace

HEADER = "t_seconds,requests\n"


def test_loads_counts_indexed_by_second(tmp_path: Path) -> None:
    """A plain trace loads as float64 counts, one per second."""
    path = write_trace(tmp_path / "t.csv", [1, 0, 2.5, 7])
    counts = trace.load(path)
    assert counts.dtype == np.float64
    np.testing.assert_array_equal(counts, [1, 0, 2.5, 7])


def test_detects_gzip_by_content_not_name(tmp_path: Path) -> None:
    """A gzip file loads whatever its name, and a plain file named .gz loads as text."""
    zipped = write_trace(tmp_path / "plain-name.csv", [3, 4], compress=True)
    plain = write_trace(tmp_path / "zipped-name.csv.gz", [5, 6])
    np.testing.assert_array_equal(trace.load(zipped), [3, 4])
    np.testing.assert_array_equal(trace.load(str(plain)), [5, 6])


def test_accepts_crlf_bom_spaces_and_no_final_newline(tmp_path: Path) -> None:
    """Windows line endings, a byte-order mark, spaces around values and a missing final
    newline are all harmless."""
    path = tmp_path / "t.csv"
    path.write_bytes(b"\xef\xbb\xbft_seconds, requests\r\n0, 1\r\n1 ,2\r\n2,3")
    np.testing.assert_array_equal(trace.load(path), [1, 2, 3])


def test_loads_a_week_of_seconds(tmp_path: Path) -> None:
    """A week-long trace (604,801 rows) loads completely and in order."""
    counts = np.arange(604_801) % 17
    path = tmp_path / "week.csv.gz"
    text = HEADER + "\n".join(f"{t},{c}" for t, c in enumerate(counts)) + "\n"
    path.write_bytes(gzip.compress(text.encode(), compresslevel=1))
    loaded = trace.load(path)
    assert loaded.shape == (604_801,)
    np.testing.assert_array_equal(loaded, counts)


def test_bundled_trace_ships_with_its_licence() -> None:
    """The bundled Azure trace is an hour of seconds, with its CC-BY licence beside it."""
    path = trace.bundled()
    assert (path.parent / "LICENSE-azure-CC-BY-4.0.txt").is_file()
    counts = trace.load(path)
    assert 3000 < len(counts) <= 3600
    assert counts.sum() > 0


def test_unknown_bundled_trace_is_a_config_error() -> None:
    """Asking for a trace that is not bundled names the ones that are."""
    with pytest.raises(errors.ConfigError, match="azure_llm_2023_conv"):
        trace.bundled("nope")


BAD_TRACES = [
    # (id, content after the header or whole file, line, field, problem)
    ("non-number", HEADER + "0,1\n1,abc\n", 3, "requests", "not a number: 'abc'"),
    ("nan", HEADER + "0,1\n1,nan\n", 3, "requests", "not a finite number: nan"),
    ("inf-time", HEADER + "0,1\ninf,1\n", 3, "t_seconds", "not a finite number: inf"),
    ("negative", HEADER + "0,1\n1,2\n2,-3\n", 4, "requests", "negative count -3"),
    ("huge", HEADER + "0,1\n1,1e308\n", 3, "requests", "count 1e308 is above the limit of"),
    ("over-limit", HEADER + "0,1000000\n1,1000001\n", 3, "requests", "above the limit"),
    ("inf", HEADER + "0,1\n1,inf\n", 3, "requests", "not a finite number: inf"),
    ("minus-inf", HEADER + "0,1\n1,-inf\n", 3, "requests", "not a finite number: -inf"),
    ("fractional-time", HEADER + "0,1\n1.5,2\n", 3, "t_seconds", "not a whole second: 1.5"),
    ("late-start", HEADER + "5,1\n6,2\n", 2, "t_seconds", "must start at t_seconds=0, got 5"),
    ("gap", HEADER + "0,1\n1,1\n4,1\n", 4, "t_seconds", "gap: expected 2, got 4 (2 s missing"),
    ("repeat", HEADER + "0,1\n1,1\n1,1\n", 4, "t_seconds", "not increasing by 1: expected 2"),
    ("backwards", HEADER + "0,1\n1,1\n0,1\n", 4, "t_seconds", "not increasing by 1"),
    ("extra-field", HEADER + "0,1\n1,1,1\n", 3, None, "expected 2 fields"),
    ("missing-field", HEADER + "0,1\n1\n", 3, None, "got 1"),
    ("blank-line", HEADER + "0,1\n\n1,1\n", 3, None, "empty line"),
    ("no-header", "0,1\n1,1\n", 1, None, "missing header: expected 't_seconds,requests'"),
    ("unknown-header", "time,count\n0,1\n", 1, None, "unknown header 'time,count'"),
    ("header-only", HEADER, None, None, "no data rows"),
    ("empty", "", None, None, "empty file"),
    ("whitespace-only", "\n \n", None, None, "empty file"),
    ("first-error-wins", HEADER + "0,1\n1,-1\n2,x\n", 3, "requests", "negative count -1"),
]


@pytest.mark.parametrize(
    ("content", "line", "field", "problem"),
    [case[1:] for case in BAD_TRACES],
    ids=[case[0] for case in BAD_TRACES],
)
def test_bad_trace_names_line_and_field(
    tmp_path: Path, content: str, line: int | None, field: str | None, problem: str
) -> None:
    """A bad trace raises TraceError naming the file, the 1-based line and the field."""
    path = tmp_path / "bad.csv"
    path.write_text(content)
    with pytest.raises(errors.TraceError) as caught:
        trace.load(path)
    e = caught.value
    assert (e.path, e.line, e.field) == (str(path), line, field)
    assert problem in e.problem


def test_bad_row_inside_gzip_is_located(tmp_path: Path) -> None:
    """Line numbers count lines of the decompressed text."""
    path = tmp_path / "bad.csv.gz"
    path.write_bytes(gzip.compress((HEADER + "0,1\n1,2\n2,-3\n").encode()))
    with pytest.raises(errors.TraceError) as caught:
        trace.load(path)
    assert str(caught.value) == f"{path}:4: field 'requests': negative count -3"


def test_bad_row_deep_in_a_long_trace_is_located(tmp_path: Path) -> None:
    """An error far into a long trace reports its own line, not the first one."""
    rows = [f"{t},1" for t in range(50_000)]
    rows[41_234] = "41234,-2"
    path = tmp_path / "long.csv"
    path.write_text(HEADER + "\n".join(rows) + "\n")
    with pytest.raises(errors.TraceError) as caught:
        trace.load(path)
    assert (caught.value.line, caught.value.field) == (41_236, "requests")


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda p: None, "no such file"),
        (lambda p: p.mkdir(), "is a directory"),
        (lambda p: p.write_bytes(b"\x1f\x8b\x08\x00garbage"), "not a valid gzip file"),
        (lambda p: p.write_bytes(gzip.compress(HEADER.encode() * 50)[:-12]), "not a valid gzip"),
    ],
    ids=["missing", "directory", "corrupt-gzip", "truncated-gzip"],
)
def test_unreadable_file_names_the_file(tmp_path: Path, make: object, problem: str) -> None:
    """A file that cannot be read or decompressed is reported without a line."""
    path = tmp_path / "trace.csv.gz"
    make(path)  # type: ignore[operator]
    with pytest.raises(errors.TraceError) as caught:
        trace.load(path)
    assert (caught.value.path, caught.value.line) == (str(path), None)
    assert problem in caught.value.problem


def test_non_utf8_text_names_its_line(tmp_path: Path) -> None:
    """Bytes that are not UTF-8 are reported on the line that holds them."""
    path = tmp_path / "latin1.csv"
    path.write_bytes(HEADER.encode() + b"0,1\n1,\xff\n")
    with pytest.raises(errors.TraceError) as caught:
        trace.load(path)
    assert (caught.value.line, caught.value.problem) == (3, "not UTF-8 text")


PER_REQUEST_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def test_bundled_per_request_trace_sums_per_second() -> None:
    """The bundled per-request hour sums to the same requests per second as the bundled
    requests trace."""
    requests = trace.load_per_request(trace.bundled_per_request())
    assert len(requests.arrival_s) == 19_366
    assert (trace.bundled_per_request().parent / "LICENSE-azure-CC-BY-4.0.txt").is_file()
    summed = trace.per_second(requests)
    counts = trace.load(trace.bundled())
    n = min(len(counts), len(summed.requests))
    assert abs(summed.requests[:n].sum() - counts[:n].sum()) <= 0.001 * counts.sum()
    assert summed.prompt_tokens.sum() == requests.prompt_tokens.sum()
    assert summed.output_tokens.sum() == requests.output_tokens.sum()


def test_per_request_rows_sum_into_their_seconds(tmp_path: Path) -> None:
    """Requests are counted in the second after the first request in which they arrive."""
    path = tmp_path / "r.csv"
    path.write_text(
        PER_REQUEST_HEADER + "2023-11-16 18:15:46.5,100,10\n2023-11-16 18:15:47.4,50,0\n"
        "2023-11-16 18:15:48.6805900,7,3\n"
    )
    summed = trace.per_second(trace.load_per_request(path))
    np.testing.assert_array_equal(summed.requests, [2, 0, 1])
    np.testing.assert_array_equal(summed.prompt_tokens, [150, 0, 7])
    np.testing.assert_array_equal(summed.output_tokens, [10, 0, 3])


BAD_PER_REQUEST = [
    ("bad-time", "2023-11-16 18:15:46,1,1\nyesterday,1,1\n", 3, "TIMESTAMP", "not a time"),
    ("backwards", "2023-11-16 18:15:46,1,1\n2023-11-16 18:15:45,1,1\n", 3, "TIMESTAMP", "back"),
    ("zero-prompt", "2023-11-16 18:15:46,0,1\n", 2, "ContextTokens", "0 is below 1"),
    ("negative-output", "2023-11-16 18:15:46,1,-1\n", 2, "GeneratedTokens", "-1 is below 0"),
    ("fraction", "2023-11-16 18:15:46,1.5,1\n", 2, "ContextTokens", "not a whole token count"),
    ("nan", "2023-11-16 18:15:46,nan,1\n", 2, "ContextTokens", "not a finite number"),
    ("huge", "2023-11-16 18:15:46,1,1e9\n", 2, "GeneratedTokens", "above the limit"),
    ("fields", "2023-11-16 18:15:46,1\n", 2, None, "expected 3 fields"),
    ("blank", "2023-11-16 18:15:46,1,1\n\n2023-11-16 18:15:47,1,1\n", 3, None, "empty line"),
]


@pytest.mark.parametrize(
    ("body", "line", "field", "problem"),
    [case[1:] for case in BAD_PER_REQUEST],
    ids=[case[0] for case in BAD_PER_REQUEST],
)
def test_bad_per_request_trace_names_line_and_field(
    tmp_path: Path, body: str, line: int, field: str | None, problem: str
) -> None:
    """A bad per-request row raises TraceError naming the file, the line and the field."""
    path = tmp_path / "bad.csv"
    path.write_text(PER_REQUEST_HEADER + body)
    with pytest.raises(errors.TraceError) as caught:
        trace.load_per_request(path)
    assert (caught.value.path, caught.value.line, caught.value.field) == (str(path), line, field)
    assert problem in caught.value.problem


@pytest.mark.parametrize(
    ("content", "problem"),
    [("", "empty file"), (PER_REQUEST_HEADER, "no data rows"), ("t,a,b\n", "unknown header")],
    ids=["empty", "header-only", "wrong-header"],
)
def test_per_request_trace_without_rows_is_rejected(
    tmp_path: Path, content: str, problem: str
) -> None:
    """An empty file, a header alone or another header is reported, never read as no load."""
    path = tmp_path / "r.csv"
    path.write_text(content)
    with pytest.raises(errors.TraceError, match=problem):
        trace.load_per_request(path)
