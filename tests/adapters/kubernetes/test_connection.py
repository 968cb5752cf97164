"""Loading the client configuration from a kubeconfig, or refusing with a ConfigError."""

from __future__ import annotations

import pathlib

import pytest
from kube.emulator import Kube
from kubernetes_asyncio import client

from autoscaler import errors
from autoscaler.adapters.kubernetes import connection


async def test_kubeconfig_from_the_environment_reaches_the_cluster(kube: Kube) -> None:
    """Outside a pod, KUBECONFIG names the file the client is configured from."""
    assert kube.kubeconfig is not None
    env = {"KUBECONFIG": str(kube.kubeconfig)}
    async with await connection.api_client(env=env) as api:
        namespaces = await client.CoreV1Api(api).list_namespace()
    assert "default" in {n.metadata.name for n in namespaces.items}


async def test_an_explicit_kubeconfig_wins_over_the_service_account(kube: Kube) -> None:
    """A kubeconfig given as an argument is used even inside a pod."""
    assert kube.kubeconfig is not None
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    loaded = await connection.configuration(kubeconfig=str(kube.kubeconfig), env=env)
    assert loaded.host == kube.url


async def test_a_missing_kubeconfig_is_a_config_error(tmp_path: pathlib.Path) -> None:
    """A kubeconfig that does not exist is reported as a ConfigError."""
    env = {"KUBECONFIG": str(tmp_path / "absent")}
    with pytest.raises(errors.ConfigError, match="kubeconfig"):
        await connection.configuration(env=env)


async def test_in_cluster_without_a_service_account_is_a_config_error() -> None:
    """Inside a pod whose service account files are missing, loading is a ConfigError."""
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    assert connection.in_cluster(env)
    with pytest.raises(errors.ConfigError, match="in-cluster"):
        await connection.configuration(env=env)


async def test_the_client_reads_the_environment_once_not_per_request(kube: Kube) -> None:
    """The client's HTTP session does not consult the environment (proxies, netrc) per call."""
    assert kube.kubeconfig is not None
    env = {"KUBECONFIG": str(kube.kubeconfig)}
    async with await connection.api_client(env=env) as api:
        assert not api.rest_client.pool_manager.trust_env
        assert not api.rest_client.proxy
        namespaces = await client.CoreV1Api(api).list_namespace()
    assert "default" in {n.metadata.name for n in namespaces.items}


def test_the_environment_names_the_proxy_with_its_credentials() -> None:
    """HTTPS_PROXY applies to an https API server, its credentials sent as a header."""
    env = {"HTTPS_PROXY": "http://ops:secret@proxy.corp:3128"}
    found = connection.environment_proxy("https://10.0.0.1:443", env)
    assert found is not None
    url, headers = found
    assert url == "http://proxy.corp:3128"
    assert headers == {"Proxy-Authorization": "Basic b3BzOnNlY3JldA=="}


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"HTTPS_PROXY": "http://proxy.corp:3128", "NO_PROXY": "10.0.0.1,.svc"},
        {"https_proxy": "http://proxy.corp:3128", "no_proxy": "*"},
        {"HTTP_PROXY": "http://proxy.corp:3128"},
        {"HTTPS_PROXY": "https://proxy.corp:3128"},
    ],
)
def test_no_proxy_when_none_applies(env: dict[str, str]) -> None:
    """No proxy without one for the scheme, under NO_PROXY, or with an https proxy URL."""
    assert connection.environment_proxy("https://10.0.0.1:443", env) is None


async def test_a_proxy_from_the_environment_is_set_on_the_client(kube: Kube) -> None:
    """The environment's proxy for the API server is on the client from the start."""
    assert kube.kubeconfig is not None
    scheme = kube.url.partition(":")[0].upper()
    env = {"KUBECONFIG": str(kube.kubeconfig), f"{scheme}_PROXY": "http://proxy.corp:3128"}
    async with await connection.api_client(env=env) as api:
        assert api.rest_client.proxy == "http://proxy.corp:3128"
