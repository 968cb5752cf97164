"""Cached pods and ReplicaSets keep only what the controller reads: every reader answers on the
trimmed object as it does on the whole one, and what repeats across objects is one string."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any

import hypothesis
from hypothesis import strategies as st
from kube.emulator import Kube
from kube.store import Store
from kubernetes_asyncio import client

from autoscaler.adapters.kubernetes import (
    _api,
    caches,
    cluster,
    informer,
    nodecache,
    placement,
    ramp,
)
from autoscaler.clock import ManualClock
from autoscaler.contract import annotations as contract
from autoscaler.contract import targets

from .support import NS, eventually, running

PODS = "v1/pods"
REPLICASETS = "apps/v1/replicasets"

_words = st.sampled_from(["a", "b", "web", "true", "false", "", "mig-3g.40gb", "shared", "whole"])
_label_keys = st.sampled_from(
    [
        "app",
        "team",
        cluster.WARMING_LABEL,
        cluster.STABLE_LABEL,
        ramp.TIER_LABEL,
        cluster.LWS_NAME_LABEL,
        "leaderworkerset.sigs.k8s.io/worker-index",
    ]
)
_times = st.sampled_from(
    ["2026-01-01T00:00:00Z", "2026-01-01T00:00:30Z", "2026-01-01T00:05:00Z", "not a time"]
)
_uids = st.sampled_from(["u-1", "u-2", "u-3"])
_resources = st.dictionaries(
    st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "nvidia.com/mig-3g.40gb"]),
    st.one_of(st.sampled_from(["1", "2", "500m", "1.5", "16Gi"]), st.integers(0, 4)),
    max_size=3,
)
_container = st.fixed_dictionaries(
    {"name": st.sampled_from(["vllm", "sidecar"]), "image": st.just("vllm/vllm-openai:v0.10.1")},
    optional={
        "ports": st.lists(
            st.fixed_dictionaries(
                {"containerPort": st.one_of(st.integers(1, 65535), st.just("http"))},
                optional={"name": st.just("http"), "protocol": st.just("TCP")},
            ),
            max_size=2,
        ),
        "resources": st.fixed_dictionaries(
            {}, optional={"limits": _resources, "requests": _resources}
        ),
        "env": st.just([{"name": "MODEL", "value": "llama"}]),
        "args": st.just(["--port", "8000"]),
    },
)
_owner_ref = st.fixed_dictionaries(
    {
        "apiVersion": st.just("apps/v1"),
        "kind": st.sampled_from(["ReplicaSet", "Deployment", "StatefulSet"]),
        "name": st.sampled_from(["web-5d8f7c", "web"]),
        "uid": _uids,
    },
    optional={"controller": st.booleans(), "blockOwnerDeletion": st.booleans()},
)
_condition = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["Ready", "ContainersReady", contract.WARM_GATE, "PodScheduled"]),
        "status": st.sampled_from(["True", "False", "Unknown"]),
    },
    optional={
        "reason": st.sampled_from([contract.STANDBY_REASON, "Warming", "Unschedulable"]),
        "message": st.sampled_from(["waiting", "0/3 nodes are available"]),
        "lastTransitionTime": _times,
        "lastProbeTime": _times,
    },
)
_pod_meta = st.fixed_dictionaries(
    {"labels": st.dictionaries(_label_keys, _words, max_size=4)},
    optional={
        "annotations": st.dictionaries(
            st.sampled_from([caches.DELETION_COST, "prometheus.io/scrape", "sidecar.io/status"]),
            st.sampled_from([ramp.LOWEST_DELETION_COST, "0", "true", '{"x": 1}']),
            max_size=3,
        ),
        "ownerReferences": st.lists(_owner_ref, max_size=2),
        "finalizers": st.just(["example.com/keep"]),
    },
)
_pod_spec = st.fixed_dictionaries(
    {"containers": st.lists(_container, min_size=1, max_size=3)},
    optional={
        "nodeName": st.sampled_from(["gpu-node", ""]),
        "readinessGates": st.lists(
            st.fixed_dictionaries(
                {"conditionType": st.sampled_from([contract.WARM_GATE, "example.com/other"])}
            ),
            max_size=2,
        ),
        "tolerations": st.just([{"operator": "Exists"}]),
        "volumes": st.just([{"name": "cache", "emptyDir": {}}]),
        "schedulerName": st.just("default-scheduler"),
    },
)
_pod_status = st.fixed_dictionaries(
    {},
    optional={
        "phase": st.sampled_from(["Pending", "Running", "Succeeded", "Failed"]),
        "podIP": st.sampled_from(["10.0.0.7", ""]),
        "hostIP": st.just("192.168.0.1"),
        "conditions": st.lists(_condition, max_size=4, unique_by=lambda c: c["type"]),
        "containerStatuses": st.just([{"name": "vllm", "ready": True, "restartCount": 0}]),
    },
)


def _stored(
    meta: dict[str, Any], spec: dict[str, Any], status: dict[str, Any], *, deleting: bool
) -> Any:
    """The pod as the API server keeps it (defaults, uid, timestamps), its status written by the
    status subresource as a kubelet writes it."""
    store = Store()
    store.create(PODS, {"metadata": {**meta, "name": "pod"}, "spec": spec}, namespace=NS)
    if status:
        store.patch(
            PODS,
            NS,
            "pod",
            {"status": status},
            content_type="application/merge-patch+json",
            subresource="status",
        )
    pod = store.get(PODS, NS, "pod")
    if deleting:
        pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:06:00Z"
    return pod


_REPLICASET = {"metadata": {"name": "web-5d8f7c", "namespace": NS, "uid": "u-1"}}


def _get(namespace: str, name: str) -> _api.Obj | None:
    return _REPLICASET if (namespace, name) == (NS, "web-5d8f7c") else None


def _warm(condition: _api.Obj) -> tuple[object, ...]:
    return tuple(condition.get(k) for k in ("status", "message", "lastTransitionTime"))


_POD_READERS: dict[str, Callable[[_api.Obj], object]] = {
    "key": informer.key_of,
    "owner index": lambda p: list(caches.owner_values(p)),
    "namespace index": lambda p: list(caches.namespace_values(p)),
    "label index": lambda p: list(caches.label_values(p)),
    "closed gate index": lambda p: list(caches.closed_gate_values(p)),
    "name": _api.name,
    "namespace": _api.namespace,
    "uid": _api.uid,
    "resourceVersion": _api.resource_version,
    "controller uid": _api.controller_uid,
    "deletion cost": lambda p: _api.annotations_of(p).get(caches.DELETION_COST),
    "labels": lambda p: _api.meta(p).get("labels"),
    "pod_info": lambda p: repr(ramp.pod_info(p, offset_s=5.0)),
    "first port": ramp.first_port,
    "warm condition (set_warm)": lambda p: _warm(_api.condition(p, contract.WARM_GATE) or {}),
    "controller kind": ramp._controller_kind,
    "owner ReplicaSet": lambda p: ramp._owner(p, "ReplicaSet", _get) is not None,
    "older": lambda p: ramp._older(p, "5"),
    "serving": cluster.is_serving,
    "controller": cluster._controller,
    "start-up": lambda p: cluster.startup_s([p], recent=1),
    "start-up end": nodecache.startup_end_s,
    "bound": placement._bound,
    "terminal": placement._terminal,
    "pending": placement.is_pending,
    "GPU requests": lambda p: placement.gpu_requests(_api.spec(p)),
    "selected": lambda p: targets.Selector(
        (targets.Requirement("app", "in", frozenset({"web"})),)
    ).matches(_api.meta(p).get("labels") or {}),
}


@hypothesis.settings(max_examples=150, deadline=None)
@hypothesis.given(meta=_pod_meta, spec=_pod_spec, status=_pod_status, deleting=st.booleans())
@hypothesis.example(  # let out of the standby pool: started once its containers were ready
    meta={"labels": {}},
    spec={"containers": [{"name": "vllm", "image": "i"}]},
    status={
        "phase": "Running",
        "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:05:00Z"},
            {
                "type": "ContainersReady",
                "status": "True",
                "lastTransitionTime": "2026-01-01T00:00:30Z",
            },
            {"type": contract.WARM_GATE, "status": "True", "reason": contract.STANDBY_REASON},
        ],
    },
    deleting=False,
)
@hypothesis.example(  # waiting on a closed gate, its containers ready
    meta={"labels": {"app": "web"}},
    spec={
        "containers": [{"name": "vllm", "image": "i"}],
        "readinessGates": [{"conditionType": contract.WARM_GATE}],
    },
    status={"phase": "Running", "conditions": [{"type": "ContainersReady", "status": "True"}]},
    deleting=False,
)
def test_a_trimmed_pod_answers_every_reader_as_the_whole_pod(
    meta: dict[str, Any], spec: dict[str, Any], status: dict[str, Any], deleting: bool
) -> None:
    pod = _stored(meta, spec, status, deleting=deleting)
    trimmed = caches.trim_pod(pod)
    for reader, read in _POD_READERS.items():
        assert read(trimmed) == read(pod), reader


@hypothesis.settings(max_examples=50, deadline=None)
@hypothesis.given(
    owners=st.lists(_owner_ref, max_size=2),
    labels=st.dictionaries(_label_keys, _words, max_size=3),
    replicas=st.integers(0, 5),
)
def test_a_trimmed_replicaset_answers_every_reader_as_the_whole_one(
    owners: list[dict[str, Any]], labels: dict[str, str], replicas: int
) -> None:
    store = Store()
    template = {
        "metadata": {"labels": labels},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }
    store.create(
        REPLICASETS,
        {
            "metadata": {"name": "web-5d8f7c", "labels": labels, "ownerReferences": owners},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": template,
            },
        },
        namespace=NS,
    )
    whole = store.get(REPLICASETS, NS, "web-5d8f7c")
    trimmed = caches.trim_replicaset(whole)
    deployment = {"metadata": {"name": "web", "namespace": NS, "uid": "u-2"}}
    readers: dict[str, Callable[[_api.Obj], object]] = {
        "key": informer.key_of,
        "owner index": lambda r: list(caches.owner_values(r)),
        "name": _api.name,
        "namespace": _api.namespace,
        "uid": _api.uid,
        "resourceVersion": _api.resource_version,
        "controller uid": _api.controller_uid,
        "controller": cluster._controller,
        "controller kind": ramp._controller_kind,
        "owner Deployment": lambda r: ramp._owner(
            r, "Deployment", lambda ns, name: deployment if name == "web" else None
        ),
    }
    for reader, read in readers.items():
        assert read(trimmed) == read(whole), reader


def _pod(name: str, **labels: str) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(
            name=name,
            labels={"app": "web", **labels},
            annotations={"sidecar.io/status": "x" * 500},
        ),
        spec=client.V1PodSpec(
            node_name="gpu-node",
            containers=[
                client.V1Container(
                    name="vllm",
                    image="vllm/vllm-openai:v0.10.1",
                    env=[client.V1EnvVar(name="MODEL", value="llama")],
                )
            ],
        ),
    )


async def test_cached_pods_keep_only_what_is_read_and_share_what_repeats(
    kube: Kube, core: client.CoreV1Api
) -> None:
    """A pod listed and a pod that comes by the watch are both kept as `POD_FIELDS` says (no
    image, environment nor foreign annotation), and hold one copy of each label value, node
    name and namespace."""
    await core.create_namespaced_pod(NS, _pod("listed"))
    cached = caches.Caches(kube.api_client(), clock=ManualClock())
    async with running(cached.pods.run()):
        async with asyncio.timeout(5):
            await cached.pods.wait_synced()
        await core.create_namespaced_pod(NS, _pod("watched"))
        await eventually(lambda: cached.pods.get(NS, "watched") is not None, cached.pods)
    listed, watched = cached.pods.get(NS, "listed"), cached.pods.get(NS, "watched")
    assert listed is not None
    assert watched is not None
    for pod in (listed, watched):
        assert caches.pick(pod, caches.POD_FIELDS) == pod
        assert pod["spec"]["containers"] == [{}]
        assert "annotations" not in pod["metadata"] or pod["metadata"]["annotations"] == {}
    assert listed["metadata"]["labels"]["app"] is watched["metadata"]["labels"]["app"]
    assert listed["spec"]["nodeName"] is sys.intern("gpu-node")
    assert listed["metadata"]["namespace"] is watched["metadata"]["namespace"]


def test_pick_keeps_what_the_shape_names_as_it_finds_it() -> None:
    shape: caches.Shape = {
        "a": caches.KEEP,
        "b": {"c": caches.SHARED},
        "d": {"e": caches.KEEP},
        "f": {"g": caches.KEEP},
    }
    obj = {"a": [1], "b": {"c": "x-y", "z": 1}, "d": [{"e": 1, "z": 2}, "odd"], "f": "odd", "h": 1}
    assert caches.pick(obj, shape) == {
        "a": [1],
        "b": {"c": "x-y"},
        "d": [{"e": 1}, "odd"],
        "f": "odd",
    }
    assert caches.pick(obj, shape)["a"] is obj["a"]
    assert caches.pick(obj, shape)["b"]["c"] is sys.intern("x-y")


async def _never(**_: Any) -> Any:
    raise AssertionError("not listed")


@hypothesis.settings(max_examples=100, deadline=None)
@hypothesis.given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c"]),
            st.one_of(st.none(), st.dictionaries(st.sampled_from(["app", "tier"]), _words)),
        ),
        max_size=12,
    )
)
def test_the_indexes_follow_puts_and_removals_from_the_objects_alone(
    steps: list[tuple[str, dict[str, str] | None]],
) -> None:
    """An index holds each object under the values its indexer gives now, whatever came
    before: the values an object was indexed under are asked of the indexer again, not kept."""
    cache = informer.Informer(
        "pods",
        [informer.Source(_never)],
        clock=ManualClock(),
        indexers={caches.LABEL: caches.label_values, caches.NAMESPACE: caches.namespace_values},
    )
    for version, (name, labels) in enumerate(steps):
        key = (NS, name)
        if labels is None:
            cache._remove(key)
        else:
            meta = {
                "name": name,
                "namespace": NS,
                "labels": labels,
                "resourceVersion": str(version),
            }
            cache._put(key, {"metadata": meta})
    for index, indexer in (
        (caches.LABEL, caches.label_values),
        (caches.NAMESPACE, caches.namespace_values),
    ):
        expected: dict[str, set[informer.Key]] = {}
        for obj in cache.items():
            for value in indexer(obj):
                expected.setdefault(value, set()).add(informer.key_of(obj))
        assert cache._indexes[index] == expected


DEPLOYMENTS = "apps/v1/deployments"

_env = st.lists(
    st.one_of(
        st.fixed_dictionaries(
            {"name": st.sampled_from(["MODEL", "HF_MODEL_ID", "PORT"]), "value": _words}
        ),
        st.just({"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "t"}}}),
    ),
    max_size=3,
)
_template_container = st.fixed_dictionaries(
    {"name": st.sampled_from(["vllm", "sidecar"]), "image": st.sampled_from(["vllm:1", "x:2"])},
    optional={
        "command": st.just(["python", "-m", "vllm.entrypoints.openai.api_server"]),
        "args": st.lists(st.sampled_from(["--model", "meta-llama/Llama-3-8B", "--port"])),
        "env": _env,
        "resources": st.fixed_dictionaries(
            {}, optional={"limits": _resources, "requests": _resources}
        ),
        "ports": st.just([{"containerPort": 8000, "name": "http"}]),
        "volumeMounts": st.just([{"name": "cache", "mountPath": "/root/.cache"}]),
        "readinessProbe": st.just({"httpGet": {"path": "/health", "port": 8000}}),
    },
)
_affinity = st.just(
    {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 50,
                    "preference": {
                        "matchExpressions": [{"key": "warm.example/llama", "operator": "Exists"}]
                    },
                }
            ]
        }
    }
)
_template = st.fixed_dictionaries(
    {
        "metadata": st.fixed_dictionaries(
            {"labels": st.dictionaries(_label_keys, _words, max_size=3)},
            optional={"annotations": st.just({"prometheus.io/scrape": "true"})},
        ),
        "spec": st.fixed_dictionaries(
            {"containers": st.lists(_template_container, min_size=1, max_size=2)},
            optional={
                "readinessGates": st.lists(
                    st.fixed_dictionaries(
                        {"conditionType": st.sampled_from([contract.WARM_GATE, "example/x"])}
                    ),
                    max_size=2,
                ),
                "affinity": _affinity,
                "nodeSelector": st.just({"pool": "inference"}),
                "tolerations": st.just([{"operator": "Exists"}]),
                "volumes": st.just([{"name": "cache", "emptyDir": {}}]),
            },
        ),
    }
)
_deployment_notes = st.dictionaries(
    st.sampled_from(
        [
            contract.ENABLED_KEY,
            contract.STATUS_KEY,
            contract.STATE_KEY,
            contract.RAMP_KEY,
            placement.TEMPLATE_HASH_KEY,
            caches.LAST_APPLIED,
            "deployment.kubernetes.io/revision",
        ]
    ),
    st.sampled_from(["true", "1", '{"kind": "hold", "reason": "cooldown", "current": 2}']),
    max_size=4,
)


def _involved(d: _api.Obj) -> object:
    from autoscaler.adapters.kubernetes import events

    return events.involved_object(d)


_DEPLOYMENT_READERS: dict[str, Callable[[_api.Obj], object]] = {
    "key": informer.key_of,
    "owner index": lambda d: list(caches.owner_values(d)),
    "name": _api.name,
    "namespace": _api.namespace,
    "uid": _api.uid,
    "resourceVersion": _api.resource_version,
    "controller uid": _api.controller_uid,
    # kubectl's copy of the whole object was never kept (`caches._trim_meta` before).
    "annotations": lambda d: {
        k: v for k, v in _api.annotations_of(d).items() if k != caches.LAST_APPLIED
    },
    "opted in": lambda d: contract.opted_in(_api.annotations_of(d)),
    "labels": lambda d: _api.meta(d).get("labels"),
    "controller": cluster._controller,
    "controller kind": ramp._controller_kind,
    "owner Deployment": lambda d: ramp._owner(
        d, "Deployment", lambda ns, name: {"metadata": {"name": name, "uid": "u-1"}}
    ),
    "tier": placement.tier_of,
    "sibling": placement.is_sibling,
    "cards": placement.cards_of,
    "GPU requests": lambda d: placement.gpu_requests(_api.spec(_api.spec(d).get("template") or {})),
    "template hash": placement.template_hash,
    "replicas (Tier)": lambda d: placement.Tier("whole", d, (), ()).replicas,
    "scale": lambda d: targets.scale_of(targets.DEPLOYMENTS, d),
    "unsupported": lambda d: targets.unsupported(targets.DEPLOYMENTS, d, _api.annotations_of(d)),
    "gated": lambda d: cluster.is_gated(_api.spec(d).get("template") or {}),
    "template labels": lambda d: _api.meta(_api.spec(d).get("template") or {}).get("labels"),
    "model": lambda d: repr(
        nodecache.modelid.model_of(
            _api.spec(d).get("template") or {}, annotated=None, size_gib=None
        )
    ),
    "prefers": lambda d: nodecache.modelid.prefers(
        _api.spec(d).get("template") or {}, "warm.example/llama"
    ),
    "involved object": _involved,
}


@hypothesis.settings(max_examples=150, deadline=None)
@hypothesis.given(
    labels=st.dictionaries(_label_keys, _words, max_size=3),
    notes=_deployment_notes,
    owners=st.lists(_owner_ref, max_size=2),
    template=_template,
    replicas=st.one_of(st.none(), st.integers(0, 5)),
    status=st.booleans(),
)
def test_a_trimmed_deployment_answers_every_reader_as_the_whole_one(
    labels: dict[str, str],
    notes: dict[str, str],
    owners: list[dict[str, Any]],
    template: dict[str, Any],
    replicas: int | None,
    status: bool,
) -> None:
    store = Store()
    spec: dict[str, Any] = {
        "selector": {"matchLabels": template["metadata"]["labels"]},
        "template": template,
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}},
        "revisionHistoryLimit": 3,
    }
    if replicas is not None:
        spec["replicas"] = replicas
    meta = {
        "name": "web",
        "labels": labels,
        "annotations": notes,
        "ownerReferences": owners,
        "finalizers": ["example.com/keep"],
    }
    store.create(DEPLOYMENTS, {"metadata": meta, "spec": spec}, namespace=NS)
    if status:
        store.patch(
            DEPLOYMENTS,
            NS,
            "web",
            {
                "status": {
                    "replicas": 2,
                    "readyReplicas": 1,
                    "conditions": [
                        {
                            "type": "Available",
                            "status": "True",
                            "reason": "MinimumReplicasAvailable",
                        }
                    ],
                }
            },
            content_type="application/merge-patch+json",
            subresource="status",
        )
    whole = store.get(DEPLOYMENTS, NS, "web")
    trimmed = caches.trim_deployment(whole)
    for reader, read in _DEPLOYMENT_READERS.items():
        assert read(trimmed) == read(whole), reader
    assert caches.LAST_APPLIED not in _api.annotations_of(trimmed)
    # A template kept whole carries no digest: it is its own.
    kept = trimmed["spec"]["template"]
    assert (caches.TEMPLATE_DIGEST in kept) == (kept != whole["spec"]["template"])
    assert "volumes" not in trimmed["spec"]["template"]["spec"]
    assert "strategy" not in trimmed["spec"]


async def test_cached_deployments_are_trimmed_and_share_their_annotation_keys(
    kube: Kube, apps: client.AppsV1Api
) -> None:
    """A Deployment listed and one that comes by the watch are both kept as
    `DEPLOYMENT_FIELDS` says, with the digest of their whole template, and share the keys of
    their annotations."""
    template = {
        "metadata": {"labels": {"app": "web"}},
        "spec": {
            "containers": [
                {
                    "name": "vllm",
                    "image": "vllm:1",
                    "env": [{"name": "MODEL", "value": "llama"}],
                    "volumeMounts": [{"name": "cache", "mountPath": "/cache"}],
                }
            ],
            "volumes": [{"name": "cache", "emptyDir": {}}],
        },
    }

    def body(name: str) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "annotations": {contract.ENABLED_KEY: "true"}},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": template},
        }

    await apps.create_namespaced_deployment(NS, body("listed"))
    cached = caches.Caches(kube.api_client(), clock=ManualClock())
    async with running(cached.deployments.run()):
        async with asyncio.timeout(5):
            await cached.deployments.wait_synced()
        await apps.create_namespaced_deployment(NS, body("watched"))
        await eventually(
            lambda: cached.deployments.get(NS, "watched") is not None, cached.deployments
        )
    listed, watched = cached.deployments.get(NS, "listed"), cached.deployments.get(NS, "watched")
    assert listed is not None
    assert watched is not None
    digest = caches.template_digest(template)
    for deployment in (listed, watched):
        kept = deployment["spec"]["template"]
        assert kept[caches.TEMPLATE_DIGEST] == digest
        assert kept["spec"] == {
            "containers": [
                {"name": "vllm", "image": "vllm:1", "env": [{"name": "MODEL", "value": "llama"}]}
            ]
        }
        assert placement.template_hash(deployment) == digest
    (listed_key,) = listed["metadata"]["annotations"]
    (watched_key,) = watched["metadata"]["annotations"]
    assert listed_key is watched_key
