"""The controller's settings groups (kubernetes, prometheus, http, warmup) and the production
clock."""

from __future__ import annotations

import asyncio
import time

import pydantic
import pytest

from autoscaler import clock, settings


def test_controller_settings_default_without_environment() -> None:
    """With no AUTOSCALER_ variables the documented defaults apply."""
    config = settings.Settings()
    k8s, prom = config.kubernetes, config.prometheus
    assert (k8s.kubeconfig, k8s.context, k8s.namespaces, k8s.exclude_namespaces) == (
        None,
        None,
        (),
        (),
    )
    assert (k8s.dry_run, k8s.lease_name, k8s.lease_namespace, k8s.identity) == (
        False,
        "inference-autoscaler",
        "inference-autoscaler",
        None,
    )
    assert (k8s.lease_duration_s, k8s.renew_deadline_s, k8s.renew_interval_s) == (15, 10, 5)
    assert k8s.lease_buckets == 1
    assert prom.url == "http://prometheus-operated.monitoring.svc:9090"
    assert (prom.timeout_s, prom.scrape_interval_s, prom.max_age_s, prom.rate_window_s) == (
        2.0,
        15.0,
        None,
        None,
    )
    assert (config.http.host, config.http.port) == ("0.0.0.0", 8080)
    assert (config.warmup.probe_concurrency, config.warmup.probe_deadline_s) == (16, 120.0)


def test_namespaces_are_comma_separated_in_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Lists are comma-separated text; blanks and repeats are dropped, order kept."""
    monkeypatch.setenv("AUTOSCALER_KUBERNETES__NAMESPACES", " chat, ml,,chat ")
    monkeypatch.setenv("AUTOSCALER_KUBERNETES__EXCLUDE_NAMESPACES", "kube-system")
    monkeypatch.setenv("AUTOSCALER_PROMETHEUS__URL", "https://thanos.example:10902/")
    config = settings.Settings()
    assert config.kubernetes.namespaces == ("chat", "ml")
    assert config.kubernetes.exclude_namespaces == ("kube-system",)
    assert config.prometheus.url == "https://thanos.example:10902"


def test_workload_kinds_default_to_all_four_and_read_a_list(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every scalable kind is managed by default; the setting narrows them, in table order."""
    assert [k.kind for k in settings.Settings().kubernetes.kinds] == [
        "Deployment",
        "StatefulSet",
        "LeaderWorkerSet",
        "Rollout",
    ]
    monkeypatch.setenv("AUTOSCALER_KUBERNETES__WORKLOAD_KINDS", "StatefulSets, deployments")
    config = settings.Settings()
    assert config.kubernetes.workload_kinds == ("deployments", "statefulsets")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("AUTOSCALER_KUBERNETES__NAMESPACES", "ML"),
        ("AUTOSCALER_KUBERNETES__WORKLOAD_KINDS", "deployments,cronjobs"),
        ("AUTOSCALER_KUBERNETES__WORKLOAD_KINDS", ","),
        ("AUTOSCALER_KUBERNETES__NAMESPACES", '["a"]'),
        ("AUTOSCALER_KUBERNETES__LEASE_NAME", "Not a name"),
        ("AUTOSCALER_KUBERNETES__LEASE_NAME", "a" * 250),
        ("AUTOSCALER_KUBERNETES__LEASE_BUCKETS", "0"),
        ("AUTOSCALER_KUBERNETES__LEASE_BUCKETS", "100"),
        ("AUTOSCALER_KUBERNETES__RENEW_DEADLINE_S", "20"),
        ("AUTOSCALER_KUBERNETES__RENEW_INTERVAL_S", "10"),
        ("AUTOSCALER_PROMETHEUS__URL", "prometheus:9090"),
        ("AUTOSCALER_PROMETHEUS__URL", "http://p:9090/?q=1"),
        ("AUTOSCALER_PROMETHEUS__TIMEOUT_S", "0"),
        ("AUTOSCALER_PROMETHEUS__RATE_WINDOW_S", "20"),
        ("AUTOSCALER_PROMETHEUS__MAX_AGE_S", "10"),
        ("AUTOSCALER_HTTP__PORT", "65536"),
        ("AUTOSCALER_WARMUP__PROBE_CONCURRENCY", "0"),
        ("AUTOSCALER_WARMUP__PROBE_DEADLINE_S", "inf"),
        ("AUTOSCALER_HTTP__PROT", "8080"),
    ],
)
def test_controller_settings_refuse_bad_values(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    """Bad names, URLs and bounds, and inconsistent timings, stop the process at start."""
    monkeypatch.setenv(name, value)
    with pytest.raises(pydantic.ValidationError):
        settings.Settings()


def test_windows_may_follow_a_shorter_scrape_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rate window and staleness limit are judged against the scrape interval they come with."""
    monkeypatch.setenv("AUTOSCALER_PROMETHEUS__SCRAPE_INTERVAL_S", "5")
    monkeypatch.setenv("AUTOSCALER_PROMETHEUS__RATE_WINDOW_S", "10")
    monkeypatch.setenv("AUTOSCALER_PROMETHEUS__MAX_AGE_S", "5")
    config = settings.Settings()
    assert (config.prometheus.rate_window_s, config.prometheus.max_age_s) == (10, 5)


async def test_wall_clock_reads_unix_time() -> None:
    """The production clock is Unix time, so persisted cooldowns mean the same to every leader."""
    wall = clock.WallClock()
    before = time.time()
    now = wall.now()
    assert before <= now <= time.time()
    await asyncio.wait_for(wall.sleep(-1.0), timeout=1.0)  # a past deadline returns at once


def test_gc_threshold_is_comma_separated_and_never_stops_the_collector(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The collector's thresholds are one to three numbers >= 1, a young generation of 50,000
    objects unless set."""
    assert settings.Settings().loop.gc_threshold == (50_000, 20, 100)
    monkeypatch.setenv("AUTOSCALER_LOOP__GC_THRESHOLD", "50000, 20")
    assert settings.Settings().loop.gc_threshold == (50000, 20)
    for bad in ("0", "50000,0,10", "1,2,3,4", "many"):
        monkeypatch.setenv("AUTOSCALER_LOOP__GC_THRESHOLD", bad)
        with pytest.raises(pydantic.ValidationError, match="gc_threshold"):
            settings.Settings()
