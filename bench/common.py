"""What the bench commands share: argument types and plain-JSON output.

Plain helpers for `bench.run`, `bench.bad_pod` and `bench.placement`; no simulation here.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path


def add_output_arguments(parser: argparse.ArgumentParser, default_out: Path) -> None:
    """`--out DIR` (default `default_out`) and `--quiet`, as every bench command takes them."""
    parser.add_argument(
        "--out",
        type=Path,
        default=default_out,
        metavar="DIR",
        help="output directory (default: %(default)s)",
    )
    parser.add_argument("--quiet", action="store_true", help="print the table only")


def add_sweep_arguments(
    parser: argparse.ArgumentParser, default_out: Path, quick_out: Path
) -> None:
    """`--duration-s`, `--jobs`, `--out DIR` (its default depends on `--quick`) and `--quiet`,
    as the benches that run the equal-SLO search take them."""
    parser.add_argument(
        "--duration-s",
        type=positive_int,
        metavar="S",
        help="cut every trace to its first S seconds",
    )
    parser.add_argument(
        "--jobs", type=positive_int, metavar="N", help="worker processes (default: the CPUs)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help=f"output directory (default: {default_out}, or {quick_out} with --quick)",
    )
    parser.add_argument("--quiet", action="store_true", help="print the table only")


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_float(text: str) -> float:
    """An argparse type: a finite number above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return value


def finite(value: object) -> object:
    """Plain JSON: tuples as lists, NaN and infinities as null, keys as strings."""
    if isinstance(value, dict):
        return {str(k): finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_json(path: Path, document: object) -> Path:
    """`document` as indented plain JSON at `path`; returns the path."""
    path.write_text(json.dumps(finite(document), indent=2, allow_nan=False) + "\n")
    return path
