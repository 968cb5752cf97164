"""`_api.Request`: the adapters' writes sent on the client's own session, past the generated
client, against the emulator over HTTP. On the wire they are what the generated client sends
(method, path, headers, body bytes); the authorization is asked for every request (a refreshed
token is used); a failure is mapped as the generated client's is; the fence is asked after the
authorization, immediately before sending."""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import AsyncIterator, Callable
from typing import Any, NamedTuple

import aiohttp.web
import attrs
import looptime
import pytest
from kube.emulator import Emulator, Kube, serve
from kube.store import Store
from kubernetes_asyncio import client

from autoscaler.adapters.kubernetes import _api, scaling
from autoscaler.contract import targets

NS = "default"


class Sent(NamedTuple):
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@attrs.define(eq=False)
class RecordingEmulator(Emulator):
    """The emulator, keeping every request as it came over the wire."""

    sent: list[Sent] = attrs.field(factory=list)

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        body = await raw_request.read()
        headers = dict(raw_request.headers)
        self.sent.append(Sent(raw_request.method, raw_request.path_qs, headers, body))
        return await super().__call__(raw_request)


@pytest.fixture
async def recorded(tmp_path: pathlib.Path) -> AsyncIterator[tuple[Kube, RecordingEmulator]]:
    emulator = RecordingEmulator(store=Store(), strict=True)
    async with serve(emulator, kubeconfig=tmp_path / "kubeconfig") as running:
        yield running, emulator


def rotating(tokens: list[str]) -> Callable[[client.Configuration], None]:
    """A refresh hook that hands out the next token on every call, as a rotated token file or an
    exec plugin would."""

    def refresh(configuration: client.Configuration) -> None:
        configuration.api_key["BearerToken"] = tokens.pop(0)

    return refresh


def authorized(kube: Kube, tokens: list[str]) -> client.ApiClient:
    configuration = kube.configuration()
    configuration.api_key = {"BearerToken": "initial"}
    configuration.api_key_prefix = {"BearerToken": "Bearer"}
    configuration.refresh_api_key_hook = rotating(tokens)
    api = client.ApiClient(configuration)
    kube._clients.append(api)  # closed with the server
    return api


def deployment(name: str) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "c"}]}},
        },
    }


def event_body(n: int) -> dict[str, Any]:
    return {
        "metadata": {"generateName": "web.", "namespace": NS},
        "involvedObject": {"kind": "Deployment", "name": "web", "namespace": NS},
        "type": "Normal",
        "reason": "ScaledUp",
        "message": f'replicas 2 -> {n}: \u00e9t\u00e9 "quoted"',
        "count": 1,
    }


def comparable(sent: Sent) -> Sent:
    # The two ways differ only in what the test made differ: nothing but the token.
    return sent._replace(headers={k: v for k, v in sent.headers.items() if k != "Authorization"})


async def test_each_write_is_on_the_wire_what_the_generated_client_sends(
    recorded: tuple[Kube, RecordingEmulator],
) -> None:
    """An annotation patch, a scale patch, an Event created and patched: the same method, path,
    headers and body bytes as through the generated client's function with the same body."""
    kube, emulator = recorded
    api = authorized(kube, [f"token-{i}" for i in range(20)])
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    await apps.create_namespaced_deployment(NS, deployment("web"))
    endpoint = scaling.Endpoint(targets.DEPLOYMENTS, apps=apps)
    notes = {"metadata": {"annotations": {"a.b/status": '{"desired":3,"why":"\u00e9"}'}}}
    scale = {"spec": {"replicas": 3}}
    event_path = _api.resource_path("", "v1", "events", NS)
    pairs = [
        (
            endpoint.patch("web", NS, notes),
            (apps.patch_namespaced_deployment, "web", NS, notes),
            {"_content_type": _api.MERGE_PATCH},
        ),
        (
            endpoint.patch_scale("web", NS, scale),
            (apps.patch_namespaced_deployment_scale, "web", NS, scale),
            {"_content_type": _api.MERGE_PATCH},
        ),
        (
            _api.Request(api, "POST", event_path, event_body(3)),
            (core.create_namespaced_event, NS, event_body(3)),
            {},
        ),
    ]
    for request, (fn, *args), options in pairs:
        emulator.sent.clear()
        await _api.write_json(_api.always, f"{NS}/web", request)
        await _api.write_json(_api.always, f"{NS}/web", fn, *args, **options)
        ours, theirs = emulator.sent
        assert comparable(ours) == comparable(theirs)
        assert ours.body  # a body was sent, and the same bytes
    created = await _api.call_json(core.list_namespaced_event, NS)
    name = created["items"][0]["metadata"]["name"]
    patch = {"count": 2, "message": "again"}
    emulator.sent.clear()
    path = _api.resource_path("", "v1", "events", NS, name)
    await _api.call_json(_api.Request(api, "PATCH", path, patch, _api.MERGE_PATCH))
    await _api.call_json(
        core.patch_namespaced_event, name, NS, patch, _content_type=_api.MERGE_PATCH
    )
    ours, theirs = emulator.sent
    assert comparable(ours) == comparable(theirs)


async def test_the_authorization_is_asked_for_every_request_and_refreshed(
    recorded: tuple[Kube, RecordingEmulator],
) -> None:
    """The configuration's refresh hook runs before each request: each carries the token it
    handed out then, prefixed as configured."""
    kube, emulator = recorded
    api = authorized(kube, ["first", "second"])
    apps = client.AppsV1Api(api)
    kube.store.create("apps/v1/deployments", deployment("web"), namespace=NS)
    endpoint = scaling.Endpoint(targets.DEPLOYMENTS, apps=apps)
    for replicas in (3, 4):
        patch = endpoint.patch_scale("web", NS, {"spec": {"replicas": replicas}})
        await _api.Caller().call("deployments/scale.patch", f"{NS}/web", patch, write=True)
    assert [sent.headers["Authorization"] for sent in emulator.sent] == [
        "Bearer first",
        "Bearer second",
    ]
    assert kube.store.get("apps/v1/deployments", NS, "web")["spec"]["replicas"] == 4


@pytest.mark.parametrize("status", [404, 409, 422, 429, 500])
async def test_an_error_status_is_mapped_as_through_the_generated_client(
    kube: Kube, api: client.ApiClient, status: int
) -> None:
    """The same `KubeApiError` (operation, status, the server's message), counted once."""
    apps = client.AppsV1Api(api)
    kube.store.create("apps/v1/deployments", deployment("web"), namespace=NS)
    endpoint = scaling.Endpoint(targets.DEPLOYMENTS, apps=apps)
    body = {"spec": {"replicas": 3}}
    failed: list[str] = []
    calls = _api.Caller(on_error=failed.append)
    errors = []
    for target in (
        endpoint.patch_scale("web", NS, body),
        apps.patch_namespaced_deployment_scale,
    ):
        kube.fail("patch", "deployments/scale", status=status, message=f"no: {status}")
        args = () if isinstance(target, _api.Request) else ("web", NS, body)
        options = {} if isinstance(target, _api.Request) else {"_content_type": _api.MERGE_PATCH}
        with pytest.raises(_api.KubeApiError) as raised:
            await calls.call("deployments/scale.patch", f"{NS}/web", target, *args, **options)
        errors.append(raised.value)
    ours, theirs = errors
    assert (ours.status, ours.operation, str(ours)) == (
        theirs.status,
        theirs.operation,
        str(theirs),
    )
    assert ours.status == status
    assert f"no: {status}" in str(ours)
    assert failed == ["deployments/scale.patch"] * 2


async def test_an_allowed_status_is_an_answer_of_none(kube: Kube, api: client.ApiClient) -> None:
    """`call_allowing`: a 404 on a patch of an Event that expired is None, nothing counted."""
    failed: list[str] = []
    path = _api.resource_path("", "v1", "events", NS, "gone.1")
    answer = await _api.Caller(on_error=failed.append).call_allowing(
        (404,),
        "events.patch",
        f"{NS}/web",
        _api.Request(api, "PATCH", path, {"count": 2}, _api.MERGE_PATCH),
        write=True,
    )
    assert answer is None
    assert failed == []


async def test_a_fenced_write_is_not_sent_when_the_lease_ends_during_the_token_refresh(
    recorded: tuple[Kube, RecordingEmulator],
) -> None:
    """The fence is asked after the authorization (whose refresh may wait), immediately before
    sending: a Lease lost meanwhile sends nothing."""
    kube, emulator = recorded
    leads = [True]
    configuration = kube.configuration()
    configuration.api_key = {"BearerToken": "t"}

    async def refresh(_: client.Configuration) -> None:
        await asyncio.sleep(0)  # an exec plugin runs meanwhile
        leads[0] = False

    configuration.refresh_api_key_hook = refresh
    api = client.ApiClient(configuration)
    kube._clients.append(api)
    kube.store.create("apps/v1/deployments", deployment("web"), namespace=NS)
    endpoint = scaling.Endpoint(targets.DEPLOYMENTS, apps=client.AppsV1Api(api))
    calls = _api.Caller(fence=lambda _: leads[0])
    with pytest.raises(_api.NotLeaderError):
        await calls.call(
            "deployments/scale.patch",
            f"{NS}/web",
            endpoint.patch_scale("web", NS, {"spec": {"replicas": 3}}),
            write=True,
        )
    assert emulator.sent == []


def test_a_request_past_its_deadline_fails_with_no_status() -> None:
    """The request timeout bounds the whole call (virtual time: looptime); the failure has no
    HTTP status, as the generated client's timeout."""

    async def held_write() -> tuple[_api.KubeApiError, float]:
        async with serve() as kube:
            api = kube.api_client()
            kube.store.create("apps/v1/deployments", deployment("web"), namespace=NS)
            endpoint = scaling.Endpoint(targets.DEPLOYMENTS, apps=client.AppsV1Api(api))
            kube.hold("patch", "deployments/scale")
            calls = _api.Caller(request_timeout_s=7.0)
            start = asyncio.get_running_loop().time()
            try:
                await calls.call(
                    "deployments/scale.patch",
                    f"{NS}/web",
                    endpoint.patch_scale("web", NS, {"spec": {"replicas": 3}}),
                    write=True,
                )
            except _api.KubeApiError as e:
                return e, asyncio.get_running_loop().time() - start
            raise AssertionError("the held write was answered")

    loop = looptime.new_event_loop()
    try:
        error, elapsed_s = loop.run_until_complete(held_write())
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()
    assert error.status is None
    assert "TimeoutError" in str(error)
    assert elapsed_s == pytest.approx(7.0, abs=0.5)


def test_resource_path_spells_the_api_paths() -> None:
    assert _api.resource_path("", "v1", "events", "ns") == "/api/v1/namespaces/ns/events"
    assert (
        _api.resource_path("apps", "v1", "deployments", "ns", "web", "scale")
        == "/apis/apps/v1/namespaces/ns/deployments/web/scale"
    )
    assert _api.resource_path("", "v1", "nodes", None, "n/1") == "/api/v1/nodes/n%2F1"
