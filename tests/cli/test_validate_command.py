"""`autoscaler validate` on the command line: files, directories, standard input, and each exit
code as the help documents it."""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import Outcome

Run = Callable[..., Outcome]

P = "autoscaler.dsec.io/"

GOOD = f"""\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: chat
  namespace: ml
  annotations:
    {P}enabled: "true"
    {P}max-replicas: "8"
    {P}target-qps-per-replica: "4"
spec:
  selector:
    matchLabels: {{app: chat}}
"""

WITH_REPLICAS = GOOD + "  replicas: 3\n"

UNGATED = GOOD.replace('"4"\n', f'"4"\n    {P}traffic-router: "istio"\n', 1)
"""A traffic router without the readiness gate or the warming label: a problem."""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_help_documents_every_exit_code(run: Run) -> None:
    """`validate --help` states what 0, 1 and 2 mean, warnings and --strict included."""
    result = run("validate", "--help")
    assert result.code == 0
    text = " ".join(result.out.split())
    assert "exit codes: 0 no problem (warnings are printed and still give 0, unless --strict)" in (
        text
    )
    assert "1 problems found (or warnings, with --strict)" in text
    assert "2 an input cannot be read or is not YAML/JSON" in text
    assert "or a usage error" in text
    assert "- for standard input" in text
    assert "a directory (every *.yaml, *.yml and *.json below it, in sorted order)" in text


def test_exit_0_for_a_clean_manifest(run: Run, tmp_path: Path) -> None:
    """A clean manifest exits 0 with the summary on stdout."""
    result = run("validate", "-f", write(tmp_path / "deploy.yaml", GOOD))
    assert (result.code, result.out, result.err) == (
        0,
        "OK: 1 autoscaled Deployment in 1 file, no problems\n",
        "",
    )


def test_exit_0_with_warnings_and_1_with_strict(run: Run, tmp_path: Path) -> None:
    """A warning alone exits 0 and is printed; --strict turns it into exit 1."""
    path = write(tmp_path / "deploy.yaml", WITH_REPLICAS)
    warning = (
        f"{path}: document 1: Deployment ml/chat: warning: spec.replicas=3: the controller owns "
        "replicas; every kubectl apply of this manifest resets them to 3: leave spec.replicas out"
    )
    relaxed = run("validate", "-f", path)
    assert (relaxed.code, relaxed.err) == (0, "")
    assert relaxed.out.splitlines() == [
        warning,
        "OK: 1 autoscaled Deployment in 1 file, no problems, 1 warning",
    ]
    strict = run("validate", "--strict", "-f", path)
    assert (strict.code, strict.out, strict.err) == (1, warning + "\n", "")


def test_exit_1_for_problems(run: Run, tmp_path: Path) -> None:
    """A problem exits 1 with one line on stdout and nothing on stderr."""
    path = write(tmp_path / "deploy.yaml", UNGATED)
    result = run("validate", "-f", path)
    assert (result.code, result.err) == (1, "")
    assert result.out.startswith(
        f'{path}: document 1: Deployment ml/chat: {P}traffic-router="istio": the pod template '
        "has neither the readiness gate"
    )
    assert result.out.count("\n") == 1


def test_exit_2_for_a_yaml_syntax_error(run: Run, tmp_path: Path) -> None:
    """Broken YAML exits 2, as the help says, with the file and line on stderr."""
    path = write(tmp_path / "deploy.yaml", "kind: Deployment\nmetadata:\n  name: a: b\n")
    result = run("validate", "-f", path)
    assert (result.code, result.out) == (2, "")
    assert result.err == f"{path}:3: YAML syntax error: mapping values are not allowed here\n"


def test_exit_2_for_a_missing_file(run: Run, tmp_path: Path) -> None:
    """A file that cannot be read exits 2, after checking the others."""
    good = write(tmp_path / "good.yaml", UNGATED)
    result = run("validate", "-f", tmp_path / "missing.yaml", "-f", good)
    assert result.code == 2
    assert result.err == f"{tmp_path / 'missing.yaml'}: cannot read: No such file or directory\n"
    assert result.out.count("\n") == 1


@pytest.mark.parametrize(
    "argv",
    [("validate",), ("validate", "-f"), ("validate", "-f", "x.yaml", "--no-such-flag")],
    ids=["no-file", "no-path", "unknown-flag"],
)
def test_exit_2_for_a_usage_error(run: Run, argv: tuple[str, ...]) -> None:
    """A usage error exits 2 with one error line on stderr."""
    result = run(*argv)
    assert (result.code, result.out) == (2, "")
    assert result.err.startswith("error: ")
    assert result.err.count("\n") == 1


def test_a_directory_is_read_recursively(run: Run, tmp_path: Path) -> None:
    """`-f DIR` reads every manifest below the directory, in sorted order."""
    write(tmp_path / "k8s" / "b" / "deploy.yml", UNGATED.replace("name: chat", "name: b"))
    write(tmp_path / "k8s" / "a.yaml", UNGATED.replace("name: chat", "name: a"))
    write(tmp_path / "k8s" / "notes.txt", "not: [yaml\n")
    result = run("validate", "-f", tmp_path / "k8s")
    assert (result.code, result.err) == (1, "")
    assert [line.split(": ", 3)[:3] for line in result.out.splitlines()] == [
        [str(tmp_path / "k8s" / "a.yaml"), "document 1", "Deployment ml/a"],
        [str(tmp_path / "k8s" / "b" / "deploy.yml"), "document 1", "Deployment ml/b"],
    ]


def test_the_summary_names_each_kind_it_found(run: Run, tmp_path: Path) -> None:
    """The summary counts the autoscaled workloads by kind, or says there is none."""
    sts = GOOD.replace("kind: Deployment", "kind: StatefulSet")
    lws = GOOD.replace(
        "apps/v1\nkind: Deployment", "leaderworkerset.x-k8s.io/v1\nkind: LeaderWorkerSet"
    )
    documents = [
        GOOD,
        GOOD.replace("name: chat", "name: embed"),
        GOOD.replace("name: chat", "name: rank"),
        sts.replace("name: chat", "name: store"),
        lws.replace("name: chat", "name: big"),
    ]
    write(tmp_path / "k8s" / "all.yaml", "---\n".join(documents))
    write(tmp_path / "k8s" / "svc.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n")

    mixed = run("validate", "-f", tmp_path / "k8s")
    none = run("validate", "-f", tmp_path / "k8s" / "svc.yaml")

    assert (mixed.code, mixed.out) == (
        0,
        "OK: 5 autoscaled workloads (3 Deployments, 1 StatefulSet, 1 LeaderWorkerSet) "
        "in 2 files, no problems\n",
    )
    assert (none.code, none.out) == (0, "OK: no autoscaled workload in 1 file, no problems\n")


def test_an_empty_directory_exits_2(run: Run, tmp_path: Path) -> None:
    """A directory without any manifest is an input error, not a pass."""
    (tmp_path / "k8s").mkdir()
    result = run("validate", "-f", tmp_path / "k8s")
    assert result.code == 2
    assert "no *.yaml, *.yml, *.json file" in result.err


def test_standard_input_is_read_for_a_dash(
    run: Run, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`-f -` reads standard input, alongside files, and counts it as one file."""
    monkeypatch.setattr("sys.stdin", io.StringIO(GOOD))
    other = write(tmp_path / "other.yaml", GOOD.replace("name: chat", "name: embed"))
    result = run("validate", "-f", "-", "-f", other)
    assert (result.code, result.out, result.err) == (
        0,
        "OK: 2 autoscaled Deployments in 2 files, no problems\n",
        "",
    )


def test_problems_on_standard_input_name_it(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    """Findings in standard input are named <stdin>, with the document index."""
    monkeypatch.setattr("sys.stdin", io.StringIO("kind: Service\n---\n" + UNGATED))
    result = run("validate", "-f", "-")
    assert result.code == 1
    assert result.out.startswith("<stdin>: document 2: Deployment ml/chat: ")


def test_standard_input_of_a_real_process() -> None:
    """`python -m autoscaler validate -f -` reads a pipe and exits 1 on a problem."""
    done = subprocess.run(
        [sys.executable, "-m", "autoscaler", "validate", "-f", "-"],
        input=UNGATED,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert done.stdout.startswith("<stdin>: document 1: Deployment ml/chat: ")
    assert done.stderr == ""
