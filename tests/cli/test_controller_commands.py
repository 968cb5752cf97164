"""`run`, `explain` and `validate` on the command line: flags, settings and every input error."""

from __future__ import annotations

import io
import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler import explain
from autoscaler.contract.annotations import PREFIX, STATE_KEY, STATUS_KEY

from .conftest import Outcome

Run = Callable[..., Outcome]

MANAGED = {
    PREFIX + "enabled": "true",
    PREFIX + "max-replicas": "10",
    PREFIX + "target-qps-per-replica": "5",
}


def test_help_lists_every_command(run: Run) -> None:
    """`--help` lists run, list, explain, validate, simulate, demo and bench, each with a
    description."""
    result = run("--help")
    assert result.code == 0
    listed = {
        line.split()[0]
        for line in result.out.splitlines()
        if line.startswith("    ") and len(line.split()) > 2
    }
    assert listed == {"run", "list", "explain", "validate", "simulate", "demo", "bench"}


def test_run_without_a_kubeconfig_is_one_line(run: Run, tmp_path: Path) -> None:
    """A kubeconfig that cannot be read ends `run` with one error line and exit code 2."""
    result = run("run", "--kubeconfig", tmp_path / "missing", "--metrics-port", "0")
    assert result.code == 2
    assert result.err.startswith("error: cannot load the Kubernetes kubeconfig: ")
    assert result.err.count("\n") == 1


def test_run_flags_override_the_environment(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bad URL in the environment is refused, unless `--prometheus-url` replaces it."""
    monkeypatch.setenv("AUTOSCALER_PROMETHEUS__URL", "ftp://prometheus")
    refused = run("run", "--kubeconfig", tmp_path / "missing")
    replaced = run(
        "run", "--kubeconfig", tmp_path / "missing", "--prometheus-url", "http://prom:9090"
    )
    assert refused.code == replaced.code == 2
    assert refused.err == (
        "error: AUTOSCALER_PROMETHEUS__URL: 'ftp://prometheus' is not an http(s) URL with a host\n"
    )
    assert replaced.err.startswith("error: cannot load the Kubernetes kubeconfig")


def test_run_namespace_flags_meet_the_environment(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Namespaces from the environment and the flags are checked together, in one line."""
    monkeypatch.setenv("AUTOSCALER_KUBERNETES__EXCLUDE_NAMESPACES", "batch, ml")
    result = run("run", "--namespace", "ml", "--namespace", "chat")
    assert result.code == 2
    assert result.err == (
        "error: AUTOSCALER_KUBERNETES: namespaces both included and excluded: ml\n"
    )
    bad = run("run", "--namespace", "Not_A_Namespace")
    assert bad.code == 2
    assert "is not a namespace name" in bad.err


@pytest.mark.parametrize("target", ["web", "ns/", "/web", "ns/web/x"])
def test_explain_needs_namespace_and_name(run: Run, target: str) -> None:
    """The Deployment is named NAMESPACE/NAME; anything else is a usage error."""
    result = run("explain", target)
    assert result.code == 2
    assert "expected NAMESPACE/NAME" in result.err


def test_explain_without_an_api_server_is_one_line(run: Run, tmp_path: Path) -> None:
    """An API server that does not answer ends `explain` with one error line and exit code 2."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again at once: nothing listens there
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    result = run("explain", "ml/chat", "--kubeconfig", kubeconfig)
    assert result.code == 2
    assert result.err.startswith("error: deployments.get ml/chat failed: ")
    assert result.err.count("\n") == 1


def test_validate_needs_a_readable_file(run: Run, tmp_path: Path) -> None:
    """`validate` without -f is a usage error; an unreadable file exits 2."""
    assert run("validate").code == 2
    result = run("validate", "-f", tmp_path / "missing.yaml")
    assert result.code == 2
    assert "cannot read" in result.err


# -- the explanation itself ------------------------------------------------------------------


def explained(notes: dict[str, str], *, replicas: int = 3) -> tuple[int, str, str]:
    deployment: dict[str, Any] = {
        "metadata": {"name": "chat", "namespace": "ml", "annotations": notes},
        "spec": {"replicas": replicas},
    }
    out, err = io.StringIO(), io.StringIO()
    code = explain.main("ml", "chat", deployment, out, err)
    return code, out.getvalue(), err.getvalue()


def test_explain_before_any_decision_says_so() -> None:
    """A managed Deployment without a status annotation has no decision yet: exit 0."""
    code, out, _ = explained(MANAGED)
    assert code == 0
    assert out.splitlines()[-1] == (
        "  no decision recorded yet (is the controller running, and leading?)"
    )


def test_explain_escapes_what_the_annotations_say() -> None:
    """Text from the status annotation is escaped: no control characters reach the terminal."""
    status = {
        "current": 3,
        "desired": 3,
        "kind": "hold",
        "reason": "cooldown\x1b[2J",
        "detail": "line\nbreak",
        "contributions": {"load\r": {"ratio": None, "desired": None, "estimator": "missing"}},
        "cooldownUntil": "2025-01-01T00:05:00Z",
        "time": "2025-01-01T00:00:00Z",
    }
    notes = {**MANAGED, STATUS_KEY: json.dumps(status), STATE_KEY: '{"lastScaleUp": 0}'}
    code, out, _ = explained(notes)
    assert code == 0
    assert "\x1b" not in out
    assert "\r" not in out
    assert "  reason         cooldown\\x1b[2J" in out
    assert "  detail         line\\nbreak" in out
    assert "  cooldown until 2025-01-01T00:05:00Z" in out
    (signal,) = [line for line in out.splitlines() if line.startswith("    load\\r ")]
    assert signal.split() == ["load\\r", "-", "-", "-", "missing"]
    epoch, minute = "1970-01-01T00:00:00Z", "1970-01-01T00:01:00Z"
    assert f"  last scale-up  {epoch}; scale-up cooldown ends {minute}" in out


def test_explain_says_whether_the_forecast_votes_and_why() -> None:
    """The seasonal forecast's vote is one line, on or off with its reason, and a JSON object."""
    status = {
        "current": 3,
        "desired": 3,
        "kind": "steady",
        "reason": "at-desired",
        "contributions": {},
        "forecast": {"on": False, "load": None, "why": "2.0 h of load history; needs 1.3 d"},
        "time": "2025-01-01T00:00:00Z",
    }
    notes = {**MANAGED, STATUS_KEY: json.dumps(status)}
    code, out, _ = explained(notes)
    assert code == 0
    assert "  forecast       off: 2.0 h of load history; needs 1.3 d" in out
    found = json.loads(explain_json(notes))
    assert found["decision"]["forecast"] == {
        "on": False,
        "load": None,
        "why": "2.0 h of load history; needs 1.3 d",
    }


def test_explain_shows_the_standby_pool_apart_from_the_serving_replicas() -> None:
    """The pool is one line (waiting, replicas, size and why) and a JSON object."""
    status = {
        "current": 3,
        "desired": 3,
        "kind": "steady",
        "reason": "at-desired",
        "contributions": {},
        "standby": {"size": 2, "replicas": 2, "waiting": 1, "why": "fixed at 2"},
        "time": "2025-01-01T00:00:00Z",
    }
    notes = {**MANAGED, STATUS_KEY: json.dumps(status)}
    code, out, _ = explained(notes)
    assert code == 0
    assert (
        "  standby        1 warm of 2 replicas with no traffic, on top of the serving ones; "
        "size 2 (fixed at 2)"
    ) in out
    found = json.loads(explain_json(notes))
    assert found["decision"]["standby"] == {
        "size": 2,
        "replicas": 2,
        "waiting": 1,
        "why": "fixed at 2",
    }


def explain_json(notes: dict[str, str]) -> str:
    deployment: dict[str, Any] = {
        "metadata": {"name": "chat", "namespace": "ml", "annotations": notes},
        "spec": {"replicas": 3},
    }
    out, err = io.StringIO(), io.StringIO()
    explain.main("ml", "chat", deployment, out, err, json_output=True)
    return out.getvalue()


def test_explain_reports_a_status_that_is_not_json() -> None:
    """A status annotation someone overwrote with text is shown quoted with the rule it breaks."""
    code, out, _ = explained({**MANAGED, STATUS_KEY: "oops"})
    assert code == 0
    assert out.splitlines()[-1] == (
        f'  {STATUS_KEY}="oops": not JSON: Expecting value: line 1 column 1 (char 0); ignored'
    )


HOSTILE = {
    "a 400-digit integer": ('{"lastScaleUp": ' + "9" * 400 + "}", "has an integer beyond 2^53"),
    "1e400": ('{"lastScaleUp": 1e400}', "has a number too large for a float"),
    "NaN": ('{"lastScaleUp": NaN}', "has NaN, which is not a JSON number"),
    "deep nesting": ("[" * 4000, "nested deeper than 8 arrays or objects"),
    "a list": ("[1]", "not a JSON object"),
}


@pytest.mark.parametrize(("text", "rule"), HOSTILE.values(), ids=HOSTILE.keys())
def test_explain_names_what_is_wrong_with_a_hostile_state(text: str, rule: str) -> None:
    """A state that cannot be read is one line with the key, the quoted value and the rule."""
    status = json.dumps({"desired": 3, "current": 3, "kind": "steady", "reason": "in-deadband"})
    code, out, err = explained({**MANAGED, STATUS_KEY: status, STATE_KEY: text})
    assert (code, err) == (0, "")
    last = out.splitlines()[-1]
    assert last.startswith(f"  {STATE_KEY}=")
    assert f": {rule}" in last
    assert last.endswith("; ignored, the controller rebuilds it")
    assert len(last) < 300


@pytest.mark.parametrize(("text", "rule"), HOSTILE.values(), ids=HOSTILE.keys())
def test_explain_names_what_is_wrong_with_a_hostile_status(text: str, rule: str) -> None:
    """A status that cannot be read is one line with the key, the quoted value and the rule."""
    code, out, err = explained({**MANAGED, STATUS_KEY: text})
    assert (code, err) == (0, "")
    last = out.splitlines()[-1]
    assert last.startswith(f"  {STATUS_KEY}=")
    assert f": {rule}" in last
    assert last.endswith("; ignored")


def test_explain_shows_a_state_of_huge_but_exact_times() -> None:
    """A state time far in the future but within a float's integers prints no date, no error."""
    status = json.dumps({"desired": 3, "current": 3, "kind": "steady", "reason": "in-deadband"})
    state = json.dumps({"lastScaleUp": 2**53})
    code, out, _ = explained({**MANAGED, STATUS_KEY: status, STATE_KEY: state})
    assert code == 0
    assert "  last scale-up  -; scale-up cooldown ends -" in out


def test_explain_names_the_switch_when_switched_off() -> None:
    """`enabled: "false"` is not managed, and the message quotes the value found."""
    code, out, err = explained({PREFIX + "enabled": "false"})
    assert (code, out) == (1, "")
    assert err == (
        "Deployment ml/chat is not managed by the autoscaler: autoscaler.dsec.io/enabled is "
        '"false", not "true"\n'
    )


def test_explain_says_a_service_is_paused_and_why_it_holds() -> None:
    """A paused service's explanation says so, with its paused-replicas, and the `paused` hold."""
    status = {"current": 0, "desired": 0, "kind": "hold", "reason": "paused", "detail": "x"}
    notes = {
        **MANAGED,
        PREFIX + "paused-replicas": "0",
        STATUS_KEY: json.dumps(status),
    }
    code, out, _ = explained(notes)
    assert code == 0
    lines = out.splitlines()
    paused = "  paused         yes at 0 replicas: the controller writes no replicas until resumed"
    assert paused in lines
    assert "  reason         paused" in lines


def test_explain_names_the_kind_of_a_statefulset_and_finds_it_in_a_manifest() -> None:
    """A StatefulSet is explained under its own kind, and `-f` finds the scalable kinds only."""
    sts: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "chat", "namespace": "ml", "annotations": MANAGED},
        "spec": {"replicas": 2},
    }
    out, err = io.StringIO(), io.StringIO()
    assert explain.main("ml", "chat", sts, out, err) == 0
    assert out.getvalue().splitlines()[0] == "StatefulSet ml/chat"
    manifest = yaml.safe_dump_all(
        [sts, {**sts, "kind": "DaemonSet"}, {**sts, "apiVersion": "x.io/v1", "kind": "Rollout"}]
    )
    assert [d["kind"] for d in explain.deployments_in(manifest)] == ["StatefulSet"]
