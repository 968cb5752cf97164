"""How the controller reaches the API server: in-cluster credentials, else a kubeconfig.

A kubeconfig given as an argument always wins. Otherwise, inside a pod
(`KUBERNETES_SERVICE_HOST` is set) the service account's token and CA are used, and the token
is re-read as the kubelet rotates it; elsewhere `KUBECONFIG` (a path list, merged as kubectl
merges it), else `~/.kube/config`.

It must not keep a client anywhere: the caller owns the `ApiClient` and closes it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from kubernetes_asyncio import client, config

from autoscaler import errors

IN_CLUSTER_ENV = "KUBERNETES_SERVICE_HOST"

ApiClient = client.ApiClient
"""The client type, for callers that must not import kubernetes_asyncio themselves."""


def in_cluster(env: Mapping[str, str] | None = None) -> bool:
    """Whether this process runs in a pod (the API server's service is in its environment)."""
    return bool((os.environ if env is None else env).get(IN_CLUSTER_ENV))


async def configuration(
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    env: Mapping[str, str] | None = None,
) -> client.Configuration:
    """The client configuration for this process; `ConfigError` when none can be loaded."""
    env = os.environ if env is None else env
    loaded = client.Configuration()
    try:
        if in_cluster(env) and kubeconfig is None:
            config.load_incluster_config(client_configuration=loaded)  # type: ignore[no-untyped-call]
        else:
            path = kubeconfig or env.get("KUBECONFIG") or None
            await config.load_kube_config(
                config_file=path,
                context=context,
                client_configuration=loaded,
                persist_config=False,
            )
    except (config.ConfigException, OSError, ValueError) as e:
        where = "in-cluster service account" if in_cluster(env) else "kubeconfig"
        raise errors.ConfigError(f"cannot load the Kubernetes {where}: {e}") from e
    return loaded


async def api_client(
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    env: Mapping[str, str] | None = None,
) -> client.ApiClient:
    """A client for this process's cluster (see the module docstring); the caller closes it."""
    loaded = await configuration(kubeconfig=kubeconfig, context=context, env=env)
    return client.ApiClient(loaded)
