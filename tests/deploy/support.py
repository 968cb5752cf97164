"""What the deployment tests share: the repository's paths, the project's version, the tools."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
LOCK = ROOT / "requirements.lock"
NAMESPACED = "overlays/namespaced"
"""The example of a namespaced install: the base and the component, for two namespaces."""
COMPONENTS = (
    "istio",
    "gateway-api",
    "smi",
    "dry-run",
    "grafana-dashboards",
    "shards",
    "cache-placement",
)
"""The components of manifests/components/ that combine over the base without an edit (the
namespaced one needs an overlay that lists the namespaces)."""


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


def run_kustomize(directory: Path) -> str:
    """`kubectl kustomize DIRECTORY`: the rendered YAML, with no cluster to ask."""
    done = subprocess.run(
        [tool("kubectl"), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={**os.environ, "KUBECONFIG": os.devnull},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def namespaced_on(kustomization: str, *, edit: Callable[[str], str] = lambda text: text) -> str:
    """The namespaced example copied elsewhere, building on `kustomization` instead of the base
    and with `edit` applied to its kustomization.yaml (kustomize refuses absolute paths: the copy
    names the manifests by relative ones)."""
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "namespaced"
        shutil.copytree(MANIFESTS / NAMESPACED, copy)
        up = Path(os.path.relpath(MANIFESTS, copy))
        text = (copy / "kustomization.yaml").read_text()
        assert "- ../../base\n" in text
        assert "- ../../components/namespaced\n" in text
        text = text.replace("- ../../base\n", f"- {up / kustomization}\n")
        text = text.replace("- ../../components/", f"- {up / 'components'}/")
        (copy / "kustomization.yaml").write_text(edit(text))
        return run_kustomize(copy)


def composed(*components: str) -> str:
    """A kustomization of a platform team's own, elsewhere: the base and `components` (names
    under manifests/components/), in that order, rendered."""
    with tempfile.TemporaryDirectory() as scratch:
        up = Path(os.path.relpath(MANIFESTS, scratch))
        listed = "".join(f"  - {up / 'components' / name}\n" for name in components)
        (Path(scratch) / "kustomization.yaml").write_text(
            "apiVersion: kustomize.config.k8s.io/v1beta1\n"
            "kind: Kustomization\n"
            f"resources:\n  - {up / 'base'}\ncomponents:\n{listed}"
        )
        return run_kustomize(Path(scratch))
