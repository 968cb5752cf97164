"""The controller's own configuration, read once at start from the environment.

Variables carry the `AUTOSCALER_` prefix and `__` between a group and its field, e.g.
`AUTOSCALER_LOG__LEVEL=debug`, `AUTOSCALER_PROMETHEUS__URL=http://prometheus:9090` or
`AUTOSCALER_KUBERNETES__NAMESPACES=ml,chat` (lists are comma-separated, headers
`Name=value,Name2=value2`). Secrets are `SecretStr`: their `repr` and dumps hide them. One
frozen `Settings` is built by the CLI (command-line flags override the environment) and handed
down group by group; nothing else reads the environment.

Every field says its unit and default; rules across fields are validators, so a bad
combination stops the process at start with one line naming the variable.

Only what the commands use today lives here; per-Deployment settings are annotations, not this.
"""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path
from typing import Annotated, Literal, Self

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from autoscaler import metricnames
from autoscaler.contract import targets
from autoscaler.core import placement

_GROUP = ConfigDict(frozen=True, extra="forbid")
_LABEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")

Namespaces = Annotated[tuple[str, ...], NoDecode]
"""A list of namespaces: comma-separated text in the environment, a tuple in Python."""
Kinds = Annotated[tuple[str, ...], NoDecode]
"""A list of workload kinds: comma-separated text in the environment, a tuple in Python."""
Headers = Annotated[dict[str, str], NoDecode]
"""HTTP headers: `Name=value,Name2=value2` in the environment, a dict in Python."""
Thresholds = Annotated[tuple[int, ...], NoDecode]
"""The garbage collector's thresholds: comma-separated numbers in the environment."""

_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
"""An HTTP field name (RFC 9110's `token`)."""
_HEADER_VALUE = re.compile(r"[\t\x20-\x7e]*")
"""Visible ASCII, spaces and tabs: no line break can smuggle in another header."""
_CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})


def _split(value: object) -> object:
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return value


def _check_namespaces(names: tuple[str, ...]) -> tuple[str, ...]:
    for name in names:
        if not _DNS1123_LABEL.fullmatch(name):
            raise ValueError(f"{name!r} is not a namespace name (a DNS-1123 label)")
    return tuple(dict.fromkeys(names))


def _parse_headers(value: object) -> object:
    """`Name=value,Name2=value2` (a value may not hold a comma); a mapping stays as it is."""
    if not isinstance(value, str):
        return value
    headers: dict[str, str] = {}
    for item in value.split(","):
        if not item.strip():
            continue
        name, equals, text = item.partition("=")
        if not equals:
            raise ValueError(f"{item.strip()!r} is not Name=value")
        headers[name.strip()] = text.strip()
    return headers


def _check_headers(headers: dict[str, str]) -> dict[str, str]:
    for name, text in headers.items():
        if not _HEADER_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not an HTTP header name")
        if name.lower() in _CREDENTIAL_HEADERS:
            raise ValueError(
                f"header {name!r} carries credentials: use bearer_token_file, bearer_token "
                "or basic_auth_* instead (they are kept secret)"
            )
        if not _HEADER_VALUE.fullmatch(text):
            raise ValueError(f"header {name!r}: its value must be printable ASCII on one line")
    return headers


class KubernetesSettings(BaseModel):
    model_config = _GROUP

    kubeconfig: str | None = None
    """Path of a kubeconfig file. Default unset: the pod's service account when running in a
    cluster, else `KUBECONFIG`, else `~/.kube/config`."""
    context: str | None = None
    """kubeconfig context to use. Default unset: the kubeconfig's current context."""
    namespaces: Namespaces = ()
    """Namespaces whose Deployments are managed, comma-separated. Default empty: all."""
    exclude_namespaces: Namespaces = ()
    """Namespaces never managed, comma-separated (applied after `namespaces`). Default empty."""
    workload_kinds: Kinds = targets.DEFAULT_KINDS
    """The kinds of workload managed, comma-separated, each scaled through its `/scale`
    subresource: `deployments`, `statefulsets`, `leaderworkersets`
    (leaderworkerset.x-k8s.io/v1), `rollouts` (argoproj.io/v1alpha1). A custom resource whose
    CRD is not installed is skipped, with one `cache.kind_absent` log line, and looked for again
    every 5 minutes. Default all four."""
    dry_run: bool = False
    """Decide, log, count and explain in the logs, but write nothing to the cluster: no
    replicas, annotations, Events nor Lease (a dry-run instance does not take part in the
    leader election, so it never displaces the real controller). Default false."""
    lease_name: str = "inference-autoscaler"
    """Name of the coordination.k8s.io Lease the replicas elect their leader with.
    Default `inference-autoscaler`."""
    lease_namespace: str = "inference-autoscaler"
    """Namespace of the Lease; the controller's own. Default `inference-autoscaler`."""
    lease_buckets: int = Field(1, ge=1, le=99)
    """Bucket Leases the managed services are split into, 1 to 99, by a stable hash of their
    `namespace/name`; each replica campaigns for every bucket and acts only on the services of
    the buckets it leads. 1 is the single Lease `lease_name`; N > 1 are the Leases
    `<lease_name>.<i>-of-<N>`. Every replica must run with the same count (change it with all
    replicas stopped). Default 1."""
    identity: str | None = None
    """This replica's name in the Lease and in Events. Default unset: `POD_NAME` (else the
    host name) and a random suffix."""
    lease_duration_s: float = Field(15.0, gt=0, allow_inf_nan=False)
    """Seconds a follower waits, after the Lease's last change, before taking it over.
    Default 15 (client-go's)."""
    renew_deadline_s: float = Field(10.0, gt=0, allow_inf_nan=False)
    """Seconds the leader keeps trying to renew before it steps down; less than
    `lease_duration_s`. Default 10."""
    renew_interval_s: float = Field(5.0, gt=0, allow_inf_nan=False)
    """Seconds between the leader's renewals; less than `renew_deadline_s`. Default 5."""
    retry_interval_s: float = Field(2.0, gt=0, allow_inf_nan=False)
    """Seconds between a follower's attempts to take the Lease (plus up to 20 % jitter).
    Default 2."""
    request_timeout_s: float = Field(10.0, gt=0, allow_inf_nan=False)
    """Seconds an API request (a list, a read, a write; not a watch's stream) may take before
    it counts as failed; the Lease's own requests take at most half of `renew_deadline_s`.
    Default 10."""

    @field_validator("namespaces", "exclude_namespaces", "workload_kinds", mode="before")
    @classmethod
    def _split_text(cls, value: object) -> object:
        return _split(value)

    @field_validator("workload_kinds")
    @classmethod
    def _kind_names(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(kind.name for kind in targets.parse_kinds(names))

    @property
    def kinds(self) -> tuple[targets.TargetKind, ...]:
        """`workload_kinds` as the kinds they name."""
        return targets.parse_kinds(self.workload_kinds)

    @field_validator("namespaces", "exclude_namespaces")
    @classmethod
    def _namespace_names(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        return _check_namespaces(names)

    @field_validator("lease_namespace")
    @classmethod
    def _lease_namespace_name(cls, name: str) -> str:
        return _check_namespaces((name,))[0]

    @field_validator("lease_name")
    @classmethod
    def _lease_name(cls, name: str) -> str:
        # Room for a bucket's `.NN-of-NN` within an object name's 253 characters.
        if not _DNS1123_SUBDOMAIN.fullmatch(name) or len(name) > 253 - len(".00-of-00"):
            raise ValueError(f"{name!r} is not an object name (a DNS-1123 subdomain)")
        return name

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        both = sorted(set(self.namespaces) & set(self.exclude_namespaces))
        if both:
            raise ValueError(f"namespaces both included and excluded: {', '.join(both)}")
        if not self.renew_interval_s < self.renew_deadline_s < self.lease_duration_s:
            raise ValueError(
                f"need renew_interval_s ({self.renew_interval_s:g}) < renew_deadline_s "
                f"({self.renew_deadline_s:g}) < lease_duration_s ({self.lease_duration_s:g})"
            )
        return self


class PrometheusSettings(BaseModel):
    model_config = _GROUP

    url: str = "http://prometheus-operated.monitoring.svc:9090"
    """Base URL of the Prometheus HTTP API (or Thanos, Mimir, VictoriaMetrics), without
    `/api/v1`. Default `http://prometheus-operated.monitoring.svc:9090` (prometheus-operator's
    Service in `monitoring`)."""
    timeout_s: float = Field(2.0, gt=0, allow_inf_nan=False)
    """Deadline of one query, in seconds, for all of it: connecting, sending and reading the whole
    answer (a server that drips its answer is cut there too). Past it the tick reads every
    signal as missing. Default 2."""
    scrape_interval_s: float = Field(15.0, gt=0, allow_inf_nan=False)
    """Seconds between two scrapes of the model servers (their ServiceMonitor's interval).
    Default 15."""
    max_age_s: float | None = Field(None, gt=0, allow_inf_nan=False)
    """Seconds after which a sample is stale and reads as missing, never as zero.
    Default unset: 3 scrape intervals."""
    rate_window_s: float | None = Field(None, gt=0, allow_inf_nan=False)
    """Seconds of counter history each request rate spans, at least 2 scrape intervals.
    Default unset: 4 scrape intervals."""
    bearer_token_file: Path | None = None
    """File holding a bearer token sent with every query (`Authorization: Bearer ...`), such
    as a mounted Secret or a projected service-account token. Read at start (a missing,
    unreadable or empty file stops the controller) and read again before a query whenever the
    file changed (its inode, size or modification time; one `stat` per query), so rotated
    tokens are picked up at the next query. Default unset."""
    bearer_token: SecretStr | None = None
    """A bearer token given as text; prefer `bearer_token_file`, which can rotate. Never logged
    or printed. Default unset."""
    basic_auth_username: str | None = None
    """User name for HTTP basic auth; needs `basic_auth_password_file` or
    `basic_auth_password`. Default unset."""
    basic_auth_password_file: Path | None = None
    """File holding the basic-auth password; read at start and again when it changes, as
    `bearer_token_file`. Default unset."""
    basic_auth_password: SecretStr | None = None
    """The basic-auth password as text; prefer `basic_auth_password_file`. Never logged or
    printed. Default unset."""
    ca_file: Path | None = None
    """PEM file of the CA certificates that sign the server's certificate, trusted instead of
    the system's (an `https` URL only). A missing or unreadable bundle stops the controller at
    start. Default unset: the system's trust store."""
    insecure_skip_verify: bool = False
    """Check no server certificate at all (`https` only; not with `ca_file`): the connection
    is encrypted but anyone can pose as the server. For tests. Default false."""
    gpu_utilization_metric: str = "DCGM_FI_DEV_GPU_UTIL"
    """DCGM series of a card's utilisation in percent, read for a pod that has no
    `gpu_activity_metric` series (cards older than Volta). DCGM exports none for MIG instances.
    Default `DCGM_FI_DEV_GPU_UTIL`."""
    gpu_activity_metric: str = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
    """DCGM series of a card's graphics-engine activity as a ratio 0-1 (read as percent times
    100), preferred wherever a pod has it: DCGM exports it for whole cards and MIG instances
    alike. Empty: read `gpu_utilization_metric` alone. Default `DCGM_FI_PROF_GR_ENGINE_ACTIVE`."""
    gpu_xid_metric: str = "DCGM_FI_DEV_XID_ERRORS"
    """DCGM series of the last XID error of a card (GPU health). Default
    `DCGM_FI_DEV_XID_ERRORS`."""
    gpu_fb_used_metric: str = "DCGM_FI_DEV_FB_USED"
    """DCGM series of a card's memory in use, MiB (GPU health). Default `DCGM_FI_DEV_FB_USED`."""
    gpu_fb_free_metric: str = "DCGM_FI_DEV_FB_FREE"
    """DCGM series of a card's free memory, MiB (GPU health). Default `DCGM_FI_DEV_FB_FREE`."""
    gpu_node_label: str = "Hostname"
    """Label of the DCGM series that holds the node's name. Default `Hostname` (the GPU
    Operator's dcgm-exporter sets it to the node name)."""
    headers: Headers = Field(default_factory=dict)
    """Extra HTTP headers sent with every query, as `Name=value,Name2=value2`, e.g.
    `X-Scope-OrgID=tenant-a` for a Mimir, Cortex or Loki tenant (a value holds no comma; join
    several tenants with `|` as Mimir does). Not for credentials: `Authorization` and
    `Cookie` are refused, use the settings above. Logged by name only. Default none."""

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{url!r} is not an http(s) URL with a host")
        if parts.query or parts.fragment:
            raise ValueError(f"{url!r}: a base URL has no query or fragment")
        if parts.username is not None or parts.password is not None:
            # The URL is logged at start: credentials go in the settings that keep them secret.
            raise ValueError("a base URL carries no user or password: use basic_auth_* instead")
        return url.rstrip("/")

    @field_validator(
        "gpu_utilization_metric", "gpu_xid_metric", "gpu_fb_used_metric", "gpu_fb_free_metric"
    )
    @classmethod
    def _metric_name(cls, name: str) -> str:
        metricnames.check_metric_name(name)
        return name

    @field_validator("gpu_activity_metric")
    @classmethod
    def _optional_metric_name(cls, name: str) -> str:
        if name:
            metricnames.check_metric_name(name)
        return name

    @field_validator("gpu_node_label")
    @classmethod
    def _label_name(cls, name: str) -> str:
        if not _LABEL_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a Prometheus label name")
        return name

    @field_validator("headers", mode="before")
    @classmethod
    def _headers_text(cls, value: object) -> object:
        return _parse_headers(value)

    @field_validator("headers")
    @classmethod
    def _headers_valid(cls, headers: dict[str, str]) -> dict[str, str]:
        return _check_headers(headers)

    @field_validator("basic_auth_username")
    @classmethod
    def _user_name(cls, name: str | None) -> str | None:
        if name is not None and (not name or ":" in name):
            raise ValueError("a basic-auth user name is not empty and holds no ':'")
        return name

    @model_validator(mode="after")
    def _one_way_in(self) -> Self:
        var = "AUTOSCALER_PROMETHEUS__"
        bearer = [n for n in ("bearer_token_file", "bearer_token") if getattr(self, n)]
        passwords = [
            n for n in ("basic_auth_password_file", "basic_auth_password") if getattr(self, n)
        ]
        basic = ["basic_auth_username"] * (self.basic_auth_username is not None) + passwords
        for chosen in (bearer, passwords):
            if len(chosen) > 1:
                first, second = (f"{var}{name.upper()}" for name in chosen)
                raise ValueError(f"set one of {first} and {second}, not both")
        if bearer and basic:
            raise ValueError(
                f"{var}{bearer[0].upper()} and {var}{basic[0].upper()} are exclusive: "
                "send a bearer token or basic auth, not both"
            )
        if basic and not (self.basic_auth_username and passwords):
            raise ValueError(
                f"basic auth needs both {var}BASIC_AUTH_USERNAME and "
                f"{var}BASIC_AUTH_PASSWORD_FILE (or {var}BASIC_AUTH_PASSWORD)"
            )
        if self.ca_file is not None and self.insecure_skip_verify:
            raise ValueError(
                f"{var}CA_FILE and {var}INSECURE_SKIP_VERIFY are exclusive: "
                "trust a CA bundle or check nothing"
            )
        tls = self.ca_file is not None or self.insecure_skip_verify
        if tls and not self.url.startswith("https://"):
            raise ValueError(
                f"{var}CA_FILE and {var}INSECURE_SKIP_VERIFY apply to an https URL, "
                f"not {self.url!r}"
            )
        return self

    @model_validator(mode="after")
    def _windows_hold_scrapes(self) -> Self:
        if self.rate_window_s is not None and self.rate_window_s < 2 * self.scrape_interval_s:
            raise ValueError(
                f"rate_window_s ({self.rate_window_s:g}) must span at least 2 scrape intervals "
                f"({2 * self.scrape_interval_s:g}): a rate needs two samples"
            )
        if self.max_age_s is not None and self.max_age_s < self.scrape_interval_s:
            raise ValueError(
                f"max_age_s ({self.max_age_s:g}) must be at least scrape_interval_s "
                f"({self.scrape_interval_s:g}), or every sample reads as stale between scrapes"
            )
        return self


class HttpSettings(BaseModel):
    model_config = _GROUP

    host: str = "0.0.0.0"
    """Address the `/metrics`, `/healthz` and `/readyz` server listens on. Default `0.0.0.0`
    (every interface, as a pod's probes and Prometheus need)."""
    port: int = Field(8080, ge=0, le=65535)
    """TCP port of that server; 0 picks a free one (for tests). Default 8080."""


class LoopSettings(BaseModel):
    model_config = _GROUP

    tick_s: float = Field(1.0, gt=0, allow_inf_nan=False)
    """Seconds between two ticks of the control loop (one sample per service per tick).
    Default 1. The simulator always ticks every second; `simulate` warns when this differs."""
    gc_threshold: Thresholds = (50_000, 20, 100)
    """The garbage collector's thresholds (`gc.set_threshold`), set once the caches have synced
    and what they hold was frozen out of collections: container objects made (less those
    freed) between two collections of the youngest generation, then collections of each
    generation between two of the next. One to three whole numbers >= 1, comma-separated (a
    generation left out keeps Python's, `700,10,10`). Default `50000,20,100`: at 10,000
    services Python's thresholds collected the youngest generation hundreds of times a tick
    and everything every other tick (docs/benchmark.md, "Scale"); with these a full
    collection still comes every 2,000 young ones, minutes apart, so garbage caught in a
    cycle cannot pile up."""

    @field_validator("gc_threshold", mode="before")
    @classmethod
    def _split_threshold(cls, value: object) -> object:
        return _split(value)

    @field_validator("gc_threshold")
    @classmethod
    def _check_threshold(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if not 1 <= len(value) <= 3 or min(value) < 1:
            raise ValueError(
                f"{','.join(map(str, value))!r}: one to three whole numbers >= 1, one per "
                "generation (0 would stop the collector)"
            )
        return value


class WarmupSettings(BaseModel):
    model_config = _GROUP

    probe_concurrency: int = Field(16, ge=1)
    """Warm-up probes in flight at once across the controller, one pod each. Default 16.
    Probes run beside the ticks, never inside one: more pods to probe only wait longer for
    their answer."""
    probe_deadline_s: float = Field(120.0, gt=0, allow_inf_nan=False)
    """Seconds one pod's probe may take in all (every one of its `warmup-requests`, each
    bounded by 5 s) before it ends and counts as failed; the pod is probed again at its next
    probe time, until its `warmup-deadline`. Default 120."""


class SmoothingSettings(BaseModel):
    model_config = _GROUP

    window_s: float = Field(300.0, gt=0, allow_inf_nan=False)
    """Seconds of history each smoothed signal sees (docs/architecture.md, "Smoothing"), for a
    managed Deployment without a `window` annotation (which sets its own). Default 300. The
    simulator always uses 300; `simulate` warns when this differs."""
    half_life_s: float = Field(30.0, gt=0)
    """Half-life in seconds of the exponential weights over the window, for the simulator's
    service; `inf` for a plain mean. Default 30. (A managed Deployment takes its own from its
    `half-life` annotation.)"""


class GpuSettings(BaseModel):
    model_config = _GROUP

    health_enabled: bool = True
    """Leave the GPUs of nodes DCGM reports unhealthy out of placement (docs/operations.md,
    "GPU health"). Default true."""
    health_interval_s: float = Field(60.0, gt=0, allow_inf_nan=False)
    """Seconds between two reads of the nodes' GPU health (one Prometheus query each).
    Default 60."""
    xid_window_s: float = Field(600.0, gt=0, allow_inf_nan=False)
    """Seconds an XID error keeps its node's GPUs out of placement. Default 600."""
    memory_ratio: float = Field(0.95, gt=0, le=1)
    """Share of a card's memory in use above which it counts as full. Default 0.95."""
    memory_window_s: float = Field(600.0, gt=0, allow_inf_nan=False)
    """Seconds a card must stay full before its node's GPUs are left out. Default 600."""
    core_weights: dict[str, float] = Field(
        default_factory=lambda: dict(placement.DEFAULT_CORE_WEIGHTS)
    )
    """Core-hours per card-hour by card product, as JSON (`{"H100-80GB": 80, "L4": 10}`):
    rows added to the default table, or replacing a row of the same name. A key matches a GFD
    product when each of its name tokens is one of the product's (docs/architecture.md,
    "Accounting"). Default `{"RTX 4090": 12, "A100-40GB": 30, "A800-80GB": 54}`."""
    core_weight_per_gib: float = Field(
        placement.DEFAULT_CORE_WEIGHT_PER_GIB, gt=0, allow_inf_nan=False
    )
    """Core-hours per card-hour per GiB of card memory (GFD's `nvidia.com/gpu.memory`) for a
    card no `core_weights` row names: an H100-80GB weighs 60 by default. A card whose memory is
    not known either weighs 1. Default 0.75 (the A100-40GB's 30 over 40 GiB)."""

    @field_validator("core_weights")
    @classmethod
    def _with_defaults(cls, weights: dict[str, float]) -> dict[str, float]:
        for key, weight in weights.items():
            if not key.strip() or not (weight >= 0 and weight < float("inf")):
                raise ValueError(
                    f"core weight {key!r}: {weight!r} must be a product name and a finite "
                    "number >= 0"
                )
        return {**placement.DEFAULT_CORE_WEIGHTS, **weights}


class CacheSettings(BaseModel):
    """Cache-aware placement (docs/operations.md, "Cache-aware placement")."""

    model_config = _GROUP

    enabled: bool = False
    """Learn which nodes hold each model's weights, label them
    `cache.autoscaler.dsec.io/<model key>` and have the tier Deployments prefer them. Needs
    `patch` on nodes. Default false."""
    retention_s: float = Field(3600.0, gt=0, allow_inf_nan=False)
    """Seconds a node stays warm after the last pod of a model of `reference_gib` there stopped
    (and of a model of unknown size). Default 3600."""
    reference_gib: float = Field(16.0, gt=0, allow_inf_nan=False)
    """Model size, in GiB, that is retained for `retention_s`; a model twice as big is retained
    half as long. Default 16."""
    min_retention_s: float = Field(300.0, gt=0, allow_inf_nan=False)
    """Shortest retention, however big the model. Default 300."""
    max_retention_s: float = Field(21_600.0, gt=0, allow_inf_nan=False)
    """Longest retention, however small the model. Default 21600 (6 hours)."""
    affinity_weight: int = Field(50, ge=1, le=100)
    """Weight of the preferred node affinity to the warm nodes' label, 1 to 100. Default 50."""

    @model_validator(mode="after")
    def _bounds_in_order(self) -> Self:
        if self.min_retention_s > self.max_retention_s:
            raise ValueError(
                f"cache.min_retention_s ({self.min_retention_s:g}) must be at most "
                f"cache.max_retention_s ({self.max_retention_s:g})"
            )
        return self


class LogSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    level: Literal["debug", "info", "warning", "error", "critical"] = "info"
    """Lowest level written. Default `info`."""
    # Named `json_lines` in Python because `json` shadows a BaseModel attribute; the setting
    # (AUTOSCALER_LOG__JSON) keeps the short name.
    json_lines: bool | None = Field(None, validation_alias=AliasChoices("json", "json_lines"))
    """JSON lines (true) or console rendering (false); unset: JSON unless stderr is a terminal."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="AUTOSCALER_",
        env_nested_delimiter="__",
        frozen=True,
        extra="forbid",
    )

    kubernetes: KubernetesSettings = KubernetesSettings()
    prometheus: PrometheusSettings = PrometheusSettings()
    http: HttpSettings = HttpSettings()
    loop: LoopSettings = LoopSettings()
    warmup: WarmupSettings = WarmupSettings()
    smoothing: SmoothingSettings = SmoothingSettings()
    gpu: GpuSettings = GpuSettings()
    cache: CacheSettings = CacheSettings()
    log: LogSettings = LogSettings()

    @model_validator(mode="after")
    def _window_holds_a_tick(self) -> Self:
        if self.smoothing.window_s < self.loop.tick_s:
            raise ValueError(
                f"smoothing.window_s ({self.smoothing.window_s:g}) must be at least "
                f"loop.tick_s ({self.loop.tick_s:g})"
            )
        return self
