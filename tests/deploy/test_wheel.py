"""The project's wheel, built from the image's build context and installed into a fresh
virtualenv, runs the `autoscaler` command.

To stay fast this does not download the runtime dependencies again: the fresh virtualenv finds
them in the project's own virtualenv, whose site-packages directory it names in a `.pth` file.
Python adds such a path without reading the `.pth` files inside it, so the project's editable
install stays inactive and `autoscaler` can only come from the wheel. That the lock satisfies the
wheel's dependencies is checked in test_dockerfile.py; the Dockerfile installs exactly the lock.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from .support import MANIFESTS, ROOT, version

CONTEXT = ("pyproject.toml", "README.md", "autoscaler")
"""What the Dockerfile copies into its builder to build the wheel."""


def run(*command: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """A command in a clean environment (nothing of this checkout on the module path)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    done = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=110,
    )
    assert done.returncode == 0, f"{command} failed:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel `pip wheel --no-deps` builds from a copy of the build context."""
    source = tmp_path_factory.mktemp("context")
    for name in CONTEXT:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, source / name)
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", out, source, cwd=out)
    (built,) = out.glob("*.whl")
    return built


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    """A fresh virtualenv with the wheel installed and the dependencies borrowed (see above)."""
    root = tmp_path_factory.mktemp("venv")
    run(sys.executable, "-m", "venv", "--without-pip", root, cwd=root)
    python = root / "bin" / "python"
    run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "--quiet",
        "--no-deps",
        "--no-index",
        wheel,
        cwd=root,
    )
    site = run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=root)
    borrowed = dict.fromkeys(sysconfig.get_paths()[key] for key in ("purelib", "platlib"))
    (Path(site.stdout.strip()) / "project-dependencies.pth").write_text("\n".join(borrowed) + "\n")
    return root


def test_the_wheel_carries_the_package_its_data_and_the_console_script(wheel: Path) -> None:
    """The wheel holds the `autoscaler` package with the bundled traces, no tests, and the
    `autoscaler` console script, at the project's version."""
    assert wheel.name.startswith(f"inference_autoscaler-{version()}-py3-none-any")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        scripts = archive.read(entry_points).decode()
    traces = {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "autoscaler/experiment/traces").glob("*.csv.gz")
    }
    assert traces
    assert traces <= set(names)
    assert "autoscaler/cli.py" in names
    assert not [n for n in names if n.split("/")[0] in ("tests", "bench", "manifests")]
    assert "autoscaler = autoscaler.cli:main" in scripts


def test_autoscaler_help_runs_from_the_installed_wheel(venv: Path, tmp_path: Path) -> None:
    """`autoscaler --help` from the fresh virtualenv lists every command, and the package it
    imports is the installed one."""
    done = run(venv / "bin" / "autoscaler", "--help", cwd=tmp_path)
    for command in ("run", "simulate", "demo", "explain", "validate", "bench"):
        assert f"    {command} " in done.stdout
    where = run(
        venv / "bin" / "python", "-c", "import autoscaler; print(autoscaler.__file__)", cwd=tmp_path
    )
    assert Path(where.stdout.strip()).is_relative_to(venv)


def test_autoscaler_validate_runs_from_the_installed_wheel(venv: Path, tmp_path: Path) -> None:
    """The installed command validates the examples, reading YAML and the annotation contract."""
    examples = sorted((MANIFESTS / "examples").glob("*.yaml"))
    done = run(
        venv / "bin" / "autoscaler",
        "validate",
        *(f"--filename={p}" for p in examples),
        cwd=tmp_path,
    )
    assert done.stdout.startswith(f"OK: {len(examples)} autoscaled Deployments")


def test_autoscaler_bench_runs_from_the_installed_wheel(venv: Path, tmp_path: Path) -> None:
    """The installed command compares policies on a trace without the repository's `bench/`."""
    trace = tmp_path / "mine.csv"
    trace.write_text("t_seconds,requests\n" + "".join(f"{t},3\n" for t in range(300)))
    done = run(
        venv / "bin" / "autoscaler",
        "bench",
        f"--trace={trace}",
        "--policies=oracle,hpa",
        "--jobs=1",
        "--quiet",
        cwd=tmp_path,
    )
    rows = [line.split("|")[3].strip() for line in done.stdout.splitlines()[2:]]
    assert rows == ["oracle", "hpa (rate)"]  # HPA labelled with the signal it ran on
    assert sorted(p.name for p in (tmp_path / "bench-out" / "trace").iterdir()) == [
        "plot.png",
        "results.json",
    ]
