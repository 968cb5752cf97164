"""The process CPU of one Kubernetes write, as the controller sends it.

    .venv/bin/python -m bench.write_cpu [--writes 2000] [--deployments 200] [--runs 5]
        [--concurrency 50] [--kind annotate|scale|event|all] [--via generated request]
        [--stub-session] [--profile PATH]

The API emulator of the tests (`tests/kube`) runs in a child process, so the CPU counted is this
process's: the client's side of each write. The client is built as `autoscaler run` builds it
(`connection.api_client` from a kubeconfig), and each write goes through the adapters' own
calls (`_api.Caller`): a status annotation patch (a merge patch of `metadata.annotations` at a
resourceVersion, as `annotate.patch_annotations` sends it), a scale patch (`deployments/scale`,
at a resourceVersion) or an Event created (`events.create`), `--concurrency` in flight at once
as a tick's publish sends them. Each is sent two ways (`--via`), alternating run by run: as the
adapters send it (`request`: an `_api.Request` on the client's session) and through the
generated client's function with the same arguments (`generated`: the way before). Printed per
way, kind and run: the process CPU per write (µs), and the least and the median over `--runs`.
`--profile` writes the cProfile stats of the last run (process CPU). `--stub-session` answers
every write at once on the client's side without sending it (`stub`): what is left is the CPU
of the adapters' and the client's own work per write, apart from HTTP and the event loop's I/O,
steady enough to compare on a loaded machine.

Run it with `nice -n 10` and `OPENBLAS_NUM_THREADS=1`. Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import itertools
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from autoscaler.adapters.kubernetes import _api, connection, scaling
from autoscaler.contract import targets

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
NAMESPACE = "team-0"
KINDS = ("annotate", "scale", "event")
VIAS = ("generated", "request")


async def serve(deployments: int) -> None:
    """The child: the emulator with `deployments` Deployments; print the kubeconfig, serve until
    stdin closes."""
    sys.path.insert(0, str(TESTS))
    from kube.emulator import Emulator, serve
    from kube.store import Store

    with tempfile.TemporaryDirectory() as tmp:
        store = Store(history_limit=1000)
        async with serve(Emulator(store=store), kubeconfig=Path(tmp) / "kubeconfig") as kube:
            store.create("v1/namespaces", {"metadata": {"name": NAMESPACE}})
            for i in range(deployments):
                labels = {"app": f"model-{i}"}
                spec = {
                    "replicas": 2,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {"containers": [{"name": "vllm", "image": "vllm"}]},
                    },
                }
                store.create(
                    "apps/v1/deployments",
                    {"metadata": {"name": f"model-{i}", "labels": labels}, "spec": spec},
                    namespace=NAMESPACE,
                )
            print(json.dumps({"kubeconfig": str(kube.kubeconfig)}), flush=True)
            await asyncio.to_thread(sys.stdin.read)


class Writer:
    """Sends writes of one kind, round-robin over the Deployments, keeping each one's last
    resourceVersion as the controller's cache would. With `generated`, each write goes through
    the generated client's function with the same arguments (as before `_api.Request`)."""

    def __init__(
        self, api: client.ApiClient, deployments: dict[str, dict[str, Any]], *, generated: bool
    ) -> None:
        self.api = api
        self.apps = client.AppsV1Api(api)
        self.core = client.CoreV1Api(api)
        self.endpoint = scaling.Endpoint(targets.DEPLOYMENTS, apps=self.apps)
        self.calls = _api.Caller()
        self.deployments = deployments
        self.generated = generated
        self.serial = itertools.count()

    async def _write(self, operation: str, name: str, request: _api.Request) -> _api.Obj:
        if not self.generated:
            return await self.calls.call(operation, f"{NAMESPACE}/{name}", request, write=True)
        fn, args = GENERATED[request.method, request.path.rsplit("/", 1)[-1] == "scale"]
        fn_args = (*args(self, name), request.body)
        options = {} if request.method == "POST" else {"_content_type": request.content_type}
        return await self.calls.call(
            operation, f"{NAMESPACE}/{name}", fn(self), *fn_args, write=True, **options
        )

    async def annotate(self, name: str) -> None:
        # As `annotate.patch_annotations` sends it.
        n = next(self.serial)
        notes = {
            "autoscaler.dsec.io/status": json.dumps(
                {"replicas": n % 7, "reason": "queue above target", "at": f"2026-12-07T00:{n}"}
            ),
            "autoscaler.dsec.io/state": json.dumps({"term": 3, "since": n}),
        }
        version = _api.resource_version(self.deployments[name])
        body = {"metadata": {"resourceVersion": version, "annotations": notes}}
        request = self.endpoint.patch(name, NAMESPACE, body)
        self.deployments[name] = await self._write("deployments.patch", name, request)

    async def scale(self, name: str) -> None:
        # As `KubeCluster` scales.
        n = next(self.serial)
        version = _api.resource_version(self.deployments[name])
        body = {"metadata": {"resourceVersion": version}, "spec": {"replicas": 2 + n % 3}}
        request = self.endpoint.patch_scale(name, NAMESPACE, body)
        answer = await self._write("deployments/scale.patch", name, request)
        self.deployments[name]["metadata"]["resourceVersion"] = _api.resource_version(answer)

    async def event(self, name: str) -> None:
        # As `events.EventRecorder` creates one.
        n = next(self.serial)
        involved = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": name,
            "namespace": NAMESPACE,
            "uid": _api.uid(self.deployments[name]),
        }
        body = {
            "metadata": {"generateName": f"{name}.", "namespace": NAMESPACE},
            "involvedObject": involved,
            "type": "Normal",
            "reason": "ScaledUp",
            "message": f"replicas 2 -> {3 + n % 3}: queue above target",
            "source": {"component": "autoscaler"},
            "reportingComponent": "autoscaler",
            "reportingInstance": "autoscaler-0",
            "firstTimestamp": "2026-12-07T00:00:00Z",
            "lastTimestamp": "2026-12-07T00:00:00Z",
            "count": 1,
        }
        path = _api.resource_path("", "v1", "events", NAMESPACE)
        await self._write("events.create", name, _api.Request(self.api, "POST", path, body))


GENERATED: dict[tuple[str, bool], tuple[Callable[[Writer], Any], Callable[[Writer, str], Any]]]
GENERATED = {
    ("PATCH", False): (lambda w: w.apps.patch_namespaced_deployment, lambda _, n: (n, NAMESPACE)),
    ("PATCH", True): (
        lambda w: w.apps.patch_namespaced_deployment_scale,
        lambda _, n: (n, NAMESPACE),
    ),
    ("POST", False): (lambda w: w.core.create_namespaced_event, lambda _, n: (NAMESPACE,)),
}
"""The generated client's function for each write (by method and whether it is a `/scale`), and
its positional arguments before the body."""


async def burst(
    write: Callable[[str], Awaitable[None]], names: list[str], writes: int, concurrency: int
) -> float:
    """Process CPU (s) of `writes` writes, `concurrency` at a time (no two on one object)."""
    queue = list(itertools.islice(itertools.cycle(names), writes))

    async def worker(mine: list[str]) -> None:
        for name in mine:
            await write(name)

    start = time.process_time()
    await asyncio.gather(*(worker(queue[i::concurrency]) for i in range(concurrency)))
    return time.process_time() - start


async def main(args: argparse.Namespace) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.write_cpu",
        "--serve",
        str(args.deployments),
        cwd=ROOT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    assert process.stdin is not None
    try:
        started = json.loads(await process.stdout.readline())
        api = await connection.api_client(kubeconfig=started["kubeconfig"])
        async with api:
            listed = await _api.call_json(
                client.AppsV1Api(api).list_namespaced_deployment, NAMESPACE
            )
            if args.stub_session:
                stub(api)
            shared = {_api.name(d): d for d in listed["items"]}
            writers = {via: Writer(api, shared, generated=via == "generated") for via in args.via}
            names = sorted(shared)
            if args.concurrency > len(names):
                raise SystemExit("--concurrency must not exceed --deployments")
            kinds = KINDS if args.kind == "all" else (args.kind,)
            for writer in writers.values():  # warm up: connections, imports, caches
                for kind in kinds:
                    await burst(getattr(writer, kind), names, 200, args.concurrency)
            per_write = {(via, kind): [] for via in writers for kind in kinds}
            profiler = cProfile.Profile(time.process_time) if args.profile else None
            for run in range(args.runs):  # the ways alternate, run by run
                last = run == args.runs - 1
                for (via, kind), values in per_write.items():
                    write = getattr(writers[via], kind)
                    if profiler is not None and last:
                        profiler.enable()
                    cpu_s = await burst(write, names, args.writes, args.concurrency)
                    if profiler is not None and last:
                        profiler.disable()
                    values.append(cpu_s / args.writes * 1e6)
                    print(f"run {run + 1} {via:9s} {kind:8s} {values[-1]:7.1f} µs per write")
            for (via, kind), values in per_write.items():
                least, median = min(values), statistics.median(values)
                print(
                    f"{via:9s} {kind:8s} least {least:7.1f} µs  median {median:7.1f} µs"
                    f" per write ({args.writes} writes x {args.runs} runs)"
                )
            if profiler is not None:
                profiler.dump_stats(args.profile)
    finally:
        process.stdin.close()
        await process.wait()


class _StubResponse:
    """What `--stub-session` answers every request with: 200 and a small object."""

    status = 200
    reason = "OK"
    _BODY = json.dumps({"metadata": {"name": "stub", "resourceVersion": "1"}}).encode()

    async def read(self) -> bytes:
        return self._BODY

    def release(self) -> None:
        pass


def stub(api: client.ApiClient) -> None:
    """Answer every request of `api`'s session at once, sending nothing: what is left of a
    write's CPU is the adapters' and the client's own, without HTTP."""

    async def request(*_: Any, **__: Any) -> _StubResponse:
        return _StubResponse()

    api.rest_client.pool_manager.request = request


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench.write_cpu", description=__doc__.split("\n")[0])
    parser.add_argument("--writes", type=int, default=2000)
    parser.add_argument("--deployments", type=int, default=200)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--kind", choices=[*KINDS, "all"], default="all")
    parser.add_argument(
        "--via",
        choices=VIAS,
        nargs="+",
        default=list(VIAS),
        help="request: `_api.Request` (the adapters' way); generated: the generated client",
    )
    parser.add_argument("--profile", type=Path)
    parser.add_argument(
        "--stub-session",
        action="store_true",
        help="answer every write at once without HTTP (the client's own CPU per write)",
    )
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse()
    if arguments.serve is not None:
        asyncio.run(serve(arguments.serve))
    else:
        asyncio.run(main(arguments))
