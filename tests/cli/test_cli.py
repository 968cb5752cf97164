"""The `autoscaler` command line, run in-process: simulate, demo, help and every input error."""

from __future__ import annotations

import csv
import gzip
import json
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from autoscaler import cli, settings
from autoscaler.experiment import run as sim_run
from autoscaler.sim.params import SUMMARY_KEYS, TIMESERIES_COLUMNS

from .builders import assert_refused_in_one_line, write_trace
from .conftest import Outcome

Run = Callable[..., Outcome]


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def check_outputs(out: Path, *, seconds: int) -> dict[str, object]:
    """Asserts the three outputs are complete; returns summary.json."""
    assert sorted(p.name for p in out.iterdir()) == ["plot.png", "summary.json", "timeseries.csv"]
    with (out / "timeseries.csv").open(newline="") as f:
        rows = list(csv.reader(f))
    assert tuple(rows[0]) == TIMESERIES_COLUMNS
    assert [int(r[0]) for r in rows[1:]] == list(range(seconds))
    assert all(len(r) == len(TIMESERIES_COLUMNS) for r in rows)
    width, height = png_size(out / "plot.png")
    assert 0 < width <= 1600
    assert 0 < height <= 1000
    summary: dict[str, object] = json.loads((out / "summary.json").read_text())
    assert summary.keys() >= SUMMARY_KEYS
    return summary


def test_help_lists_the_commands(run: Run) -> None:
    """`--help` lists simulate and demo, each with a one-line description."""
    result = run("--help")
    assert result.code == 0
    lines = result.out.splitlines()
    assert any(line.split()[:1] == ["simulate"] and len(line.split()) > 2 for line in lines)
    assert any(line.split()[:1] == ["demo"] and len(line.split()) > 2 for line in lines)


def test_module_entry_point_prints_help() -> None:
    """`python -m autoscaler --help` runs the same command line in a fresh process."""
    done = subprocess.run(
        [sys.executable, "-m", "autoscaler", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "simulate" in done.stdout
    assert "demo" in done.stdout


def test_policy_choices_come_from_the_simulator(run: Run) -> None:
    """Every policy the simulator registers is offered by `simulate --help`."""
    result = run("simulate", "--help")
    assert result.code == 0
    for name in sim_run.POLICIES:
        assert name in result.out


def test_simulate_writes_the_three_outputs(run: Run, step_trace: Path, tmp_path: Path) -> None:
    """A synthetic step trace yields one CSV row per second, a summary with the params and a
    plot, and the table and paths on stdout."""
    out = tmp_path / "out"
    result = run(
        "simulate", "--trace", step_trace, "--policy", "seed", "--min-replicas", "3",
        "--max-replicas", "30", "--startup-s", "20", "--seed", "7", "--out", out,
    )  # fmt: skip
    assert result.code == 0, result.err
    summary = check_outputs(out, seconds=600)
    params = summary["params"]
    assert isinstance(params, dict)
    assert (params["policy"], params["min_replicas"], params["max_replicas"]) == ("seed", 3, 30)
    assert (params["startup_s"], params["seed"], params["rate_scale"]) == (20, 7, 1)
    assert "GPU-hours" in result.out
    assert "SLO misses" in result.out
    assert str(out / "plot.png") in result.out


def test_simulate_off_a_terminal_writes_only_json_lines_with_simulated_time(
    run: Run, step_trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Off a terminal, stderr carries JSON log lines only (no progress text between them), and
    each event of the simulated controller carries its simulated time `sim_t_s`."""
    monkeypatch.setenv("AUTOSCALER_LOG__LEVEL", "info")
    result = run("simulate", "--trace", step_trace, "--policy", "seed", "--out", tmp_path / "o")
    assert result.code == 0, result.err
    events = [json.loads(line) for line in result.err.splitlines()]
    decisions = [e for e in events if e["event"] == "decision.made"]
    assert decisions
    times = [e["sim_t_s"] for e in decisions]
    assert times == sorted(times)
    assert 200 <= times[1] < 600  # the step at 200 s, in simulated seconds, not wall-clock ones
    assert all("sim_t_s" not in e for e in events if e["event"] == "trace.loaded")


def test_simulate_scales_the_bundled_trace(
    run: Run, azure_counts: npt.NDArray[np.float64], tmp_path: Path
) -> None:
    """The first 15 minutes of the Azure trace, scaled to a mean of 20 replicas, simulate end
    to end with the default policy."""
    path = write_trace(tmp_path / "azure-900.csv.gz", azure_counts[:900], compress=True)
    out = tmp_path / "out"
    result = run("simulate", "--trace", path, "--target-mean-replicas", "20", "--out", out)
    assert result.code == 0, result.err
    summary = check_outputs(out, seconds=900)
    params = summary["params"]
    assert isinstance(params, dict)
    assert params["policy"] == "default"
    expected_scale = 20 * 0.75 / float(np.mean(azure_counts[:900]))
    assert params["rate_scale"] == pytest.approx(expected_scale)


def test_simulate_replaces_outputs_of_an_earlier_run(
    run: Run, step_trace: Path, tmp_path: Path
) -> None:
    """Running again into the same directory replaces the three files and keeps others."""
    out = tmp_path / "out"
    assert run("simulate", "--trace", step_trace, "--out", out, "--quiet").code == 0
    (out / "notes.txt").write_text("mine")
    result = run("simulate", "--trace", step_trace, "--out", out, "--seed", "3", "--quiet")
    assert result.code == 0
    assert result.out == ""
    summary = json.loads((out / "summary.json").read_text())
    assert summary["params"]["seed"] == 3
    assert (out / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "step.csv"]


def test_demo_compares_both_policies(
    capsys: pytest.CaptureFixture[str], azure_counts: npt.NDArray[np.float64], tmp_path: Path
) -> None:
    """The demo (on a 15-minute prefix of its trace) writes both policies' outputs and prints
    the attribution and a side-by-side table."""
    code = cli.run_demo(
        out_dir=tmp_path / "demo", config=settings.Settings(), arrivals=azure_counts[:900]
    )
    assert code == 0
    for policy in ("default", "seed"):
        summary = check_outputs(tmp_path / "demo" / policy, seconds=900)
        assert summary["params"]["policy"] == policy  # type: ignore[index]
    out = capsys.readouterr().out
    assert "Azure LLM inference trace 2023 (conversation), Microsoft, CC-BY-4.0" in out
    header = next(line for line in out.splitlines() if line.startswith("| policy"))
    assert header.split("|")[2:4] == [" default ", "    seed "]
    assert str(tmp_path / "demo" / "seed" / "plot.png") in out


# --- bad input: one line on stderr, exit code 2, nothing written -------------------------------


def bad_trace(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


H = "t_seconds,requests\n"


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("missing.csv", None, "{path}: no such file"),
        ("empty.csv", "", "{path}: empty file"),
        ("words.csv", H + "0,1\n1,many\n", "{path}:3: field 'requests': not a number: 'many'"),
        (
            "back.csv",
            H + "0,1\n1,1\n0,1\n",
            "{path}:4: field 't_seconds': not increasing by 1: expected 2, got 0",
        ),
        (
            "neg.csv.gz",
            gzip.compress(f"{H}0,1\n1,-3\n".encode()),
            "{path}:3: field 'requests': negative count -3",
        ),
        (
            "huge.csv",
            H + "0,1\n1,1e308\n",
            "{path}:3: field 'requests': count 1e308 is above the limit of 1,000,000 requests "
            "per second",
        ),
        ("zeros.csv", H + "0,0\n1,0\n", "{path}: the trace has no arrivals to scale"),
    ],
    ids=["missing", "empty", "malformed", "non-monotonic", "negative", "huge", "all-zero"],
)
def test_bad_trace_is_one_line(
    run: Run, tmp_path: Path, name: str, content: str | bytes | None, expected: str
) -> None:
    """A bad trace exits 2 with one line naming the file, line and field, and writes nothing."""
    path = tmp_path / name if content is None else bad_trace(tmp_path, name, content)
    out = tmp_path / "out"
    result = run("simulate", "--trace", path, "--target-mean-replicas", "5", "--out", out)
    assert (result.code, result.out) == (2, "")
    assert result.err == f"error: {expected.format(path=path)}\n"
    assert not out.exists()


BOUNDS = "--min-replicas", "9", "--max-replicas", "4"
NONSENSE_OPTIONS = [
    (["--policy", "magic"], "argument --policy: invalid choice: 'magic'"),
    ([*BOUNDS], "--min-replicas 9 is above --max-replicas 4"),
    (["--min-replicas", "100"], "--min-replicas 100 is above the default --max-replicas 64"),
    (["--max-replicas", "0"], "argument --max-replicas: must be at least 1, got 0"),
    (["--min-replicas", "-1"], "argument --min-replicas: must be at least 0, got -1"),
    (["--max-replicas", "2.5"], "argument --max-replicas: not a whole number: '2.5'"),
    (["--startup-s", "-5"], "argument --startup-s: must be at least 0, got -5"),
    (["--startup-s", "inf"], "argument --startup-s: must be a finite number, got 'inf'"),
    (["--startup-s", "nan"], "argument --startup-s: must be a finite number, got 'nan'"),
    (["--rate-scale", "0"], "argument --rate-scale: must be above 0, got 0"),
    (["--rate-scale", "-2"], "argument --rate-scale: must be above 0, got -2"),
    (
        ["--rate-scale", "2", "--target-mean-replicas", "5"],
        "argument --target-mean-replicas: not allowed with argument --rate-scale",
    ),
    (
        ["--target-mean-replicas", "100"],
        "--target-mean-replicas 100 is above the default --max-replicas 64",
    ),
    (["--seed", "-1"], "argument --seed: must be at least 0, got -1"),
    (["--frobnicate"], "unrecognized arguments: --frobnicate"),
]


@pytest.mark.parametrize(
    ("args", "expected"), NONSENSE_OPTIONS, ids=[" ".join(a) for a, _ in NONSENSE_OPTIONS]
)
def test_nonsense_option_is_one_line(
    run: Run, step_trace: Path, tmp_path: Path, args: list[str], expected: str
) -> None:
    """A nonsense option exits 2 with one error line, no traceback and no output directory."""
    assert_refused_in_one_line(run, step_trace, tmp_path / "out", args, expected)


def test_missing_command_is_one_line(run: Run) -> None:
    """No command at all is a one-line usage error."""
    result = run()
    assert result.code == 2
    assert result.err.count("\n") == 1
    assert result.err.startswith("error: ")


def test_output_path_that_is_a_file_is_refused(run: Run, step_trace: Path, tmp_path: Path) -> None:
    """An --out that is an existing file is refused before simulating, and left alone."""
    out = tmp_path / "taken"
    out.write_text("keep")
    for argv in (["simulate", "--trace", step_trace], ["demo"]):
        result = run(*argv, "--out", out)
        assert (result.code, result.err) == (2, f"error: {out}: exists and is not a directory\n")
    assert out.read_text() == "keep"


def test_bad_setting_is_one_line(
    run: Run, step_trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bad AUTOSCALER_ environment variable is named in one error line."""
    monkeypatch.setenv("AUTOSCALER_LOG__LEVEL", "loud")
    result = run("simulate", "--trace", step_trace, "--out", tmp_path / "out")
    assert result.code == 2
    assert result.err.startswith("error: AUTOSCALER_LOG__LEVEL: ")
    assert result.err.count("\n") == 1


def test_loop_settings_the_simulator_cannot_honour_are_reported(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tick other than the simulator's one second runs anyway, with a warning that says so."""
    monkeypatch.setenv("AUTOSCALER_LOOP__TICK_S", "2")
    path = write_trace(tmp_path / "short.csv", np.full(120, 3.0))
    result = run("simulate", "--trace", path, "--out", tmp_path / "out", "--quiet")
    assert result.code == 0
    record = json.loads(result.err)
    assert (record["event"], record["setting"]) == ("setting.ignored", "AUTOSCALER_LOOP__TICK_S")
