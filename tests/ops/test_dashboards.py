"""The Grafana dashboards: their schema, and every query run against a real Prometheus.

The live test runs a controller on the API emulator (the end-to-end harness) over one annotated
vLLM service, then starts a Prometheus of its own that scrapes the test exporters and the
controller's `/metrics` as the Prometheus Operator would (job `inference-autoscaler`, the series'
own labels kept). It substitutes each dashboard's variables as Grafana does and runs every panel
query and every variable query: none may fail, and each must return data.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from e2e import support
from kube.emulator import Kube
from kube.kubelet import FakeCluster
from prom import server
from prom.fixtures import Stack

from autoscaler import telemetry
from autoscaler.core import model

from . import series

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((ROOT / "dashboards").glob("*.json"))
GUIDE = ROOT / "docs" / "operations.md"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
MIN_SCHEMA_VERSION = 39
GRID_COLUMNS = 24
CONTROLLER_JOB = "inference-autoscaler"
CONTROLLER_NAMESPACE = "inference-autoscaler"
RATE_INTERVAL = "4s"
"""Grafana's `$__rate_interval` for a 1 s scrape interval: four scrapes."""
INTERVAL = "2s"
QUERY_WINDOW_S = 20
"""The time range of the panel queries, ending now: `$__range`."""
SCRAPES = 4
"""Scrapes of the controller to wait for, so that every rate window holds two samples."""
SCRAPES_TIMEOUT_S = 30.0
"""Real seconds to wait for them: the first scrape lands about 5 s after Prometheus starts."""
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


def load(path: Path) -> dict[str, Any]:
    board: dict[str, Any] = json.loads(path.read_text())
    return board


def panels(board: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every panel, those inside rows included."""
    found = []
    for panel in board["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))
    return found


def queried(board: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The panels that run queries (rows do not)."""
    return [panel for panel in panels(board) if panel["type"] != "row"]


def variables(board: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {variable["name"]: variable for variable in board["templating"]["list"]}


def variable_query(variable: Mapping[str, Any]) -> str:
    query = variable["query"]
    text: str = query["query"] if isinstance(query, dict) else query
    assert text == variable["definition"], variable["name"]
    return text


def substitute(text: str, values: Mapping[str, str]) -> str:
    """Replace `$name` and `${name}` as Grafana does; an unknown variable is an error."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in values:
            raise AssertionError(f"undefined variable ${name} in {text!r}")
        return values[name]

    return _VARIABLE.sub(value, text)


@pytest.mark.parametrize("path", DASHBOARDS, ids=[p.stem for p in DASHBOARDS])
def test_each_dashboard_follows_the_current_schema(path: Path) -> None:
    """A uid, a current schema version, unique panel ids, and a grid without overlaps."""
    board = load(path)
    assert re.fullmatch(r"[a-z0-9-]{1,40}", board["uid"])
    assert board["title"]
    assert board["schemaVersion"] >= MIN_SCHEMA_VERSION
    assert isinstance(board["refresh"], str)  # schema 40
    assert "time_options" not in board.get("timepicker", {})  # schema 41
    ids = [panel["id"] for panel in panels(board)]
    assert len(ids) == len(set(ids)), ids
    taken: dict[tuple[int, int], str] = {}
    for panel in panels(board):
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= GRID_COLUMNS, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in taken, f"{panel['title']} overlaps {taken[(x, y)]}"
                taken[(x, y)] = panel["title"]


def test_the_dashboards_have_distinct_uids_and_link_each_other() -> None:
    """Both dashboards carry the tag their links list."""
    boards = [load(path) for path in DASHBOARDS]
    assert [path.stem for path in DASHBOARDS] == ["controller", "service"]
    assert len({board["uid"] for board in boards}) == len(boards)
    for board in boards:
        (link,) = board["links"]
        assert link["type"] == "dashboards"
        assert set(link["tags"]) <= set(board["tags"])


@pytest.mark.parametrize("path", DASHBOARDS, ids=[p.stem for p in DASHBOARDS])
def test_every_panel_and_variable_reads_the_datasource_variable(path: Path) -> None:
    """The Prometheus datasource is chosen by the `datasource` variable, and everything uses it."""
    board = load(path)
    found = variables(board)
    datasource = found["datasource"]
    assert (datasource["type"], datasource["query"]) == ("datasource", "prometheus")
    for variable in found.values():
        if variable["type"] == "query":
            assert variable["datasource"] == DATASOURCE, variable["name"]
            assert variable_query(variable).startswith("label_values(")
    for panel in queried(board):
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        refs = [target["refId"] for target in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
            assert target["expr"].strip(), panel["title"]


def annotation_queries(board: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The dashboard's Prometheus annotations (Grafana's built-in one runs no query)."""
    return [a for a in board["annotations"]["list"] if a["datasource"] == DATASOURCE]


def test_the_controller_dashboard_lists_every_service_with_a_link_to_its_dashboard() -> None:
    """The overview table reads the chosen namespaces (multi-select) and links each service."""
    board = load(ROOT / "dashboards" / "controller.json")
    namespace = variables(board)["namespace"]
    assert (namespace["multi"], namespace["includeAll"]) == (True, True)
    (table,) = [panel for panel in queried(board) if panel["type"] == "table"]
    assert all('namespace=~"$namespace"' in target["expr"] for target in table["targets"])
    (override,) = table["fieldConfig"]["overrides"]
    (link,) = override["properties"][0]["value"]
    service = load(ROOT / "dashboards" / "service.json")
    assert link["url"].startswith(f"/d/{service['uid']}/?")
    assert "var-service=${__data.fields.service}" in link["url"]


def test_the_service_dashboard_marks_scale_events_and_its_gpu_target() -> None:
    """Scale events are annotations from the decisions counter; the GPU panel draws the target."""
    board = load(ROOT / "dashboards" / "service.json")
    names = [annotation["name"] for annotation in annotation_queries(board)]
    assert names == ["Scale events", "Holds"]
    assert all("autoscaler_decisions_total" in a["expr"] for a in annotation_queries(board))
    (gpu,) = [panel for panel in queried(board) if panel["title"] == "GPU utilisation"]
    exprs = [target["expr"] for target in gpu["targets"]]
    assert any("autoscaler_target_gpu_utilization_percent" in expr for expr in exprs)


def test_the_service_dashboard_selects_a_namespace_then_a_service() -> None:
    """`namespace` lists the managed namespaces; `service` the services of the chosen one."""
    found = variables(load(ROOT / "dashboards" / "service.json"))
    assert variable_query(found["namespace"]) == "label_values(autoscaler_replicas, namespace)"
    assert variable_query(found["service"]) == (
        'label_values(autoscaler_replicas{namespace="$namespace"}, service)'
    )


@pytest.mark.parametrize("path", DASHBOARDS, ids=[p.stem for p in DASHBOARDS])
def test_every_query_reads_only_series_that_exist(path: Path) -> None:
    """The controller's own series, the model-server presets, DCGM's GPU utilisation, `up`."""
    known = series.controller() | series.servers() | series.DCGM | series.SCRAPE
    board = load(path)
    texts = [variable_query(v) for v in variables(board).values() if v["type"] == "query"]
    texts += [target["expr"] for panel in queried(board) for target in panel["targets"]]
    texts += [annotation["expr"] for annotation in annotation_queries(board)]
    for text in texts:
        assert series.read_by(text) <= known, text


@pytest.mark.parametrize("path", DASHBOARDS, ids=[p.stem for p in DASHBOARDS])
def test_the_operations_guide_describes_every_panel(path: Path) -> None:
    """The guide's section on the dashboard, headed by its title, names each of its panels."""
    board = load(path)
    sections = re.split(r"^### ", GUIDE.read_text(), flags=re.M)
    (section,) = [text for text in sections if text.startswith(board["title"] + "\n")]
    for panel in queried(board):
        assert panel["title"] in section, panel["title"]


# -- against a real Prometheus -----------------------------------------------------------------


@pytest.fixture
async def controllers(kube: Kube, stack: Stack) -> AsyncIterator[support.Controllers]:
    """Controllers on the emulator reading the session's Prometheus, on a clock of their own."""
    async with support.controllers(
        kube,
        support.SteppedClock(),
        prometheus_url=stack.prometheus.url,
        calls=support.CallLog(),
        test_id="dashboards",
    ) as made:
        yield made


def produce_unwired(metrics: telemetry.Telemetry, service: model.ServiceId) -> list[str]:
    """Set, through `Telemetry`'s own methods, the series of features this build does not feed
    yet (the placement tiers and fallbacks, GPU core-hours); the names of those it set."""
    namespace, _, name = service.partition("/")
    exported = metrics.exposition().decode()
    set_here = []
    if "autoscaler_tier_replicas{" not in exported:
        metrics.tiers(service, {"whole": 2, "shared": 1})
        set_here.append("autoscaler_tier_replicas")
    if "autoscaler_placement_fallbacks_total{" not in exported:
        metrics.fell_back(service, "shared", 1)
        set_here.append("autoscaler_placement_fallbacks_total")
    if "autoscaler_gpu_core_hours_total{" not in exported:
        metrics.core_hours.labels(namespace, name, namespace).inc(0.01)
        set_here.append("autoscaler_gpu_core_hours_total")
    return set_here


def get_json(prometheus: server.Prometheus, path: str, params: Mapping[str, str]) -> Any:
    """A Prometheus API answer's `data`; an error status fails with Prometheus's message."""
    address = f"{prometheus.url}{path}?{urllib.parse.urlencode(params)}"
    try:
        with urllib.request.urlopen(address, timeout=10) as response:
            body = json.load(response)
    except urllib.error.HTTPError as e:
        raise AssertionError(f"{params}: HTTP {e.code}: {e.read().decode()}") from None
    assert body["status"] == "success", body
    assert not body.get("warnings"), body["warnings"]
    return body["data"]


def run_panel_query(prometheus: server.Prometheus, promql: str, end_s: float) -> str | None:
    """Run a range query as a time-series panel does; what is wrong with its answer, if any."""
    params = {
        "query": promql,
        "start": f"{end_s - QUERY_WINDOW_S:.3f}",
        "end": f"{end_s:.3f}",
        "step": "1",
    }
    try:
        data = get_json(prometheus, "/api/v1/query_range", params)
    except AssertionError as e:
        return str(e)
    values = [float(value) for found in data["result"] for _, value in found["values"]]
    if not values:
        return "no series"
    if not any(math.isfinite(value) for value in values):
        return f"no finite value among {len(values)}"
    return None


def run_variable_query(prometheus: server.Prometheus, query: str, end_s: float) -> list[str]:
    """`label_values(selector, label)` as Grafana's Prometheus datasource runs it."""
    found = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query)
    assert found is not None, query
    selector, label = found.groups()
    params = {"match[]": selector, "start": f"{end_s - 3600:.3f}", "end": f"{end_s:.3f}"}
    values: list[str] = get_json(prometheus, f"/api/v1/label/{label}/values", params)
    return values


async def wait_for_scrapes(
    prometheus: server.Prometheus, clock: support.SteppedClock, *, scrapes: int
) -> None:
    """Tick the controller a second at a time until Prometheus has scraped it `scrapes` times."""
    promql = f'count_over_time(autoscaler_leader{{job="{CONTROLLER_JOB}"}}[1m])'

    async def tick_and_count() -> list[dict[str, Any]]:
        await clock.advance(1.0)
        return await asyncio.to_thread(prometheus.query, promql)

    await server.poll(
        tick_and_count,
        lambda result: bool(result) and float(result[0]["value"][1]) >= scrapes,
        timeout_s=SCRAPES_TIMEOUT_S,
        what=f"{scrapes} scrapes of the controller",
    )


async def test_every_dashboard_query_returns_data_from_a_running_controller(
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    controllers: support.Controllers,
    prometheus_binary: str,
    tmp_path: Path,
    unique: str,
) -> None:
    """Every panel query and variable query of both dashboards answers without error and with
    at least one series holding a finite value."""
    kubelet.add_node("gpu-1", gpus=8)
    notes = support.managed(**{"target-queue-per-replica": "4"})
    chat = await support.Service.create(
        kube, kubelet, stack.upper, f"{unique}-dash", "chat", annotations=notes
    )
    chat.serve(rate_per_s=12.5, waiting=3.0, gpu_pct=60.0)
    await support.wait_for_load(stack.prometheus, chat, 25.0)
    # A conflict on the first status write, for the API-errors panel: it is re-read and retried.
    kube.fail("patch", "deployments", status=409, namespace=chat.namespace)
    running = await controllers.start()
    await controllers.clock.advance(3)
    await running.controller.cluster.events.wait_idle()
    service = model.ServiceId(f"{chat.namespace}/{chat.name}")
    produce_unwired(running.controller.telemetry, service)

    target = f"127.0.0.1:{running.controller.http_port}"
    job = server.Job(
        CONTROLLER_JOB,
        [target],
        {"namespace": CONTROLLER_NAMESPACE, "pod": "inference-autoscaler-7c9d5-a1"},
    )
    exporters = [stack.upper.target, stack.lower.target]
    with server.running(
        prometheus_binary, tmp_path / "prometheus", targets=exporters, jobs=[job]
    ) as prometheus:
        await wait_for_scrapes(prometheus, controllers.clock, scrapes=SCRAPES)
        end_s = time.time()
        chosen = {
            "job": CONTROLLER_JOB,
            "namespace": chat.namespace,
            "service": chat.name,
            "__rate_interval": RATE_INTERVAL,
            "__interval": INTERVAL,
            "__range": f"{QUERY_WINDOW_S}s",
        }
        problems = []
        for path in DASHBOARDS:
            board = load(path)
            for name, variable in variables(board).items():
                if variable["type"] != "query":
                    continue
                query = substitute(variable_query(variable), chosen)
                values = await asyncio.to_thread(run_variable_query, prometheus, query, end_s)
                if chosen[name] not in values:
                    problems.append(f"{path.stem} ${name}: {chosen[name]!r} not in {values}")
            for panel in queried(board):
                for query in panel["targets"]:
                    promql = substitute(query["expr"], chosen)
                    wrong = await asyncio.to_thread(run_panel_query, prometheus, promql, end_s)
                    if wrong is not None:
                        problems.append(f"{path.stem} {panel['title']!r} {query['refId']}: {wrong}")
            # An annotation marks events: before the first scale event it has none to show.
            for annotation in annotation_queries(board):
                promql = substitute(annotation["expr"], chosen)
                wrong = await asyncio.to_thread(run_panel_query, prometheus, promql, end_s)
                if wrong is not None and wrong != "no series":
                    problems.append(f"{path.stem} annotation {annotation['name']!r}: {wrong}")
    assert problems == []
