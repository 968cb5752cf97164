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
