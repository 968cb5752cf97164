"""Prometheus behind the `MetricsSource` port: per tick, one PromQL query per metric kind.

Each query covers the serving pods of every managed service at once, grouped `by (namespace, pod)`,
and the answers are mapped back to services through the pods each `ports.Workload` names.
Every query is one aiohttp request under one deadline for all of it (connecting, sending and the
whole answer): a Prometheus that answers slowly, or drips its answer, costs a tick at most that.

A query that Prometheus refuses as such (HTTP 400 `bad_data`, 422 `execution`), rather than an
outage (refused connection, 5xx, deadline), is bisected: the services are split and the halves
queried apart until the ones that break it are found. They are queried apart from then on (their
signal reads as missing) while the rest share the query again; an outage holds every service
and is never bisected.

Only validated names reach PromQL: metric names must match Prometheus's grammar, namespaces and pods
must be DNS-1123 names, and every value is regex-quoted and string-escaped on top of that. Service
owners choose metric names (a preset or `custom`), never PromQL.

`LoadHistory` is the seasonal forecast's history (`ports.HistorySource`): each service's load
over the last days, one mean per step, from range queries over the pods of its Deployment (past
pods included), only the stretches the forecast reads, fetched once and then only the steps
added since, a few times an hour, many services of a namespace in one query; the range answers
are scanned as the per-pod ones are.

`HealthQueries` serves the traffic ramp (docs/architecture.md,
"The warm-up gate and the traffic ramp") from the same names and quoting: the health of the warming
and stable pods of one service over a window, and the requests still in flight on pods being
drained.

Every query of both goes out through one `Client`, built once and handed to both: one deadline,
one connection pool, one mapping of failures to `ObservationError`, and one `Access`: the
credentials (a bearer token or basic auth, each from a file read again when it changes), the TLS
trust (a CA bundle, or none checked) and the extra headers (a tenant's `X-Scope-OrgID` for Mimir,
Cortex or Thanos). A 401 or 403 answer is an `ObservationError` that says the credentials were
refused. Secrets never reach a log line, an error message or a `repr`.

This module decides nothing: a pod without a fresh series is missing data (NaN), never zero, and
what missing data means is for the decision core to say.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import functools
import itertools
import json
import math
import operator
import os
import re
import ssl
import types
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NamedTuple, Protocol

import aiohttp
import numpy as np
import numpy.typing as npt
import structlog

from autoscaler import errors, metricnames, ports
from autoscaler.core import forecast, gpuhealth, model

log = structlog.get_logger(__name__)

GPU_UTILIZATION: Final = "DCGM_FI_DEV_GPU_UTIL"
"""DCGM exporter's GPU utilisation gauge, percent. Whole cards only: DCGM does not export it for
MIG instances."""
GPU_ACTIVITY: Final = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
"""DCGM exporter's graphics-engine activity, a ratio 0-1 (a profiling field): exported for whole
cards and for each MIG instance alike. Preferred over `GPU_UTILIZATION` where present."""

DEFAULT_TIMEOUT_S: Final = 2.0
"""Deadline of one query: connecting, sending and reading the whole answer."""
DEFAULT_MAX_ISOLATION_QUERIES: Final = 64
"""Most queries one tick may spend finding the services that break a shared query; past it,
the tick fails as an outage does (every service holds)."""
REJECTED_TYPES: Final = frozenset({"bad_data", "execution"})
"""Prometheus's `errorType`s that blame the query itself (HTTP 400 and 422), not the server."""
DEFAULT_SCRAPE_INTERVAL_S: Final = 15.0
DEFAULT_MAX_POD_MATCHER_CHARS: Final = 1500
"""Longest pod alternation put in a query; past it, queries select by namespace alone.

The GPU query repeats the alternation four times and URL encoding grows it: at 1500 characters
its request line is about 7.3 KB (46 pods of 31-character names), under the 8 KiB that common
reverse proxies accept in front of Prometheus.
"""

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# RE2's metacharacters, each behind a backslash: exactly what Go's regexp.QuoteMeta escapes.
_RE2_QUOTED: Final = str.maketrans({c: f"\\{c}" for c in "\\.+*?()|[]{}^$"})

_PodKey = str
"""A pod as the per-pod answers name it: see `pod_key`."""


def pod_key(namespace: str, pod: str) -> _PodKey:
    """The key of a pod in the per-pod readings: its two labels as Prometheus writes them,
    from the namespace's first character to the pod name's last (`ns","pod":"name`).

    The scan of an answer takes it whole from the text, one string per series. No two pods of
    Kubernetes names (which hold no quote) share a key, nor share one with any other pair.
    """
    return f'{namespace}","pod":"{pod}'


def is_namespace(name: str) -> bool:
    """Whether `name` is a valid Kubernetes namespace name (a DNS-1123 label)."""
    return len(name) <= 63 and _DNS1123_LABEL.fullmatch(name) is not None


def is_pod_name(name: str) -> bool:
    """Whether `name` is a valid Kubernetes pod name (a DNS-1123 subdomain)."""
    return len(name) <= 253 and _DNS1123_SUBDOMAIN.fullmatch(name) is not None


def _check_names(serving: ServingPods) -> None:
    if not is_namespace(serving.namespace):
        raise ValueError(f"not a namespace name: {serving.namespace!r}")
    for pod in serving.pods:
        if not is_pod_name(pod):
            raise ValueError(f"not a pod name: {pod!r}")


MetricNames = metricnames.MetricNames
"""Re-exported: the names a `ServingPods` carries (the table lives in `autoscaler.metricnames`)."""
PRESETS = metricnames.PRESETS
"""Re-exported from `autoscaler.metricnames`, the one source of the presets."""
_check_metric_name = metricnames.check_metric_name


@dataclass(frozen=True, slots=True)
class ServingPods:
    """Where one service's metrics come from: its namespace, serving pods and metric names."""

    namespace: str
    pods: frozenset[str]
    """Pods warm and in the stable traffic set: the only ones whose series count."""
    metrics: MetricNames
    llm_signals: frozenset[model.Signal] = frozenset()
    """The LLM signals the service sets a target for: its pods join only their queries."""


class QueryRejected(errors.ObservationError):
    """Prometheus refused the query itself (400 `bad_data`, 422 `execution`): the text of the
    query, not the server, is at fault, so a smaller query may still be answered."""


class Secret(Protocol):
    """A credential read when a query is sent; never printed."""

    def value(self) -> str:
        """The secret's current text; raises `ObservationError` when it cannot be read."""
        ...


class SecretText:
    """A secret given as text (from a variable): its `repr` hides it."""

    __slots__ = ("_text",)

    def __init__(self, text: str) -> None:
        self._text = text

    def value(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return "SecretText('**********')"


_FileStamp = tuple[int, int, int, int]
"""(device, inode, size, modification time in ns): what tells that a file changed."""


def _stamp(status: os.stat_result) -> _FileStamp:
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)


class SecretFile:
    """A secret kept in a file, such as a mounted Secret or a projected service-account token.

    The file is read at construction: a missing, unreadable or empty one is a `ConfigError`
    naming `setting`. Before each query the file is checked again (one `stat`) and read anew
    when its device, inode, size or modification time changed, so a rotated token is sent from
    the first query after the rotation: the kubelet swaps a mounted Secret's files through a
    symlink (a new inode). If it cannot be read then, the query fails (`ObservationError`,
    services hold) rather than send a token that may have expired.
    """

    def __init__(self, path: str | os.PathLike[str], *, setting: str) -> None:
        self.path = Path(path)
        self.setting = setting
        try:
            self._stamp, self._text = self._load()
        except (OSError, ValueError) as e:
            raise errors.ConfigError(f"{setting}: cannot read {self.path}: {_os_brief(e)}") from e

    def value(self) -> str:
        try:
            changed = _stamp(os.stat(self.path)) != self._stamp
            if changed:
                self._stamp, self._text = self._load()
        except (OSError, ValueError) as e:
            raise errors.ObservationError(
                f"{self.setting}: cannot read {self.path}: {_os_brief(e)}"
            ) from e
        if changed:
            log.info(SECRET_RELOADED, setting=self.setting, path=str(self.path))
        return self._text

    def _load(self) -> tuple[_FileStamp, str]:
        with self.path.open("rb") as file:
            stamp = _stamp(os.fstat(file.fileno()))
            text = file.read().decode().strip()
        if not text:
            raise ValueError("the file is empty")
        return stamp, text

    def __repr__(self) -> str:
        return f"SecretFile({str(self.path)!r})"


SECRET_RELOADED: Final = "prometheus.secret_reloaded"
"""Log event: a credential file changed and was read again (its path, never its text)."""


def _os_brief(e: Exception) -> str:
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e) or type(e).__name__


class Access:
    """How every query reaches Prometheus: credentials, TLS trust and extra headers.

    At most one of `bearer_token` and `basic_auth` (a user name and its password). `ca_file`
    is a PEM bundle trusted instead of the system's; `insecure_skip_verify` checks no
    certificate at all (the connection is encrypted, not authenticated). `headers` go with every
    query, e.g. `{"X-Scope-OrgID": "tenant-a"}`; they may not set `Authorization`. A CA bundle
    that cannot be loaded is a `ConfigError` naming `ca_setting`.
    """

    def __init__(
        self,
        *,
        bearer_token: Secret | None = None,
        basic_auth: tuple[str, Secret] | None = None,
        ca_file: str | os.PathLike[str] | None = None,
        insecure_skip_verify: bool = False,
        headers: Mapping[str, str] | None = None,
        ca_setting: str = "ca_file",
    ) -> None:
        if bearer_token is not None and basic_auth is not None:
            raise ValueError("a bearer token and basic auth are exclusive")
        if ca_file is not None and insecure_skip_verify:
            raise ValueError("a CA bundle and insecure_skip_verify are exclusive")
        self.headers = dict(headers or {})
        if any(name.lower() == "authorization" for name in self.headers):
            raise ValueError("set credentials with bearer_token or basic_auth, not a header")
        self.bearer_token = bearer_token
        self.basic_auth = basic_auth
        self.tls: ssl.SSLContext | bool = True
        """What aiohttp checks the server's certificate with: True for the system's trust."""
        if ca_file is not None:
            try:
                self.tls = ssl.create_default_context(cafile=os.fspath(ca_file))
            except (OSError, ssl.SSLError) as e:
                raise errors.ConfigError(
                    f"{ca_setting}: cannot load a CA bundle from {ca_file}: {_os_brief(e)}"
                ) from e
        elif insecure_skip_verify:
            self.tls = False

    @property
    def scheme(self) -> str:
        """The kind of credentials sent, for logs: `none`, `bearer` or `basic`."""
        if self.bearer_token is not None:
            return "bearer"
        return "none" if self.basic_auth is None else "basic"

    def request_headers(self) -> dict[str, str]:
        """The headers of one query, with the credentials as they are now."""
        headers = dict(self.headers)
        if self.bearer_token is not None:
            headers["Authorization"] = f"Bearer {self.bearer_token.value()}"
        elif self.basic_auth is not None:
            user, password = self.basic_auth
            # RFC 7617 with UTF-8, as Prometheus and common proxies read it.
            pair = f"{user}:{password.value()}".encode()
            headers["Authorization"] = f"Basic {base64.b64encode(pair).decode()}"
        return headers

    def __repr__(self) -> str:
        return (
            f"Access(scheme={self.scheme!r}, headers={sorted(self.headers)!r}, "
            f"tls={'custom CA' if isinstance(self.tls, ssl.SSLContext) else self.tls!r})"
        )


NO_ACCESS_CONTROL: Final = Access()
"""Plain HTTP(S) with the system's trust, no credentials and no extra header."""

_REFUSED: Final = {
    401: "Unauthorized: credentials missing or wrong",
    403: "Forbidden: the credentials may not run this query",
}


class Client:
    """One Prometheus HTTP API: instant queries, each bounded by one deadline in all.

    The metrics and the health queries share one: its deadline (`timeout_s`), its `access`
    (credentials, TLS, headers) and its mapping of every failure to `ObservationError`. The
    aiohttp session is opened by the first query, on the running loop; `close` ends it.
    Nothing is retried within a query: the caller asks again at its next tick, and a retry would
    stall every service's decision meanwhile.
    """

    def __init__(
        self, url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, access: Access = NO_ACCESS_CONTROL
    ) -> None:
        if not (timeout_s > 0 and math.isfinite(timeout_s)):
            raise ValueError(f"timeout_s must be > 0 and finite, not {timeout_s!r}")
        self.endpoint = url.rstrip("/") + "/api/v1/query"
        self.timeout_s = timeout_s
        self.access = access
        self._session: aiohttp.ClientSession | None = None
        self.sent = 0
        """Queries sent since construction (each is one HTTP request)."""
        self.scanned = 0
        """Answers of `query_per_pod` and `query_range_points` read by a scan, without
        decoding their JSON."""
        self._last_values: dict[str, _LastValues] = {}
        """The values of the last scanned answer of each kind of `query_per_pod`."""

    async def query(self, what: str, promql: str) -> list[Any]:
        """The result of an instant query; raises `ObservationError` (`QueryRejected` when
        Prometheus refused the query as such)."""
        return await self._get(what, self.endpoint, {"query": promql}, "an instant vector")

    async def query_range(
        self, what: str, promql: str, *, start_s: float, end_s: float, step_s: float
    ) -> list[Any]:
        """The matrix of a range query evaluated at `start_s`, `start_s + step_s`, ... up to
        `end_s` (Unix seconds); raises as `query` does."""
        params = {"query": promql, "start": f"{start_s:.3f}", "end": f"{end_s:.3f}"}
        params["step"] = f"{step_s:g}"
        return await self._get(what, self.endpoint + "_range", params, "a range matrix")

    async def query_range_points(
        self, what: str, promql: str, *, start_s: float, end_s: float, step_s: float
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """The times and the values of every point of a range query's series, one series after
        another (NaN and infinite values included; a malformed point is left out); raises as
        `query` does.

        A first fetch of the forecast's history reads millions of points: the answer is first
        scanned for the compact shape Prometheus writes a matrix in (`_scan_range`), its numbers
        read in one pass, and decoded as JSON only when it is anything else.
        """
        params = {"query": promql, "start": f"{start_s:.3f}", "end": f"{end_s:.3f}"}
        params["step"] = f"{step_s:g}"
        status, body = await self._fetch(what, self.endpoint + "_range", params)
        if status == 200 and (scanned := _scan_range(body)) is not None:
            self.scanned += 1
            return scanned
        return _range_points(self._decode(what, status, body, "a range matrix"))

    async def query_range_series(
        self, what: str, promql: str, *, label: str, start_s: float, end_s: float, step_s: float
    ) -> RangeSeries:
        """The points of a range query's series as `query_range_points` reads them, with each
        series' value of `label` and its number of points; raises as `query` does.

        Sent as a POST form: a query over many services is longer than a URL may be."""
        params = {"query": promql, "start": f"{start_s:.3f}", "end": f"{end_s:.3f}"}
        params["step"] = f"{step_s:g}"
        status, body = await self._fetch(what, self.endpoint + "_range", params, post=True)
        if status == 200 and (scanned := _scan_matrix(body)) is not None:
            self.scanned += 1
            texts, counts, times, values = scanned
            return RangeSeries([_label_of(text, label) for text in texts], counts, times, values)
        labels: list[str | None] = []
        sizes: list[int] = []
        stamps: list[npt.NDArray[np.float64]] = [np.empty(0)]
        read: list[npt.NDArray[np.float64]] = [np.empty(0)]
        for item in self._decode(what, status, body, "a range matrix"):
            metric = item.get("metric") if isinstance(item, dict) else None
            value = metric.get(label) if isinstance(metric, dict) else None
            labels.append(value if isinstance(value, str) else None)
            points = _range_points([item])
            sizes.append(len(points[0]))
            stamps.append(points[0])
            read.append(points[1])
        return RangeSeries(labels, sizes, np.concatenate(stamps), np.concatenate(read))

    async def query_per_pod(self, what: str, promql: str) -> PodSamples:
        """The samples of an instant query grouped by pod (`by (namespace, pod)`, or `by (pod)`
        where the namespace reads empty), NaN and infinite values included; raises as `query`
        does, and `ObservationError` for a malformed sample.

        At 10,000 services an answer holds 20,000 series, some 2 MB of JSON, and decoding
        it was the largest single cost of a tick: the answer is first scanned for the one shape
        Prometheus writes such series in, and decoded as JSON only when any part of it is not of
        that shape (an escaped or an extra label, an error, a malformed value).
        """
        status, body = await self._fetch(what, self.endpoint, {"query": promql})
        last = self._last_values.get(what)
        if last is None:
            last = self._last_values[what] = _LastValues()
        if status == 200 and (scanned := _scan_per_pod(body, last.read)) is not None:
            self.scanned += 1
            return scanned
        return _per_pod(self._decode(what, status, body, "an instant vector"))

    async def _get(
        self, what: str, endpoint: str, params: Mapping[str, str], shape: str
    ) -> list[Any]:
        status, body = await self._fetch(what, endpoint, params)
        return self._decode(what, status, body, shape)

    async def _fetch(
        self, what: str, endpoint: str, params: Mapping[str, str], *, post: bool = False
    ) -> tuple[int, bytes]:
        headers = self.access.request_headers()
        self.sent += 1
        try:
            async with asyncio.timeout(self.timeout_s):
                session = self._open()
                asked = (
                    session.post(endpoint, data=dict(params), headers=headers)
                    if post
                    else session.get(endpoint, params=params, headers=headers)
                )
                async with asked as response:
                    status = response.status
                    body = await response.read()
        except TimeoutError as e:
            raise errors.ObservationError(
                f"Prometheus {what} query failed: no whole answer within {self.timeout_s:g} s"
            ) from e
        except aiohttp.ClientError as e:  # refused, reset, bad HTTP, certificate refused
            raise errors.ObservationError(f"Prometheus {what} query failed: {_brief(e)}") from e
        if status in _REFUSED:  # before parsing: a proxy's refusal is rarely JSON
            said = body[:200].decode(errors="replace").strip()
            raise errors.ObservationError(
                f"Prometheus {what} query refused: HTTP {status} {_REFUSED[status]} "
                f"(sent: {self.access.scheme} auth); the server said: {said!r}"
            )
        return status, body

    def _decode(self, what: str, status: int, body: bytes, shape: str) -> list[Any]:
        try:
            answer = json.loads(body)
        except ValueError as e:  # HTML from a proxy, a truncated body
            raise errors.ObservationError(
                f"Prometheus {what} query failed: HTTP {status}, not JSON: {body[:200]!r}"
            ) from e
        if status != 200:
            raise _refusal(what, status, answer)
        try:
            result = answer["data"]["result"]
        except (KeyError, TypeError) as e:
            raise errors.ObservationError(f"Prometheus {what} answer malformed: {e!r}") from e
        if not isinstance(result, list):
            raise errors.ObservationError(f"Prometheus {what} answer is not {shape}")
        return result

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self.access.tls),
                cookie_jar=aiohttp.DummyCookieJar(),
            )
        return self._session

    async def close(self) -> None:
        """Close the session (and its connections); idempotent."""
        if self._session is not None:
            await self._session.close()
            self._session = None


class RangeSeries(NamedTuple):
    """The points of a range answer, one series after another, and what each series is."""

    labels: list[str | None]
    """Per series: its value of the label asked for, None where it has none."""
    counts: list[int]
    """Per series: its number of points."""
    times: npt.NDArray[np.float64]
    values: npt.NDArray[np.float64]


def _refusal(what: str, status: int, answer: Any) -> errors.ObservationError:
    """The error for a JSON answer with a status other than 200."""
    kind = answer.get("errorType") if isinstance(answer, dict) else None
    detail = str(answer.get("error", "")) if isinstance(answer, dict) else ""
    if status in (400, 422) and kind in REJECTED_TYPES:
        return QueryRejected(f"Prometheus refused the {what} query: {kind}: {detail[:300]}")
    return errors.ObservationError(
        f"Prometheus {what} query failed: HTTP {status}: {json.dumps(answer)[:300]}"
    )


@dataclass(frozen=True, slots=True)
class _Target:
    """One service's serving pods, as one tick reads them."""

    service: model.ServiceId
    serving: ServingPods
    pods: tuple[_PodKey, ...]
    """The keys of `serving.pods` (`pod_key`), made once with the target."""


@dataclass(frozen=True, slots=True)
class Rejected:
    """A service whose metric names break the shared query, and what Prometheus said."""

    metrics: MetricNames
    signal: model.Signal
    error: str


class _Budget:
    def __init__(self, queries: int) -> None:
        self.left = queries

    def take(self, queries: int) -> bool:
        if queries > self.left:
            return False
        self.left -= queries
        return True


class MetricsSource:
    """Samples every managed service's signals from Prometheus, one query per signal per tick.

    Per service: LOAD is the sum over its serving pods of the rate of its requests counter,
    SATURATION the sum of its queue gauge, CAPACITY the mean over its pods of the pod's mean GPU
    utilisation. Only pods that reported count: a service whose pods partly reported reads the
    sum (or mean) over the reporters, one where none reported reads NaN.

    A series is fresh while its newest sample is at most `max_age_s` old by Prometheus's clock;
    older ones read as missing. Prometheus's own staleness markers (a series gone from a scrape,
    a target down) make a series missing at once.

    A service whose query Prometheus refuses (see the module docstring) is in `rejected`: it is
    queried apart, its signals read NaN while refused, and it rejoins the shared query once its
    own is answered (or its metric names change).
    """

    def __init__(
        self,
        client: Client,
        *,
        scrape_interval_s: float = DEFAULT_SCRAPE_INTERVAL_S,
        max_age_s: float | None = None,
        rate_window_s: float | None = None,
        gpu_metric: str = GPU_UTILIZATION,
        gpu_ratio_metric: str | None = GPU_ACTIVITY,
        max_pod_matcher_chars: int = DEFAULT_MAX_POD_MATCHER_CHARS,
        max_isolation_queries: int = DEFAULT_MAX_ISOLATION_QUERIES,
    ) -> None:
        """Query through `client` (its deadline and access). `scrape_interval_s` is the
        interval of the servers' scrape jobs. `max_age_s` defaults to three of them;
        `rate_window_s` to four, so that a rate spans several samples and survives one missed
        scrape. A pod's GPU utilisation is `gpu_ratio_metric` (0-1, read as percent) where it
        has that series, else `gpu_metric` (percent); None reads `gpu_metric` alone.
        """
        if not scrape_interval_s > 0:
            raise ValueError("scrape_interval_s must be > 0")
        self.max_age_s = 3 * scrape_interval_s if max_age_s is None else max_age_s
        self.rate_window_s = 4 * scrape_interval_s if rate_window_s is None else rate_window_s
        if not self.max_age_s > 0 or not self.rate_window_s >= 0.001:
            raise ValueError("max_age_s must be > 0 and rate_window_s >= 1 ms")
        _check_metric_name(gpu_metric)
        if gpu_ratio_metric is not None:
            _check_metric_name(gpu_ratio_metric)
        self.gpu_metric = gpu_metric
        self.gpu_ratio_metric = gpu_ratio_metric
        self.max_pod_matcher_chars = max_pod_matcher_chars
        self.max_isolation_queries = max_isolation_queries
        self.client = client
        """Shared with the health queries; its owner closes it."""
        self.queries_sent = 0
        """Queries this source sent since construction (each is one HTTP request)."""
        self.last_queries: tuple[str, ...] = ()
        """The PromQL of the last `sample`; empty when no pod was to be read."""
        self.rejected: dict[model.ServiceId, Rejected] = {}
        """Services whose metric names Prometheus refused in a query, queried apart."""
        # Records change only on informer events: what is read from one (its names checked,
        # its pods mapped to rows, the query text) is kept while the same records come back.
        self._targets: dict[model.ServiceId, tuple[ports.Workload, _Target | None]] = {}
        self._located: _Located | None = None
        self._plans: dict[tuple[int, ...], tuple[Sequence[_Target], _Plan]] = {}

    async def sample(
        self, workloads: Sequence[ports.Workload], now_s: float
    ) -> npt.NDArray[np.float64]:
        """One sample per workload and signal, NaN where no serving pod reported a fresh value.

        `now_s` is the loop's clock, not Unix time, so it is not sent: Prometheus evaluates at
        its own current time and judges freshness by the same clock it stamped the samples with.
        """
        values = np.full((len(workloads), len(model.Signal)), np.nan)
        located = self._locate(workloads)
        rows, targets = located.rows, located.targets
        sent: list[str] = []
        self.last_queries = ()
        if not rows:
            return values
        # Services gone, or with new metric names, get a new chance in the shared query.
        apart = {
            t.service
            for t in (targets if self.rejected else ())
            if (known := self.rejected.get(t.service)) is not None
            and known.metrics == t.serving.metrics
        }
        if len(apart) * len(model.Signal) > self.max_isolation_queries:
            # Too many to query apart: Prometheus itself is likely at fault. They rejoin the
            # shared query, whose bisection then runs out of budget and holds every service.
            apart = set()
        groups: list[Sequence[_Target]] = [targets]
        if apart:
            shared = [t for t in targets if t.service not in apart]
            groups = [shared] if shared else []
            groups += [[t] for t in targets if t.service in apart]
        budget = _Budget(self.max_isolation_queries - len(apart) * len(model.Signal))
        blamed: dict[model.ServiceId, Rejected] = {}
        plans = _Plans(self, self._plans, located)
        reads = [(signal, group) for group in groups for signal in model.Signal]
        answers = await asyncio.gather(
            *(
                self._read(
                    signal, group, budget, blamed, sent, plans, whole=len(group) == len(targets)
                )
                for signal, group in reads
            ),
            return_exceptions=True,
        )
        self.last_queries = tuple(sent)
        self._plans = plans.made
        # Every query has finished here, so nothing of a failed tick is still running.
        for answer in answers:
            if isinstance(answer, BaseException):
                raise answer
        for service, rejection in blamed.items():
            if service not in self.rejected:
                log.warning(
                    "metrics.query_rejected",
                    service=service,
                    signal=rejection.signal.name.lower(),
                    error=rejection.error,
                )
        for service in apart - set(blamed):
            log.info("metrics.query_accepted", service=service)
        self.rejected = blamed
        by_signal: dict[model.Signal, list[Any]] = {}
        for (signal, _), answer in zip(reads, answers, strict=True):
            if isinstance(answer, list):
                by_signal.setdefault(signal, []).extend(answer)
        for signal, answer in by_signal.items():
            if signal in model.LATENCY_SIGNALS:
                _fill_quantile(values[:, signal], answer, rows, QUANTILE)
            else:
                mean = signal in model.MEAN_SIGNALS
                _fill(values[:, signal], answer, rows, mean=mean, slot=signal)
        return values

    def _locate(self, workloads: Sequence[ports.Workload]) -> _Located:
        """Each serving pod's row, and the services' pods with invalid names left out.

        Records change only on informer events. A tick whose records all come back unchanged
        (by identity) reuses the last answer whole; one whose records are the same services in
        the same order patches the rows of the records that changed, and only where what they
        read changed (their pods, names or metrics); any other builds it anew.
        """
        last = self._located
        if last is not None and len(last.workloads) == len(workloads):
            changed = ports.rebuilt_rows(last.workloads, workloads)
            if not changed:
                return last
            before = last.workloads
            if all(before[row].id == workloads[row].id for row in changed):
                self._located = last.patched(workloads, changed, self._target_for)
                return self._located
        known = self._targets
        rows = _Rows()
        by_row: list[_Target | None] = []
        for row, workload in enumerate(workloads):
            target = self._target_for(workload)
            by_row.append(target)
            if target is not None:
                for pod in target.pods:
                    rows.add(pod, row)
        if len(known) > len(workloads):  # every present service is known: others are gone
            present = {w.id for w in workloads}
            for gone in [service for service in known if service not in present]:
                del known[gone]
        self._located = _Located(tuple(workloads), rows, by_row)
        return self._located

    def _target_for(self, workload: ports.Workload) -> _Target | None:
        """What the queries read of `workload`, kept from its last record while that one
        reads the same pods, names and metrics (a record made again for a change of its
        counts): the target is then the same object, and so is every plan that holds it."""
        known = self._targets
        entry = known.get(workload.id)
        if entry is None:
            entry = known[workload.id] = (workload, _target_of(workload))
        elif entry[0] is not workload:
            if not _reads_the_same(entry[0], workload):
                entry = (workload, _target_of(workload))
            known[workload.id] = (workload, entry[1])
        return entry[1]

    async def _read(
        self,
        signal: model.Signal,
        group: Sequence[_Target],
        budget: _Budget,
        blamed: dict[model.ServiceId, Rejected],
        sent: list[str],
        plans: _Plans,
        *,
        whole: bool = False,
    ) -> list[Any]:
        """The answer to `signal` for `group`'s pods, bisecting the group while Prometheus
        refuses its query; the services that alone break it go to `blamed`. A latency
        percentile's answer is (pod key, bucket bound, value) samples; any other is one
        `PodSamples` per group asked (two once bisected, and so on). `whole` says the group
        is every service of the tick.
        """
        plan = plans.of(group)
        promql = plan.queries.get(signal)
        if promql is None:
            return []
        sent.append(promql)
        self.queries_sent += 1
        # A namespace-wide query also answers for pods of services outside the group. Those
        # of no service at all `sample` leaves out by itself: a group of every service needs
        # no more.
        try:
            if signal in model.LATENCY_SIGNALS:
                series = await self.client.query(signal.name.lower(), promql)
                return _buckets(series, plan.pods)
            samples = await self.client.query_per_pod(signal.name.lower(), promql)
            return [samples if whole else samples.among(plan.pods)]
        except QueryRejected as e:
            refused = e
        if len(group) == 1:
            (target,) = group
            blamed[target.service] = Rejected(target.serving.metrics, signal, str(refused))
            return []
        if not budget.take(2):
            raise refused
        half = len(group) // 2
        parts = await asyncio.gather(
            self._read(signal, group[:half], budget, blamed, sent, plans),
            self._read(signal, group[half:], budget, blamed, sent, plans),
            return_exceptions=True,
        )
        for part in parts:
            if isinstance(part, BaseException):
                raise part
        return [item for part in parts if isinstance(part, list) for item in part]


class _Plan:
    """What one tick asks Prometheus for one group of services: a query per signal, and the
    pods the answers may name."""

    __slots__ = ("_group", "_pods", "queries")

    def __init__(self, queries: dict[model.Signal, str], group: Sequence[_Target]) -> None:
        self.queries = queries
        self._group = group
        self._pods: frozenset[_PodKey] | None = None

    @property
    def pods(self) -> frozenset[_PodKey]:
        """Made when first asked: an answer for every service of the tick is not filtered."""
        if self._pods is None:
            self._pods = frozenset(itertools.chain.from_iterable(t.pods for t in self._group))
        return self._pods


class _Plans:
    """The plans of one tick, each made once per group however many signals read it (a
    bisected half is a group of its own), and taken from the last tick's when a group holds
    the very same targets (no record changed)."""

    def __init__(
        self,
        source: MetricsSource,
        last: Mapping[tuple[int, ...], tuple[Sequence[_Target], _Plan]],
        located: _Located | None = None,
    ) -> None:
        self._source = source
        self._last = last
        self._located = located
        self.made: dict[tuple[int, ...], tuple[Sequence[_Target], _Plan]] = {}
        """This tick's plans by the identities of their targets (the targets kept, so that
        no identity is reused while they are)."""
        self._asked: dict[int, tuple[Sequence[_Target], _Plan]] = {}
        """The same by the identity of the group itself (kept likewise): every signal reads
        the same group, and 10,000 identities need not be looked at for each."""

    def of(self, group: Sequence[_Target]) -> _Plan:
        asked = self._asked.get(id(group))
        if asked is not None and asked[0] is group:
            return asked[1]
        plan = self._made_for(group)
        self._asked[id(group)] = (group, plan)
        return plan

    def _made_for(self, group: Sequence[_Target]) -> _Plan:
        key = tuple(map(id, group))
        found = self.made.get(key) or self._last.get(key)
        if found is not None and all(map(operator.is_, found[0], group)):
            self.made[key] = found
            return found[1]
        s = self._source
        located = self._located
        if located is not None and group is located.targets:
            # Every service of the tick: made from the groups kept up record by record.
            queries = _render(
                located.groups(),
                rate_window_s=s.rate_window_s,
                max_age_s=s.max_age_s,
                gpu_metric=s.gpu_metric,
                gpu_ratio_metric=s.gpu_ratio_metric,
                max_pod_matcher_chars=s.max_pod_matcher_chars,
            )
        else:
            queries = build_queries(
                [t.serving for t in group],
                names_checked=True,
                rate_window_s=s.rate_window_s,
                max_age_s=s.max_age_s,
                gpu_metric=s.gpu_metric,
                gpu_ratio_metric=s.gpu_ratio_metric,
                max_pod_matcher_chars=s.max_pod_matcher_chars,
            )
        plan = _Plan(queries, group)
        self.made[key] = (group, plan)
        return plan


def _reads_the_same(a: ports.Workload, b: ports.Workload) -> bool:
    return (
        a.namespace == b.namespace
        and a.metrics == b.metrics
        and a.pods == b.pods
        and a.policy.llm_signals == b.policy.llm_signals
    )


def _target_of(workload: ports.Workload) -> _Target | None:
    """What the metrics read of one record: None when it names no metrics, no pods or a bad
    namespace; pods whose names are not valid are left out, with a warning naming them."""
    if workload.metrics is None or not workload.pods:
        return None
    serving = ServingPods(
        workload.namespace, workload.pods, workload.metrics, workload.policy.llm_signals
    )
    if not is_namespace(serving.namespace):
        log.warning("metrics.service_skipped", service=workload.id, reason="bad namespace")
        return None
    pods = frozenset(p for p in serving.pods if is_pod_name(p))
    if rejected := serving.pods - pods:
        log.warning("metrics.pods_skipped", service=workload.id, pods=sorted(rejected))
        serving = dataclasses.replace(serving, pods=pods)
    if not pods:
        return None
    # In name order: a record made again with the same pods, whose set iterates in another
    # order, reads as the same target.
    keys = tuple(pod_key(serving.namespace, pod) for pod in sorted(pods))
    return _Target(workload.id, serving, keys)


_Indices = npt.NDArray[np.intp]


class _Rows:
    """Each serving pod's row, by its key: one row for nearly every pod, a list where services
    share one."""

    __slots__ = ("_located", "more", "one")

    def __init__(self) -> None:
        self.one: dict[_PodKey, int] = {}
        self.more: dict[_PodKey, list[int]] = {}
        self._located: dict[object, tuple[tuple[_PodKey, ...], _Indices, _Indices]] = {}

    def add(self, pod: _PodKey, row: int) -> None:
        first = self.one.setdefault(pod, row)
        if first != row:
            self.more.setdefault(pod, []).append(row)

    def remove(self, pod: _PodKey, row: int) -> None:
        """Undo `add(pod, row)`."""
        if self.one[pod] == row:
            if pod not in self.more:
                del self.one[pod]
                return
            self.one[pod] = self.more[pod].pop(0)
        else:
            self.more[pod].remove(row)
        if not self.more[pod]:
            del self.more[pod]

    def forget_answers(self) -> None:
        """Drop the rows remembered of the last answers (`locate`): some pod's rows moved."""
        self._located.clear()

    def of(self, pod: _PodKey) -> list[int]:
        """The pod's rows; none for a pod of no service."""
        first = self.one.get(pod)
        if first is None:
            return []
        return [first, *self.more.get(pod, ())]

    def locate(
        self, pods: tuple[_PodKey, ...], *, slot: object = None
    ) -> tuple[_Indices, _Indices]:
        """(at, rows): `pods[at[i]]` is a pod of row `rows[i]`, once per row of each pod,
        ordered by `at`; pods of no service are left out. Both are read-only.

        The last answer of each `slot` (a signal) is remembered: Prometheus lists the series
        of an answer in the same order tick after tick while they stay the same, and comparing
        the pods with the last ones costs less than looking each up again.
        """
        last = self._located.get(slot)
        if last is not None and last[0] == pods:
            return last[1], last[2]
        count = len(pods)
        first = np.fromiter(map(self.one.get, pods, itertools.repeat(-1)), np.intp, count)
        at = np.flatnonzero(first >= 0)
        rows = first[at]
        more = self.more
        if more:  # services sharing a pod: rare, so only their pods go through Python
            shared = np.flatnonzero(np.fromiter(map(more.__contains__, pods), bool, count))
            extra = [(i, row) for i in shared.tolist() for row in more[pods[i]]]
            if extra:
                more_at, more_rows = np.array(extra, dtype=np.intp).T
                at = np.concatenate([at, more_at])
                rows = np.concatenate([rows, more_rows])
                # In the answer's order, so each row adds its pods up as the answer lists them.
                order = np.argsort(at, kind="stable")
                at, rows = at[order], rows[order]
        at.flags.writeable = rows.flags.writeable = False  # shared with the next ticks
        self._located[slot] = (pods, at, rows)
        return at, rows


class _Located:
    """The services of one call to `sample` as the queries read them: the records, each
    serving pod's rows, and each row's target (None for a record read for nothing)."""

    __slots__ = ("_index", "by_row", "rows", "targets", "workloads")

    def __init__(
        self,
        workloads: tuple[ports.Workload, ...],
        rows: _Rows,
        by_row: list[_Target | None],
        targets: list[_Target] | None = None,
        index: _QueryIndex | None = None,
    ) -> None:
        self.workloads = workloads
        self.rows = rows
        self.by_row = by_row
        self.targets = [t for t in by_row if t is not None] if targets is None else targets
        """The targets in row order."""
        self._index = index

    def groups(self) -> _Groups:
        """The targets grouped as `build_queries` groups them; counted when first asked, then
        kept up by `patched`."""
        if self._index is None:
            self._index = _QueryIndex(t.serving for t in self.targets)
        return self._index.groups()

    def patched(
        self,
        workloads: Sequence[ports.Workload],
        changed: Iterable[int],
        target_of: Callable[[ports.Workload], _Target | None],
    ) -> _Located:
        """These services with the records of rows `changed` (the same services) replaced:
        the rows of the pods of a record whose target changed are moved, the rest kept, and so
        are the groups of its queries. The rows and groups are shared with the result, which
        this one must not be used after."""
        rows, by_row, index = self.rows, self.by_row, self._index
        moved = False
        for row in changed:
            target = target_of(workloads[row])
            was = by_row[row]
            if target is was:
                continue
            moved = True
            if was is not None:
                for pod in was.pods:
                    rows.remove(pod, row)
                if index is not None:
                    index.add(was.serving, -1)
            if target is not None:
                for pod in target.pods:
                    rows.add(pod, row)
                if index is not None:
                    index.add(target.serving, 1)
            by_row[row] = target
        if not moved:  # the very targets: the plans that hold them stay
            return _Located(tuple(workloads), rows, by_row, self.targets, index)
        rows.forget_answers()
        return _Located(tuple(workloads), rows, by_row, index=index)


def build_queries(
    targets: Iterable[ServingPods],
    *,
    rate_window_s: float,
    max_age_s: float,
    gpu_metric: str = GPU_UTILIZATION,
    gpu_ratio_metric: str | None = GPU_ACTIVITY,
    max_pod_matcher_chars: int = DEFAULT_MAX_POD_MATCHER_CHARS,
    names_checked: bool = False,
) -> dict[model.Signal, str]:
    """The PromQL for one tick: one query per signal, covering every pod of `targets`.

    Services whose servers export different metric names share the query, one `or` branch per
    name; a signal that no service names a metric for gets no query (its column stays NaN).
    Raises `ValueError` for a metric, namespace or pod name that is not valid: such text never
    reaches PromQL. `names_checked` says the namespaces and pods were checked already (the
    metrics source checks each record's once); metric names are checked all the same.
    """
    targets_list = list(targets)
    if not names_checked:
        for serving in targets_list:
            _check_names(serving)
    return _render(
        _QueryIndex(targets_list).groups(),
        rate_window_s=rate_window_s,
        max_age_s=max_age_s,
        gpu_metric=gpu_metric,
        gpu_ratio_metric=gpu_ratio_metric,
        max_pod_matcher_chars=max_pod_matcher_chars,
    )


@dataclass(frozen=True, slots=True)
class _Groups:
    """The services of one query plan grouped as its queries read them: by the name of each
    signal's metric (a token signal's only for the services that set its target), and all of
    them for the GPU's."""

    requests: Mapping[str, _Tally]
    queue: Mapping[str, _Tally]
    tokens: Mapping[model.Signal, Mapping[str, _Tally]]
    everyone: _Tally


_TOKEN_NAMES: Final[Mapping[model.Signal, Callable[[MetricNames], tuple[str, ...]]]] = {
    model.Signal.KV_CACHE: lambda m: m.kv_cache,
    model.Signal.TOKENS: lambda m: m.generation_tokens,
    model.Signal.PROMPT_TOKENS: lambda m: m.prompt_tokens,
    model.Signal.TTFT: lambda m: m.ttft,
    model.Signal.TPOT: lambda m: m.tpot,
}
"""The names each token signal reads of a server's metrics (one per version of the server)."""


def _render(
    groups: _Groups,
    *,
    rate_window_s: float,
    max_age_s: float,
    gpu_metric: str,
    gpu_ratio_metric: str | None,
    max_pod_matcher_chars: int,
) -> dict[model.Signal, str]:
    """The queries of `build_queries` for its targets grouped as `groups`."""
    if groups.everyone.empty:
        return {}
    window = _duration(rate_window_s)
    age = f"{max_age_s:g}"
    loads = []
    for name, pods in sorted(groups.requests.items()):
        sel = _selector(name, pods.matchers(max_pod_matcher_chars))
        loads.append(f"sum by (namespace, pod) ({_fresh(f'rate({sel}[{window}])', sel, age)})")
    queues = []
    for name, pods in sorted(groups.queue.items()):
        sel = _selector(name, pods.matchers(max_pod_matcher_chars))
        queues.append(f"sum by (namespace, pod) ({_fresh(sel, sel, age)})")
    queries: dict[model.Signal, str] = {}
    if loads:
        queries[model.Signal.LOAD] = " or ".join(loads)
    if queues:
        queries[model.Signal.SATURATION] = " or ".join(queues)
    queries.update(_token_queries(groups.tokens, window, age, max_pod_matcher_chars))
    percent = _gpu_query(gpu_metric, groups.everyone, age, max_pod_matcher_chars)
    if gpu_ratio_metric is None:
        queries[model.Signal.CAPACITY] = percent
    else:
        # Both are averaged per pod first, so `or` compares {namespace, pod} alone: a pod with
        # the ratio (MIG instances have nothing else) reads it, any other pod the percent.
        ratio = _gpu_query(
            gpu_ratio_metric, groups.everyone, age, max_pod_matcher_chars, scale=100.0
        )
        queries[model.Signal.CAPACITY] = f"{ratio} or {percent}"
    return queries


QUANTILE: Final = 0.95
"""The percentile of the TTFT and TPOT signals."""


def _token_queries(
    tokens: Mapping[model.Signal, Mapping[str, _Tally]],
    window: str,
    age: str,
    max_pod_matcher_chars: int,
) -> dict[model.Signal, str]:
    """One query per token signal over every service that sets its target and whose server
    exports it (`tokens`: by signal, then by name): a fleet where no service sets one sends
    none of these queries.

    KV-cache usage is the gauge per pod; TOKENS the rate of the generation counter per pod,
    PROMPT_TOKENS the prompt counter's; TTFT and TPOT the rate of each bucket per pod (`le`
    kept), so that `sample` adds up a service's buckets and takes the percentile of the sum:
    a service's P95, not a mean of its pods' P95s, from a query shared by every service.
    """
    if not tokens:
        return {}

    def grouped(signal: model.Signal) -> list[tuple[str, _Tally]]:
        return sorted(tokens.get(signal, {}).items(), key=operator.itemgetter(0))

    def selector(name: str, pods: _Tally) -> str:
        return _selector(name, pods.matchers(max_pod_matcher_chars))

    def rates(signal: model.Signal) -> str:
        parts = []
        for name, pods in grouped(signal):
            sel = selector(name, pods)
            parts.append(f"sum by (namespace, pod) ({_fresh(f'rate({sel}[{window}])', sel, age)})")
        return " or ".join(parts)

    def buckets(signal: model.Signal) -> str:
        parts = []
        for name, pods in grouped(signal):
            sel = selector(f"{name}_bucket", pods)
            fresh = _fresh(f"rate({sel}[{window}])", sel, age)
            parts.append(f"sum by (namespace, pod, le) ({fresh})")
        return " or ".join(parts)

    queries: dict[model.Signal, str] = {}
    kv = [
        f"avg by (namespace, pod) ({_fresh(sel, sel, age)})"
        for name, pods in grouped(model.Signal.KV_CACHE)
        for sel in (selector(name, pods),)
    ]
    if kv:
        queries[model.Signal.KV_CACHE] = " or ".join(kv)
    # A server reads its token rate only when it exports both counters (the contract refuses
    # a tokens target otherwise), so a service has both columns or neither.
    if generation := rates(model.Signal.TOKENS):
        queries[model.Signal.TOKENS] = generation
    if prompt := rates(model.Signal.PROMPT_TOKENS):
        queries[model.Signal.PROMPT_TOKENS] = prompt
    if ttft := buckets(model.Signal.TTFT):
        queries[model.Signal.TTFT] = ttft
    if tpot := buckets(model.Signal.TPOT):
        queries[model.Signal.TPOT] = tpot
    return queries


def _gpu_query(
    metric: str, pods: _Tally, age: str, max_pod_matcher_chars: int, *, scale: float = 1.0
) -> str:
    """Mean GPU utilisation per pod (times `scale`), wherever the exporter put the pod's name.

    dcgm-exporter labels a GPU's series with the `namespace` and `pod` using it. Scraped with
    `honor_labels: true` they stay so; without it, Prometheus renames them `exported_namespace`
    and `exported_pod` (and `namespace`/`pod` name the exporter itself). Both are read, the
    renamed ones copied back to `namespace`/`pod` so the two kinds average together.
    """
    own = _selector(metric, [*pods.matchers(max_pod_matcher_chars), 'exported_pod=""'])
    renamed = _selector(
        metric, pods.matchers(max_pod_matcher_chars, "exported_namespace", "exported_pod")
    )
    moved = (
        f"label_replace(label_replace({_fresh(renamed, renamed, age)}, "
        f'"namespace", "$1", "exported_namespace", "(.+)"), "pod", "$1", "exported_pod", "(.+)")'
    )
    mean = f"avg by (namespace, pod) (({_fresh(own, own, age)}) or {moved})"
    return mean if scale == 1.0 else f"({scale:g} * {mean})"


def _fresh(vector: str, selector: str, age: str) -> str:
    """`vector` where the newest sample of `selector` is at most `age` seconds old."""
    return f"{vector} and (time() - timestamp({selector})) <= {age}"


class _Tally:
    """The namespaces and pod names of the services read through one metric name, kept up as
    services join and leave one at a time (`add`), their namespaces and pod names counted."""

    __slots__ = ("_chars", "_literals", "_namespaces", "_pods", "servings")

    def __init__(self) -> None:
        self.servings = 0
        """The services counted in."""
        self._namespaces: dict[str, int] = {}
        self._pods: dict[str, int] = {}
        self._chars = 0
        """Each pod name counted once, with a separator: a bound of the pods' regex literal's
        length (quoting only lengthens it), so a fleet's thousands of pods are not quoted for a
        matcher that would be dropped."""
        self._literals: dict[int, str | None] = {}

    def add(self, serving: ServingPods, sign: int) -> None:
        """Count `serving` in (`sign` 1) or out (-1, one that was counted in)."""
        self.servings += sign
        self._literals.clear()
        _count(self._namespaces, serving.namespace, sign)
        pods = self._pods
        for pod in serving.pods:
            if _count(pods, pod, sign):
                self._chars += sign * (len(pod) + 1)

    @property
    def namespaces(self) -> Collection[str]:
        return self._namespaces.keys()

    @property
    def empty(self) -> bool:
        return not self._pods

    def matchers(
        self, max_pod_matcher_chars: int, namespace_label: str = "namespace", pod_label: str = "pod"
    ) -> list[str]:
        """Label matchers for these pods; by namespace alone when the pod list is too long.

        A namespace-only query returns pods of the same namespaces that serve nothing, and
        pods of one service's name in another's namespace; `sample` drops them as it maps pods
        to services.
        """
        matchers = [f"{namespace_label}=~{regex_literal(self._namespaces)}"]
        if (pods := self._pod_literal(max_pod_matcher_chars)) is not None:
            matchers.append(f"{pod_label}=~{pods}")
        return matchers

    def _pod_literal(self, max_chars: int) -> str | None:
        if max_chars not in self._literals:
            literal = None if self._chars > max_chars else regex_literal(self._pods)
            fits = literal is not None and len(literal) <= max_chars
            self._literals[max_chars] = literal if fits else None
        return self._literals[max_chars]


def _count(counts: dict[str, int], key: str, sign: int) -> bool:
    """Add `sign` to the count of `key`, dropped at zero; whether it came or went."""
    now = counts.get(key, 0) + sign
    if now:
        counts[key] = now
    else:
        del counts[key]
    return now == (1 if sign > 0 else 0)


class _QueryIndex:
    """The services of a tick grouped as `build_queries` groups them, kept up as records change
    one at a time: the queries are then made from the groups' counts, in time that does not
    grow with the services (at 10,000 of them, some record's pods change most ticks)."""

    __slots__ = ("everyone", "queue", "requests", "tokens")

    def __init__(self, servings: Iterable[ServingPods] = ()) -> None:
        self.requests: dict[str, _Tally] = {}
        self.queue: dict[str, _Tally] = {}
        self.tokens: dict[model.Signal, dict[str, _Tally]] = {}
        self.everyone = _Tally()
        for serving in servings:
            self.add(serving, 1)

    def add(self, serving: ServingPods, sign: int) -> None:
        """Count `serving` in (`sign` 1) or out (-1, one that was counted in)."""
        metrics = serving.metrics
        if (name := metrics.requests) is not None:
            _tally(self.requests, name, serving, sign)
        if (name := metrics.queue) is not None:
            _tally(self.queue, name, serving, sign)
        for signal in serving.llm_signals:
            names_of = _TOKEN_NAMES.get(signal)
            for name in () if names_of is None else names_of(metrics):
                by_name = self.tokens.setdefault(signal, {})
                _tally(by_name, name, serving, sign)
                if not by_name:
                    del self.tokens[signal]
        self.everyone.add(serving, sign)

    def groups(self) -> _Groups:
        return _Groups(self.requests, self.queue, self.tokens, self.everyone)


def _tally(tallies: dict[str, _Tally], name: str, serving: ServingPods, sign: int) -> None:
    tally = tallies.get(name)
    if tally is None:
        tally = tallies[name] = _Tally()
    tally.add(serving, sign)
    if not tally.servings:
        del tallies[name]


def _selector(metric: str, matchers: Sequence[str]) -> str:
    _check_metric_name(metric)
    return f"{metric}{{{','.join(matchers)}}}"


def regex_literal(values: Collection[str]) -> str:
    """A PromQL string holding a regex that matches exactly `values` (label regexes are anchored).

    Each value is quoted as Go's `regexp.QuoteMeta` does (RE2's metacharacters escaped), and the
    alternation is written as a JSON string, whose escapes are a subset of the Go escapes that
    PromQL strings take.
    """
    quoted = (v.translate(_RE2_QUOTED) for v in sorted(values))
    return json.dumps("|".join(quoted), ensure_ascii=True)


def _duration(seconds: float) -> str:
    ms = round(seconds * 1000)
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def _fill(
    column: npt.NDArray[np.float64],
    answers: Sequence[PodSamples],
    rows: _Rows,
    *,
    mean: bool,
    slot: object = None,
) -> None:
    """Write each row's sum (or mean) over its reporting pods, added up in the answers' order;
    rows without one stay NaN. `slot` names the answers for `_Rows.locate`."""
    samples = PodSamples.joined(answers)
    at, index = rows.locate(samples.pods, slot=slot)
    weights = samples.values[at]
    if not bool(np.isfinite(weights).all()):  # a NaN or infinite sample is missing data
        finite = np.isfinite(weights)
        index, weights = index[finite], weights[finite]
    total = np.bincount(index, weights=weights, minlength=len(column))
    count = np.bincount(index, minlength=len(column))
    reported = count > 0
    column[reported] = total[reported] / count[reported] if mean else total[reported]


def _fill_quantile(
    column: npt.NDArray[np.float64],
    samples: Sequence[tuple[_PodKey, float, float]],
    rows: _Rows,
    quantile: float,
) -> None:
    """Write each row's `quantile` of the bucket rates of its pods added up, from (pod, bucket
    bound, rate) samples; rows with no bucket, or no observation in the window, stay NaN."""
    buckets: dict[int, dict[float, float]] = {}
    for pod, bound, value in samples:
        if not math.isfinite(value):  # missing data
            continue
        for row in rows.of(pod):
            by_bound = buckets.setdefault(row, {})
            by_bound[bound] = by_bound.get(bound, 0.0) + value
    for row, by_bound in buckets.items():
        column[row] = histogram_quantile(quantile, by_bound)


def histogram_quantile(quantile: float, cumulative: Mapping[float, float]) -> float:
    """Prometheus's `histogram_quantile` over cumulative bucket counts by upper bound: linear
    within the bucket the rank falls in (from 0 for the first), the highest finite bound when
    it falls in the `+Inf` bucket; NaN without a `+Inf` bucket or with no observation."""
    bounds = sorted(cumulative)
    if not bounds or bounds[-1] != math.inf:
        return math.nan
    total = cumulative[math.inf]
    if not total > 0:
        return math.nan
    rank = quantile * total
    below_bound, below_count = 0.0, 0.0
    for bound in bounds:
        count = cumulative[bound]
        if count >= rank:
            if bound == math.inf:
                return below_bound
            if count <= below_count:
                return bound
            return below_bound + (bound - below_bound) * (rank - below_count) / (
                count - below_count
            )
        below_bound, below_count = bound, count
    return below_bound


_VECTOR_START: Final = '{"status":"success","data":{"resultType":"vector","result":['
_SERIES_LABELS: Final = (
    r'\{"metric":\{"namespace":"([a-z0-9.-]*+","pod":"[a-z0-9.-]*+)"\},"value":\['
)
_SERIES_VALUE: Final = r',"([0-9A-Za-z.+-]*+)"\]\}'
_JSON_NUMBER: Final = r"-?+(?:0|[1-9][0-9]*+)(?:\.[0-9]++)?+(?:[eE][+-]?+[0-9]++)?+"
_PER_POD_SERIES: Final = re.compile(_SERIES_LABELS + _JSON_NUMBER + _SERIES_VALUE)
"""One series of an instant vector grouped `by (namespace, pod)` as Prometheus writes it:
compact, labels in name order, Kubernetes names (never escaped in JSON), the time a JSON number
and the value a float's text (Go's `strconv` writes digits, `.`, `e`, signs, `NaN` and `Inf`).
Its group 1 is the pod's key (`pod_key`), its group 2 the value. Possessive: no part of it
gives back what it matched, which no match needs (each part stops at a character it cannot
take), so a failed match is not tried again shorter."""
_FIRST_TIME: Final = re.compile(_SERIES_LABELS + f"({_JSON_NUMBER}),")
"""The time of the first series of an answer, its group 2 (group 1 is its pod's key)."""


@functools.lru_cache(maxsize=4)
def _series_at(time: str) -> re.Pattern[str]:
    """`_PER_POD_SERIES` with the time `time` (a JSON number's text) alone: Prometheus stamps
    every series of an instant vector with the time it evaluated the query at, and a literal
    is matched in about three quarters of the time the number's grammar takes."""
    return re.compile(_SERIES_LABELS + re.escape(time) + _SERIES_VALUE)


_VECTOR_END: Final = re.compile(r'\]\}(?:,"warnings":\[[^\]]*\])?(?:,"infos":\[[^\]]*\])?\}')
"""What follows the series of an answer: the end of its data, and the warnings and the info
notes Prometheus may add (an info for a `rate` over a name it takes for no counter)."""
_VECTOR_PLAIN_END: Final = "]}}"
"""The usual `_VECTOR_END`: no warning, no info."""


@dataclass(frozen=True, slots=True, eq=False)
class PodSamples:
    """The series of an instant vector grouped by pod: series `i` is of pod `pods[i]` (see
    `pod_key`) and reads `values[i]`, NaN and infinite values included."""

    pods: tuple[_PodKey, ...]
    values: npt.NDArray[np.float64]

    def among(self, pods: Collection[_PodKey]) -> PodSamples:
        """These samples without the series of pods outside `pods`."""
        kept = np.fromiter(map(pods.__contains__, self.pods), bool, len(self.pods))
        if bool(kept.all()):
            return self
        return PodSamples(tuple(itertools.compress(self.pods, kept)), self.values[kept])

    @staticmethod
    def joined(parts: Sequence[PodSamples]) -> PodSamples:
        """The series of every part, in order."""
        if len(parts) == 1:
            return parts[0]
        pods = tuple(itertools.chain.from_iterable(part.pods for part in parts))
        return PodSamples(pods, np.concatenate([np.empty(0), *(part.values for part in parts)]))


def _floats(texts: list[str]) -> npt.NDArray[np.float64]:
    """Each text read by `float`, as the JSON path reads a value; raises `ValueError`."""
    return np.fromiter(map(float, texts), np.float64, len(texts))


class _LastValues:
    """The value texts of the last answer to one kind of query, and what they read.

    Between two scrapes of a target its series keep their values: a gauge's, and a rate's
    while the samples in its window stay the same. Prometheus lists an answer's series in the
    same order tick after tick, so most values have the text of the same series in the last
    answer; those are not read again (a text reads one float wherever it is), the rest are.
    """

    __slots__ = ("texts", "values")

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.values: npt.NDArray[np.float64] = np.empty(0)

    def read(self, texts: list[str]) -> npt.NDArray[np.float64]:
        """What `_floats(texts)` reads, bit for bit (read-only); raises as it does."""
        count = len(texts)
        if count and count == len(self.texts):
            same = np.fromiter(map(operator.eq, texts, self.texts), bool, count)
            if bool(same.all()):
                values = self.values
            else:
                values = self.values.copy()
                new = np.flatnonzero(~same).tolist()
                values[new] = _floats([texts[i] for i in new])
        else:
            values = _floats(texts)
        values.flags.writeable = False  # shared with the next answers
        self.texts, self.values = texts, values
        return values


def _scan_per_pod(
    body: bytes, read: Callable[[list[str]], npt.NDArray[np.float64]] = _floats
) -> PodSamples | None:
    """The samples of a successful answer made only of series of the shape `_PER_POD_SERIES`
    matches, one after the other; None when any part of it is anything else, for the JSON
    decoder to read (and judge).

    The series split the answer into what comes before the first (the start of a successful
    vector), what lies between two (a comma), and what follows the last (`_VECTOR_END`): the
    scan reads exactly the answers that are these pieces, which the decoder reads the same.
    Each value is read by `float`, as the decoder's reader does, through `read` (a
    `_LastValues.read` that reads only the values whose text changed).
    """
    try:
        text = body.decode()
    except UnicodeDecodeError:
        return None
    if not text.startswith(_VECTOR_START):
        return None
    first = _FIRST_TIME.match(text, len(_VECTOR_START))
    pieces = _series_at(first[2]).split(text) if first else None
    if pieces is None or not _series_only(pieces, text):  # not every series at one time
        pieces = _PER_POD_SERIES.split(text)
        if not _series_only(pieces, text):
            return None
    pods, values = pieces[1::3], pieces[2::3]
    try:
        floats = read(values)
    except ValueError:  # a value that is not a number: for the decoder to report
        return None
    return PodSamples(tuple(pods), floats)


def _series_only(pieces: list[str], text: str) -> bool:
    """Whether an answer's `text`, split on its series into `pieces` (before, pod, value,
    between, pod, value, between, ..., pod, value, after), is made of those series alone: the
    start of a successful vector before them, one comma between two, and its end after."""
    if len(pieces) > 1:
        between = pieces[3:-1:3]
        if pieces[0] != _VECTOR_START or between.count(",") != len(between):
            return False
        after = pieces[-1]
    else:
        after = text[len(_VECTOR_START) :]
    return after == _VECTOR_PLAIN_END or _is_vector_end(after)


def _is_vector_end(after: str) -> bool:
    """Whether `after` ends a vector's answer as `_VECTOR_END` does, warnings included."""
    if _VECTOR_END.fullmatch(after) is None:
        return False
    try:  # the warnings' text is JSON strings, escapes and all
        json.loads(_VECTOR_START + after)
    except ValueError:
        return False
    return True


def _sample(item: Any) -> tuple[Mapping[str, Any], float]:
    """The labels and the value of one series of an instant vector, NaN and infinite values
    included; a malformed series raises `ObservationError` naming it.

    Every reader of a decoded answer goes through here; `_scan_per_pod` is the same reading of
    the usual per-pod answer done on its bytes.
    """
    try:
        labels = item["metric"]
        value = float(item["value"][1])
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise errors.ObservationError(f"Prometheus sample malformed: {item!r:.200}") from e
    if not isinstance(labels, dict):
        raise errors.ObservationError(f"Prometheus sample malformed: {item!r:.200}")
    return labels, value


def _pod_sample(item: Any) -> tuple[_PodKey, float]:
    """The pod's key (its namespace and name, empty where a label is absent) and the value of
    one series."""
    labels, value = _sample(item)
    return pod_key(str(labels.get("namespace", "")), str(labels.get("pod", ""))), value


def _per_pod(series: Iterable[Any]) -> PodSamples:
    """The samples of a decoded answer, as `_scan_per_pod` reads its bytes: NaN and infinite
    values included (the callers leave them out)."""
    read = [_pod_sample(item) for item in series]
    return PodSamples(tuple(pod for pod, _ in read), np.array([v for _, v in read], np.float64))


def _buckets(
    series: Iterable[Any], pods: Collection[_PodKey]
) -> list[tuple[_PodKey, float, float]]:
    """(pod key, bucket bound, value) of each series of a per-pod histogram answer whose pod is
    in `pods`; a malformed series raises `ObservationError` (its bound only when its pod is
    read)."""
    found: list[tuple[_PodKey, float, float]] = []
    for item in series:
        pod, value = _pod_sample(item)
        if pod not in pods:
            continue
        try:
            bound = float(item["metric"]["le"])
        except (KeyError, TypeError, ValueError) as e:
            raise errors.ObservationError(f"Prometheus bucket malformed: {item!r:.200}") from e
        found.append((pod, bound, value))
    return found


def _brief(e: Exception) -> str:
    return f"{type(e).__name__}: {str(e)[:300]}"


# -- GPU health (docs/operations.md, "GPU health") -----------------------------------------------

XID_ERRORS: Final = "DCGM_FI_DEV_XID_ERRORS"
"""DCGM exporter's gauge of the last XID error code a card reported (0: none)."""
FB_USED: Final = "DCGM_FI_DEV_FB_USED"
"""DCGM exporter's framebuffer memory in use, MiB."""
FB_FREE: Final = "DCGM_FI_DEV_FB_FREE"
"""DCGM exporter's framebuffer memory free, MiB."""
NODE_LABEL: Final = "Hostname"
"""The label dcgm-exporter puts the node's name in (the GPU Operator sets it to the node name)."""
MEMORY_STEPS: Final = 10
"""Points of the memory rule's subquery: the window is read at this many evenly spaced steps,
and a card counts as full only if it was full at every one of them."""
_LABEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RULE_LABEL: Final = "autoscaler_rule"
"""Marks each series of the one health query with the rule it answers."""
_NODE: Final = "autoscaler_node"


@dataclasses.dataclass(frozen=True, slots=True)
class GpuHealthNames:
    """The DCGM series and node label the GPU health query reads (settings
    `AUTOSCALER_PROMETHEUS__GPU_*`)."""

    xid_errors: str = XID_ERRORS
    fb_used: str = FB_USED
    fb_free: str = FB_FREE
    node_label: str = NODE_LABEL

    def __post_init__(self) -> None:
        for name in (self.xid_errors, self.fb_used, self.fb_free):
            _check_metric_name(name)
        if not _LABEL_NAME.fullmatch(self.node_label):
            raise ValueError(f"not a Prometheus label name: {self.node_label!r}")


def gpu_health_query(
    names: GpuHealthNames, rules: gpuhealth.Rules, *, scrape_interval_s: float
) -> str:
    """One instant query answering both rules for every node DCGM reports on.

    Each series carries the node (`autoscaler_node`, copied from `names.node_label`) and the
    rule (`autoscaler_rule`: `xid` or `memory`):

    - `xid`: the highest XID code any card of the node reported within the XID window, 0 when
      none did. DCGM's gauge keeps the last code until the exporter restarts, so a code counts
      only when it was new within the window: the gauge changed to it, or its series began
      there (a card or an exporter that started since). An XID from hours ago that the gauge
      still shows excludes nothing;
    - `memory`: the highest, over the node's cards, of each card's lowest framebuffer share in
      use over the memory window, read at `MEMORY_STEPS` steps; a card with a sample at fewer
      steps than that (new, or its exporter was down) is left out, so a short spike is never
      read as ten minutes full.
    """
    node = names.node_label
    xid_window = _duration(rules.xid_window_s)
    window = _duration(rules.memory_window_s)
    step = _duration(max(rules.memory_window_s / MEMORY_STEPS, scrape_interval_s))
    steps = max(1, min(MEMORY_STEPS, math.floor(rules.memory_window_s / scrape_interval_s)))
    ratio = f"({names.fb_used} / ({names.fb_used} + {names.fb_free}))"

    def per_node(vector: str) -> str:
        named = f'label_replace({vector}, "{_NODE}", "$1", "{node}", "(.+)")'
        return f"max by ({_NODE}) ({named})"

    def tagged(vector: str, rule: str) -> str:
        return f'label_replace({vector}, "{_RULE_LABEL}", "{rule}", "", "")'

    x = names.xid_errors
    new_code = (
        f"(max_over_time({x}[{xid_window}]) != 0 and changes({x}[{xid_window}]) > 0) "
        f"or ({x} != 0 unless {x} offset {xid_window})"
    )
    # Per node, a new code where there is one, else 0 for a node whose cards all report.
    xid = tagged(f"({per_node(f'({new_code})')} or {per_node(f'0 * {x}')})", "xid")
    full = (
        f"min_over_time({ratio}[{window}:{step}]) "
        f"and count_over_time({ratio}[{window}:{step}]) >= {steps}"
    )
    return f"{xid} or {tagged(per_node(f'({full})'), 'memory')}"


class GpuHealth:
    """What DCGM says of each node's cards, for `core.gpuhealth`: one query per `read`."""

    def __init__(
        self,
        client: Client,
        *,
        names: GpuHealthNames = GpuHealthNames(),
        rules: gpuhealth.Rules = gpuhealth.DEFAULT_RULES,
        scrape_interval_s: float = DEFAULT_SCRAPE_INTERVAL_S,
    ) -> None:
        self.client = client
        """Shared with the metrics; its owner closes it."""
        self.query = gpu_health_query(names, rules, scrape_interval_s=scrape_interval_s)
        """The PromQL each `read` sends."""

    async def read(self) -> dict[str, gpuhealth.Reading]:
        """The reading of every node DCGM reports on; a node or a rule without data is absent.
        Raises `ObservationError` when Prometheus cannot answer."""
        series = await self.client.query("gpu health", self.query)
        found: dict[str, dict[str, float]] = {}
        for item in series:
            labels, value = _sample(item)
            if (rule := labels.get(_RULE_LABEL)) is None:
                raise errors.ObservationError(f"Prometheus sample malformed: {item!r:.200}")
            node = str(labels.get(_NODE, ""))
            if node and math.isfinite(value):
                found.setdefault(node, {})[str(rule)] = value
        return {
            node: gpuhealth.Reading(xid_error=rules.get("xid"), memory_ratio=rules.get("memory"))
            for node, rules in found.items()
        }


# -- The traffic ramp's health gate and the drain (docs/architecture.md) ------------------------

RUNNING_GAUGES: Final[Mapping[str, str]] = types.MappingProxyType(
    {
        "vllm:num_requests_waiting": "vllm:num_requests_running",
        "sglang:num_queue_reqs": "sglang:num_running_reqs",
        "tgi_queue_size": "tgi_batch_current_size",
    }
)
"""The gauge of requests in execution that goes with a preset's queue gauge: in flight is queued
plus running. Triton has none (its pending count excludes what executes), nor has `custom`."""

P95: Final = 0.95


def health_queries(
    namespace: str,
    metrics: MetricNames,
    pods: Collection[str],
    *,
    window_s: float,
    max_pod_matcher_chars: int = DEFAULT_MAX_POD_MATCHER_CHARS,
) -> dict[str, str]:
    """The PromQL for one group of pods over `window_s`: `requests`, `errors` and `p95`.

    Requests are the increase of the requests counter (of the latency histogram's `_count` for
    a server without one); errors the increase of the errors counter, only its series whose
    `error_label` is one of `error_values` when the server names one; P95 the 0.95 quantile of
    the group's summed bucket rates. A kind the server has no metric for gets no query. A
    group whose pod alternation is too long is read through the first of its pods (by name)
    that fit. Raises `ValueError` for a namespace or pod that is not a Kubernetes name.
    """
    if not is_namespace(namespace):
        raise ValueError(f"not a namespace name: {namespace!r}")
    for pod in pods:
        if not is_pod_name(pod):
            raise ValueError(f"not a pod name: {pod!r}")
    if not window_s >= 0.001:
        raise ValueError(f"window_s must be >= 1 ms, not {window_s!r}")
    window = _duration(window_s)
    where = [f"namespace={json.dumps(namespace)}", f"pod=~{_fitting(pods, max_pod_matcher_chars)}"]
    queries: dict[str, str] = {}
    requests_counter = metrics.requests or (metrics.latency and f"{metrics.latency}_count")
    if requests_counter:
        queries["requests"] = f"sum(increase({_selector(requests_counter, where)}[{window}]))"
    if metrics.errors is not None:
        failed = where
        if metrics.error_label is not None:
            failed = [*where, f"{metrics.error_label}=~{regex_literal(metrics.error_values)}"]
        queries["errors"] = f"sum(increase({_selector(metrics.errors, failed)}[{window}]))"
    if metrics.latency is not None:
        buckets = _selector(f"{metrics.latency}_bucket", where)
        queries["p95"] = f"histogram_quantile({P95}, sum by (le) (rate({buckets}[{window}])))"
    return queries


def in_flight_query(
    namespace: str, metrics: MetricNames, pods: Collection[str], *, max_age_s: float
) -> str | None:
    """Queued plus running requests per pod (fresh samples only); None without a queue gauge.

    Where the server has a running gauge, a pod answers only when it exports both.
    """
    if metrics.queue is None:
        return None
    if not is_namespace(namespace):
        raise ValueError(f"not a namespace name: {namespace!r}")
    for pod in pods:
        if not is_pod_name(pod):
            raise ValueError(f"not a pod name: {pod!r}")
    where = [f"namespace={json.dumps(namespace)}", f"pod=~{regex_literal(pods)}"]
    age = f"{max_age_s:g}"
    gauges = [metrics.queue]
    if (running := RUNNING_GAUGES.get(metrics.queue)) is not None:
        gauges.append(running)
    parts = []
    for gauge in gauges:
        sel = _selector(gauge, where)
        parts.append(f"sum by (pod) ({_fresh(sel, sel, age)})")
    return " + ".join(parts)


def _fitting(pods: Collection[str], limit: int) -> str:
    """The regex literal of `pods`, or of the first of them (by name) whose literal fits `limit`.

    The stable set is the gate's reference: a sample of it reads the same normal level, and a
    request line stays under what proxies accept. At least one pod is always kept.
    """
    chosen: list[str] = []
    for pod in sorted(pods):
        if chosen and len(regex_literal([*chosen, pod])) > limit:
            break
        chosen.append(pod)
    return regex_literal(chosen)


class HealthQueries:
    """`ports.HealthSource` on Prometheus: the ramp gate's health and the drain's in-flight count.

    `health` reads each group (warming, stable) through `health_queries`, every query of a call
    at once, each under its deadline; `in_flight` through one `in_flight_query`. The namespace label
    is fixed in every query and pods are matched by escaped regex literals (docs/architecture.md,
    "Safety").

    No data is NaN, never zero: an empty group, no requests series, no errors series, no
    histogram or no observation in the window. The error rate is NaN without requests. For
    Triton, whose success counter excludes failures, it reads failures over successes: a
    little above the true ratio, on the side of failing the gate. A Prometheus that cannot
    answer raises `ObservationError`.
    """

    def __init__(
        self,
        client: Client,
        *,
        scrape_interval_s: float = DEFAULT_SCRAPE_INTERVAL_S,
        max_age_s: float | None = None,
        max_pod_matcher_chars: int = DEFAULT_MAX_POD_MATCHER_CHARS,
    ) -> None:
        """Query through `client`, the one `MetricsSource` uses; gauges older than `max_age_s`
        (three scrape intervals by default) are missing, as in `MetricsSource`."""
        if not scrape_interval_s > 0:
            raise ValueError("scrape_interval_s must be > 0")
        self.max_age_s = 3 * scrape_interval_s if max_age_s is None else max_age_s
        self.min_window_s = 4 * scrape_interval_s
        """The shortest range a health query uses, as `MetricsSource`'s rate window: a range
        of fewer scrapes can hold a single sample of a counter or a histogram, and reads no
        rate at all. A gate asked about a shorter time (an early gate at 1 s steps, or any step
        shorter than four scrapes) is answered over this much instead: a little of the
        traffic before the step, rather than nothing."""
        if not self.max_age_s > 0:
            raise ValueError("max_age_s must be > 0")
        self.max_pod_matcher_chars = max_pod_matcher_chars
        self.client = client
        """Shared with the metrics; its owner closes it."""
        self.last_queries: tuple[str, ...] = ()
        """The PromQL of the last call."""

    async def health(
        self,
        namespace: str,
        metrics: MetricNames,
        warming: Collection[str],
        stable: Collection[str],
        window_s: float,
    ) -> tuple[ports.GroupHealth, ports.GroupHealth]:
        """(warming, stable) health over the last `window_s`; see the class docstring."""
        groups = {"warming": warming, "stable": stable}
        queries = {
            (group, kind): promql
            for group, pods in groups.items()
            if pods
            for kind, promql in health_queries(
                namespace,
                metrics,
                pods,
                window_s=max(window_s, self.min_window_s),
                max_pod_matcher_chars=self.max_pod_matcher_chars,
            ).items()
        }
        answers = await self._ask(
            {key: (f"{key[0]} {key[1]}", promql) for key, promql in queries.items()}
        )
        values = {key: _scalar(f"{key[0]} {key[1]}", series) for key, series in answers.items()}
        warming_health, stable_health = (
            _group_health(
                values.get((group, "requests"), math.nan),
                values.get((group, "errors"), math.nan),
                values.get((group, "p95"), math.nan),
            )
            for group in groups
        )
        return warming_health, stable_health

    async def in_flight(
        self, namespace: str, metrics: MetricNames, pods: Collection[str]
    ) -> dict[str, float]:
        """Queued plus running requests per pod; a pod without fresh data is absent."""
        promql = in_flight_query(namespace, metrics, pods, max_age_s=self.max_age_s)
        if promql is None or not pods:
            self.last_queries = ()
            return {}
        self.last_queries = (promql,)
        samples = await self.client.query_per_pod("in-flight", promql)
        # Summed `by (pod)`: the answer's pods have no namespace.
        asked = {pod_key("", pod): pod for pod in pods}
        return {
            asked[key]: value
            for key, value in zip(samples.pods, samples.values.tolist(), strict=True)
            if key in asked and math.isfinite(value)
        }

    async def _ask(self, queries: Mapping[Any, tuple[str, str]]) -> dict[Any, list[Any]]:
        """Every query at once, each under its deadline; raises once all have finished."""
        self.last_queries = tuple(promql for _, promql in queries.values())
        answers = await asyncio.gather(
            *(self.client.query(what, promql) for what, promql in queries.values()),
            return_exceptions=True,
        )
        results: dict[Any, list[Any]] = {}
        for key, answer in zip(queries, answers, strict=True):
            if isinstance(answer, BaseException):
                raise answer
            results[key] = answer
        return results


def _scalar(what: str, series: list[Any]) -> float:
    """The value of an aggregate without grouping labels: NaN when the vector is empty."""
    if not series:
        return math.nan
    if len(series) > 1:
        raise errors.ObservationError(f"Prometheus {what} answer has {len(series)} series, not 1")
    _, value = _sample(series[0])
    return value


def _group_health(requests_: float, failed: float, p95_s: float) -> ports.GroupHealth:
    """The group's health from its three values (NaN where a query found nothing)."""
    has_requests = math.isfinite(requests_) and requests_ > 0
    return ports.GroupHealth(
        requests=requests_ if math.isfinite(requests_) else math.nan,
        error_rate=failed / requests_ if has_requests and math.isfinite(failed) else math.nan,
        p95_s=p95_s,
    )


if TYPE_CHECKING:

    def _implements_the_health_port(source: HealthQueries) -> ports.HealthSource:
        return source  # mypy checks the structural type here


DEFAULT_MAX_RANGE_POINTS: Final = 10_000
"""Most steps one range query asks for (Prometheus refuses more than 11,000 per series)."""
MAX_HISTORY_RATE: Final = 1e12
"""Requests per second above which a history value is taken for a broken answer."""
_HISTORY_CONCURRENCY: Final = 8
_SHARED_CONCURRENCY: Final = 2
HISTORY_OWNER_LABEL: Final = "autoscaler_deployment"
"""The label a batched history query names each series' Deployment by."""
DEFAULT_MAX_BATCH_SERVICES: Final = 500
"""Most services one history range query asks for."""
DEFAULT_MAX_BATCH_CHARS: Final = 16_000
"""Most characters of owner names in one history range query (its pattern is in it twice,
sent as a POST form, never in a URL)."""
DEFAULT_MAX_BATCH_POINTS: Final = 500_000
"""Most points one batched history range answer holds (about 12 MB of JSON)."""
DEFAULT_MAX_HISTORY_ISOLATION_QUERIES: Final = 256
"""Most queries one refresh of the history may spend bisecting refused shared queries (about 16
for each service that breaks one of 500); past it, the refresh fails as an outage does."""


_ROOM_RATIO: Final = 8
"""A stretch's buffer has room for an eighth of its steps more: a week of one-minute steps
takes 21 hours of five-minute refreshes before it is made anew."""
_PAST_LEAD_S: Final = 7_200.0
"""A stretch of the history one period or two ago is fetched this far past what the forecast
reads of it yet: it moves on one step per step, and is asked again only once this is used up."""


@functools.lru_cache(maxsize=64)
def _reads(config: model.ForecastConfig) -> tuple[tuple[int, int], ...]:
    """`forecast.reads` with a refresh of lead: one tuple for all the services of a config."""
    return forecast.reads(config, lead_s=config.refresh_s)


@dataclass(frozen=True, slots=True)
class _Run:
    """One stretch of a service's history as fetched so far: the mean of step `first + i` is
    `values[i]`, in float32 (a load keeps 7 significant digits; the forecast sums in float64).

    `values` is a read-only view of `buffer` from `offset`, and the histories handed out share
    it. Later steps are written into the room after it, which no view handed out covers, so a
    refresh neither copies the stretch nor changes a history the loop still reads; only when
    the room runs out is the buffer made anew (and the old one lives on with the last histories
    until the loop lets them go)."""

    first: int
    values: npt.NDArray[np.float32]
    buffer: npt.NDArray[np.float32]
    offset: int

    @classmethod
    def empty(cls, first: int) -> _Run:
        nothing = np.empty(0, dtype=np.float32)
        return cls(first, nothing, nothing, 0)

    @property
    def end(self) -> int:
        return self.first + len(self.values)

    def extended(self, fresh: npt.NDArray[np.float64], *, drop: int) -> _Run:
        """These values with `fresh` after them and the first `drop` left out."""
        if not len(fresh) and not drop:
            return self
        start, end = self.offset + drop, self.offset + len(self.values)
        buffer = self.buffer
        if end + len(fresh) > len(buffer):
            kept = self.values[drop:]
            size = len(kept) + len(fresh)
            buffer = np.empty(size + size // _ROOM_RATIO, dtype=np.float32)
            buffer[: len(kept)] = kept
            start, end = 0, len(kept)
        buffer[end : end + len(fresh)] = fresh
        values = buffer[start : end + len(fresh)]
        values.flags.writeable = False  # the histories handed out share it
        return _Run(self.first + drop, values, buffer, start)


@dataclass(frozen=True, slots=True)
class _Kept:
    """One service's history as fetched so far: the stretches the forecast reads, in order."""

    requests: str
    """The metric it was read from: new names start a new history."""
    reads: tuple[tuple[int, int], ...]
    """The stretches kept, counted from the history's end (`forecast.reads`): another
    forecast configuration starts a new history."""
    runs: tuple[_Run, ...]


class LoadHistory:
    """The load of each service over the last days, from Prometheus range queries
    (`ports.HistorySource`).

    A service's load at one step is `sum(rate(<requests>[window]))` over the pods of its
    Deployment, by name (`<name>-<template hash>-<suffix>`, and its placement tiers' pods
    `<name>-mig-...` and `<name>-shared-...`), so pods long gone count too; each value is the rate
    over the step that ends at it. A step with no sample is NaN. A service whose pods or names
    the cache does not know is left out.

    Of a service with a forecast, only the stretches the forecast reads are kept
    (`forecast.reads`: around now, one period and two periods ago), in float32: at 10,000
    services a week of every step in float64 was about a gigabyte. The first call fetches each
    stretch; later calls fetch the steps added since, and each stretch of the past again only
    once the `_PAST_LEAD_S` fetched past it is used up; the steps a stretch has moved past are
    dropped. A service without a forecast of its own keeps the whole span the same way. The
    services of one namespace and metric that want the same steps share a range query
    (`history_batch_query`), one series each.

    The loop's clock need not be Unix time (tests step their own): `wall_now` is, and the history
    is moved onto the loop's clock by the difference.
    """

    def __init__(
        self,
        client: Client,
        *,
        wall_now: Callable[[], float],
        scrape_interval_s: float = DEFAULT_SCRAPE_INTERVAL_S,
        max_range_points: int = DEFAULT_MAX_RANGE_POINTS,
        max_batch_services: int = DEFAULT_MAX_BATCH_SERVICES,
        max_batch_chars: int = DEFAULT_MAX_BATCH_CHARS,
        max_batch_points: int = DEFAULT_MAX_BATCH_POINTS,
        max_isolation_queries: int = DEFAULT_MAX_HISTORY_ISOLATION_QUERIES,
    ) -> None:
        """Query through `client`: its own, since a range query over days needs a longer
        deadline than a tick's instant queries; its owner closes it. One range query asks for
        at most `max_range_points` steps, `max_batch_services` services, `max_batch_chars` of
        their names and `max_batch_points` points in all (a service alone asks for its steps
        whatever their number). A refresh spends at most `max_isolation_queries` queries
        finding the services whose own query Prometheus refuses."""
        if not scrape_interval_s > 0 or max_range_points < 1:
            raise ValueError("scrape_interval_s must be > 0 and max_range_points >= 1")
        if min(max_batch_services, max_batch_chars, max_batch_points) < 1:
            raise ValueError("the batch limits must be >= 1")
        self.client = client
        self._wall_now = wall_now
        self.scrape_interval_s = scrape_interval_s
        self.max_range_points = max_range_points
        self.max_batch_services = max_batch_services
        self.max_batch_chars = max_batch_chars
        self.max_batch_points = max_batch_points
        self.max_isolation_queries = max_isolation_queries
        self._kept: dict[model.ServiceId, _Kept] = {}

    @property
    def queries_sent(self) -> int:
        return self.client.sent

    async def load_history(
        self, workloads: Sequence[ports.Workload], now_s: float, *, span_s: float, step_s: float
    ) -> dict[model.ServiceId, forecast.History]:
        """See `ports.HistorySource`; raises `ObservationError` when a query fails.

        The steps to fetch are asked for many services at once (`_batches`). A shared query
        that Prometheus refuses is bisected down to the services refused alone, which are left
        out of this refresh (and asked again at the next); if every service is refused, or the
        bisection runs out of `max_isolation_queries`, the refusal is raised."""
        if not (step_s > 0 and span_s > 0):
            raise ValueError("span_s and step_s must be > 0")
        wall = self._wall_now()
        last = math.floor(wall / step_s)  # steps [.., last) have ended
        first = last - math.ceil(span_s / step_s)
        window_s = max(step_s, 4 * self.scrape_interval_s)
        lead = math.ceil(_PAST_LEAD_S / step_s)
        present: set[model.ServiceId] = set()
        plans: list[_HistoryPlan] = []
        # The services that want the same steps of the same metric in one namespace.
        needs: dict[tuple[str, str, int, int], list[_Need]] = {}
        for workload in workloads:
            if workload.metrics is None or workload.metrics.requests is None:
                continue
            serving = ServingPods(
                workload.namespace, workload.pods, workload.metrics, workload.policy.llm_signals
            )
            if not is_namespace(serving.namespace):
                continue
            config = workload.policy.forecast
            # Only the stretches the forecast reads, with a refresh of lead for the votes made
            # before the next one; all of the span for a service without a forecast of its own.
            reads = (
                _reads(config)
                if config is not None and config.step_s == step_s
                else ((-math.ceil(span_s / step_s), 0),)
            )
            present.add(workload.id)
            plan = self._plan(workload.id, serving, reads, first=first, last=last, lead=lead)
            plans.append(plan)
            for k, (_, begin, upto) in enumerate(plan.stretches):
                if begin < upto:
                    need = _Need(plan, k, _owner(workload.id, serving))
                    key = (serving.namespace, plan.requests, begin, upto)
                    needs.setdefault(key, []).append(need)
        for gone in set(self._kept) - present:
            del self._kept[gone]

        slots = _Slots(
            asyncio.Semaphore(_HISTORY_CONCURRENCY), asyncio.Semaphore(_SHARED_CONCURRENCY)
        )
        refused: dict[model.ServiceId, str] = {}
        budget = _Budget(self.max_isolation_queries)
        batches = [
            (batch, begin, upto)
            for (_, _, begin, upto), wanted in needs.items()
            for batch in _batches(
                wanted,
                max_services=self.max_batch_services,
                max_chars=self.max_batch_chars,
                per_service=min(upto - begin, self.max_range_points),
                max_points=self.max_batch_points,
            )
        ]
        answers = await asyncio.gather(
            *(
                self._fetch_batch(
                    batch,
                    begin=begin,
                    last=upto,
                    step_s=step_s,
                    window_s=window_s,
                    slots=slots,
                    refused=refused,
                    budget=budget,
                )
                for batch, begin, upto in batches
            ),
            return_exceptions=True,
        )
        # Every query has finished here; the first failure stands for the outage.
        for answer in answers:
            if isinstance(answer, BaseException):
                raise answer
        if refused and refused.keys() >= {n.plan.service for w in needs.values() for n in w}:
            # Not one service's own query is answered: Prometheus is at fault, not a service.
            raise QueryRejected(next(iter(refused.values())))
        for service, error in refused.items():
            log.warning("history.query_rejected", service=service, error=error)
        for plan in plans:
            if plan.service in refused:
                continue
            runs = tuple(
                run.extended(fresh, drop=lo - run.first)
                for (run, _, _), lo, fresh in zip(
                    plan.stretches, plan.lows, plan.fresh, strict=True
                )
            )
            self._kept[plan.service] = _Kept(plan.requests, plan.reads, runs)

        start = first * step_s + now_s - wall
        found: dict[model.ServiceId, forecast.History] = {}
        for service in present:
            kept = self._kept.get(service)
            if kept is None or not kept.runs or service in refused:
                continue
            # Shared, not copied: no step of a run is written again (`_Run`).
            runs = kept.runs
            if len(runs) == 1 and runs[0].first == first and runs[0].end == last:
                found[service] = forecast.History(start, step_s, runs[0].values)
                continue
            pieces = tuple((run.first - first, run.values) for run in runs)
            empty = np.empty(0, dtype=np.float32)
            found[service] = forecast.History(
                start, step_s, empty, pieces=pieces, length=last - first
            )
        return found

    def _plan(
        self,
        service: model.ServiceId,
        serving: ServingPods,
        reads: tuple[tuple[int, int], ...],
        *,
        first: int,
        last: int,
        lead: int,
    ) -> _HistoryPlan:
        """What brings the service's stretches to the history `[first, last)`: the steps each
        has moved past are dropped, the steps it has moved onto fetched (a stretch of the past
        with `_PAST_LEAD_S` more, so that it is asked again only once that is used up)."""
        requests = serving.metrics.requests
        assert requests is not None
        kept = self._kept.get(service)
        if kept is None or kept.requests != requests or kept.reads != reads:
            kept = _Kept(requests, reads, ())
        wanted = [(max(first, last + lo), last + hi) for lo, hi in reads]
        wanted = [(lo, hi) for lo, hi in wanted if lo < hi]
        stretches: list[tuple[_Run, int, int]] = []
        for k, (lo, hi) in enumerate(wanted):
            # Runs stay apart: a stretch's lead stops where the next one begins.
            bound = wanted[k + 1][0] if k + 1 < len(wanted) else last
            run = next((r for r in kept.runs if r.first <= lo < r.end), None)
            if run is None:
                run = _Run.empty(lo)
            begin = run.end
            upto = min(bound, last, hi + lead) if begin < hi else begin
            stretches.append((run, begin, upto))
        nothing = np.empty(0)
        return _HistoryPlan(
            service,
            serving,
            requests,
            reads,
            stretches,
            [lo for lo, _ in wanted],
            [nothing] * len(wanted),
        )

    async def _fetch_batch(
        self,
        batch: Sequence[_Need],
        *,
        begin: int,
        last: int,
        step_s: float,
        window_s: float,
        slots: _Slots,
        refused: dict[model.ServiceId, str],
        budget: _Budget,
    ) -> None:
        """Fetch steps `[begin, last)` of each service of `batch` into its plan: in one query
        (per `max_range_points`) for all, a service alone in its own (`history_query`). A batch
        whose query Prometheus refuses is bisected, each half asked apart, down to the services
        that alone break it (into `refused`); past `budget`, the refusal is raised."""
        try:
            if len(batch) == 1:
                (need,) = batch
                plan = need.plan
                promql = history_query(plan.service, plan.serving, window_s=window_s)
                fresh = await self._fetch(
                    promql, begin=begin, last=last, step_s=step_s, slots=slots
                )
                plan.fresh[need.stretch] = fresh
                return
            fetched = await self._fetch_many(
                batch, begin=begin, last=last, step_s=step_s, window_s=window_s, slots=slots
            )
        except QueryRejected as e:
            if len(batch) == 1:
                refused[batch[0].plan.service] = str(e)
                return
            if not budget.take(2):
                raise
        else:
            for need, fresh in zip(batch, fetched, strict=True):
                need.plan.fresh[need.stretch] = fresh
            return
        half = len(batch) // 2
        parts = await asyncio.gather(
            *(
                self._fetch_batch(
                    part,
                    begin=begin,
                    last=last,
                    step_s=step_s,
                    window_s=window_s,
                    slots=slots,
                    refused=refused,
                    budget=budget,
                )
                for part in (batch[:half], batch[half:])
            ),
            return_exceptions=True,
        )
        for part in parts:
            if isinstance(part, BaseException):
                raise part

    async def _fetch_many(
        self,
        batch: Sequence[_Need],
        *,
        begin: int,
        last: int,
        step_s: float,
        window_s: float,
        slots: _Slots,
    ) -> list[npt.NDArray[np.float64]]:
        """The means of steps `[begin, last)` of each service of `batch` (one namespace and
        metric, no owner a `-` prefix of another: `_batches`), as `_fetch` reads one's."""
        plan = batch[0].plan
        requests = plan.requests
        promql = history_batch_query(
            [need.owner for need in batch], plan.serving.namespace, requests, window_s=window_s
        )
        at_owner = {need.owner: i for i, need in enumerate(batch)}
        fresh = np.full((len(batch), last - begin), np.nan)
        at = begin
        while at < last:
            upto = min(last, at + self.max_range_points)
            async with slots.shared, slots.any:
                series = await self.client.query_range_series(
                    "load history",
                    promql,
                    label=HISTORY_OWNER_LABEL,
                    start_s=(at + 1) * step_s,
                    end_s=upto * step_s,
                    step_s=step_s,
                )
            owners = [-1 if o is None else at_owner.get(o, -1) for o in series.labels]
            rows = np.repeat(np.array(owners, dtype=np.intp), series.counts)
            ours = rows >= 0
            _place(
                fresh,
                series.times[ours],
                series.values[ours],
                begin=begin,
                within=(at, upto),
                step_s=step_s,
                rows=rows[ours],
            )
            at = upto
        return list(fresh)

    async def _fetch(
        self, promql: str, *, begin: int, last: int, step_s: float, slots: _Slots
    ) -> npt.NDArray[np.float64]:
        """The means of steps `[begin, last)`, NaN where none is found, in range queries of at
        most `max_range_points` steps."""
        fresh = np.full(max(0, last - begin), np.nan)
        at = begin
        while at < last:
            upto = min(last, at + self.max_range_points)
            # The value at instant (k + 1) x step is the rate over step k.
            async with slots.any:
                stamps, values = await self.client.query_range_points(
                    "load history",
                    promql,
                    start_s=(at + 1) * step_s,
                    end_s=upto * step_s,
                    step_s=step_s,
                )
            _place(fresh, stamps, values, begin=begin, within=(at, upto), step_s=step_s)
            at = upto
        return fresh


@dataclass(frozen=True, slots=True)
class _Slots:
    """The history's queries in flight at once: `any` of all, `shared` of the shared ones.

    A shared query costs Prometheus what a few hundred of one service do: eight at once held
    the tick's instant queries behind them (p99 about 1 s at 10,000 services, against 0.1 s
    with two)."""

    any: asyncio.Semaphore
    shared: asyncio.Semaphore


@dataclass(slots=True)
class _HistoryPlan:
    """What one refresh does to one service's history (`LoadHistory._plan`)."""

    service: model.ServiceId
    serving: ServingPods
    requests: str
    reads: tuple[tuple[int, int], ...]
    stretches: list[tuple[_Run, int, int]]
    """Per stretch: the run kept of it, and the steps `[begin, upto)` to fetch after it."""
    lows: list[int]
    """Per stretch: its first step now (the steps before it are dropped)."""
    fresh: list[npt.NDArray[np.float64]]
    """Per stretch: the steps fetched, filled in by the fetch."""


@dataclass(frozen=True, slots=True)
class _Need:
    """One stretch of one service to fetch."""

    plan: _HistoryPlan
    stretch: int
    owner: str
    """The Deployment's name, its pods' prefix."""


def _batches(
    wanted: Sequence[_Need],
    *,
    max_services: int,
    max_chars: int,
    per_service: int,
    max_points: int,
) -> list[list[_Need]]:
    """`wanted` (one namespace, metric and stretch) in batches of one query each: at most
    `max_services`, `max_points` points of `per_service` each and `max_chars` of owner names.

    No owner in a batch is another's prefix followed by `-` (`a` and `a-b`, `chat` and
    `chat-mig-x`): then a pod's name fits the pattern of at most one owner in it, and the owner
    captured from it is the one whose own query counts it. A pod that both patterns fit
    (`chat-mig-x-<hash>-<suffix>` is both `chat`'s MIG tier and `chat-mig-x`'s own) counts for
    both, in their separate queries, as it does asked one by one."""
    size = max(1, min(max_services, max_points // max(1, per_service)))
    batches: list[tuple[list[_Need], set[str], set[str], list[int]]] = []
    for need in wanted:
        owner = need.owner
        heads = [owner[:i] for i, c in enumerate(owner) if c == "-"]
        chars = len(owner) + 1
        for batch, owners, prefixes, used in batches:
            if (
                len(batch) < size
                and used[0] + chars <= max_chars
                and owner not in owners
                and owner not in prefixes
                and not any(head in owners for head in heads)
            ):
                break
        else:
            batch, owners, prefixes, used = [], set(), set(), [0]
            batches.append((batch, owners, prefixes, used))
        batch.append(need)
        owners.add(owner)
        prefixes.update(heads)
        used[0] += chars
    return [batch for batch, _, _, _ in batches]


def _owner(service: model.ServiceId, serving: ServingPods) -> str:
    """The Deployment's name of `service`, checked as `history_query` checks it."""
    requests = serving.metrics.requests
    if requests is None:
        raise ValueError("no requests metric to read the load from")
    _check_metric_name(requests)
    name = service.rsplit("/", 1)[-1]
    if not is_pod_name(name):
        raise ValueError(f"not a Deployment name: {name!r}")
    if not is_namespace(serving.namespace):
        raise ValueError(f"not a namespace: {serving.namespace!r}")
    return name


def _owned_pods(owners: str) -> str:
    """The pattern of the pods of `owners` (one quoted name or an alternation) and of their
    placement tiers'."""
    return f"{owners}-((mig-[a-z0-9.-]+|shared)-)?[a-z0-9]{{1,10}}-[a-z0-9]{{5}}"


def history_query(service: model.ServiceId, serving: ServingPods, *, window_s: float) -> str:
    """The PromQL of one service's load over time: the rate of its requests counter summed
    over every pod its Deployment (or a placement tier of it) ever ran."""
    owner = _owner(service, serving).translate(_RE2_QUOTED)
    pods = _owned_pods(owner)
    where = [f"namespace={json.dumps(serving.namespace)}", f"pod=~{json.dumps(pods)}"]
    assert serving.metrics.requests is not None
    selector = _selector(serving.metrics.requests, where)
    return f"sum(rate({selector}[{_duration(window_s)}]))"


def history_batch_query(
    owners: Sequence[str], namespace: str, requests: str, *, window_s: float
) -> str:
    """The PromQL of the load over time of several Deployments of one namespace, one series
    each, labelled `HISTORY_OWNER_LABEL` with its name: `history_query`'s pods of each, taken
    by one pattern whose first group is the owner's name. No owner may be another's prefix
    followed by `-` (`_batches`)."""
    _check_metric_name(requests)
    if not is_namespace(namespace):
        raise ValueError(f"not a namespace: {namespace!r}")
    for owner in owners:
        if not is_pod_name(owner):
            raise ValueError(f"not a Deployment name: {owner!r}")
    alternation = "|".join(owner.translate(_RE2_QUOTED) for owner in owners)
    pods = json.dumps(_owned_pods(f"({alternation})"))
    selector = _selector(requests, [f"namespace={json.dumps(namespace)}", f"pod=~{pods}"])
    rates = f"rate({selector}[{_duration(window_s)}])"
    label = HISTORY_OWNER_LABEL
    return f'sum by ({label}) (label_replace({rates}, "{label}", "$1", "pod", {pods}))'


def _place(
    fresh: npt.NDArray[np.float64],
    stamps: npt.NDArray[np.float64],
    values: npt.NDArray[np.float64],
    *,
    begin: int,
    within: tuple[int, int],
    step_s: float,
    rows: npt.NDArray[np.intp] | None = None,
) -> None:
    """Write each point of a range answer into `fresh` (step `begin + i` at `i`): the value at
    instant `(k + 1) x step` is the rate over step `k`, for the steps `within` only. With
    `rows`, `fresh` holds one series a row and each point goes to its row."""
    k = np.round(stamps / step_s) - 1
    # Prometheus answers on the grid asked for, with rates that are never negative nor
    # absurd: anything else comes from a broken answer.
    with np.errstate(invalid="ignore", over="ignore"):
        on_grid = np.abs(stamps - (k + 1) * step_s) < 1e-3
        sane = np.isfinite(values) & (values >= 0) & (values <= MAX_HISTORY_RATE)
    keep = on_grid & sane & (k >= within[0]) & (k < within[1])
    # A later point of the same step wins, as it did read one by one.
    at = k[keep].astype(np.int64) - begin
    if rows is None:
        fresh[at] = values[keep]
    else:
        fresh[rows[keep], at] = values[keep]


_MATRIX_START: Final = b'{"status":"success","data":{"resultType":"matrix","result":['
_JSON_TEXT: Final = rb'"[ !#-\[\]-~]*+"'
"""A JSON string of printable ASCII without escapes: what the decoder reads as the same text.
A point's value is narrower still (a number's characters, no comma or bracket), so that its
points split at their commas into times and values."""
_RANGE_POINT: Final = (
    rb'\[-?+(?:0|[1-9][0-9]*+)(?:\.[0-9]++)?+(?:[eE][-+]?+[0-9]++)?+,"[0-9A-Za-z.+_-]*+"\]'
)
_LABEL: Final = _JSON_TEXT + b":" + _JSON_TEXT
_RANGE_SERIES: Final = re.compile(
    rb'\{"metric":\{((?:%b(?:,%b)*+)?+)\},"values":\[((?:%b,)*+%b)?+\]\}'
    % (_LABEL, _LABEL, _RANGE_POINT, _RANGE_POINT)
)
"""One series of a range answer as Prometheus writes it: compact, its labels and its points
`[time,"value"]` and nothing else. Possessive throughout: no part of it ever gives back what it
matched, and the scan runs at twice the speed."""


def _scan_range(
    body: bytes,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]] | None:
    """The times and values of a successful range answer whose every series has the shape
    `_RANGE_SERIES` matches, read as `_range_points` reads the decoded answer; None when it is
    anything else, for the JSON decoder to read (and judge)."""
    scanned = _scan_matrix(body)
    return None if scanned is None else scanned[2:]


def _scan_matrix(
    body: bytes,
) -> tuple[list[bytes], list[int], npt.NDArray[np.float64], npt.NDArray[np.float64]] | None:
    """As `_scan_range`, with each series' labels (the text between the braces) and its
    number of points, in the order of the points."""
    if not body.startswith(_MATRIX_START) or not body.endswith(b"]}}"):
        return None
    at, end = len(_MATRIX_START), len(body) - 3
    numbers: list[bytes] = []
    labels: list[bytes] = []
    counts: list[int] = []
    while at < end:
        found = _RANGE_SERIES.match(body, at, end)
        if found is None:
            return None
        at = found.end()
        if at < end:
            if body[at : at + 1] != b"," or at + 1 == end:
                return None
            at += 1
        labels.append(found.group(1))
        if found.group(2):
            points = found.group(2).translate(None, b'[]"').split(b",")
            numbers += points
            counts.append(len(points) // 2)
        else:
            counts.append(0)
    try:
        # Python's float reads the text as it reads the decoded strings and numbers.
        values = np.array(list(map(float, numbers[1::2])), dtype=np.float64)
    except ValueError:  # a value that is not a number: the decoder's reading leaves it out
        return None
    return labels, counts, _times(numbers[0::2]), values


def _label_of(labels: bytes, name: str) -> str | None:
    """The value of label `name` in a scanned series' labels (no escapes: `_JSON_TEXT`)."""
    head = f'"{name}":"'.encode()
    if labels.startswith(head) and labels.count(b'"') == 4:  # that label alone
        return labels[len(head) : -1].decode()
    metric = json.loads(b"{" + labels + b"}")
    value = metric.get(name)
    return value if isinstance(value, str) else None


def _times(texts: list[bytes]) -> npt.NDArray[np.float64]:
    """The times of a range answer's points: whole seconds of one width (as Prometheus writes
    them for a grid of whole seconds) read digit by digit across all at once, exactly as
    `float` reads them; any other text by `float`."""
    if not texts:
        return np.empty(0)
    digits = np.array(texts).view(np.uint8).reshape(len(texts), -1)
    if digits.shape[1] > 15 or not np.all((digits >= 0x30) & (digits <= 0x39)):
        return np.array(list(map(float, texts)), dtype=np.float64)
    powers = 10 ** np.arange(digits.shape[1] - 1, -1, -1, dtype=np.int64)
    whole: npt.NDArray[np.float64] = ((digits - 0x30).astype(np.int64) @ powers).astype(np.float64)
    return whole


def _range_points(
    series: Iterable[Any],
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """The times and values of every point of a decoded range answer, one series after
    another; malformed points are left out."""
    pairs = [pair for item in series for pair in _points(item)]
    if not pairs:
        return np.empty(0), np.empty(0)
    read = np.array(pairs, dtype=np.float64)
    return read[:, 0].copy(), read[:, 1].copy()


def _points(item: Any) -> Iterator[tuple[float, float]]:
    """The (time, value) pairs of one series of a range answer; malformed ones are skipped."""
    values = item.get("values") if isinstance(item, dict) else None
    if not isinstance(values, list):
        return
    for pair in values:
        try:
            yield float(pair[0]), float(pair[1])
        except (IndexError, TypeError, ValueError):
            continue
