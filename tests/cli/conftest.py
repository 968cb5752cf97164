"""Fixtures for the command-line tests: a clean environment, and small traces on disk."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import structlog

from autoscaler import cli
from autoscaler.experiment import trace

from .builders import write_trace


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No AUTOSCALER_ variable from the caller's shell, and no logging set up by a test leaks."""
    for name in list(os.environ):
        if name.startswith("AUTOSCALER_"):
            monkeypatch.delenv(name)
    yield
    structlog.reset_defaults()


@dataclass(frozen=True)
class Outcome:
    code: int
    out: str
    err: str


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Callable[..., Outcome]:
    """Runs `autoscaler ARGS...` in-process and returns its exit code, stdout and stderr."""

    def run_(*argv: str | Path) -> Outcome:
        capsys.readouterr()
        code = cli.main([str(a) for a in argv])
        captured = capsys.readouterr()
        return Outcome(code, captured.out, captured.err)

    return run_


@pytest.fixture(scope="session")
def azure_counts() -> npt.NDArray[np.float64]:
    """The bundled Azure conversation trace's per-second counts."""
    return trace.load(trace.bundled())


@pytest.fixture
def step_trace(tmp_path: Path) -> Path:
    """A 600 s synthetic trace: 4 requests/s, a step to 14/s at 200 s, back to 4/s at 400 s."""
    counts = np.full(600, 4.0)
    counts[200:400] = 14.0
    return write_trace(tmp_path / "step.csv", counts)
