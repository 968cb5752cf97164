"""Runs the real Prometheus binary for tests: free loopback port, temporary data, 1 s scrapes.

Waiting here is waiting on a real external process: it polls the server's HTTP API with short
pauses until a condition holds, bounded by a timeout, and never sleeps for a fixed time.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
import socket
import ssl
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from prometheus_client import parser

T = TypeVar("T")

DEBIAN_BINARY = "/usr/bin/prometheus"
SCRAPE_INTERVAL_S = 1.0
READY_TIMEOUT_S = 10.0
WAIT_TIMEOUT_S = 15.0
POLL_PAUSE_S = 0.05


def find_binary() -> str | None:
    """The Prometheus binary: Debian's package path, else the first on PATH."""
    if os.access(DEBIAN_BINARY, os.X_OK):
        return DEBIAN_BINARY
    return shutil.which("prometheus")


@dataclass(frozen=True)
class Job:
    """A scrape job besides the exporters': its targets, and the labels every target gets, as
    service discovery attaches them (a ServiceMonitor adds `namespace`, `pod`, ...)."""

    name: str
    targets: Sequence[str]
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class WebConfig:
    """Prometheus's `--web.config.file`: TLS and basic auth on its own HTTP API, and how the
    harness itself gets through them (`ca_file` and `user`)."""

    cert_file: Path | None = None
    """The server's certificate (PEM); with `key_file`, the API serves HTTPS."""
    key_file: Path | None = None
    ca_file: Path | None = None
    """The CA that signed `cert_file`, trusted by the harness's own requests."""
    users: Mapping[str, str] = field(default_factory=dict)
    """User name -> bcrypt hash of the password: the API asks for basic auth."""
    user: tuple[str, str] | None = None
    """(name, password) the harness's own requests authenticate with."""

    @property
    def scheme(self) -> str:
        return "https" if self.cert_file is not None else "http"

    def document(self) -> dict[str, Any]:
        """The web config file's content."""
        config: dict[str, Any] = {}
        if self.cert_file is not None:
            config["tls_server_config"] = {
                "cert_file": str(self.cert_file),
                "key_file": str(self.key_file),
            }
        if self.users:
            config["basic_auth_users"] = dict(self.users)
        return config

    def headers(self) -> dict[str, str]:
        if self.user is None:
            return {}
        token = base64.b64encode(":".join(self.user).encode()).decode()
        return {"Authorization": f"Basic {token}"}

    def tls(self) -> ssl.SSLContext | None:
        if self.ca_file is None:
            return None
        return ssl.create_default_context(cafile=str(self.ca_file))


@dataclass
class Prometheus:
    """One running Prometheus process and its HTTP API."""

    url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    started_s: float
    """`time.monotonic()` when the process was started."""
    ready_after_s: float = field(default=float("nan"))
    """Seconds from start until `/-/ready` answered 200."""
    web: WebConfig = field(default_factory=WebConfig)
    """TLS and basic auth in front of the API, if any."""

    def get(self, path: str, *, timeout_s: float = 5.0) -> Any:
        """Open `path` (with its query string) on the API as the harness: an HTTP response."""
        request = urllib.request.Request(f"{self.url}{path}", headers=self.web.headers())
        return urllib.request.urlopen(request, timeout=timeout_s, context=self.web.tls())

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The result of an instant query, as Prometheus's JSON gives it."""
        with self.get(f"/api/v1/query?{urllib.parse.urlencode({'query': promql})}") as response:
            body = json.load(response)
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def values(self, promql: str) -> dict[str, float]:
        """Each series of an instant query's result, keyed by its `pod` label (or all labels)."""
        return {
            s["metric"].get("pod", json.dumps(s["metric"], sort_keys=True)): float(s["value"][1])
            for s in self.query(promql)
        }

    async def wait_for_series(
        self,
        promql: str,
        done: Callable[[list[dict[str, Any]]], bool],
        *,
        timeout_s: float = WAIT_TIMEOUT_S,
    ) -> list[dict[str, Any]]:
        """Poll an instant query until its result satisfies `done`; fails after `timeout_s`."""
        return await poll(
            lambda: asyncio.to_thread(self.query, promql),
            done,
            timeout_s=timeout_s,
            what=f"Prometheus query {promql!r}",
        )

    def wait_until_scraped(self, targets: Sequence[str], *, timeout_s: float) -> float:
        """Block until every target has been scraped successfully; seconds since start."""
        deadline = time.monotonic() + timeout_s
        while True:
            up = {s["metric"].get("instance"): s["value"][1] for s in self.query("up")}
            if all(up.get(t) == "1" for t in targets):
                return time.monotonic() - self.started_s
            if time.monotonic() > deadline:
                raise TimeoutError(f"targets not scraped after {timeout_s} s: up={up}")
            time.sleep(POLL_PAUSE_S)

    def http_requests(self, handler: str) -> float:
        """Requests served on `handler`, from Prometheus's own `prometheus_http_requests_total`."""
        with self.get("/metrics") as response:
            text = response.read().decode()
        return sum(
            sample.value
            for family in parser.text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == "prometheus_http_requests_total"
            and sample.labels.get("handler") == handler
        )

    def stop(self) -> int:
        """Stop the server (SIGTERM, then SIGKILL after 10 s); its exit code."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


@contextlib.contextmanager
def running(
    binary: str,
    work_dir: Path,
    *,
    targets: Sequence[str] = (),
    jobs: Sequence[Job] = (),
    web: WebConfig | None = None,
) -> Iterator[Prometheus]:
    """A ready Prometheus scraping `targets` (and `jobs`) every second, stopped on exit."""
    prometheus = start(binary, work_dir, targets=targets, jobs=jobs, web=web)
    try:
        yield prometheus
    finally:
        prometheus.stop()


def start(
    binary: str,
    work_dir: Path,
    *,
    targets: Sequence[str] = (),
    port: int | None = None,
    jobs: Sequence[Job] = (),
    web: WebConfig | None = None,
) -> Prometheus:
    """Start Prometheus on a free loopback port and wait until `/-/ready` answers.

    With `port` (a restart where an earlier one ran), that port and its data are used again.
    With `web`, its API serves TLS or asks for basic auth (`--web.config.file`).
    """
    work_dir.mkdir(parents=True, exist_ok=True)
    config = work_dir / "prometheus.yml"
    config.write_text(json.dumps(_config(targets, jobs), indent=2))  # JSON is YAML
    web = web or WebConfig()
    if port is not None:
        prometheus = _launch(binary, work_dir, config, port, web)
        if not _wait_ready(prometheus):
            prometheus.stop()
            raise RuntimeError(f"Prometheus not ready on port {port}:\n{prometheus.log_tail()}")
        return prometheus
    # The port is free when chosen but could be taken before Prometheus binds it: try again then.
    for _ in range(3):
        prometheus = _launch(binary, work_dir, config, _free_port(), web)
        if _wait_ready(prometheus):
            return prometheus
        if prometheus.process.poll() is None or "address already in use" not in (
            prometheus.log_tail().lower()
        ):
            prometheus.stop()
            raise RuntimeError(f"Prometheus not ready:\n{prometheus.log_tail()}")
    raise RuntimeError(f"Prometheus found no free port:\n{prometheus.log_tail()}")


def _config(targets: Sequence[str], jobs: Sequence[Job] = ()) -> dict[str, Any]:
    interval = f"{SCRAPE_INTERVAL_S:g}s"
    return {
        "global": {
            "scrape_interval": interval,
            "scrape_timeout": interval,
            "evaluation_interval": interval,
        },
        "scrape_configs": [
            {
                "job_name": "exporters",
                # The exporters' own `namespace` and `pod` labels win, as with the pod labels
                # that ServiceMonitors and PodMonitors attach.
                "honor_labels": True,
                "static_configs": [{"targets": list(targets)}],
            },
            *(
                {
                    "job_name": job.name,
                    # Series labels win over the target's, as with `honorLabels: true`.
                    "honor_labels": True,
                    "static_configs": [{"targets": list(job.targets), "labels": dict(job.labels)}],
                }
                for job in jobs
            ),
        ],
    }


def _launch(binary: str, work_dir: Path, config: Path, port: int, web: WebConfig) -> Prometheus:
    data = work_dir / f"data-{port}"
    log_path = work_dir / f"prometheus-{port}.log"
    arguments = [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={data}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]
    if web != WebConfig():
        web_file = work_dir / "web.yml"
        web_file.write_text(json.dumps(web.document(), indent=2))  # JSON is YAML
        arguments.append(f"--web.config.file={web_file}")
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            arguments,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    return Prometheus(
        f"{web.scheme}://127.0.0.1:{port}", process, log_path, time.monotonic(), web=web
    )


def _wait_ready(prometheus: Prometheus) -> bool:
    """Poll `/-/ready` until it answers 200 (True) or the process exits (False)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if prometheus.process.poll() is not None:
            return False
        try:
            with prometheus.get("/-/ready", timeout_s=1) as response:
                if response.status == 200:
                    prometheus.ready_after_s = time.monotonic() - prometheus.started_s
                    return True
        except OSError:
            pass  # not listening yet, or still starting (503)
        time.sleep(POLL_PAUSE_S)
    return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def poll(
    probe: Callable[[], Awaitable[T]],
    done: Callable[[T], bool],
    *,
    timeout_s: float = WAIT_TIMEOUT_S,
    what: str,
) -> T:
    """Await `probe` with short pauses until `done(result)`; fails with the last result."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = await probe()
        if done(result):
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: condition not met after {timeout_s} s; last {result!r}")
        await asyncio.sleep(POLL_PAUSE_S)
