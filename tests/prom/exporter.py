"""Test exporters: small aiohttp servers serving series a test sets, for Prometheus to scrape.

Each exporter serves, per pod, vLLM-style series and DCGM GPU series, in the plain text
exposition format 0.0.4 whatever the scraper asks for: prometheus_client renames `a:b` names when
OpenMetrics is negotiated, and vLLM's names have colons. The `namespace` and `pod` labels are on
the series themselves, as ServiceMonitors attach them (the scrape job honours them).

Exporters run on an event loop in a thread of their own, so one set serves a whole test session
whatever loop each test runs on; tests change series from their own thread under a lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections.abc import Coroutine, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

T = TypeVar("T")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# vLLM's buckets for vllm:e2e_request_latency_seconds (vllm/v1/metrics/loggers.py).
LATENCY_BUCKETS_S = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0)
GPU_MODEL = "NVIDIA A100-SXM4-80GB"
# vLLM's buckets for the TTFT and TPOT histograms (a subset, vllm/v1/metrics/loggers.py).
TOKEN_LATENCY_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0)


@dataclass
class _Ramp:
    """A counter growing at a constant rate from the moment it was last set."""

    value: float = 0.0
    since_s: float = field(default_factory=time.monotonic)
    rate_per_s: float = 0.0

    def at(self, now_s: float) -> float:
        return self.value + self.rate_per_s * (now_s - self.since_s)


@dataclass
class VllmPod:
    """One vLLM server's series; change them through `Exporter` methods."""

    namespace: str
    pod: str
    waiting: float = 0.0
    running: float = 0.0
    timestamp_s: float | None = None
    """When set, every sample carries this Unix time instead of the scrape's (it stops ageing)."""
    completed: dict[str, _Ramp] = field(default_factory=dict)
    """`vllm:request_success_total` per `finished_reason`."""
    latency_counts: list[int] = field(default_factory=lambda: [0] * len(LATENCY_BUCKETS_S))
    latency_over: int = 0
    latency_sum_s: float = 0.0
    latency_ramps: dict[float, _Ramp] = field(default_factory=dict)
    """Requests finishing at a constant rate per latency (seconds), from `set_traffic`."""
    tokens: Tokens | None = None
    """The token series, from `set_tokens`; None serves none."""


@dataclass
class Tokens:
    """One vLLM server's token series: the KV-cache gauge under the name of its version, the
    token counters, and TTFT/TPOT histograms where every request lands in one bucket."""

    kv_cache_ratio: float
    kv_cache_name: str
    prompt: _Ramp
    generation: _Ramp
    requests: _Ramp
    ttft_s: float
    tpot_s: float


@dataclass
class Gpu:
    """One GPU's `DCGM_FI_DEV_GPU_UTIL` series (None: none, as for a MIG instance) and
    `DCGM_FI_PROF_GR_ENGINE_ACTIVE` series (None: none, as for a card older than Volta), used by
    a pod."""

    namespace: str
    pod: str
    index: int
    util_pct: float | None
    renamed: bool = False
    activity_ratio: float | None = None
    """Labels as Prometheus leaves them without `honor_labels`: `exported_namespace`,
    `exported_pod`, with `namespace`/`pod` naming the exporter's own pod."""


class Exporter:
    """A `/metrics` endpoint on a free loopback port whose series the test sets."""

    def __init__(self, *, hostname_label: str = "Hostname", node: str = "gpu-node-1") -> None:
        self.hostname_label = hostname_label
        self.node = node
        self.port = 0
        self._lock = threading.Lock()
        self._vllm: dict[tuple[str, str], VllmPod] = {}
        self._gpus: dict[tuple[str, str, int], Gpu] = {}
        self._health: dict[tuple[str, int], NodeGpu] = {}
        self._probes: set[str] = set()
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(self)
        self._runner: web.AppRunner | None = None

    @property
    def target(self) -> str:
        """`host:port` for a scrape config."""
        return f"127.0.0.1:{self.port}"

    def set_vllm(
        self,
        namespace: str,
        pod: str,
        *,
        rate_per_s: float | None = None,
        finished_reason: str = "stop",
        waiting: float | None = None,
        running: float | None = None,
        timestamp_s: float | None = None,
    ) -> None:
        """Create or change a vLLM pod's series; a rate makes its counter grow from now on."""
        now_s = time.monotonic()
        with self._lock:
            vllm = self._vllm.setdefault((namespace, pod), VllmPod(namespace, pod))
            if rate_per_s is not None:
                ramp = vllm.completed.setdefault(finished_reason, _Ramp(since_s=now_s))
                ramp.value, ramp.since_s, ramp.rate_per_s = ramp.at(now_s), now_s, rate_per_s
            if waiting is not None:
                vllm.waiting = waiting
            if running is not None:
                vllm.running = running
            vllm.timestamp_s = timestamp_s

    def set_traffic(
        self,
        namespace: str,
        pod: str,
        *,
        rate_per_s: float,
        latency_s: float,
        error_ratio: float = 0.0,
    ) -> None:
        """Serve a pod under steady traffic from now on: `rate_per_s` requests finish per
        second, each taking `latency_s`, and `error_ratio` of them are aborted.

        Grows `vllm:request_success_total` (`finished_reason` "stop" and "abort", both present
        as vLLM exports them) and the latency histogram at that rate; a misbehaving pod is one
        with a high `error_ratio` or a slow `latency_s`. Calling it again changes the rates.
        """
        if not 0.0 <= error_ratio <= 1.0:
            raise ValueError(f"error_ratio must be in [0, 1], not {error_ratio}")
        self.set_vllm(namespace, pod, rate_per_s=rate_per_s * (1.0 - error_ratio))
        self.set_vllm(namespace, pod, rate_per_s=rate_per_s * error_ratio, finished_reason="abort")
        now_s = time.monotonic()
        with self._lock:
            vllm = self._vllm[(namespace, pod)]
            for ramp in vllm.latency_ramps.values():
                ramp.value, ramp.since_s, ramp.rate_per_s = ramp.at(now_s), now_s, 0.0
            ramp = vllm.latency_ramps.setdefault(latency_s, _Ramp(since_s=now_s))
            ramp.value, ramp.since_s, ramp.rate_per_s = ramp.at(now_s), now_s, rate_per_s

    def observe_latency(self, namespace: str, pod: str, latency_s: float) -> None:
        """Count one finished request's latency in the pod's histogram."""
        with self._lock:
            vllm = self._vllm.setdefault((namespace, pod), VllmPod(namespace, pod))
            vllm.latency_sum_s += latency_s
            for i, bound in enumerate(LATENCY_BUCKETS_S):
                if latency_s <= bound:
                    vllm.latency_counts[i] += 1
                    break
            else:
                vllm.latency_over += 1

    def set_tokens(
        self,
        namespace: str,
        pod: str,
        *,
        kv_cache_ratio: float,
        prompt_per_s: float,
        generation_per_s: float,
        requests_per_s: float,
        ttft_s: float,
        tpot_s: float,
        kv_cache_name: str = "vllm:kv_cache_usage_perc",
    ) -> None:
        """Serve a vLLM pod's token series from now on: the KV-cache gauge (under
        `kv_cache_name`, the name of vLLM >= 0.10 by default), the token counters growing at
        their rates, and `requests_per_s` TTFT and TPOT observations at the given values."""
        now_s = time.monotonic()
        with self._lock:
            vllm = self._vllm.setdefault((namespace, pod), VllmPod(namespace, pod))
            vllm.tokens = Tokens(
                kv_cache_ratio,
                kv_cache_name,
                _Ramp(since_s=now_s, rate_per_s=prompt_per_s),
                _Ramp(since_s=now_s, rate_per_s=generation_per_s),
                _Ramp(since_s=now_s, rate_per_s=requests_per_s),
                ttft_s,
                tpot_s,
            )

    def set_gpu(
        self,
        namespace: str,
        pod: str,
        util_pct: float | None,
        *,
        index: int = 0,
        renamed: bool = False,
        activity_ratio: float | None = None,
    ) -> None:
        """Create or change the utilisation (and graphics-engine activity) of GPU `index` used
        by a pod."""
        with self._lock:
            self._gpus[(namespace, pod, index)] = Gpu(
                namespace, pod, index, util_pct, renamed, activity_ratio
            )

    def set_node_gpu(
        self, node: str, *, index: int = 0, xid: float, fb_used_mib: float, fb_free_mib: float
    ) -> None:
        """Create or change the health series (XID, framebuffer) of GPU `index` of `node`."""
        with self._lock:
            self._health[(node, index)] = NodeGpu(node, index, xid, fb_used_mib, fb_free_mib)

    def add_probe(self, value: str) -> None:
        """Serve `promql_probe{value=<value>} 1`, for checking how label values are matched."""
        with self._lock:
            self._probes.add(value)

    def drop(self, namespace: str, pod: str) -> None:
        """Stop serving every series of a pod."""
        with self._lock:
            self._vllm.pop((namespace, pod), None)
            for key in [k for k in self._gpus if k[:2] == (namespace, pod)]:
                del self._gpus[key]

    def clear(self) -> None:
        """Stop serving every series."""
        with self._lock:
            self._vllm.clear()
            self._gpus.clear()
            self._health.clear()
            self._probes.clear()

    def render(self) -> bytes:
        """The exposition text of every series now."""
        return generate_latest(self._registry)

    def collect(self) -> Iterable[Metric]:
        """The series, as prometheus_client metric families (the registry calls this)."""
        now_s = time.monotonic()
        with self._lock:
            vllms = list(self._vllm.values())
            gpus = list(self._gpus.values())
            health = list(self._health.values())
            probes = sorted(self._probes)
        yield from _vllm_families(vllms, now_s)
        yield _gpu_family(gpus, self.hostname_label, self.node)
        yield _gpu_family(gpus, self.hostname_label, self.node, activity=True)
        yield from _health_families(health, self.hostname_label)
        probe = GaugeMetricFamily("promql_probe", "Values for matcher tests.", labels=["value"])
        for value in probes:
            probe.add_metric([value], 1.0)
        yield probe

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _metrics(self, request: web.Request) -> web.Response:
        # Whatever the Accept header asks (Prometheus prefers OpenMetrics), answer 0.0.4.
        return web.Response(body=self.render(), headers={"Content-Type": CONTENT_TYPE})


def _vllm_families(pods: list[VllmPod], now_s: float) -> Iterator[Metric]:
    labels = ["namespace", "pod", "model_name", "engine"]
    completed = CounterMetricFamily(
        "vllm:request_success",
        "Count of successfully processed requests.",
        labels=[*labels, "finished_reason"],
    )
    waiting = GaugeMetricFamily(
        "vllm:num_requests_waiting", "Number of requests waiting to be processed.", labels=labels
    )
    running = GaugeMetricFamily(
        "vllm:num_requests_running", "Number of requests in model execution batches.", labels=labels
    )
    latency = HistogramMetricFamily(
        "vllm:e2e_request_latency_seconds",
        "Histogram of e2e request latency in seconds.",
        labels=labels,
    )
    for p in pods:
        values = [p.namespace, p.pod, "test-model", "0"]
        ts = p.timestamp_s
        for reason, ramp in sorted(p.completed.items()):
            completed.add_metric([*values, reason], ramp.at(now_s), timestamp=ts)
        waiting.add_metric(values, p.waiting, timestamp=ts)
        running.add_metric(values, p.running, timestamp=ts)
        counts = [float(count) for count in p.latency_counts]
        over, total_s = float(p.latency_over), p.latency_sum_s
        for latency_s, ramp in p.latency_ramps.items():
            finished = ramp.at(now_s)
            total_s += finished * latency_s
            index = next((i for i, b in enumerate(LATENCY_BUCKETS_S) if latency_s <= b), None)
            if index is None:
                over += finished
            else:
                counts[index] += finished
        cumulative, buckets = 0.0, []
        for bound, count in zip(LATENCY_BUCKETS_S, counts, strict=True):
            cumulative += count
            buckets.append((f"{bound}", cumulative))
        buckets.append(("+Inf", cumulative + over))
        latency.add_metric(values, buckets, total_s, timestamp=ts)
    yield from (completed, waiting, running, latency)
    yield from _token_families([p for p in pods if p.tokens is not None], now_s)


def _token_families(pods: list[VllmPod], now_s: float) -> Iterator[Metric]:
    labels = ["namespace", "pod", "model_name", "engine"]
    kv: dict[str, GaugeMetricFamily] = {}
    prompt = CounterMetricFamily("vllm:prompt_tokens", "Prefill tokens.", labels=labels)
    generation = CounterMetricFamily("vllm:generation_tokens", "Generated tokens.", labels=labels)
    ttft = HistogramMetricFamily(
        "vllm:time_to_first_token_seconds", "Time to first token.", labels=labels
    )
    tpot = HistogramMetricFamily(
        "vllm:time_per_output_token_seconds", "Time per output token.", labels=labels
    )
    for p in pods:
        tokens = p.tokens
        assert tokens is not None
        values = [p.namespace, p.pod, "test-model", "0"]
        gauge = kv.setdefault(
            tokens.kv_cache_name,
            GaugeMetricFamily(tokens.kv_cache_name, "KV-cache usage.", labels=labels),
        )
        gauge.add_metric(values, tokens.kv_cache_ratio)
        prompt.add_metric(values, tokens.prompt.at(now_s))
        generation.add_metric(values, tokens.generation.at(now_s))
        requests = tokens.requests.at(now_s)
        for family, seconds in ((ttft, tokens.ttft_s), (tpot, tokens.tpot_s)):
            buckets = [
                (f"{bound}", requests if seconds <= bound else 0.0)
                for bound in TOKEN_LATENCY_BUCKETS_S
            ]
            family.add_metric(values, [*buckets, ("+Inf", requests)], requests * seconds)
    yield from (*kv.values(), prompt, generation, ttft, tpot)


def _gpu_family(
    gpus: list[Gpu], hostname_label: str, node: str, *, activity: bool = False
) -> Metric:
    # dcgm-exporter's labels in Kubernetes mode (`--kubernetes`): the GPU, and the pod using it.
    family = GaugeMetricFamily(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE" if activity else "DCGM_FI_DEV_GPU_UTIL",
        "Ratio of time the graphics engine is active." if activity else "GPU utilization (in %).",
        labels=[
            "gpu",
            "UUID",
            "device",
            "modelName",
            hostname_label,
            "namespace",
            "pod",
            "container",
            "exported_namespace",
            "exported_pod",
        ],
    )
    for g in gpus:
        value = g.activity_ratio if activity else g.util_pct
        if value is None:
            continue
        gpu_uuid = f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{node}/{g.index}')}"
        common = [str(g.index), gpu_uuid, f"nvidia{g.index}", GPU_MODEL, node]
        if g.renamed:
            where = ["gpu-operator", "nvidia-dcgm-exporter-7x2k9", "", g.namespace, g.pod]
        else:
            where = [g.namespace, g.pod, "server", "", ""]
        # Empty label values are absent labels in Prometheus.
        family.add_metric([*common, *where], value)
    return family


@dataclass
class NodeGpu:
    """One GPU's health series, on the node named."""

    node: str
    index: int
    xid: float
    fb_used_mib: float
    fb_free_mib: float


def _health_families(gpus: list[NodeGpu], hostname_label: str) -> Iterator[Metric]:
    labels = ["gpu", "UUID", "device", "modelName", hostname_label]
    for name, help_, field_ in (
        ("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", "xid"),
        ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "fb_used_mib"),
        ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", "fb_free_mib"),
    ):
        family = GaugeMetricFamily(name, help_, labels=labels)
        for g in gpus:
            gpu_uuid = f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{g.node}/{g.index}')}"
            common = [str(g.index), gpu_uuid, f"nvidia{g.index}", GPU_MODEL, g.node]
            family.add_metric(common, float(getattr(g, field_)))
        yield family


class LoopThread:
    """An event loop running in a thread of its own, for servers that outlive one test's loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="exporters", daemon=True)

    def __enter__(self) -> LoopThread:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()

    def run(self, coro: Coroutine[Any, Any, T], *, timeout_s: float = 10.0) -> T:
        """Run `coro` on the thread's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)


@contextlib.contextmanager
def serving(hostname_labels: Iterable[str]) -> Iterator[list[Exporter]]:
    """Started exporters, one per DCGM hostname label spelling, stopped on exit."""
    with LoopThread() as thread:
        exporters = [Exporter(hostname_label=label) for label in hostname_labels]
        try:
            for exporter in exporters:
                thread.run(exporter.start())
            yield exporters
        finally:
            for exporter in exporters:
                thread.run(exporter.stop())
