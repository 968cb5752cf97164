"""What the deployment tests share: the repository's paths, the project's version, the tools."""

from __future__ import annotations

import os
import shutil
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
LOCK = ROOT / "requirements.lock"


def pyproject() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)


def version() -> str:
    """The project's version, which the image tag and its labels repeat."""
    found = pyproject()["project"]["version"]
    assert isinstance(found, str)
    return found


def tool(name: str) -> str:
    """A command of the dev extras: the one installed beside this interpreter (the project's
    virtualenv, at the pinned version) first, else one on PATH. Never skipped: a missing tool
    fails the test with the way to install it."""
    beside = Path(sys.executable).parent / name
    if os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: install the dev extras (`make venv`)")
    return found
