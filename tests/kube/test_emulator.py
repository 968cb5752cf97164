"""The API emulator, exercised only through the real kubernetes-asyncio client."""

import asyncio
import re
from typing import Any

import aiohttp
import kmock
import looptime
import pytest
from kubernetes_asyncio import client, config, watch

from .emulator import Kube, serve
from .fixtures import wait_next

NS = "default"
MERGE = "application/merge-patch+json"


def deployment(name: str = "web", replicas: int = 2) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "server", "image": "vllm:1"}]},
            },
        },
    }


def pod(name: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [{"name": "c", "image": "x"}], **spec},
    }


@pytest.fixture
def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


async def names(core: client.CoreV1Api, **selectors: str) -> list[str]:
    pods = await core.list_namespaced_pod(NS, **selectors)
    return [p.metadata.name for p in pods.items]


# -- create, replace, metadata -----------------------------------------------------------------


async def test_create_answers_201_for_builtin_and_custom_objects(
    core: client.CoreV1Api, custom: client.CustomObjectsApi
) -> None:
    """Create answers 201 Created, so the client returns the object, custom objects included."""
    _, status, _ = await core.create_namespaced_pod_with_http_info(NS, pod("p"))
    assert status == 201

    body = {"apiVersion": "mesh.example/v1", "kind": "Route", "metadata": {"name": "r"}}
    created = await custom.create_namespaced_custom_object("mesh.example", "v1", NS, "routes", body)
    assert created["metadata"]["name"] == "r"
    assert created["kind"] == "Route"


async def test_lease_is_created_read_and_replaced(api: client.ApiClient) -> None:
    """Leases support create, get and PUT replace, and a replace from a stale read conflicts."""
    leases = client.CoordinationV1Api(api)
    spec = client.V1LeaseSpec(holder_identity="a", lease_duration_seconds=15)
    lease = client.V1Lease(metadata=client.V1ObjectMeta(name="leader"), spec=spec)
    await leases.create_namespaced_lease(NS, lease)

    mine = await leases.read_namespaced_lease("leader", NS)
    theirs = await leases.read_namespaced_lease("leader", NS)
    mine.spec.holder_identity = "b"
    renewed = await leases.replace_namespaced_lease("leader", NS, mine)
    assert renewed.spec.holder_identity == "b"
    assert int(renewed.metadata.resource_version) > int(theirs.metadata.resource_version)

    theirs.spec.holder_identity = "c"
    with pytest.raises(client.ApiException) as error:
        await leases.replace_namespaced_lease("leader", NS, theirs)
    assert error.value.status == 409
    assert (await leases.read_namespaced_lease("leader", NS)).spec.holder_identity == "b"


async def test_metadata_is_filled_by_the_server(
    apps: client.AppsV1Api, core: client.CoreV1Api
) -> None:
    """The server sets uid, creationTimestamp, generation and a name from generateName."""
    body = pod("")
    body["metadata"] = {"generateName": "worker-"}
    first = await core.create_namespaced_pod(NS, body)
    second = await core.create_namespaced_pod(NS, body)
    assert re.fullmatch(r"worker-[a-z0-9]{5}", first.metadata.name)
    assert first.metadata.name != second.metadata.name
    assert first.metadata.uid != second.metadata.uid
    assert first.metadata.creation_timestamp is not None

    created = await apps.create_namespaced_deployment(NS, deployment())
    assert created.metadata.generation == 1
    labelled = await apps.patch_namespaced_deployment(
        "web", NS, {"metadata": {"labels": {"x": "y"}}}
    )
    assert labelled.metadata.generation == 1
    scaled = await apps.patch_namespaced_deployment("web", NS, {"spec": {"replicas": 3}})
    assert scaled.metadata.generation == 2
    assert scaled.metadata.uid == created.metadata.uid


async def test_resource_versions_increase_and_lists_report_them(core: client.CoreV1Api) -> None:
    """Every write bumps the resourceVersion; a list carries the latest one; no-op writes do not."""
    before = int((await core.list_namespaced_pod(NS)).metadata.resource_version)
    created = await core.create_namespaced_pod(NS, pod("p"))
    patched = await core.patch_namespaced_pod("p", NS, {"metadata": {"labels": {"a": "1"}}})
    unchanged = await core.patch_namespaced_pod("p", NS, {"metadata": {"labels": {"a": "1"}}})
    after = int((await core.list_namespaced_pod(NS)).metadata.resource_version)
    assert before < int(created.metadata.resource_version) < int(patched.metadata.resource_version)
    assert unchanged.metadata.resource_version == patched.metadata.resource_version
    assert after == int(patched.metadata.resource_version)


async def test_stale_resource_version_conflicts(apps: client.AppsV1Api) -> None:
    """A PUT or a PATCH carrying a stale metadata.resourceVersion gets 409 Conflict."""
    stale = await apps.create_namespaced_deployment(NS, deployment())
    await apps.patch_namespaced_deployment("web", NS, {"spec": {"replicas": 4}})

    stale.spec.replicas = 9
    with pytest.raises(client.ApiException) as error:
        await apps.replace_namespaced_deployment("web", NS, stale)
    assert error.value.status == 409

    body = {
        "metadata": {"resourceVersion": stale.metadata.resource_version},
        "spec": {"replicas": 9},
    }
    with pytest.raises(client.ApiException) as error:
        await apps.patch_namespaced_deployment("web", NS, body)
    assert error.value.status == 409

    current = await apps.read_namespaced_deployment("web", NS)
    assert current.spec.replicas == 4
    current.spec.replicas = 5
    assert (await apps.replace_namespaced_deployment("web", NS, current)).spec.replicas == 5


async def test_finalizers_hold_deletion_until_removed(core: client.CoreV1Api) -> None:
    """Deleting an object with finalizers marks it; removing the last finalizer deletes it."""
    body = pod("p")
    body["metadata"]["finalizers"] = ["example.com/hold"]
    await core.create_namespaced_pod(NS, body)
    await core.delete_namespaced_pod("p", NS)
    marked = await core.read_namespaced_pod("p", NS)
    assert marked.metadata.deletion_timestamp is not None

    await core.patch_namespaced_pod("p", NS, {"metadata": {"finalizers": None}})
    with pytest.raises(client.ApiException) as error:
        await core.read_namespaced_pod("p", NS)
    assert error.value.status == 404


# -- discovery -----------------------------------------------------------------------------------


async def test_version_and_discovery_answer(api: client.ApiClient) -> None:
    """/version/, /api/, /apis/ and a group's resource list answer as discovery clients expect."""
    version = await client.VersionApi(api).get_code()
    assert version.major == "1"
    assert "v1" in (await client.CoreApi(api).get_api_versions()).versions
    groups = await client.ApisApi(api).get_api_versions()
    assert {"apps", "coordination.k8s.io", "events.k8s.io"} <= {g.name for g in groups.groups}
    resources = await client.AppsV1Api(api).get_api_resources()
    assert {"deployments", "deployments/scale", "deployments/status"} <= {
        r.name for r in resources.resources
    }


async def test_kubeconfig_file_configures_a_client(kube: Kube) -> None:
    """The kubeconfig file points a client loaded from it at the emulator without credentials."""
    assert kube.kubeconfig is not None
    configuration = client.Configuration()
    await config.load_kube_config(
        config_file=str(kube.kubeconfig), client_configuration=configuration
    )
    assert configuration.host == kube.url
    async with client.ApiClient(configuration) as api:
        namespaces = await client.CoreV1Api(api).list_namespace()
    assert "default" in {n.metadata.name for n in namespaces.items}


# -- selectors -----------------------------------------------------------------------------------


async def test_label_selectors_filter_lists(core: client.CoreV1Api) -> None:
    """Lists honour equality, !=, in, notin and existence label selectors."""
    await core.create_namespaced_pod(NS, pod("a", {"app": "llm", "tier": "gpu"}))
    await core.create_namespaced_pod(NS, pod("b", {"app": "llm", "tier": "cpu"}))
    await core.create_namespaced_pod(NS, pod("c", {"app": "web"}))

    assert await names(core, label_selector="app=llm") == ["a", "b"]
    assert await names(core, label_selector="app==llm,tier!=gpu") == ["b"]
    assert await names(core, label_selector="tier in (gpu, tpu)") == ["a"]
    assert await names(core, label_selector="app notin (llm)") == ["c"]
    assert await names(core, label_selector="tier notin (gpu)") == ["b", "c"]
    assert await names(core, label_selector="tier") == ["a", "b"]
    assert await names(core, label_selector="!tier") == ["c"]
    with pytest.raises(client.ApiException) as error:
        await names(core, label_selector="app in llm")
    assert error.value.status == 400


async def test_field_selectors_filter_lists(core: client.CoreV1Api, kube: Kube) -> None:
    """Lists honour metadata.name, metadata.namespace, spec.nodeName and status.phase selectors."""
    await core.create_namespace({"metadata": {"name": "other"}})
    await core.create_namespaced_pod(NS, pod("a", nodeName="gpu-1"))
    await core.create_namespaced_pod(NS, pod("b"))
    await core.create_namespaced_pod("other", pod("c", nodeName="gpu-1"))
    await core.patch_namespaced_pod_status("b", NS, {"status": {"phase": "Running"}})

    assert await names(core, field_selector="metadata.name=b") == ["b"]
    assert await names(core, field_selector="spec.nodeName=gpu-1") == ["a"]
    assert await names(core, field_selector="spec.nodeName=") == ["b"]
    assert await names(core, field_selector="status.phase!=Running") == ["a"]
    everywhere = await core.list_pod_for_all_namespaces(field_selector="metadata.namespace=other")
    assert [p.metadata.name for p in everywhere.items] == ["c"]
    with pytest.raises(client.ApiException) as error:
        await names(core, field_selector="spec.image=x")
    assert error.value.status == 400


async def test_lists_page_with_limit_and_continue(core: client.CoreV1Api) -> None:
    """A limited list returns a continue token that yields the rest in order."""
    for name in ("a", "b", "c"):
        await core.create_namespaced_pod(NS, pod(name))
    first = await core.list_namespaced_pod(NS, limit=2)
    assert [p.metadata.name for p in first.items] == ["a", "b"]
    assert first.metadata.remaining_item_count == 1
    rest = await core.list_namespaced_pod(NS, limit=2, _continue=first.metadata._continue)
    assert [p.metadata.name for p in rest.items] == ["c"]
    assert rest.metadata._continue is None


# -- watches -------------------------------------------------------------------------------------


async def test_watch_streams_changes_with_resource_versions(core: client.CoreV1Api) -> None:
    """A watch streams ADDED, MODIFIED and DELETED, each with the object's new resourceVersion."""
    await core.create_namespaced_pod(NS, pod("existing"))
    async with watch.Watch() as w:
        events = w.stream(core.list_namespaced_pod, NS)
        await wait_next(events)  # the replayed "existing": the stream is open from here on
        created = await core.create_namespaced_pod(NS, pod("p"))
        added = await wait_next(events)
        patched = await core.patch_namespaced_pod("p", NS, {"metadata": {"labels": {"a": "1"}}})
        modified = await wait_next(events)
        await core.delete_namespaced_pod("p", NS)
        deleted = await wait_next(events)

    assert [added["type"], modified["type"], deleted["type"]] == ["ADDED", "MODIFIED", "DELETED"]
    assert added["object"].metadata.resource_version == created.metadata.resource_version
    assert modified["object"].metadata.resource_version == patched.metadata.resource_version
    deleted_rv = deleted["object"].metadata.resource_version
    assert int(deleted_rv) > int(patched.metadata.resource_version)


async def test_watch_resumes_from_a_resource_version(core: client.CoreV1Api) -> None:
    """A watch from a list's resourceVersion streams only later changes, not the listed state."""
    await core.create_namespaced_pod(NS, pod("old"))
    listed = await core.list_namespaced_pod(NS)
    await core.create_namespaced_pod(NS, pod("new"))
    async with watch.Watch() as w:
        events = w.stream(
            core.list_namespaced_pod, NS, resource_version=listed.metadata.resource_version
        )
        event = await wait_next(events)
    assert (event["type"], event["object"].metadata.name) == ("ADDED", "new")


async def test_watch_without_resource_version_starts_with_the_current_state(
    core: client.CoreV1Api,
) -> None:
    """A watch with no resourceVersion first replays existing objects as ADDED."""
    await core.create_namespaced_pod(NS, pod("existing"))
    async with watch.Watch() as w:
        event = await wait_next(w.stream(core.list_namespaced_pod, NS))
    assert (event["type"], event["object"].metadata.name) == ("ADDED", "existing")


async def test_watch_applies_selectors_and_reports_leaving_as_deleted(
    core: client.CoreV1Api,
) -> None:
    """A selective watch sees an object enter its selectors as ADDED and leave them as DELETED."""
    await core.create_namespaced_pod(NS, pod("p", {"role": "cold"}))
    listed = await core.list_namespaced_pod(NS)
    await core.create_namespaced_pod(NS, pod("other", {"role": "warm"}))  # not by this name
    await core.patch_namespaced_pod("p", NS, {"metadata": {"labels": {"role": "warm"}}})
    await core.patch_namespaced_pod("p", NS, {"metadata": {"labels": {"role": "cold"}}})
    async with watch.Watch() as w:
        events = w.stream(
            core.list_namespaced_pod,
            NS,
            resource_version=listed.metadata.resource_version,
            label_selector="role=warm",
            field_selector="metadata.name!=other",
        )
        entered = await wait_next(events)
        left = await wait_next(events)
    assert (entered["type"], entered["object"].metadata.name) == ("ADDED", "p")
    assert (left["type"], left["object"].metadata.name) == ("DELETED", "p")


async def test_watch_of_compacted_history_answers_410(core: client.CoreV1Api, kube: Kube) -> None:
    """Resuming a watch from a resourceVersion older than the kept history answers 410 Gone."""
    listed = await core.list_namespaced_pod(NS)
    await core.create_namespaced_pod(NS, pod("p"))
    kube.compact()
    async with watch.Watch() as w:
        events = w.stream(
            core.list_namespaced_pod,
            NS,
            resource_version=listed.metadata.resource_version,
            timeout_seconds=5,
        )
        with pytest.raises(client.ApiException) as error:
            await wait_next(events)
    assert error.value.status == 410


@pytest.mark.parametrize("http", [False, True], ids=["error-event", "http-status"])
async def test_expire_next_watch_answers_410(
    core: client.CoreV1Api, kube: Kube, http: bool
) -> None:
    """An injected expiry answers the next watch with 410, as an ERROR event or an HTTP status."""
    kube.expire_next_watch("pods", http=http)
    async with watch.Watch() as w:
        with pytest.raises(client.ApiException) as error:
            await wait_next(w.stream(core.list_namespaced_pod, NS, timeout_seconds=5))
    assert error.value.status == 410

    await core.create_namespaced_pod(NS, pod("p"))
    async with watch.Watch() as w:  # only the next watch expires
        event = await wait_next(w.stream(core.list_namespaced_pod, NS, timeout_seconds=5))
    assert event["object"].metadata.name == "p"


async def test_watch_forever_reconnects_after_one_expiry(
    core: client.CoreV1Api, kube: Kube
) -> None:
    """The client's endless watch understands the ERROR event and reconnects once."""
    kube.expire_next_watch("pods")
    await core.create_namespaced_pod(NS, pod("p"))
    async with watch.Watch() as w:
        event = await wait_next(w.stream(core.list_namespaced_pod, NS))
    assert event["object"].metadata.name == "p"
    assert kube.requests.count("watch", "pods") == 2


def test_timeout_seconds_ends_the_stream() -> None:
    """A watch with timeoutSeconds ends after that much event-loop time (virtual: looptime)."""

    async def watch_until_timeout() -> tuple[list[Any], float]:
        async with serve() as kube:
            core = client.CoreV1Api(kube.api_client())
            start = asyncio.get_running_loop().time()
            async with watch.Watch() as w:
                seen = [
                    event
                    async for event in w.stream(core.list_namespaced_pod, NS, timeout_seconds=30)
                ]
            return seen, asyncio.get_running_loop().time() - start

    # The project runs without looptime's pytest plugin: this test owns a looptime loop instead.
    loop = looptime.new_event_loop()
    try:
        seen, elapsed_s = loop.run_until_complete(watch_until_timeout())
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()
    assert seen == []
    assert elapsed_s == pytest.approx(30, abs=1)


# -- subresources --------------------------------------------------------------------------------


async def test_pod_status_patch_merges_conditions_by_type(core: client.CoreV1Api) -> None:
    """A strategic-merge patch of pods/status merges conditions by type, not as a whole list."""
    await core.create_namespaced_pod(NS, pod("p"))
    ready = {"type": "Ready", "status": "False"}
    await core.patch_namespaced_pod_status("p", NS, {"status": {"conditions": [ready]}})
    gate = {"type": "example.com/warm", "status": "True"}
    await core.patch_namespaced_pod_status("p", NS, {"status": {"conditions": [gate]}})
    ready = {"type": "Ready", "status": "True"}
    result = await core.patch_namespaced_pod_status("p", NS, {"status": {"conditions": [ready]}})
    conditions = {c.type: c.status for c in result.status.conditions}
    assert conditions == {"Ready": "True", "example.com/warm": "True"}
    assert result.status.phase == "Pending"


async def test_status_is_written_only_through_the_status_subresource(
    apps: client.AppsV1Api,
) -> None:
    """Status in a create or main-resource write is ignored; /status writes only status."""
    body = deployment()
    body["status"] = {"replicas": 7}
    created = await apps.create_namespaced_deployment(NS, body)
    assert created.status is None or created.status.replicas is None

    patch = {"spec": {"replicas": 9}, "status": {"replicas": 2}}
    written = await apps.patch_namespaced_deployment_status("web", NS, patch)
    assert (written.spec.replicas, written.status.replicas) == (2, 2)
    assert written.metadata.generation == 1


async def test_deployment_scale_subresource(apps: client.AppsV1Api) -> None:
    """The scale subresource reads and writes spec.replicas and reports status and selector."""
    await apps.create_namespaced_deployment(NS, deployment(replicas=2))
    await apps.patch_namespaced_deployment_status("web", NS, {"status": {"replicas": 2}})
    scale = await apps.read_namespaced_deployment_scale("web", NS)
    assert (scale.spec.replicas, scale.status.replicas, scale.status.selector) == (2, 2, "app=web")

    patched = await apps.patch_namespaced_deployment_scale("web", NS, {"spec": {"replicas": 5}})
    assert patched.spec.replicas == 5
    current = await apps.read_namespaced_deployment("web", NS)
    assert (current.spec.replicas, current.metadata.generation) == (5, 2)

    scale.spec.replicas = 3  # read before the patch: stale
    with pytest.raises(client.ApiException) as error:
        await apps.replace_namespaced_deployment_scale("web", NS, scale)
    assert error.value.status == 409
    fresh = await apps.read_namespaced_deployment_scale("web", NS)
    fresh.spec.replicas = 3
    assert (await apps.replace_namespaced_deployment_scale("web", NS, fresh)).spec.replicas == 3


async def test_statefulset_scale_subresource(apps: client.AppsV1Api) -> None:
    """A StatefulSet's scale subresource reads and writes its replicas with its selector."""
    body = deployment(replicas=2)
    body["spec"]["serviceName"] = "web"
    await apps.create_namespaced_stateful_set(NS, body)
    scale = await apps.read_namespaced_stateful_set_scale("web", NS)
    assert (scale.spec.replicas, scale.status.selector) == (2, "app=web")
    patch = {"metadata": {"resourceVersion": scale.metadata.resource_version}}
    patch["spec"] = {"replicas": 4}
    assert (await apps.patch_namespaced_stateful_set_scale("web", NS, patch)).spec.replicas == 4
    with pytest.raises(client.ApiException) as error:  # the same version again: stale
        await apps.patch_namespaced_stateful_set_scale("web", NS, patch)
    assert error.value.status == 409


async def test_custom_resource_scale_reads_its_label_selector_path(
    kube: Kube, api: client.ApiClient
) -> None:
    """A registered custom resource's scale serves the text at its labelSelectorPath."""
    kube.store.register(
        "argoproj.io/v1alpha1/rollouts",
        kind="Rollout",
        subresources=("status", "scale"),
        label_selector_path=".status.selector",
    )
    custom = client.CustomObjectsApi(api)
    args = ("argoproj.io", "v1alpha1", NS, "rollouts")
    body = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", **deployment(replicas=1)}
    await custom.create_namespaced_custom_object(*args, body)
    status = {"status": {"replicas": 1, "selector": "app=web"}}
    merge = {"_content_type": "application/merge-patch+json"}
    await custom.patch_namespaced_custom_object_status(*args, "web", status, **merge)
    scale = await custom.get_namespaced_custom_object_scale(*args, "web")
    assert (scale["spec"]["replicas"], scale["status"]["selector"]) == (1, "app=web")
    replicas = {"spec": {"replicas": 3}}
    await custom.patch_namespaced_custom_object_scale(*args, "web", replicas, **merge)
    assert (await custom.get_namespaced_custom_object(*args, "web"))["spec"]["replicas"] == 3


# -- patch content types -------------------------------------------------------------------------


async def test_patch_content_types(apps: client.AppsV1Api) -> None:
    """Strategic merge merges containers by name, merge-patch replaces lists, json-patch applies."""
    body = deployment()
    body["spec"]["template"]["spec"]["containers"].append({"name": "sidecar", "image": "envoy:1"})
    await apps.create_namespaced_deployment(NS, body)

    image = {
        "spec": {"template": {"spec": {"containers": [{"name": "server", "image": "vllm:2"}]}}}
    }
    strategic = await apps.patch_namespaced_deployment("web", NS, image)
    containers = strategic.spec.template.spec.containers
    assert [(c.name, c.image) for c in containers] == [("server", "vllm:2"), ("sidecar", "envoy:1")]

    merged = await apps.patch_namespaced_deployment(
        "web", NS, image, _content_type="application/merge-patch+json"
    )
    assert [c.name for c in merged.spec.template.spec.containers] == ["server"]

    ops = [{"op": "replace", "path": "/spec/replicas", "value": 6}]
    assert (await apps.patch_namespaced_deployment("web", NS, ops)).spec.replicas == 6
    with pytest.raises(client.ApiException) as error:
        await apps.patch_namespaced_deployment(
            "web", NS, [{"op": "test", "path": "/spec/replicas", "value": 1}]
        )
    assert error.value.status == 422


async def test_custom_object_patches_follow_the_api_server(custom: client.CustomObjectsApi) -> None:
    """Custom objects take merge and json patches, and reject a dict sent as json-patch (400)."""
    body = {
        "apiVersion": "mesh.example/v1",
        "kind": "Route",
        "metadata": {"name": "r"},
        "spec": {"w": 1},
    }
    await custom.create_namespaced_custom_object("mesh.example", "v1", NS, "routes", body)
    patch = {"spec": {"w": 2}}
    with pytest.raises(client.ApiException) as error:  # the client defaults to json-patch
        await custom.patch_namespaced_custom_object("mesh.example", "v1", NS, "routes", "r", patch)
    assert error.value.status == 400
    merged = await custom.patch_namespaced_custom_object(
        "mesh.example", "v1", NS, "routes", "r", patch, _content_type="application/merge-patch+json"
    )
    assert merged["spec"] == {"w": 2}


# -- resources -----------------------------------------------------------------------------------


async def test_events_of_both_groups_are_created(
    api: client.ApiClient, core: client.CoreV1Api
) -> None:
    """core/v1 and events.k8s.io/v1 Events are created and listed."""
    involved = {"kind": "Deployment", "namespace": NS, "name": "web"}
    core_event = {
        "metadata": {"generateName": "web."},
        "involvedObject": involved,
        "reason": "Scaled",
    }
    await core.create_namespaced_event(NS, core_event)
    events_v1 = client.EventsV1Api(api)
    new_event = {
        "metadata": {"generateName": "web."},
        "regarding": involved,
        "reason": "Scaled",
        "action": "Scale",
        "eventTime": "2025-01-01T00:00:00.000000Z",
        "reportingController": "autoscaler",
        "reportingInstance": "autoscaler-0",
    }
    await events_v1.create_namespaced_event(NS, new_event)

    listed = await core.list_namespaced_event(NS, field_selector="involvedObject.name=web")
    assert [e.reason for e in listed.items] == ["Scaled"]
    assert [e.reason for e in (await events_v1.list_namespaced_event(NS)).items] == ["Scaled"]


async def test_cluster_scoped_and_namespaced_resources(
    api: client.ApiClient, core: client.CoreV1Api
) -> None:
    """Namespaces and nodes are cluster-scoped; namespaced objects need an existing namespace."""
    await core.create_namespace({"metadata": {"name": "serving"}})
    node = {"metadata": {"name": "gpu-1"}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}}
    await core.create_node(node)
    assert (await core.read_node("gpu-1")).status.allocatable == {"nvidia.com/gpu": "8"}
    assert (await core.read_namespace("serving")).status.phase == "Active"

    service = {"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}}
    await core.create_namespaced_service("serving", service)
    apps = client.AppsV1Api(api)
    rs = deployment("rs")
    await apps.create_namespaced_replica_set("serving", rs)
    assert [s.metadata.name for s in (await core.list_namespaced_service("serving")).items] == [
        "web"
    ]
    assert [r.metadata.name for r in (await apps.list_replica_set_for_all_namespaces()).items] == [
        "rs"
    ]

    with pytest.raises(client.ApiException) as error:
        await core.create_namespaced_pod("missing", pod("p"))
    assert error.value.status == 404

    await core.delete_namespace("serving")
    assert (await core.list_service_for_all_namespaces()).items == []


async def test_custom_resources_are_stored_and_watched(custom: client.CustomObjectsApi) -> None:
    """Arbitrary custom resources support get, list, status, watch and delete, in any version."""
    args = ("gateway.example", "v1", NS, "httproutes")
    body = {
        "apiVersion": "gateway.example/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": "r"},
        "spec": {},
    }
    async with watch.Watch() as w:
        events = w.stream(custom.list_namespaced_custom_object, *args)
        await custom.create_namespaced_custom_object(*args, body)
        assert (await wait_next(events))["type"] == "ADDED"

    status = {"status": {"parents": [{"name": "gw"}]}}
    await custom.patch_namespaced_custom_object_status(
        *args, "r", status, _content_type="application/merge-patch+json"
    )
    fetched = await custom.get_namespaced_custom_object(*args, "r")
    assert fetched["status"] == {"parents": [{"name": "gw"}]}
    other_version = await custom.get_namespaced_custom_object(
        "gateway.example", "v1beta1", NS, "httproutes", "r"
    )
    assert other_version["apiVersion"] == "gateway.example/v1beta1"
    assert [
        o["metadata"]["name"] for o in (await custom.list_namespaced_custom_object(*args))["items"]
    ] == ["r"]
    await custom.delete_namespaced_custom_object(*args, "r")
    assert (await custom.list_cluster_custom_object("gateway.example", "v1", "httproutes"))[
        "items"
    ] == []


# -- request log and fault injection -------------------------------------------------------------


async def test_request_log_records_kubernetes_verbs(
    kube: Kube, core: client.CoreV1Api, apps: client.AppsV1Api
) -> None:
    """The request log maps HTTP methods to (verb, group, resource, subresource, namespace)."""
    await apps.create_namespaced_deployment(NS, deployment())
    await apps.read_namespaced_deployment("web", NS)
    await apps.list_deployment_for_all_namespaces()
    await apps.patch_namespaced_deployment_scale("web", NS, {"spec": {"replicas": 1}})
    current = await apps.read_namespaced_deployment("web", NS)
    await apps.replace_namespaced_deployment("web", NS, current)
    async with watch.Watch() as w:
        await wait_next(w.stream(apps.list_namespaced_deployment, NS))
    await apps.delete_namespaced_deployment("web", NS)
    await core.delete_collection_namespaced_pod(NS)
    await client.VersionApi(core.api_client).get_code()

    assert kube.requests.rules() == {
        ("create", "apps", "deployments"),
        ("get", "apps", "deployments"),
        ("list", "apps", "deployments"),
        ("patch", "apps", "deployments/scale"),
        ("update", "apps", "deployments"),
        ("watch", "apps", "deployments"),
        ("delete", "apps", "deployments"),
        ("deletecollection", "", "pods"),
    }
    assert kube.requests.count("get", "deployments", namespace=NS) == 2
    assert kube.requests.count("list", "deployments", namespace=None) == 1
    assert kube.requests.non_resource["get", "/version/"] == 1


async def test_request_log_stays_bounded(kube: Kube, core: client.CoreV1Api) -> None:
    """Many requests aggregate into counts; the recent window and kmock's own log stay bounded."""
    await core.create_namespaced_pod(NS, pod("p"))
    for _ in range(300):
        await core.read_namespaced_pod("p", NS)
    assert kube.requests.count("get", "pods") == 300
    assert len(kube.requests.counts) == 2
    assert len(kube.requests.recent) <= kube.requests.recent_limit
    assert len(list(kube.emulator)) <= kube.emulator.request_window


async def test_injected_failure_changes_nothing(kube: Kube, apps: client.AppsV1Api) -> None:
    """An injected error answers the next matching calls and leaves the object as it was."""
    await apps.create_namespaced_deployment(NS, deployment(replicas=2))
    kube.fail("patch", "deployments/scale", status=409)
    with pytest.raises(client.ApiException) as error:
        await apps.patch_namespaced_deployment_scale("web", NS, {"spec": {"replicas": 5}})
    assert error.value.status == 409
    assert (await apps.read_namespaced_deployment("web", NS)).spec.replicas == 2
    await apps.patch_namespaced_deployment_scale("web", NS, {"spec": {"replicas": 5}})
    assert (await apps.read_namespaced_deployment("web", NS)).spec.replicas == 5


async def test_kmock_reactions_take_precedence(kube: Kube, core: client.CoreV1Api) -> None:
    """A kmock DSL reaction answers before the emulated API does."""
    kube.emulator["list", kmock.resource("", "v1", "pods")] << 503
    with pytest.raises(client.ApiException) as error:
        await core.list_namespaced_pod(NS)
    assert error.value.status == 503
    assert (await core.list_namespace()).items


# -- held requests and chaos ---------------------------------------------------------------------


async def test_a_held_write_is_served_against_the_store_as_it_is_at_release(
    apps: client.AppsV1Api, kube: Kube
) -> None:
    """A held write waits until released and is then judged by the store's state at that time."""
    created = await apps.create_namespaced_deployment(NS, deployment(replicas=2))
    stale = {"metadata": {"resourceVersion": created.metadata.resource_version}}
    held = kube.hold("patch", "deployments/scale")
    write = asyncio.create_task(
        apps.patch_namespaced_deployment_scale(
            "web", NS, {**stale, "spec": {"replicas": 3}}, _content_type=MERGE
        )
    )
    await asyncio.wait_for(held.arrived.wait(), 5)
    await apps.patch_namespaced_deployment_scale("web", NS, {"spec": {"replicas": 5}})
    held.release()
    with pytest.raises(client.ApiException) as error:
        await write
    assert error.value.status == 409
    assert kube.store.get("apps/v1/deployments", NS, "web")["spec"]["replicas"] == 5
    assert [(w.resource, w.status) for w in kube.requests.writes] == [
        ("deployments", 201),
        ("deployments/scale", 200),
        ("deployments/scale", 409),
    ]


async def test_a_held_write_lands_even_when_its_client_has_gone(
    apps: client.AppsV1Api, kube: Kube
) -> None:
    """A held write whose client gave up is still carried out once released, as a real API
    server finishes a write already under way."""
    await apps.create_namespaced_deployment(NS, deployment(replicas=2))
    held = kube.hold("patch", "deployments/scale")
    write = asyncio.create_task(
        apps.patch_namespaced_deployment_scale("web", NS, {"spec": {"replicas": 3}})
    )
    await asyncio.wait_for(held.arrived.wait(), 5)
    write.cancel()
    await asyncio.wait([write])

    held.release()
    await asyncio.wait_for(held.answered.wait(), 5)

    assert held.status == 200
    assert kube.store.get("apps/v1/deployments", NS, "web")["spec"]["replicas"] == 3


@pytest.mark.parametrize(
    ("kind", "verb", "expected"),
    [("5xx", "list", {500, 503}), ("409", "create", {409}), ("drop", "list", {"dropped"})],
)
async def test_chaos_fails_a_seeded_share_of_the_calls(
    core: client.CoreV1Api, kube: Kube, kind: str, verb: str, expected: set[object]
) -> None:
    """Under chaos about the given share of the calls fails in the given way; the rest succeed."""
    chaos = kube.chaos(kind, 0.5, seed=1)
    outcomes: list[object] = []
    for n in range(40):
        try:
            if verb == "list":
                await core.list_namespaced_pod(NS)
            else:
                await core.create_namespaced_pod(NS, pod(f"p{n}"))
            outcomes.append("ok")
        except client.ApiException as e:
            outcomes.append(e.status)
        except aiohttp.ClientError:
            outcomes.append("dropped")
    kube.calm()
    assert set(outcomes) == {"ok", *expected}
    failed = 40 - outcomes.count("ok")
    # The client sends a request again after a dropped connection: more hits than failures.
    assert failed == chaos.hits if kind != "drop" else failed <= chaos.hits
    assert 10 <= failed <= 30


async def test_a_hung_call_answers_only_once_the_chaos_ends(
    core: client.CoreV1Api, kube: Kube
) -> None:
    """A hung call gets no answer until `calm()`, and then a 504 that changed nothing."""
    kube.chaos("hang", 1.0, seed=1)
    call = asyncio.create_task(core.create_namespaced_pod(NS, pod("p")))
    done, _ = await asyncio.wait([call], timeout=0.2)
    assert not done
    kube.calm()
    with pytest.raises(client.ApiException) as error:
        await call
    assert error.value.status == 504
    assert kube.store.list_objects("v1/pods", NS) == []
