"""`autoscaler bench --trace`: every policy on a user's own trace, its table, JSON and one plot."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from autoscaler.experiment import report, sweep, variants

from .builders import write_trace
from .conftest import Outcome

Run = Callable[..., Outcome]

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
AZURE_PREFIX_S = 600


@pytest.fixture
def short_trace(tmp_path: Path) -> Path:
    """Three minutes at 3 requests/s, then three at 6/s, Poisson-drawn from a fixed seed."""
    rate = np.where(np.arange(360) < 180, 3.0, 6.0)
    counts = np.random.default_rng(5).poisson(rate)
    return write_trace(tmp_path / "mine.csv", counts)


def table_rows(text: str) -> list[list[str]]:
    """The cells of every line of the Markdown table in `text`."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]


def bench(run: Run, trace: Path, out: Path, *args: str) -> Outcome:
    return run("bench", "--trace", trace, "--out", out, "--jobs", "1", *args)


def test_bench_compares_every_policy_on_the_trace(
    run: Run, short_trace: Path, tmp_path: Path
) -> None:
    """The table has a row per policy, the JSON every run of every search, and one plot."""
    out = tmp_path / "out"
    result = bench(run, short_trace, out, "--regime", "warm")
    assert result.code == 0, result.err

    header, _, *rows = table_rows(result.out)
    assert tuple(header) == report.COLUMNS
    # HPA and KEDA run on two signals each; the table keeps the better, labelled with it.
    families = list(dict.fromkeys(variants.family(p) for p in sweep.POLICIES))
    assert [row[2].split()[0] for row in rows] == families
    assert {row[2] for row in rows} >= {"seed", "default", "kpa", "oracle"}
    assert (rows[0][0], rows[0][1]) == ("mine.csv", "warm 8 s")
    assert f"wrote {out / 'results.json'}" in result.out

    assert sorted(p.name for p in out.iterdir()) == ["plot.png", "results.json"]
    assert (out / "plot.png").read_bytes()[:8] == PNG_MAGIC
    saved = json.loads((out / "results.json").read_text())
    assert saved["rate_scale"] == 1.0
    assert saved["config"]["regimes"] == {"warm": 8.0}
    assert [o["family"] for o in saved["outcomes"]] == families
    assert len(saved["outcomes"]) + len(saved["set_aside"]) == len(sweep.POLICIES)
    for outcome in saved["outcomes"]:
        targets = [r["utilisation"] for r in outcome["runs"]]
        assert targets == sorted(targets)
        assert outcome["default"] in outcome["runs"]
        assert outcome["equal_slo"] is None or outcome["equal_slo"] in outcome["runs"]
        assert outcome["equal_slo"] is None or outcome["equal_slo"]["slo_miss_pct"] <= 1.0


def test_bench_scales_the_trace_and_keeps_to_the_policies_asked_for(
    run: Run, short_trace: Path, tmp_path: Path
) -> None:
    """`--rate-scale` multiplies the counts and `--policies` limits the rows, in that order;
    `--quiet` prints the table only."""
    out = tmp_path / "out"
    result = bench(
        run, short_trace, out, "--policies", "oracle,hpa", "--rate-scale", "2", "--quiet"
    )
    assert result.code == 0, result.err

    assert [row[2] for row in table_rows(result.out)[2:]] == ["oracle", "hpa (rate)"]
    assert not [line for line in result.out.splitlines() if not line.startswith("|")]
    saved = json.loads((out / "results.json").read_text())
    assert saved["rate_scale"] == 2.0
    counts = np.loadtxt(short_trace, delimiter=",", skiprows=1)[:, 1]
    assert saved["scenarios"]["mine.csv"]["requests"] == pytest.approx(2 * counts.sum())


def test_bench_replaces_the_outputs_of_an_earlier_run(
    run: Run, short_trace: Path, tmp_path: Path
) -> None:
    """Into an existing directory, the two outputs are replaced and other files left alone."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text("old")
    (out / "notes.txt").write_text("keep")
    result = bench(run, short_trace, out, "--policies", "oracle", "--quiet")
    assert result.code == 0, result.err
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "plot.png", "results.json"]
    assert json.loads((out / "results.json").read_text())["outcomes"][0]["policy"] == "oracle"
    assert (out / "notes.txt").read_text() == "keep"


BAD_INPUT = [
    (["--trace", "{missing}"], "{missing}: no such file"),
    (["--trace", "{malformed}"], "{malformed}:3: field 'requests': "),
    (
        ["--trace", "{good}", "--policies", "hpa,magic"],
        "argument --policies: unknown policy 'magic'; known: seed, default,",
    ),
    (["--trace", "{good}", "--regime", "tepid"], "argument --regime: invalid choice: 'tepid'"),
    (["--trace", "{good}", "--jobs", "0"], "argument --jobs: must be at least 1, got 0"),
    (
        ["--trace", "{good}", "--target-mean-replicas", "500"],
        "--target-mean-replicas 500 is above the 100 replicas every policy may use",
    ),
    (
        ["--trace", "{zeros}", "--target-mean-replicas", "5"],
        "{zeros}: the trace has no arrivals to scale",
    ),
]


@pytest.mark.parametrize(
    ("args", "expected"), BAD_INPUT, ids=["missing", "malformed", "policy", "regime", "jobs",
                                          "too-many-replicas", "all-zero"]
)  # fmt: skip
def test_bad_input_is_one_line_and_writes_nothing(
    run: Run, short_trace: Path, tmp_path: Path, args: list[str], expected: str
) -> None:
    """Bad input exits 2 with one error line before anything runs, and writes nothing."""
    paths = {
        "missing": tmp_path / "absent.csv",
        "malformed": tmp_path / "bad.csv",
        "good": short_trace,
        "zeros": write_trace(tmp_path / "zeros.csv", np.zeros(60)),
    }
    paths["malformed"].write_text("t_seconds,requests\n0,1\n1,many\n")
    out = tmp_path / "out"
    result = run("bench", *(a.format(**paths) for a in args), "--out", out)
    assert (result.code, result.out) == (2, "")
    assert result.err.startswith(f"error: {expected.format(**paths)}")
    assert result.err.count("\n") == 1
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [short_trace.name, "bad.csv", "zeros.csv"]
    )


def test_output_path_that_is_a_file_is_refused(run: Run, short_trace: Path, tmp_path: Path) -> None:
    """An --out that is an existing file is refused before running, and left alone."""
    out = tmp_path / "taken"
    out.write_text("keep")
    result = bench(run, short_trace, out)
    assert (result.code, result.out) == (2, "")
    assert result.err == f"error: {out}: exists and is not a directory\n"
    assert out.read_text() == "keep"


def test_bench_on_the_bundled_trace_does_not_depend_on_the_number_of_jobs(
    run: Run, azure_counts: npt.NDArray[np.float64], tmp_path: Path
) -> None:
    """On the first 10 minutes of the Azure trace, one job and two give the same table, JSON
    and plot."""
    trace = write_trace(tmp_path / "azure.csv", azure_counts[:AZURE_PREFIX_S])
    args = ("--target-mean-replicas", "10", "--policies", "default,oracle", "--quiet")
    one = run("bench", "--trace", trace, "--out", tmp_path / "one", "--jobs", "1", *args)
    two = run("bench", "--trace", trace, "--out", tmp_path / "two", "--jobs", "2", *args)
    assert (one.code, two.code) == (0, 0), one.err + two.err

    assert one.out == two.out
    for name in ("results.json", "plot.png"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
