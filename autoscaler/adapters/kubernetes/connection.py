"""How the controller reaches the API server: in-cluster credentials, else a kubeconfig.

A kubeconfig given as an argument always wins. Otherwise, inside a pod
(`KUBERNETES_SERVICE_HOST` is set) the service account's token and CA are used, and the token
is re-read as the kubelet rotates it; elsewhere `KUBECONFIG` (a path list, merged as kubectl
merges it), else `~/.kube/config`.

The environment's proxy for the API server (`HTTPS_PROXY`/`HTTP_PROXY` for its scheme, unless
`NO_PROXY` covers its host; lower case first, as curl reads them) is looked up once, here. The
generated client's HTTP session would otherwise look it up, and read `~/.netrc`, on a worker
thread before every request: two thread hand-offs per call, a measurable share of a tick's CPU
at a thousand writes. As before, a proxy is used only with an `http://` URL (the HTTP library
cannot reach an `https://` one), its credentials sent as `Proxy-Authorization`.

It must not keep a client anywhere: the caller owns the `ApiClient` and closes it.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping

import aiohttp
import yarl
from kubernetes_asyncio import client, config

from autoscaler import errors

IN_CLUSTER_ENV = "KUBERNETES_SERVICE_HOST"

READ_BUFFER_BYTES = 2**21
"""The HTTP session's read buffer, as the generated client sizes it: a watch event carries a
whole object, up to etcd's 1.5 MiB request limit."""

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
    env = os.environ if env is None else env
    loaded = await configuration(kubeconfig=kubeconfig, context=context, env=env)
    api = client.ApiClient(loaded)
    rest = api.rest_client
    if not rest.proxy:
        found = environment_proxy(loaded.host or "", env)
        if found is not None:
            rest.proxy, rest.proxy_headers = found
    # The same connector (its TLS context and connection limit), on a session that does not
    # read the environment per request.
    session = rest.pool_manager
    rest.pool_manager = aiohttp.ClientSession(
        connector=session.connector, trust_env=False, read_bufsize=READ_BUFFER_BYTES
    )
    session.detach()
    return api


def environment_proxy(url: str, env: Mapping[str, str]) -> tuple[str, dict[str, str]] | None:
    """The proxy the environment names for `url` and its headers; None when there is none, it
    is bypassed (`NO_PROXY`), or it is not an `http://` URL."""
    target = yarl.URL(url)
    scheme = target.scheme or "https"
    text = env.get(f"{scheme}_proxy") or env.get(f"{scheme.upper()}_PROXY")
    if not text:
        return None
    if _bypassed(target.host or "", env.get("no_proxy") or env.get("NO_PROXY") or ""):
        return None
    proxy = yarl.URL(text)
    if proxy.scheme != "http":
        return None
    headers = {}
    if proxy.user is not None:
        credentials = f"{proxy.user}:{proxy.password or ''}".encode()
        headers["Proxy-Authorization"] = "Basic " + base64.b64encode(credentials).decode()
    return str(proxy.with_user(None)), headers


def _bypassed(host: str, no_proxy: str) -> bool:
    """Whether `NO_PROXY` covers `host`: `*`, the host itself, or a domain it is under."""
    if no_proxy.strip() == "*":
        return True
    host = host.lower()
    for name in no_proxy.split(","):
        name = name.strip().lstrip(".").lower()
        if name and (host == name or host.endswith(f".{name}")):
            return True
    return False
