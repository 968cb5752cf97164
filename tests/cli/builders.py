"""Builders for the command-line tests: trace files on disk."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import numpy.typing as npt


def write_trace(path: Path, counts: npt.ArrayLike, *, compress: bool = False) -> Path:
    """Writes a valid `t_seconds,requests` trace of `counts`."""
    rows = "".join(f"{t},{c:g}\n" for t, c in enumerate(np.asarray(counts, dtype=float)))
    data = ("t_seconds,requests\n" + rows).encode()
    path.write_bytes(gzip.compress(data) if compress else data)
    return path
