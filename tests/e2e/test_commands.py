"""The controller's commands end to end: `run` in a process of its own, `explain`, `validate`."""

from __future__ import annotations

import asyncio
import datetime
import io
import json
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from kube.emulator import Kube
from kube.kubelet import FakeCluster
from prom.fixtures import Stack

from autoscaler import cli
from autoscaler.contract.annotations import PREFIX

from .support import (
    LEASE_NAMESPACE,
    LEASES,
    CallLog,
    Controllers,
    Service,
    SteppedClock,
    advance_until,
    ensure_namespace,
    managed,
    wait_for_load,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "manifests" / "examples" / "vllm-deployment.yaml"


def utc(unix_s: float) -> str:
    return datetime.datetime.fromtimestamp(unix_s, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def explain(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """`autoscaler explain ARGV...` in a thread (it runs its own event loop): code, out, err."""
    capsys.readouterr()
    code = await asyncio.to_thread(cli.main, ["explain", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


async def test_explain_prints_the_last_decision_and_why(
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    clock: SteppedClock,
    unique: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`explain` shows the decision's replicas, reason, signals and cooldowns, or why not."""
    kubelet.add_node("gpu-1", gpus=8)
    namespace = f"{unique}-g"
    chat = await Service.create(kube, kubelet, stack.upper, namespace, "chat")
    chat.serve(rate_per_s=12.5)
    await wait_for_load(stack.prometheus, chat, 25.0)
    bad_notes = managed(**{"min-replicas": "20", "target-qps-per-replica": "fast"})
    await Service.create(kube, kubelet, stack.upper, namespace, "bad", annotations=bad_notes)
    await Service.create(kube, kubelet, stack.upper, namespace, "plain", annotations={})
    running = await cluster.start()
    await advance_until(clock, lambda: chat.replicas == 3, limit_s=5, what="scale-up")
    up_s = chat.state()["lastScaleUp"]
    await running.stop()  # the controller's API calls end here; explain's are a person's
    kubeconfig = str(kube.kubeconfig)

    code, out, err = await explain(capsys, f"{namespace}/chat", "--kubeconfig", kubeconfig)

    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == f"Deployment {namespace}/chat"
    assert "  managed        mode active, policy seed, server vllm" in lines
    assert "  bounds         2..10 replicas; target per replica 10 req/s" in lines
    assert "  replicas       2 -> 3 (scale-up)" in lines
    assert "  reason         above-target" in lines
    assert any(line.startswith("  detail         load ratio 1.") for line in lines)
    (load,) = [line.split() for line in lines if line.startswith("    load ")]
    assert load[0] == "load"
    assert 1.1 < float(load[1]) < 1.5
    assert 20.0 < float(load[2]) < 30.0
    assert load[3:] == ["3", "mean"]
    status = chat.status()
    assert status is not None
    assert f"Last decision ({status['time']})" in lines
    assert f"  last scale-up  {utc(up_s)}; scale-up cooldown ends {utc(up_s + 60)}" in lines
    assert f"  last change    {utc(up_s)}; scale-down cooldown ends {utc(up_s + 300)}" in lines

    code, out, err = await explain(capsys, f"{namespace}/bad", "--kubeconfig", kubeconfig)
    assert code == 1
    assert out.splitlines() == [
        f"Deployment {namespace}/bad is not managed: its annotations are invalid (InvalidConfig)",
        f'  - {PREFIX}target-qps-per-replica="fast": must be a decimal number > 0',
    ]

    code, out, err = await explain(capsys, f"{namespace}/plain", "--kubeconfig", kubeconfig)
    assert (code, out) == (1, "")
    assert err == (
        f"Deployment {namespace}/plain is not managed by the autoscaler: "
        f"{PREFIX}enabled is not set\n"
    )

    code, out, err = await explain(capsys, f"{namespace}/gone", "--kubeconfig", kubeconfig)
    assert (code, out, err) == (1, "", f"Deployment {namespace}/gone not found\n")


def test_validate_accepts_the_example_and_lists_each_problem_of_a_broken_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The example manifest validates (exit 0); a broken copy exits 1, one problem per line."""
    assert cli.main(["validate", "-f", str(EXAMPLE)]) == 0
    assert capsys.readouterr().out == "OK: 1 autoscaled Deployment in 1 file, no problems\n"

    text = EXAMPLE.read_text()
    for old, new in (
        ('min-replicas: "2"', 'min-replicas: "20"'),
        ('target-gpu-utilization: "80"', "target-gpu-utilization: 80"),
        ('server: "vllm"', 'servr: "vllm"'),
    ):
        assert old in text
        text = text.replace(old, new)
    broken = tmp_path / "broken.yaml"
    broken.write_text(text)

    assert cli.main(["validate", "-f", str(broken)]) == 1
    where = f"{broken}: document 2: Deployment ml-serving/llama-chat: "  # after its Namespace
    assert capsys.readouterr().out.splitlines() == [
        f"{where}{PREFIX}target-gpu-utilization: YAML reads 80 as a number; annotations must "
        'be strings: write "80" in quotes',
        f"{where}{PREFIX}servr: unknown key; did you mean {PREFIX}server?",
        f'{where}{PREFIX}min-replicas="20": must be <= {PREFIX}max-replicas (16)',
    ]


# -- `autoscaler run` in a process of its own -----------------------------------------------


async def log_lines(stream: asyncio.StreamReader) -> AsyncIterator[dict[str, Any]]:
    while line := await stream.readline():
        try:
            yield json.loads(line)
        except ValueError:
            yield {"event": "(not JSON)", "text": line.decode(errors="replace")}


async def wait_for_event(
    logs: AsyncIterator[dict[str, Any]], event: str, seen: list[dict[str, Any]], **values: Any
) -> dict[str, Any]:
    async with asyncio.timeout(30):
        async for record in logs:
            seen.append(record)
            if record.get("event") == event and all(record.get(k) == v for k, v in values.items()):
                return record
    raise AssertionError(f"the process ended before logging {event}: {seen[-5:]}")


async def test_run_scales_serves_probes_and_stops_cleanly_on_sigterm(
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    unique: str,
    api_calls: CallLog,
    request: pytest.FixtureRequest,
) -> None:
    """`autoscaler run` leads, scales and answers /readyz; SIGTERM releases the Lease, exit 0."""
    kubelet.add_node("gpu-1", gpus=8)
    chat = await Service.create(kube, kubelet, stack.upper, f"{unique}-r", "chat")
    chat.serve(rate_per_s=12.5)
    await wait_for_load(stack.prometheus, chat, 25.0)
    ensure_namespace(kube, LEASE_NAMESPACE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOSCALER_")}
    env.update(
        POD_NAME="autoscaler-7d9f-x2",
        AUTOSCALER_KUBERNETES__LEASE_NAMESPACE=LEASE_NAMESPACE,
        AUTOSCALER_PROMETHEUS__SCRAPE_INTERVAL_S="1",
        AUTOSCALER_HTTP__HOST="127.0.0.1",
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "autoscaler",
        "run",
        "--kubeconfig",
        str(kube.kubeconfig),
        "--prometheus-url",
        stack.prometheus.url,
        "--metrics-port",
        "0",
        "--namespace",
        chat.namespace,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    seen: list[dict[str, Any]] = []
    try:
        assert process.stderr is not None
        logs = log_lines(process.stderr)
        serving = await wait_for_event(logs, "http.serving", seen)
        elected = await wait_for_event(logs, "leader.elected", seen)
        assert elected["identity"].startswith("autoscaler-7d9f-x2-")
        await wait_for_event(logs, "scale.applied", seen, service=f"{chat.namespace}/chat")
        assert chat.replicas == 3
        url = f"http://127.0.0.1:{serving['port']}/readyz"
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            assert response.status == 200

        process.send_signal(signal.SIGTERM)
        await wait_for_event(logs, "controller.stopped", seen)
        async with asyncio.timeout(15):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    lease = kube.store.get(LEASES, LEASE_NAMESPACE, "inference-autoscaler")
    assert lease["spec"]["holderIdentity"] is None
    assert [r["level"] for r in seen if r["level"] in ("error", "critical")] == []
    api_calls.add(request.node.nodeid, kube.requests.counts)


async def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """`autoscaler ARGV...` in a thread (it runs its own event loop): code, out, err."""
    capsys.readouterr()
    code = await asyncio.to_thread(cli.main, list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def table(out: str) -> list[list[str]]:
    """`list` output split into cells (three or more spaces apart; no cell holds that many)."""
    return [re.split(r"\s{3,}", line.strip()) for line in out.splitlines()]


async def test_list_shows_each_managed_deployment_and_marks_a_corrupt_annotation(
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    clock: SteppedClock,
    unique: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`list` prints one row per managed Deployment for -n and -A, wide and JSON, and a corrupt
    status as `?` with its rule."""
    kubelet.add_node("gpu-1", gpus=8)
    first, second = f"{unique}-la", f"{unique}-lb"
    chat = await Service.create(kube, kubelet, stack.upper, first, "chat")
    chat.serve(rate_per_s=12.5)
    await wait_for_load(stack.prometheus, chat, 25.0)
    await Service.create(kube, kubelet, stack.upper, first, "plain", annotations={})
    embed = await Service.create(kube, kubelet, stack.upper, second, "embed")
    running = await cluster.start()
    await advance_until(clock, lambda: chat.replicas == 3, limit_s=5, what="scale-up")
    await advance_until(clock, lambda: embed.status() is not None, limit_s=5, what="status")
    await running.stop()
    embed.annotate(status='{"desired": 1e400}', ramp="[[[")
    up_s = chat.state()["lastScaleUp"]
    kubeconfig = ("--kubeconfig", str(kube.kubeconfig))

    code, out, err = await run_cli(capsys, "list", "-n", first, *kubeconfig)
    assert (code, err) == (0, "")
    rows = table(out)
    assert rows[0] == [
        "NAME", "DESIRED", "CURRENT", "SERVING", "REASON", "LAST SCALE", "RAMP", "TIER"
    ]  # fmt: skip
    assert len(rows) == 2
    assert rows[1][:5] == ["chat", "3", "2", "2", "scale-up/above-target"]
    assert re.fullmatch(r"\d+(y\d*d?|d\d*h?|h\d*m?|m\d*s?|s)", rows[1][5])
    assert rows[1][6:] == ["-", "-"]

    code, out, err = await run_cli(capsys, "list", "-A", *kubeconfig)
    assert (code, err) == (0, "")
    rows = table(out)
    assert rows[0][:2] == ["NAMESPACE", "NAME"]
    ours = [row for row in rows if row[0] in (first, second)]
    assert [row[:2] for row in ours] == [[first, "chat"], [second, "embed"]]
    assert ours[1][2:5] == ["?", "?", "2"]
    assert ours[1][5] == "?"
    assert ours[1][7] == "?"

    code, out, err = await run_cli(capsys, "list", "-n", second, "-o", "wide", *kubeconfig)
    assert (code, err) == (0, "")
    rows = table(out)
    assert rows[0][-6:] == ["TARGETS", "MIN", "MAX", "POLICY", "MODE", "PROBLEMS"]
    assert rows[1][8:13] == [
        "loadPerReplica=10,gpuUtilizationPercent=75", "2", "10", "seed", "active"
    ]  # fmt: skip
    problems = rows[1][13]
    assert f'{PREFIX}status="{{\\"desired\\": 1e400}}": has a number too large' in problems
    assert f'{PREFIX}ramp="[[[": ramp state not JSON' in problems

    code, out, err = await run_cli(capsys, "list", "-A", "-o", "json", *kubeconfig)
    assert (code, err) == (0, "")
    listed = {row["name"]: row for row in json.loads(out) if row["namespace"] in (first, second)}
    assert set(listed) == {"chat", "embed"}
    assert listed["chat"] == {
        "namespace": first,
        "name": "chat",
        "desired": 3,
        "current": 2,
        "serving": 2,
        "kind": "scale-up",
        "reason": "above-target",
        "decidedAt": chat.status()["time"],
        "lastScale": utc(up_s),
        "lastScaleAgeSeconds": listed["chat"]["lastScaleAgeSeconds"],
        "ramp": None,
        "tiers": {},
        "mode": "active",
        "policy": "seed",
        "minReplicas": 2,
        "maxReplicas": 10,
        "targets": {"loadPerReplica": 10.0, "gpuUtilizationPercent": 75.0},
        "problems": [],
    }
    assert listed["embed"]["desired"] is None
    assert listed["embed"]["reason"] is None
    assert len(listed["embed"]["problems"]) == 2

    code, out, err = await run_cli(capsys, "list", "-n", f"{unique}-none", *kubeconfig)
    assert (code, out) == (0, "")
    assert err == f"No managed Deployments found in namespace {unique}-none.\n"


async def test_explain_prints_json_and_reads_a_manifest_without_a_cluster(
    kube: Kube,
    kubelet: FakeCluster,
    stack: Stack,
    cluster: Controllers,
    clock: SteppedClock,
    unique: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`explain -o json` says what the text says; `-f` explains the same object from a file
    or stdin, and names the one Deployment it needs."""
    kubelet.add_node("gpu-1", gpus=8)
    namespace = f"{unique}-j"
    chat = await Service.create(kube, kubelet, stack.upper, namespace, "chat")
    chat.serve(rate_per_s=12.5)
    await wait_for_load(stack.prometheus, chat, 25.0)
    running = await cluster.start()
    await advance_until(clock, lambda: chat.replicas == 3, limit_s=5, what="scale-up")
    await running.stop()
    up_s = chat.state()["lastScaleUp"]
    kubeconfig = ("--kubeconfig", str(kube.kubeconfig))

    code, out, err = await run_cli(
        capsys, "explain", f"{namespace}/chat", "-o", "json", *kubeconfig
    )
    assert (code, err) == (0, "")
    found = json.loads(out)
    status = chat.status()
    assert status is not None
    decision = found.pop("decision")
    assert found == {
        "namespace": namespace,
        "name": "chat",
        "found": True,
        "managed": True,
        "problems": [],
        "mode": "active",
        "policy": "seed",
        "server": "vllm",
        "minReplicas": 2,
        "maxReplicas": 10,
        "targets": {"loadPerReplica": 10.0, "gpuUtilizationPercent": 75.0},
        "specReplicas": 3,
        "lastScaleUp": {"at": utc(up_s), "cooldownEnds": utc(up_s + 60)},
        "lastChange": {"at": utc(up_s), "cooldownEnds": utc(up_s + 300)},
    }
    assert decision["time"] == status["time"]
    assert (decision["current"], decision["desired"]) == (2, 3)
    assert (decision["kind"], decision["reason"]) == ("scale-up", "above-target")
    assert 1.1 < decision["signals"]["load"]["ratio"] < 1.5
    assert decision["signals"]["load"]["estimator"] == "mean"

    code, text, err = await run_cli(capsys, "explain", f"{namespace}/chat", *kubeconfig)
    manifest = tmp_path / "chat.yaml"
    manifest.write_text(yaml.safe_dump(chat.object))
    assert await run_cli(capsys, "explain", "-f", str(manifest)) == (0, text, "")
    assert await run_cli(capsys, "explain", "-f", str(manifest), "-o", "json") == (0, out, "")

    listed = {"apiVersion": "v1", "kind": "List", "items": [chat.object, chat.object]}
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(listed)))
    code, _, err = await run_cli(capsys, "explain", "-f", "-")
    assert code == 2
    assert err == (
        "error: standard input: expected one Deployment, found 2 (name one with NAMESPACE/NAME)\n"
    )
    code, _, err = await run_cli(capsys, "explain", "-f", str(manifest), f"{namespace}/other")
    assert (code, err) == (
        2,
        f"error: {manifest}: expected one Deployment named {namespace}/other, found 0 "
        "(name one with NAMESPACE/NAME)\n",
    )
