"""Wiring: settings -> the Kubernetes and Prometheus adapters -> the loop, run as one controller.

The only module that names concrete adapters. `run` is `autoscaler run`; `wire` builds a
`Controller` from the settings (with clocks a test can replace) and `Controller.serve` runs it
in one `asyncio.TaskGroup`:

- the caches and the Event recorder, on every replica: followers keep their caches warm so
  that they can take over at once;
- the bucket Leases (`leader.BucketLeases`, coordination.k8s.io): `lease_buckets` of them,
  one by default (the single leader Lease). This replica campaigns for every bucket and acts
  only on the services whose bucket it leads: one predicate, judged once per tick
  (`owned_now`), makes `KubeCluster.workloads()` skip the other services (so the loop, the
  Prometheus queries, the placement upkeep and the ramp driver never see them) and keeps the
  gates the ramp driver opens to its own Deployments (`_OwnedGates`); every write is fenced
  per service by the live answer (`owns`). A bucket this replica gives up to even the split
  is cleared only once the tick under way and the Events on their way are done
  (`_wait_quiet`). None with the global dry-run, which writes
  nothing, the Leases included, so a dry-run instance never displaces the real controller;
- the ticker: while this replica leads at least one bucket, `Loop.run`, which alone decides
  when work runs: a tick every `tick_s` on a fixed grid, ending with the placement ladder's
  upkeep (`KubeCluster.tend`), each report fed to `Telemetry`. Every new term of leadership
  (from leading no bucket to leading some) starts a fresh `Loop`, whose state comes from the
  Deployments' `state` annotations as the previous leader left them; a bucket won or lost
  within a term only changes which services the loop sees (a service that comes in starts
  from its annotations, one that goes is forgotten). Every `gpu.health_interval_s` the tick
  also runs the GPU health guard (`GpuGuard.tend`: one DCGM query, unhealthy nodes left out of
  placement). The end of a term (or of the ticker)
  cancels its ramp driver's warm-up probes and waits for them;
- the HTTP server: `/metrics`, `/healthz` (with the buckets led), and `/readyz` (caches
  synced and, while leading some bucket, a tick within the last few `tick_s` since this
  replica's set of buckets last changed).

The warm-up gate and the traffic ramp (docs/architecture.md,
"The warm-up gate and the traffic ramp") ride on the same parts: `KubeRamp` on the same client and
caches, one traffic router per `traffic-router` value, the health gate on the same Prometheus
settings as the signals, and one HTTP prober. Each term's loop sends its scale writes through a
fresh `RampDriver` (which resumes every ramp from the Deployments' `autoscaler.dsec.io/ramp`
annotations) and lets it act once per tick.

An unexpected exception in any of them ends the group, and with it the process, for
Kubernetes to restart. Setting `stop` (SIGTERM or SIGINT under `run`) stops ticking, lets
queued Events out, releases the Leases, stops the rest, and returns.

Production time is wall time for the loop (the persisted cooldowns are Unix seconds and must
survive a change of leader), the event loop's monotonic clock for the Lease, readiness and
the adapters' retries, and a high-resolution timer for the warm-up probes' latencies. Tests
replace the loop's, the Lease's and the probes' clocks and leave the retries on the event loop.

It decides nothing: the loop and the core do.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import math
import signal
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Final

import structlog
from aiohttp import web

from autoscaler import clock as clock_
from autoscaler import errors, ports, ramp_driver, settings, telemetry
from autoscaler import loop as loop_
from autoscaler.adapters import prometheus, warmup
from autoscaler.adapters.kubernetes import caches, cluster, connection, gpuguard, leader, ramp
from autoscaler.adapters.mesh import registry
from autoscaler.core import cache, gates, gpuhealth, shards, smoothing

log = structlog.get_logger(__name__)

STARTED: Final = "controller.started"
STOPPING: Final = "controller.stopping"
STOPPED: Final = "controller.stopped"
HTTP_SERVING: Final = "http.serving"

STALLED_TICKS: Final = 5
"""A leader whose last tick is older than this many `tick_s` (plus a Prometheus timeout) is
not ready."""
EVENT_FLUSH_S: Final = 5.0
"""Seconds a stopping leader waits for its queued Events to be posted."""
HISTORY_TIMEOUT_S: Final = 10.0
"""Deadline of one range query for the seasonal forecast's history (at least the instant
queries' own)."""

OnTick = Callable[[loop_.TickReport, float], None]
"""Told each tick's report and its whole duration in seconds, the telemetry that follows the
step included (benchmarks)."""

Owns = Callable[[str], bool]
"""Whether this replica acts on the service `namespace/name` now (it leads its bucket)."""


class _OwnedGates:
    """The ramp driver's `Gates` over the adapter, keeping the gates of the Deployments whose
    bucket this replica leads."""

    def __init__(self, inner: ramp.KubeRamp, owned: Callable[[], Owns]) -> None:
        self._inner = inner
        self._owned = owned

    def closed_gates(self) -> Sequence[gates.ClosedGate]:
        owns = self._owned()
        return [g for g in self._inner.closed_gates() if owns(f"{g.namespace}/{g.deployment}")]

    async def open_gate(self, gate: gates.ClosedGate, message: str) -> None:
        await self._inner.open_gate(gate, message)

    def announce(self, opening: gates.Opening) -> None:
        self._inner.announce(opening)


class Controller:
    """One replica of the controller, wired and ready to `serve`; see the module docstring."""

    def __init__(
        self,
        config: settings.Settings,
        api: connection.ApiClient,
        *,
        clock: clock_.Clock,
        lease_clock: clock_.Clock,
        wall_now: Callable[[], float],
        probe_timer: Callable[[], float] = time.perf_counter,
        identity: str | None = None,
        on_tick: OnTick | None = None,
        access: prometheus.Access | None = None,
        freeze_heap: bool = False,
    ) -> None:
        """Build the adapters, the elector and the telemetry on `api` (a kubernetes-asyncio
        `ApiClient`); nothing runs until `serve`. `access` is how the Prometheus queries get
        through (default: read from the settings now, see `prometheus_access`).

        `clock` is the loop's (policy time, persisted in Unix seconds in production);
        `lease_clock` (monotonic) paces the Lease and judges its expiry and readiness;
        `wall_now` stamps the status annotation, Events and the Lease; `probe_timer` times the
        warm-up probes, whose latencies a new pod's must match the serving pods'. The adapters'
        retries and backoffs run on the event loop's clock.

        With `freeze_heap` (what `run` asks), once the caches have synced the garbage collector
        collects once and then leaves every object alive at that moment out of its collections
        (`gc.freeze`): the caches hold tens of thousands of objects that live as long as the
        process, and each full collection walked them all again. Its thresholds are then set
        to `loop.gc_threshold`. Tests that start many controllers in one process leave it off.
        """
        k8s, prom = config.kubernetes, config.prometheus
        self.settings = config
        self.clock = clock
        self.lease_clock = lease_clock
        self.identity = identity or k8s.identity or leader.default_identity()
        # Names this replica in the API server's audit log, next to its Lease and Events.
        api.user_agent = f"inference-autoscaler/{self.identity}"
        self.telemetry = telemetry.Telemetry()
        self._on_tick = on_tick
        self._freeze_heap = freeze_heap
        self.buckets = shards.Buckets.named(k8s.lease_name, k8s.lease_buckets)
        self.leases: leader.BucketLeases | None = None
        """One elector per bucket Lease; None in dry-run."""
        if not k8s.dry_run:
            self.leases = leader.BucketLeases(
                api,
                buckets=self.buckets,
                namespace=k8s.lease_namespace,
                identity=self.identity,
                clock=lease_clock,
                retry_interval_s=k8s.retry_interval_s,
                on_changed=self._buckets_changed,
                wait_quiet=self._wait_quiet,
                wall_now=wall_now,
                lease_duration_s=k8s.lease_duration_s,
                renew_interval_s=k8s.renew_interval_s,
                renew_deadline_s=k8s.renew_deadline_s,
                on_api_error=self._api_error,
                request_timeout_s=min(k8s.request_timeout_s, k8s.renew_deadline_s / 2),
            )
        self._led: frozenset[int] = frozenset()
        """The buckets in a term of leadership, as last told by the Leases."""
        self._leading_some = asyncio.Event()
        """Set while `_led` is not empty."""
        self._tick_idle = asyncio.Event()
        """Set while no tick is under way."""
        self._tick_idle.set()
        self.cluster = cluster.KubeCluster(
            api,
            identity=self.identity,
            clock=clock_.LoopClock(),
            wall_now=wall_now,
            namespaces=caches.NamespaceFilter.of(k8s.namespaces, k8s.exclude_namespaces),
            dry_run=k8s.dry_run,
            may_write=self.owns,
            owned=self.owned_now,
            on_api_error=self._api_error,
            request_timeout_s=k8s.request_timeout_s,
            on_tiers=self.telemetry.tiers,
            on_fallback=self.telemetry.fell_back,
            on_event=lambda outcome: self.telemetry.events.labels(outcome).inc(),
            core_weights=config.gpu.core_weights,
            core_weight_per_gib=config.gpu.core_weight_per_gib,
            cache_retention=_retention(config.cache),
            cache_weight=config.cache.affinity_weight,
            kinds=k8s.kinds,
        )
        access = access or prometheus_access(prom)
        self.prometheus = prometheus.Client(prom.url, timeout_s=prom.timeout_s, access=access)
        """The one Prometheus client of the metrics and the health queries."""
        self.metrics = prometheus.MetricsSource(
            self.prometheus,
            scrape_interval_s=prom.scrape_interval_s,
            max_age_s=prom.max_age_s,
            rate_window_s=prom.rate_window_s,
            gpu_metric=prom.gpu_utilization_metric,
            gpu_ratio_metric=prom.gpu_activity_metric or None,
        )
        self.gpu_guard: gpuguard.GpuGuard | None = None
        """Leaves nodes DCGM reports unhealthy out of placement; None when switched off."""
        if config.gpu.health_enabled:
            rules = gpuhealth.Rules(
                xid_window_s=config.gpu.xid_window_s,
                memory_ratio=config.gpu.memory_ratio,
                memory_window_s=config.gpu.memory_window_s,
            )
            dcgm = prometheus.GpuHealth(
                self.prometheus,
                names=prometheus.GpuHealthNames(
                    xid_errors=prom.gpu_xid_metric,
                    fb_used=prom.gpu_fb_used_metric,
                    fb_free=prom.gpu_fb_free_metric,
                    node_label=prom.gpu_node_label,
                ),
                rules=rules,
                scrape_interval_s=prom.scrape_interval_s,
            )
            self.gpu_guard = gpuguard.GpuGuard(
                self.cluster.placement.capacity,
                self.cluster.caches,
                self.cluster.events,
                read=dcgm.read,
                now=clock.now,
                rules=rules,
                interval_s=config.gpu.health_interval_s,
                on_change=self.telemetry.gpu_exclusions,
            )
        self.ramp = ramp.KubeRamp(
            api,
            self.cluster,
            clock=clock,
            wall_now=wall_now,
            request_timeout_s=k8s.request_timeout_s,
        )
        self.routers = registry.routers(
            api,
            on_api_error=self._api_error,
            may_write=lambda service: not k8s.dry_run and self.owns(service),
            request_timeout_s=k8s.request_timeout_s,
        )
        # A range query over days of history takes longer than a tick's instant query.
        self.history = prometheus.LoadHistory(
            prometheus.Client(
                prom.url, access=access, timeout_s=max(prom.timeout_s, HISTORY_TIMEOUT_S)
            ),
            wall_now=wall_now,
            scrape_interval_s=prom.scrape_interval_s,
        )
        self.health = prometheus.HealthQueries(
            self.prometheus,
            scrape_interval_s=prom.scrape_interval_s,
            max_age_s=prom.max_age_s,
        )
        self.prober = warmup.HttpProber(timer=probe_timer)
        self._owned_gates = _OwnedGates(self.ramp, self.owned_now)
        self._last_workloads: Sequence[ports.Workload] = ()
        self.loop: loop_.Loop | None = None
        """The loop of the current term of leadership; None while following."""
        self.ramps: ramp_driver.RampDriver | None = None
        """The ramp driver of the current term's loop."""
        self.ticks = 0
        """Ticks run since start, over every term."""
        self.http_port: int | None = None
        """The port `/metrics` is served on, once serving (useful when the setting is 0)."""
        self.serving = asyncio.Event()
        """Set once the HTTP server listens."""
        self.ticker: asyncio.Task[None] | None = None
        """The task that runs the terms' loops, once `serve` has begun: what a caller driving
        the loop's clock waits for after a new term starts, as it waits for a woken tick."""
        self._term = 0
        self._leading_since_s = -math.inf
        self._last_tick_s = -math.inf
        self.stall_after_s = STALLED_TICKS * config.loop.tick_s + prom.timeout_s

    # -- state ---------------------------------------------------------------------------------

    @property
    def elector(self) -> leader.LeaderElector | None:
        """The elector of the first bucket (the only one with one bucket); None in dry-run."""
        return None if self.leases is None else self.leases.electors[0]

    @property
    def leading(self) -> bool:
        """Whether this replica is in a term of leadership, of at least one bucket (always, in
        dry-run)."""
        return self.leases is None or bool(self.leases.leading())

    def is_leader(self) -> bool:
        """Whether this replica may act now on some service: it leads a bucket whose renew
        deadline has not passed."""
        return self.leases is None or bool(self.leases.led())

    def owns(self, service: str) -> bool:
        """Whether this replica may act on `service` (`namespace/name`) now: it leads the
        service's bucket and that Lease's renew deadline has not passed (always, in dry-run)."""
        return self.leases is None or self.leases.leads(service)

    def owned_now(self) -> Owns:
        """`owns` for the buckets led at this moment, judged once: the filter of one tick."""
        if self.leases is None:
            return _everything
        return self.leases.owned_now()

    @property
    def last_workloads(self) -> Sequence[ports.Workload]:
        """The services the last tick saw: those of the buckets this replica led then."""
        return self._last_workloads

    def buckets_led(self) -> frozenset[int]:
        """The buckets this replica may act on now (every bucket, in dry-run)."""
        if self.leases is None:
            return frozenset(range(len(self.buckets)))
        return self.leases.led()

    def health_text(self) -> str:
        """What `/healthz` and `/readyz` say besides their verdict: the buckets led."""
        led = sorted(self.buckets_led())
        names = ",".join(self.buckets.names[i] for i in led) or "-"
        return f"buckets: {len(led)}/{len(self.buckets)} {names}\n"

    def ready(self) -> bool:
        """`/readyz`: caches synced and, while leading some bucket, the loop ticking since the
        set of buckets last changed."""
        if not self.cluster.synced:
            return False
        if not self.is_leader():
            return True
        since = max(self._leading_since_s, self._last_tick_s)
        return self.lease_clock.now() - since <= self.stall_after_s

    def new_loop(self) -> loop_.Loop:
        """A loop over this replica's adapters, with no memory of earlier terms: its ramp driver
        resumes each ramp from what the Deployment carries."""
        self.ramps = ramp_driver.RampDriver(
            cluster=self.cluster,
            pods=self.ramp,
            routers=self.routers,
            health=self.health,
            prober=self.prober,
            gates=self._owned_gates,
            observer=self.telemetry,
            probe_concurrency=self.settings.warmup.probe_concurrency,
            probe_deadline_s=self.settings.warmup.probe_deadline_s,
        )
        return loop_.Loop(
            cluster=self.cluster,
            metrics=self.metrics,
            clock=self.clock,
            smoothing_config=smoothing.SmoothingConfig(
                window_s=self.settings.smoothing.window_s, tick_s=self.settings.loop.tick_s
            ),
            ramps=self.ramps,
            history=self.history,
            chores=(self.cluster.tend,)
            + (() if self.gpu_guard is None else (self.gpu_guard.tend,)),
            on_tick=(self._ticked,),
        )

    # -- running -------------------------------------------------------------------------------

    async def serve(self, stop: asyncio.Event) -> None:
        """Run every part until `stop` is set, then shut down in order; see the module docstring."""
        log.info(
            STARTED,
            identity=self.identity,
            dry_run=self.leases is None,
            namespaces=list(self.settings.kubernetes.namespaces) or "all",
            excluded=list(self.settings.kubernetes.exclude_namespaces),
            prometheus=self.settings.prometheus.url,
            prometheus_access=repr(self.prometheus.access),
        )
        if self.leases is None:  # dry-run: leads its own, writeless, term at once
            self._term, self._leading_since_s = 1, self.lease_clock.now()
        async with asyncio.TaskGroup() as group:
            rest = [
                group.create_task(self.cluster.run(), name="caches"),
                group.create_task(self._serve_http(), name="http"),
            ]
            elector = None
            if self.leases is not None:
                elector = group.create_task(self.leases.run(), name="leases")
            ticker = group.create_task(self._tick_while_leading(), name="ticker")
            self.ticker = ticker
            await stop.wait()
            log.info(STOPPING, identity=self.identity)
            await _cancel(ticker)
            if self.is_leader():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(EVENT_FLUSH_S):
                        await self.cluster.events.wait_idle()
            if elector is not None:
                await _cancel(elector)  # each elector releases its Lease as it stops
            for task in rest:
                task.cancel()
        log.info(STOPPED, identity=self.identity, ticks=self.ticks)

    async def wait_probes_idle(self) -> None:
        """Return once the current term's ramp driver has no warm-up probe in flight."""
        if self.ramps is not None:
            await self.ramps.wait_probes_idle()

    async def _tick_while_leading(self) -> None:
        try:
            await self._tick_terms()
        finally:
            await self._end_term()

    async def _end_term(self) -> None:
        """Drop the term's loop; its ramp driver's probes are cancelled and waited for."""
        self.loop = None
        self._tick_idle.set()
        ramps, self.ramps = self.ramps, None
        if ramps is not None:
            await ramps.close()

    async def _tick_terms(self) -> None:
        # A tick over half-filled caches would see Deployments without their pods: nothing
        # serving, every service holding, a status written for each.
        await self.cluster.wait_synced()
        if self._freeze_heap:
            gc.collect()
            gc.freeze()
            # What is left to collect is what the ticks make; at 10,000 services the youngest
            # generation filled hundreds of times a tick at Python's 700.
            gc.set_threshold(*self.settings.loop.gc_threshold)
        while True:
            if not self.leading:
                await self._leading_some.wait()
                continue
            term = self._term
            self.loop = self.new_loop()
            if self.gpu_guard is not None:
                # Before the term's first placement, not after it: the loop reads it again
                # at the end of a tick every `health_interval_s`.
                await self.gpu_guard.tend()
            try:
                # One term, one loop: it stops at the first slot after the term ends, and
                # skips a slot while the renewal is late (it waits a tick for it, or the loss).
                await self.loop.run(
                    active=functools.partial(self._in_term, term), may_step=self._may_step
                )
            finally:
                await self._end_term()

    def _in_term(self, term: int) -> bool:
        return self.leading and self._term == term

    def _may_step(self) -> bool:
        """`is_leader`, as the loop asks it right before a tick: a tick is under way from a yes
        until `_ticked` (or the end of the term)."""
        if not self.is_leader():
            return False
        self._tick_idle.clear()
        return True

    async def _wait_quiet(self) -> None:
        """Before a bucket given up to even the split is cleared: the tick under way (which may
        have begun with its services) ends, and the Events on their way are sent. Bounded by
        the request deadline, after which no request sent before the step-down is awaited."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.settings.kubernetes.request_timeout_s):
                await self._tick_idle.wait()
                await self.cluster.events.wait_idle()

    def _ticked(self, report: loop_.TickReport, duration_s: float) -> None:
        started = time.perf_counter()
        self._last_workloads = report.workloads
        self._tick_idle.set()
        if self.leading:  # else the term ended during the tick: its series are dropped already
            self.telemetry.observe_tick(
                report,
                report.workloads,
                duration_s=duration_s,
                wall_time_s=time.time(),
                tick_s=self.settings.loop.tick_s,
            )
        self.ticks += 1
        self._last_tick_s = self.lease_clock.now()
        if self._on_tick is not None:
            self._on_tick(report, duration_s + time.perf_counter() - started)

    async def _serve_http(self) -> None:
        http = self.settings.http
        app = telemetry.http_app(self.telemetry, ready=self.ready, detail=self.health_text)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, http.host, http.port).start()
            self.http_port = int(runner.addresses[0][1])
            self.serving.set()
            log.info(HTTP_SERVING, host=http.host, port=self.http_port)
            await asyncio.get_running_loop().create_future()  # until cancelled
        finally:
            await runner.cleanup()

    # -- callbacks -----------------------------------------------------------------------------

    def _buckets_changed(self) -> None:
        """A bucket was won or lost: a new term from none, the end of one at none."""
        assert self.leases is not None
        before, self._led = self._led, self.leases.leading()
        if before == self._led:
            return
        self.telemetry.led(self.buckets.names, self._led)
        log.info(
            "buckets.changed",
            identity=self.identity,
            led=[self.buckets.names[i] for i in sorted(self._led)],
            won=[self.buckets.names[i] for i in sorted(self._led - before)],
            lost=[self.buckets.names[i] for i in sorted(before - self._led)],
        )
        # Readiness gives the loop a few ticks over its new set of services.
        self._leading_since_s = self.lease_clock.now()
        if not before:
            self._term += 1
            self._leading_some.set()
        if before - self._led:
            # Another replica acts on those services now: what this one remembers about them
            # (the counts it set, its placements) would be stale if their bucket came back.
            self.cluster.forget_unless(self.owns)
        if not self._led:
            self._leading_some.clear()
            # The next leaders export these services now; stale copies here would be summed
            # with their series on every dashboard.
            self.telemetry.forget_services()
            self.telemetry.gpu_exclusions({})
            if self.gpu_guard is not None:
                self.gpu_guard.forget()

    def _api_error(self, operation: str) -> None:
        self.telemetry.api_errors.labels(operation).inc()


def _retention(config: settings.CacheSettings) -> cache.Retention | None:
    """The node caches' retention when cache-aware placement is on; None when it is off."""
    if not config.enabled:
        return None
    return cache.Retention(
        base_s=config.retention_s,
        reference_gib=config.reference_gib,
        min_s=config.min_retention_s,
        max_s=config.max_retention_s,
    )


def _everything(_: str) -> bool:
    return True


def prometheus_access(config: settings.PrometheusSettings) -> prometheus.Access:
    """The credentials, TLS trust and headers of every Prometheus query, from the settings.

    Reads the credential files and the CA bundle now: raises `ConfigError`, naming the
    variable, when one cannot be read.
    """
    var = "AUTOSCALER_PROMETHEUS__"
    bearer: prometheus.Secret | None = None
    if config.bearer_token_file is not None:
        bearer = prometheus.SecretFile(config.bearer_token_file, setting=f"{var}BEARER_TOKEN_FILE")
    elif config.bearer_token is not None:
        bearer = prometheus.SecretText(config.bearer_token.get_secret_value())
    basic: tuple[str, prometheus.Secret] | None = None
    if config.basic_auth_username is not None:
        password: prometheus.Secret
        if config.basic_auth_password_file is not None:
            password = prometheus.SecretFile(
                config.basic_auth_password_file, setting=f"{var}BASIC_AUTH_PASSWORD_FILE"
            )
        elif config.basic_auth_password is not None:
            password = prometheus.SecretText(config.basic_auth_password.get_secret_value())
        else:  # the settings' validator makes this unreachable
            raise errors.ConfigError(f"{var}BASIC_AUTH_USERNAME needs a password")
        basic = (config.basic_auth_username, password)
    return prometheus.Access(
        bearer_token=bearer,
        basic_auth=basic,
        ca_file=config.ca_file,
        insecure_skip_verify=config.insecure_skip_verify,
        headers=config.headers,
        ca_setting=f"{var}CA_FILE",
    )


async def _cancel(task: asyncio.Task[None]) -> None:
    """Cancel a task of the group and wait until it has finished (its `finally` included)."""
    task.cancel()
    await asyncio.wait([task])


@contextlib.asynccontextmanager
async def wire(
    config: settings.Settings,
    *,
    clock: clock_.Clock | None = None,
    lease_clock: clock_.Clock | None = None,
    wall_now: Callable[[], float] = time.time,
    probe_timer: Callable[[], float] = time.perf_counter,
    identity: str | None = None,
    on_tick: OnTick | None = None,
    freeze_heap: bool = False,
) -> AsyncIterator[Controller]:
    """A `Controller` on a client for the configured cluster; the clients close on exit.

    Production clocks by default: `WallClock` for the loop, the event loop's for the Lease,
    `time.perf_counter` for the probes. Raises `ConfigError` when a Prometheus credential file
    or CA bundle cannot be read, or no Kubernetes configuration can be loaded.
    """
    k8s = config.kubernetes
    access = prometheus_access(config.prometheus)
    api = await connection.api_client(kubeconfig=k8s.kubeconfig, context=k8s.context)
    try:
        controller = Controller(
            config,
            api,
            access=access,
            clock=clock or clock_.WallClock(),
            lease_clock=lease_clock or clock_.LoopClock(),
            wall_now=wall_now,
            probe_timer=probe_timer,
            identity=identity,
            on_tick=on_tick,
            freeze_heap=freeze_heap,
        )
        try:
            yield controller
        finally:
            await controller.prometheus.close()
            await controller.history.client.close()
            await controller.prober.close()
    finally:
        await api.close()


async def run(config: settings.Settings, *, stop: asyncio.Event | None = None) -> None:
    """`autoscaler run`: the controller until `stop` is set, or until SIGTERM or SIGINT.

    Signal handlers are installed only when no `stop` is given (the caller owns it otherwise).
    Returns after a clean shutdown; an unexpected error propagates.
    """
    handled: list[signal.Signals] = []
    if stop is None:
        stop = asyncio.Event()
        running = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            running.add_signal_handler(signum, stop.set)
            handled.append(signum)
    try:
        async with wire(config, freeze_heap=True) as controller:
            await controller.serve(stop)
    finally:
        for signum in handled:
            asyncio.get_running_loop().remove_signal_handler(signum)


async def read_workload(
    config: settings.KubernetesSettings, namespace: str, name: str
) -> dict[str, Any] | None:
    """The workload `namespace/name` of the kinds managed (`cluster.read_workload`), read once
    with the configured credentials; None when it does not exist.

    Raises `ConfigError` without credentials and `ActuationError` when the API fails.
    """
    api = await connection.api_client(kubeconfig=config.kubeconfig, context=config.context)
    try:
        return await cluster.read_workload(api, namespace, name, kinds=config.kinds)
    finally:
        await api.close()


async def list_workloads(
    config: settings.KubernetesSettings, namespace: str | None
) -> list[dict[str, Any]]:
    """The Deployments of `namespace` (None: every namespace) and the other workloads of the
    kinds managed, read once with the configured credentials. Raises `ConfigError` without
    credentials and `ActuationError` when the API fails."""
    api = await connection.api_client(kubeconfig=config.kubeconfig, context=config.context)
    try:
        return await cluster.list_workloads(api, namespace, kinds=config.kinds)
    finally:
        await api.close()
