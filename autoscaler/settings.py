"""The controller's own configuration, read once at start from the environment.

Variables carry the `AUTOSCALER_` prefix and `__` between a group and its field, e.g.
`AUTOSCALER_LOG__LEVEL=debug`, `AUTOSCALER_PROMETHEUS__URL=http://prometheus:9090` or
`AUTOSCALER_KUBERNETES__NAMESPACES=ml,chat` (lists are comma-separated). One frozen `Settings`
is built by the CLI (command-line flags override the environment) and handed down group by
group; nothing else reads the environment.

Every field says its unit and default; rules across fields are validators, so a bad
combination stops the process at start with one line naming the variable.

Only what the commands use today lives here; per-Deployment settings are annotations, not this.
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Annotated, Literal, Self

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

_GROUP = ConfigDict(frozen=True, extra="forbid")
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")

Namespaces = Annotated[tuple[str, ...], NoDecode]
"""A list of namespaces: comma-separated text in the environment, a tuple in Python."""


def _split(value: object) -> object:
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return value


def _check_namespaces(names: tuple[str, ...]) -> tuple[str, ...]:
    for name in names:
        if not _DNS1123_LABEL.fullmatch(name):
            raise ValueError(f"{name!r} is not a namespace name (a DNS-1123 label)")
    return tuple(dict.fromkeys(names))


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
    dry_run: bool = False
    """Decide, log, count and explain in the logs, but write nothing to the cluster: no
    replicas, annotations, Events nor Lease (a dry-run instance does not take part in the
    leader election, so it never displaces the real controller). Default false."""
    lease_name: str = "inference-autoscaler"
    """Name of the coordination.k8s.io Lease the replicas elect their leader with.
    Default `inference-autoscaler`."""
    lease_namespace: str = "inference-autoscaler"
    """Namespace of the Lease; the controller's own. Default `inference-autoscaler`."""
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

    @field_validator("namespaces", "exclude_namespaces", mode="before")
    @classmethod
    def _split_text(cls, value: object) -> object:
        return _split(value)

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
        if not _DNS1123_SUBDOMAIN.fullmatch(name):
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
    """Seconds one query may take before the tick reads its signal as missing. Default 2."""
    scrape_interval_s: float = Field(15.0, gt=0, allow_inf_nan=False)
    """Seconds between two scrapes of the model servers (their ServiceMonitor's interval).
    Default 15."""
    max_age_s: float | None = Field(None, gt=0, allow_inf_nan=False)
    """Seconds after which a sample is stale and reads as missing, never as zero.
    Default unset: 3 scrape intervals."""
    rate_window_s: float | None = Field(None, gt=0, allow_inf_nan=False)
    """Seconds of counter history each request rate spans, at least 2 scrape intervals.
    Default unset: 4 scrape intervals."""

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{url!r} is not an http(s) URL with a host")
        if parts.query or parts.fragment:
            raise ValueError(f"{url!r}: a base URL has no query or fragment")
        return url.rstrip("/")

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


class SmoothingSettings(BaseModel):
    model_config = _GROUP

    window_s: float = Field(300.0, gt=0, allow_inf_nan=False)
    """Seconds of history each smoothed signal sees (DESIGN §3.2). Default 300. The simulator
    always uses 300; `simulate` warns when this differs."""
    half_life_s: float = Field(30.0, gt=0)
    """Half-life in seconds of the exponential weights over the window, for the simulator's
    service; `inf` for a plain mean. Default 30. (A managed Deployment takes its own from its
    `half-life` annotation.)"""


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
    smoothing: SmoothingSettings = SmoothingSettings()
    log: LogSettings = LogSettings()

    @model_validator(mode="after")
    def _window_holds_a_tick(self) -> Self:
        if self.smoothing.window_s < self.loop.tick_s:
            raise ValueError(
                f"smoothing.window_s ({self.smoothing.window_s:g}) must be at least "
                f"loop.tick_s ({self.loop.tick_s:g})"
            )
        return self
