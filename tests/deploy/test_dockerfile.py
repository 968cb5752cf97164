"""The image's inputs: the Dockerfile (linted by hadolint), its build context and the lock of the
runtime dependencies it installs. The image itself is built by `make image`, not here."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from .support import DOCKERFILE, DOCKERIGNORE, LOCK, MANIFESTS, ROOT, pyproject, tool, version

VENV = "/opt/venv"


@dataclass(frozen=True, slots=True)
class Instruction:
    keyword: str
    arguments: str


def instructions(text: str) -> list[Instruction]:
    """The Dockerfile's instructions, continuation lines joined and comments dropped."""
    found = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, arguments = (pending + line).partition(" ")
        found.append(Instruction(keyword.upper(), " ".join(arguments.split())))
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    return found


def stages() -> list[list[Instruction]]:
    """The build stages, each from its FROM; what precedes the first FROM is stage 0's preamble."""
    found: list[list[Instruction]] = [[]]
    for instruction in instructions(DOCKERFILE.read_text()):
        if instruction.keyword == "FROM":
            found.append([])
        found[-1].append(instruction)
    return found


def pair(assignment: str) -> tuple[str, str]:
    """`name=value` as (name, value)."""
    name, _, value = assignment.partition("=")
    return name, value


def build_args(preamble: list[Instruction] | None = None) -> dict[str, str]:
    """`ARG name=default` of a stage (the global ones by default)."""
    stage = stages()[0] if preamble is None else preamble
    return dict(pair(i.arguments) for i in stage if i.keyword == "ARG" and "=" in i.arguments)


def environment(stage: list[Instruction]) -> dict[str, str]:
    env: dict[str, str] = {}
    for instruction in stage:
        if instruction.keyword == "ENV":
            env.update(pair(item) for item in shlex.split(instruction.arguments))
    return env


def deployment() -> dict[str, Any]:
    found: dict[str, Any]
    (found,) = [
        d
        for d in yaml.safe_load_all((MANIFESTS / "base" / "deployment.yaml").read_text())
        if d["kind"] == "Deployment"
    ]
    return found


def hadolint(dockerfile: str, *, cwd: Path) -> list[dict[str, object]]:
    """hadolint's findings on a Dockerfile text, every severity down to style."""
    done = subprocess.run(
        [tool("hadolint"), "--format", "json", "--failure-threshold", "style", "-"],
        input=dockerfile,
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
        timeout=60,
    )
    findings = json.loads(done.stdout)
    assert isinstance(findings, list), done.stderr
    assert (done.returncode == 0) == (not findings), done.stderr
    return findings


def test_hadolint_finds_nothing_in_the_dockerfile() -> None:
    """hadolint, with the repository's configuration if any, reports no finding of any severity."""
    findings = hadolint(DOCKERFILE.read_text(), cwd=ROOT)
    assert findings == [], "\n".join(f"{f['line']}: {f['code']} {f['message']}" for f in findings)


def test_hadolint_catches_what_the_dockerfile_avoids(tmp_path: Path) -> None:
    """The linter is live: an unpinned base, unpinned pip installs and pip's cache are findings."""
    bad = 'FROM python:latest\nRUN pip install aiohttp\nENTRYPOINT ["autoscaler"]\n'
    codes = {f["code"] for f in hadolint(bad, cwd=tmp_path)}
    assert {"DL3007", "DL3013", "DL3042"} <= codes


def test_pip_is_called_by_name_so_the_linter_checks_it() -> None:
    """hadolint's pip rules match `pip` by name only; a pip called by its path escapes them."""
    runs = [i.arguments for stage in stages() for i in stage if i.keyword == "RUN"]
    assert any(re.search(r"(^|&& )pip install ", run) for run in runs)
    assert not [run for run in runs if re.search(r"/pip3?(\.\d+)? ", run)]


def test_two_stages_on_one_pinned_slim_python_3_11() -> None:
    """Builder and final stage start from the same slim Python 3.11 image, pinned to a patch."""
    preamble, builder, final = stages()
    base = build_args(preamble)["PYTHON_IMAGE"]
    assert re.fullmatch(r"python:3\.11\.\d+-slim(-[a-z]+)?", base), base
    assert builder[0].arguments == "${PYTHON_IMAGE} AS builder"
    assert final[0].arguments == "${PYTHON_IMAGE}"
    assert pyproject()["project"]["requires-python"] == ">=3.11"


def test_the_final_stage_copies_only_the_virtualenv_and_runs_nothing() -> None:
    """No RUN (so no package manager, no compiler) and one COPY: the builder's virtualenv."""
    final = stages()[-1]
    assert [i for i in final if i.keyword in ("RUN", "ADD")] == []
    copies = [i.arguments for i in final if i.keyword == "COPY"]
    assert copies == [f"--from=builder {VENV} {VENV}"]
    assert environment(final)["PATH"].startswith(f"{VENV}/bin:")


def test_the_builder_installs_the_locked_dependencies_and_the_wheel_alone() -> None:
    """Dependencies come only from the hashed lock, as wheels; the project's wheel adds none."""
    builder = stages()[1]
    runs = [i.arguments for i in builder if i.keyword == "RUN"]
    (lock_install,) = [r for r in runs if "-r requirements.lock" in r]
    assert "--require-hashes" in lock_install
    assert "--only-binary=:all:" in lock_install
    (wheel_install,) = [r for r in runs if "pip wheel" in r]
    assert wheel_install.count("--no-deps") == 2
    assert "pip uninstall --yes pip setuptools" in wheel_install
    assert environment(builder)["PATH"].startswith(f"{VENV}/bin:")


def test_the_image_runs_autoscaler_run_as_the_manifests_non_root_user() -> None:
    """A numeric non-root USER equal to the Deployment's runAsUser/runAsGroup, JSON-form
    ENTRYPOINT `autoscaler` (the project's console script) and CMD `run`."""
    final = stages()[-1]
    (user,) = [i.arguments for i in final if i.keyword == "USER"]
    uid, gid = (int(part) for part in user.split(":"))
    assert uid > 0
    assert gid > 0
    pod = deployment()["spec"]["template"]["spec"]
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]) == (uid, gid)
    (entrypoint,) = [json.loads(i.arguments) for i in final if i.keyword == "ENTRYPOINT"]
    (command,) = [json.loads(i.arguments) for i in final if i.keyword == "CMD"]
    assert entrypoint == ["autoscaler"]
    assert command == ["run"]
    assert "autoscaler" in pyproject()["project"]["scripts"]
    (container,) = pod["containers"]
    assert container.get("command") is None
    assert container["args"] == command


def test_nothing_is_written_outside_tmp_at_run_time() -> None:
    """No bytecode written, HOME and matplotlib's cache under /tmp, WORKDIR /tmp: the one
    writable path of the Deployment (an emptyDir under a read-only root filesystem)."""
    final = stages()[-1]
    env = environment(final)
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["HOME"] == "/tmp"
    assert env["MPLCONFIGDIR"].startswith("/tmp/")
    (workdir,) = [i.arguments for i in final if i.keyword == "WORKDIR"]
    assert workdir == "/tmp"
    pod = deployment()["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]


SINGLE_THREADED = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def test_numeric_libraries_run_one_thread_in_the_image_and_the_deployment() -> None:
    """The image and the controller's Deployment both limit BLAS and OpenMP to one thread."""
    env = environment(stages()[-1])
    assert {name: env.get(name) for name in SINGLE_THREADED} == dict.fromkeys(SINGLE_THREADED, "1")
    (container,) = deployment()["spec"]["template"]["spec"]["containers"]
    values = {e["name"]: e.get("value") for e in container["env"]}
    assert {name: values.get(name) for name in SINGLE_THREADED} == dict.fromkeys(
        SINGLE_THREADED, "1"
    )


def test_freed_large_blocks_go_back_to_the_node_in_the_image_and_the_deployment() -> None:
    """The image and the controller's Deployment both fix glibc's mmap threshold at 128 KiB,
    so the large blocks a refresh frees are unmapped rather than kept in the heap."""
    assert environment(stages()[-1]).get("MALLOC_MMAP_THRESHOLD_") == "131072"
    (container,) = deployment()["spec"]["template"]["spec"]["containers"]
    values = {e["name"]: e.get("value") for e in container["env"]}
    assert values.get("MALLOC_MMAP_THRESHOLD_") == "131072"


def test_the_labels_describe_the_project_at_its_version() -> None:
    """OCI labels: title, version (the project's, through the VERSION build argument), source
    and the project's licence."""
    final = stages()[-1]
    labels: dict[str, str] = {}
    for instruction in final:
        if instruction.keyword == "LABEL":
            labels.update(pair(item) for item in shlex.split(instruction.arguments))
    assert labels["org.opencontainers.image.title"] == pyproject()["project"]["name"]
    assert labels["org.opencontainers.image.version"] == "${VERSION}"
    assert build_args(final)["VERSION"] == version()
    assert labels["org.opencontainers.image.licenses"] == pyproject()["project"]["license"]["text"]
    assert labels["org.opencontainers.image.source"].startswith("https://")


# -- the build context -------------------------------------------------------------------------


def dockerignore_patterns() -> list[tuple[bool, re.Pattern[str]]]:
    """(excludes, pattern) in file order; the last pattern that matches a path decides."""
    patterns = []
    for raw in DOCKERIGNORE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        excludes = not line.startswith("!")
        glob = line.lstrip("!").strip("/")
        regex = ""
        for part in re.split(r"(\*\*/?|\*|\?)", glob):
            if part in ("**", "**/"):
                regex += "(.*/)?" if part == "**/" else ".*"
            elif part == "*":
                regex += "[^/]*"
            elif part == "?":
                regex += "[^/]"
            else:
                regex += re.escape(part)
        # A pattern that matches a directory matches everything under it.
        patterns.append((excludes, re.compile(regex + "(/.*)?")))
    return patterns


def in_context(path: str) -> bool:
    """Whether Docker sends `path` (relative to the repository) with the build context."""
    included = True
    for excludes, pattern in dockerignore_patterns():
        if pattern.fullmatch(path):
            included = not excludes
    return included


def test_the_build_context_holds_every_file_the_dockerfile_copies() -> None:
    """Each COPY source from the context, and every package file under it, reaches the build."""
    sources = [
        source
        for stage in stages()
        for i in stage
        if i.keyword == "COPY" and not i.arguments.startswith("--from=")
        for source in i.arguments.split()[:-1]
    ]
    assert sources
    files = []
    for source in sources:
        path = ROOT / source
        assert path.exists(), source
        if path.is_dir():
            files += [
                p.relative_to(ROOT).as_posix()
                for p in path.rglob("*")
                if p.is_file() and "__pycache__" not in p.parts
            ]
        else:
            files.append(source)
    assert [f for f in files if not in_context(f)] == []


@pytest.mark.parametrize(
    "path",
    [
        ".venv/bin/python",
        ".git/HEAD",
        "tests/conftest.py",
        "bench/run.py",
        "manifests/base/deployment.yaml",
        "autoscaler/__pycache__/cli.cpython-311.pyc",
        "Dockerfile",
    ],
)
def test_the_build_context_leaves_out_what_the_image_does_not_need(path: str) -> None:
    """The virtualenv, Git history, tests, benchmarks, manifests and bytecode stay out."""
    assert not in_context(path)


# -- the lock ------------------------------------------------------------------------------------


def locked() -> dict[str, tuple[str, list[str]]]:
    """requirements.lock as {canonical name: (version, hashes)}."""
    found: dict[str, tuple[str, list[str]]] = {}
    current = None
    for raw in LOCK.read_text().splitlines():
        line = raw.split("#", 1)[0].strip().rstrip("\\").strip()
        if not line:
            continue
        if line.startswith("--hash="):
            assert current is not None, raw
            found[current][1].append(line.removeprefix("--hash="))
            continue
        assert not line.startswith("-"), f"unexpected option in the lock: {raw}"
        name, sep, pinned = line.partition("==")
        assert sep, f"not pinned with ==: {raw}"
        current = canonicalize_name(name)
        assert current not in found, f"pinned twice: {name}"
        found[current] = (pinned, [])
    return found


def test_the_lock_pins_one_version_with_hashes_per_package() -> None:
    """Every line is `name==version` with sha256 hashes, as `pip --require-hashes` needs."""
    pins = locked()
    assert pins
    for name, (pinned, hashes) in pins.items():
        assert re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", pinned), name
        assert hashes, f"{name} has no hash"
        assert all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in hashes), name


def test_the_lock_satisfies_every_runtime_dependency() -> None:
    """Each dependency of pyproject.toml is locked at a version its range accepts; after
    changing them, regenerate the lock with `make lock`."""
    pins = locked()
    for text in pyproject()["project"]["dependencies"]:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} is not in requirements.lock: run `make lock`"
        assert requirement.specifier.contains(pins[name][0], prereleases=True), (
            f"requirements.lock pins {requirement.name}=={pins[name][0]}, outside {text}: "
            "run `make lock`"
        )


def test_the_lock_was_resolved_for_the_images_python() -> None:
    """The lock's resolver ran on the image's Python minor version."""
    minor = re.search(r"python:(3\.\d+)\.", build_args()["PYTHON_IMAGE"])
    assert minor is not None
    assert f"pip-compile with Python {minor.group(1)}\n" in LOCK.read_text()
