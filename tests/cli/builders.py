"""Builders for the command-line tests: trace files on disk."""

from __future__ import annotations

import gzip
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from .conftest import Outcome


def write_trace(path: Path, counts: npt.ArrayLike, *, compress: bool = False) -> Path:
    """Writes a valid `t_seconds,requests` trace of `counts`."""
    rows = "".join(f"{t},{c:g}\n" for t, c in enumerate(np.asarray(counts, dtype=float)))
    data = ("t_seconds,requests\n" + rows).encode()
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


def assert_refused_in_one_line(
    run: Callable[..., Outcome], trace: Path, out: Path, args: Sequence[str], expected: str
) -> None:
    """`simulate` with `args` exits 2 with one line starting `expected`, and writes nothing."""
    result = run("simulate", "--trace", trace, "--out", out, *args)
    assert (result.code, result.out) == (2, "")
    assert result.err.startswith(f"error: {expected}")
    assert result.err.count("\n") == 1
    assert not out.exists()
