"""Writing a command's output files all or nothing: into a staging folder first, then moved.

A run that fails halfway (a full disk, an interrupt) leaves the output folder as it was; a run
that succeeds replaces exactly the files it writes. It must not decide what the files hold.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

from autoscaler import errors


def write_all(out_dir: Path, writers: Mapping[str, Callable[[Path], None]]) -> None:
    """Call each `writers[name](path)` on a staging path, then put every file at
    `out_dir / name` (creating `out_dir` if needed).

    Raises `ConfigError` when `out_dir` exists but is not a directory; I/O errors propagate and
    leave `out_dir` as it was.
    """
    if out_dir.exists() and not out_dir.is_dir():
        raise errors.ConfigError(f"{out_dir}: exists and is not a directory")
    existed = out_dir.is_dir()
    # Beside out_dir, so the final rename is atomic; inside it when it already exists, so the
    # moves never cross a mount point.
    staging_parent = out_dir if existed else out_dir.absolute().parent
    staging_parent.mkdir(parents=True, exist_ok=True)
    staging = staging_parent / f".{out_dir.absolute().name}.{secrets.token_hex(4)}.tmp"
    staging.mkdir()
    try:
        for name, write in writers.items():
            write(staging / name)
        if existed:
            for name in writers:
                os.replace(staging / name, out_dir / name)
            staging.rmdir()
        else:
            os.rename(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
