"""Informers and caches: list once, follow the watch, relist on 410, resume after failures."""

from __future__ import annotations

import asyncio
import random
import sys
from collections.abc import Callable
from typing import Any

import pytest
from kube.emulator import Kube
from kube.kubelet import FakeCluster
from kubernetes_asyncio import client

from autoscaler.adapters.kubernetes import _api, caches, informer
from autoscaler.clock import ManualClock

from .support import NS, StepClock, deployment, eventually, running

DEPLOYMENTS = "apps/v1/deployments"


class Recorder:
    """A handler that remembers (type, name) of every change."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def __call__(self, kind: str, old: _api.Obj | None, new: _api.Obj | None) -> None:
        obj = new if new is not None else old
        assert obj is not None
        self.seen.append((kind, _api.name(obj)))


def deployments_informer(
    apps: client.AppsV1Api, *, clock: Any = None, errors: list[str] | None = None
) -> informer.Informer:
    on_error: Callable[[str], None] = errors.append if errors is not None else _api.ignore_error
    return informer.Informer(
        "deployments",
        [informer.Source(apps.list_deployment_for_all_namespaces)],
        clock=clock or ManualClock(),
        on_api_error=on_error,
        rng=random.Random(1),
    )


def names(cache: informer.Informer) -> set[str]:
    return {_api.name(obj) for obj in cache.items()}


async def test_cache_fills_from_one_list_and_follows_changes(
    kube: Kube, apps: client.AppsV1Api
) -> None:
    """The cache lists once, then follows creations, updates and deletions through the watch."""
    await apps.create_namespaced_deployment(NS, deployment("a"))
    await apps.create_namespaced_deployment(NS, deployment("b"))
    cache = deployments_informer(apps)
    recorder = Recorder()
    cache.add_handler(recorder)
    async with running(cache.run()):
        async with asyncio.timeout(5):
            await cache.wait_synced()
        assert names(cache) == {"a", "b"}

        await apps.create_namespaced_deployment(NS, deployment("c"))
        await apps.patch_namespaced_deployment("a", NS, {"spec": {"replicas": 5}})
        await apps.delete_namespaced_deployment("b", NS)

        def caught_up() -> bool:
            a = cache.get(NS, "a")
            return names(cache) == {"a", "c"} and a is not None and a["spec"]["replicas"] == 5

        await eventually(caught_up, cache)

    assert recorder.seen == [
        ("ADDED", "a"),
        ("ADDED", "b"),
        ("ADDED", "c"),
        ("MODIFIED", "a"),
        ("DELETED", "b"),
    ]
    assert kube.requests.count("list", "deployments") == 1
    assert cache.relists == 1


async def test_expired_watch_relists_and_reports_what_changed_meanwhile(
    kube: Kube, apps: client.AppsV1Api
) -> None:
    """A watch that falls behind compacted history (410) relists and emits only the differences."""
    for name in ("keep", "gone", "changed"):
        await apps.create_namespaced_deployment(NS, deployment(name))
    cache = deployments_informer(apps)
    recorder = Recorder()
    async with running(cache.run()):
        async with asyncio.timeout(5):
            await cache.wait_synced()
        cache.add_handler(recorder)
        # Changed and compacted in one step: the open watch never sees these changes.
        store = kube.store
        store.create(DEPLOYMENTS, deployment("new"), namespace=NS)
        store.delete(DEPLOYMENTS, NS, "gone")
        store.patch(DEPLOYMENTS, NS, "changed", {"spec": {"replicas": 7}})
        kube.compact()

        await eventually(lambda: names(cache) == {"keep", "changed", "new"}, cache)

    assert sorted(recorder.seen) == [("ADDED", "new"), ("DELETED", "gone"), ("MODIFIED", "changed")]
    changed = cache.get(NS, "changed")
    assert changed is not None
    assert changed["spec"]["replicas"] == 7
    assert kube.requests.count("list", "deployments") == 2


@pytest.mark.parametrize("http", [False, True], ids=["error-event", "http-status"])
async def test_watch_gone_at_start_relists_without_losing_state(
    kube: Kube, apps: client.AppsV1Api, http: bool
) -> None:
    """A 410 on the first watch, as an ERROR event or HTTP status, relists and keeps the cache."""
    await apps.create_namespaced_deployment(NS, deployment("a"))
    kube.expire_next_watch("deployments", http=http)
    cache = deployments_informer(apps)
    async with running(cache.run()):
        async with asyncio.timeout(5):
            await cache.wait_synced()
        await apps.create_namespaced_deployment(NS, deployment("b"))
        await eventually(lambda: names(cache) == {"a", "b"}, cache)
        await apps.create_namespaced_deployment(NS, deployment("c"))
        await eventually(lambda: names(cache) == {"a", "b", "c"}, cache)
    assert kube.requests.count("list", "deployments") == 2


async def test_failed_watch_resumes_from_its_resource_version_after_backoff(
    kube: Kube, apps: client.AppsV1Api
) -> None:
    """A watch that fails backs off on the clock, then resumes where it was without relisting."""
    clock = StepClock()
    errors: list[str] = []
    kube.fail("watch", "deployments", status=500)
    cache = deployments_informer(apps, clock=clock, errors=errors)
    async with running(cache.run()):
        await clock.wait_sleeping(1)  # in its backoff, after the failed watch
        assert cache.synced
        assert errors == ["deployments.watch"]
        # Created while nobody watches: only a resume from the list's version delivers it.
        await apps.create_namespaced_deployment(NS, deployment("meanwhile"))
        clock.advance(60)
        await eventually(lambda: names(cache) == {"meanwhile"}, cache)

    assert kube.requests.count("list", "deployments") == 1
    assert kube.requests.count("watch", "deployments") == 2


async def test_backoff_grows_with_failures_and_is_jittered() -> None:
    """Backoff doubles with each failure up to its cap, drawn from the upper half of the step."""
    backoff = informer.Backoff(initial_s=1.0, max_s=8.0)
    rng = random.Random(3)
    delays = [backoff.delay_s(n, rng) for n in range(1, 7)]
    for n, delay in enumerate(delays, start=1):
        step = min(8.0, 2.0 ** (n - 1))
        assert step / 2 <= delay <= step
    assert len(set(delays)) == len(delays)


async def test_pods_are_grouped_by_owner_not_by_labels(
    kube: Kube, kubelet: FakeCluster, apps: client.AppsV1Api
) -> None:
    """Pods of a sibling Deployment whose labels overlap belong to the sibling only."""
    kubelet.add_node("gpu-1", gpus=8)
    await apps.create_namespaced_deployment(NS, deployment("llm", replicas=2))
    sibling = deployment("llm-mig", replicas=3, labels={"app": "llm", "tier": "mig"})
    await apps.create_namespaced_deployment(NS, sibling)
    await kubelet.settle()

    cached = caches.Caches(kube.api_client(), clock=ManualClock())
    async with running(cached.run()):
        async with asyncio.timeout(5):
            await cached.wait_synced()
        owner, other = cached.deployment(NS, "llm"), cached.deployment(NS, "llm-mig")
        assert owner is not None
        assert other is not None
        owner_pods, other_pods = cached.pods_of(owner), cached.pods_of(other)

    assert len(owner_pods) == 2
    assert len(other_pods) == 3
    assert all(_api.name(p).startswith("llm-mig-") for p in other_pods)
    assert not {_api.name(p) for p in owner_pods} & {_api.name(p) for p in other_pods}
    assert all(p["metadata"]["labels"]["app"] == "llm" for p in owner_pods + other_pods)


async def test_namespace_filters_choose_what_is_watched(kube: Kube, apps: client.AppsV1Api) -> None:
    """An include list watches each namespace on its own; an exclude list drops a namespace."""
    core = client.CoreV1Api(kube.api_client())
    for namespace in ("serving", "batch"):
        await core.create_namespace({"metadata": {"name": namespace}})
        await apps.create_namespaced_deployment(namespace, deployment(f"in-{namespace}"))
    await apps.create_namespaced_deployment(NS, deployment("in-default"))

    included = caches.Caches(
        kube.api_client(), clock=ManualClock(), namespaces=caches.NamespaceFilter.of(["serving"])
    )
    excluded = caches.Caches(
        kube.api_client(),
        clock=ManualClock(),
        namespaces=caches.NamespaceFilter.of(exclude=["batch"]),
    )
    async with running(included.run()), running(excluded.run()):
        async with asyncio.timeout(5):
            await included.wait_synced()
            await excluded.wait_synced()
        await apps.create_namespaced_deployment("batch", deployment("later"))
        await apps.create_namespaced_deployment("serving", deployment("later"))
        await eventually(lambda: len(included.deployments) == 2, included.deployments)
        await eventually(lambda: len(excluded.deployments) == 3, excluded.deployments)

    assert {informer.key_of(d) for d in included.deployments.items()} == {
        ("serving", "in-serving"),
        ("serving", "later"),
    }
    assert {informer.key_of(d) for d in excluded.deployments.items()} == {
        ("serving", "in-serving"),
        ("serving", "later"),
        (NS, "in-default"),
    }
    assert kube.requests.count("list", "deployments", namespace="serving") == 1
    assert kube.requests.count("list", "deployments", namespace=None) == 1


async def test_cancelled_informer_stops_promptly_and_keeps_its_cache(
    apps: client.AppsV1Api,
) -> None:
    """Cancelling a running informer ends it at once, mid-watch, leaving the cache readable."""
    await apps.create_namespaced_deployment(NS, deployment("a"))
    cache = deployments_informer(apps)
    task = asyncio.create_task(cache.run())
    async with asyncio.timeout(5):
        await cache.wait_synced()
    task.cancel()
    async with asyncio.timeout(5):
        with pytest.raises(asyncio.CancelledError):
            await task
    assert names(cache) == {"a"}


def scaled_objects_informer(kube: Kube, clock: Any) -> informer.Informer:
    custom = client.CustomObjectsApi(kube.api_client())
    return informer.Informer(
        caches.SCALED_OBJECTS,
        [
            informer.Source(
                custom.list_cluster_custom_object,
                (caches.KEDA_GROUP, caches.KEDA_VERSION, caches.SCALED_OBJECTS),
            )
        ],
        clock=clock,
        optional=True,
        absent_retry_s=300.0,
        rng=random.Random(1),
    )


async def test_an_optional_kind_that_is_not_served_reads_as_none_and_is_tried_again(
    kube: Kube,
) -> None:
    """A 404 on an optional kind's list (no CRD) syncs an empty cache, and a later list finds
    the kind once it is installed."""
    clock = StepClock()
    kube.fail("list", caches.SCALED_OBJECTS, status=404, times=2)
    cache = scaled_objects_informer(kube, clock)
    async with running(cache.run()):
        await clock.wait_sleeping(1)
        assert cache.synced
        assert len(cache) == 0
        clock.advance(300)  # still absent: a second 404, nothing failed
        await clock.wait_sleeping(1)
        assert kube.requests.count("list", caches.SCALED_OBJECTS) == 2
        kube.store.create(
            f"{caches.KEDA_GROUP}/{caches.KEDA_VERSION}/{caches.SCALED_OBJECTS}",
            {"metadata": {"name": "chat"}, "spec": {"scaleTargetRef": {"name": "chat"}}},
            namespace=NS,
        )
        clock.advance(300)
        await eventually(lambda: names(cache) == {"chat"}, cache)

    assert kube.requests.count("list", caches.SCALED_OBJECTS) == 3


async def test_other_scalers_are_found_by_the_deployment_they_target(kube: Kube) -> None:
    """HPAs and ScaledObjects are indexed by their target Deployment; other kinds are not."""
    hpa = "autoscaling/v2/horizontalpodautoscalers"
    scaled = f"{caches.KEDA_GROUP}/{caches.KEDA_VERSION}/{caches.SCALED_OBJECTS}"

    def ref(name: str, kind: str | None = "Deployment") -> dict[str, Any]:
        target = {"apiVersion": "apps/v1", "name": name}
        return {"scaleTargetRef": target if kind is None else {**target, "kind": kind}}

    kube.store.create(hpa, {"metadata": {"name": "chat-hpa"}, "spec": ref("chat")}, namespace=NS)
    kube.store.create(
        hpa, {"metadata": {"name": "rs"}, "spec": ref("chat", "ReplicaSet")}, namespace=NS
    )
    kube.store.create(scaled, {"metadata": {"name": "so"}, "spec": ref("chat", None)}, namespace=NS)
    kube.store.create(scaled, {"metadata": {"name": "other"}, "spec": ref("embed")}, namespace=NS)

    cached = caches.Caches(kube.api_client(), clock=ManualClock())
    async with running(cached.run()):
        async with asyncio.timeout(5):
            await cached.wait_synced()
        assert cached.other_scalers(NS, "chat") == [
            f"HorizontalPodAutoscaler {NS}/chat-hpa",
            f"ScaledObject {NS}/so",
        ]
        assert cached.other_scalers(NS, "embed") == [f"ScaledObject {NS}/other"]
        assert cached.other_scalers(NS, "none") == []


async def test_objects_that_come_by_the_watch_share_their_keys_and_short_values(
    kube: Kube, apps: client.AppsV1Api
) -> None:
    """Two Deployments created while the cache watches, each decoded from its own event, hold
    one copy of each key and of each short value they have in common; what they say is what
    the API says, long values and resourceVersions included."""
    cache = deployments_informer(apps)
    async with running(cache.run()):
        async with asyncio.timeout(5):
            await cache.wait_synced()
        for name in ("a", "b"):
            await apps.create_namespaced_deployment(NS, deployment(name))
        await eventually(lambda: names(cache) == {"a", "b"}, cache)
        read = await _api.call_json(apps.read_namespaced_deployment, "a", NS)
    a, b = cache.get(NS, "a"), cache.get(NS, "b")
    assert a is not None
    assert b is not None

    def key(obj: _api.Obj, wanted: str) -> str:
        return next(k for k in obj if k == wanted)

    assert key(a, "metadata") is key(b, "metadata")
    assert key(a["metadata"], "namespace") is key(b["metadata"], "namespace")
    assert a["metadata"]["namespace"] is b["metadata"]["namespace"]
    assert a["apiVersion"] is b["apiVersion"]
    assert a == read  # the API's own JSON of "a", decoded once


def test_shared_keeps_every_value_and_shares_only_short_strings() -> None:
    long = "x" * (informer.SHARED_MAX_CHARS + 1)
    obj = {"metadata": {"resourceVersion": "123", "labels": {"app": "web"}}, "items": [{"k": long}]}
    copy = informer.shared(obj)
    assert copy == obj
    assert copy["metadata"]["labels"]["app"] is sys.intern("web")
