"""The alert rules: promtool accepts them, each alert's unit tests pass, and each has a runbook.

`spec.groups` of the PrometheusRule is written out as a plain rules file next to a copy of each
alert's promtool test file (`alerts/tests/<Alert>.yaml`, whose `rule_files` names it).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from . import series

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "manifests" / "base" / "prometheusrule.yaml"
UNIT_TESTS = ROOT / "alerts" / "tests"
RUNBOOK = ROOT / "docs" / "alerts.md"
GUIDE = ROOT / "docs" / "operations.md"
RULES_FILE = "autoscaler.rules.yaml"
"""The name the promtool test files give the extracted rules."""
SEVERITIES = {"critical", "warning", "info"}
CONTROLLER_JOB = "inference-autoscaler"
PROMTOOL_TIMEOUT_S = 60


def rule_object() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(RULES.read_text())
    return document


def alert_rules() -> list[dict[str, Any]]:
    return [rule for group in rule_object()["spec"]["groups"] for rule in group["rules"]]


ALERTS = [rule["alert"] for rule in alert_rules()]
SERVICE_ALERTS = {
    rule["alert"]
    for group in rule_object()["spec"]["groups"]
    if group["name"].endswith(".services")
    for rule in group["rules"]
}
"""The alerts about one managed service (the others are about the controller)."""


def write_rules(directory: Path) -> Path:
    """The PrometheusRule's groups as a plain Prometheus rules file in `directory`."""
    path = directory / RULES_FILE
    path.write_text(yaml.safe_dump({"groups": rule_object()["spec"]["groups"]}, sort_keys=False))
    return path


def run(promtool: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=PROMTOOL_TIMEOUT_S,
        check=False,
    )


def anchors(markdown: str) -> set[str]:
    """The anchors of a Markdown file's headings, as GitHub derives them."""
    found = set()
    for line in markdown.splitlines():
        heading = re.match(r"#{1,6}\s+(.*)", line)
        if heading:
            text = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower())
            found.add(text.replace(" ", "-"))
    return found


def test_the_rule_object_is_a_prometheus_operator_rule() -> None:
    """The manifest is a `monitoring.coreos.com/v1` PrometheusRule in the controller's namespace."""
    rule = rule_object()
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert rule["metadata"]["namespace"] == "inference-autoscaler"
    assert rule["metadata"]["labels"]["app.kubernetes.io/name"] == "inference-autoscaler"
    assert len(set(ALERTS)) == len(ALERTS)


def test_promtool_checks_the_rules(promtool: str, tmp_path: Path) -> None:
    """`promtool check rules` accepts the extracted groups."""
    path = write_rules(tmp_path)
    checked = run(promtool, "check", "rules", str(path), cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in checked.stdout


@pytest.mark.parametrize("alert", ALERTS)
def test_each_alerts_unit_tests_pass(alert: str, promtool: str, tmp_path: Path) -> None:
    """The alert's promtool tests, which show it firing and staying silent, pass."""
    source = UNIT_TESTS / f"{alert}.yaml"
    shutil.copy(source, tmp_path / source.name)
    write_rules(tmp_path)
    tested = run(promtool, "test", "rules", source.name, cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr


@pytest.mark.parametrize("alert", ALERTS)
def test_each_alerts_unit_tests_cover_firing_and_silence(alert: str) -> None:
    """The test file evaluates only its own alert, and expects it both to fire and to be silent."""
    document = yaml.safe_load((UNIT_TESTS / f"{alert}.yaml").read_text())
    assert document["rule_files"] == [RULES_FILE]
    checks = [check for case in document["tests"] for check in case.get("alert_rule_test", [])]
    assert {check["alertname"] for check in checks} == {alert}
    assert any(check["exp_alerts"] for check in checks), "never expected to fire"
    assert any(not check["exp_alerts"] for check in checks), "never expected to stay silent"


def test_every_unit_test_file_belongs_to_an_alert() -> None:
    """No test file is left behind by a renamed or removed alert."""
    assert {path.stem for path in UNIT_TESTS.glob("*.yaml")} == set(ALERTS)


@pytest.mark.parametrize("rule", alert_rules(), ids=ALERTS)
def test_each_alert_has_a_severity_a_summary_and_a_runbook(rule: dict[str, Any]) -> None:
    """A severity label, a summary and a description, and a runbook section in docs/alerts.md."""
    assert rule["labels"]["severity"] in SEVERITIES
    notes = rule["annotations"]
    assert notes["summary"].strip()
    assert notes["description"].strip()
    assert notes["runbook_url"] == f"docs/alerts.md#{rule['alert'].lower()}"
    assert rule["alert"].lower() in anchors(RUNBOOK.read_text())
    if rule["alert"] in SERVICE_ALERTS:  # it names the Deployment it is about
        assert "by (namespace, service)" in rule["expr"]
        for text in (notes["summary"], notes["description"]):
            assert "{{ $labels.namespace }}/{{ $labels.service }}" in text


def test_the_operations_guide_lists_every_alert_with_its_severity() -> None:
    """The guide's alert table has one row per alert, linking its runbook section."""
    rows = re.findall(r"^\| \[(\w+)\]\(alerts\.md#(\w+)\) \| (\w+) \|", GUIDE.read_text(), re.M)
    expected = [
        (rule["alert"], rule["alert"].lower(), rule["labels"]["severity"]) for rule in alert_rules()
    ]
    assert rows == expected


@pytest.mark.parametrize("rule", alert_rules(), ids=ALERTS)
def test_each_alert_reads_only_series_that_exist(rule: dict[str, Any]) -> None:
    """Every metric an alert reads is one the controller exports, or Prometheus's `up`."""
    assert series.read_by(rule["expr"]) <= series.controller() | series.SCRAPE


def test_the_controller_job_is_the_one_scraped() -> None:
    """`up` is read for the controller's own job only."""
    jobs = {
        job for rule in alert_rules() for job in re.findall(r'up\{job="([^"]+)"\}', rule["expr"])
    }
    assert jobs == {CONTROLLER_JOB}


def test_the_servicemonitor_scrapes_the_job_and_keeps_the_services_labels() -> None:
    """The manifests' ServiceMonitor scrapes the Service the alerts name as `job`, and keeps the
    series' own `namespace` and `service` labels (`honorLabels`)."""
    objects = [
        document
        for path in sorted((ROOT / "manifests").rglob("*.yaml"))
        for document in yaml.safe_load_all(path.read_text())
        if isinstance(document, dict) and "kind" in document
    ]
    monitors = [o for o in objects if o["kind"] == "ServiceMonitor"]
    assert monitors
    services = [o for o in objects if o["kind"] == "Service"]
    for monitor in monitors:
        selector = monitor["spec"]["selector"].get("matchLabels", {})
        selected = [
            s["metadata"]["name"]
            for s in services
            if selector.items() <= s["metadata"].get("labels", {}).items()
        ]
        assert selected == [CONTROLLER_JOB]
        for endpoint in monitor["spec"]["endpoints"]:
            assert endpoint.get("honorLabels") is True
