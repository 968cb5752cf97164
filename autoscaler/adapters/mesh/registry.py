"""One router per `traffic-router` value, built on one API client (for `app` to wire).

It builds; it must not choose a service's router (the annotation does) or call one.
"""

from __future__ import annotations

from kubernetes_asyncio import client

from autoscaler import ports
from autoscaler.adapters.kubernetes import _api
from autoscaler.adapters.mesh import gateway, istio, none, smi
from autoscaler.contract import annotations as contract

__all__ = ["routers"]


def routers(
    api: client.ApiClient,
    *,
    on_api_error: _api.ErrorCallback = _api.ignore_error,
    request_timeout_s: float = _api.DEFAULT_REQUEST_TIMEOUT_S,
    may_write: _api.Fence = _api.always,
    istio_version: str = "v1",
    smi_version: str = "v1alpha2",
    cluster_domain: str = "cluster.local",
) -> dict[contract.TrafficRouter, ports.TrafficRouter]:
    """Every router, keyed by the annotation's value, all calling through one `_api.Caller`:
    `may_write(service)` is asked before each write for a service (the bucket Leases' `leads`)."""
    calls = _api.Caller(fence=may_write, on_error=on_api_error, request_timeout_s=request_timeout_s)
    return {
        contract.TrafficRouter.NONE: none.NoRouter(),
        contract.TrafficRouter.ISTIO: istio.IstioRouter(
            api,
            calls=calls,
            version=istio_version,
            cluster_domain=cluster_domain,
        ),
        contract.TrafficRouter.GATEWAY_API: gateway.GatewayRouter(
            api,
            calls=calls,
        ),
        contract.TrafficRouter.SMI: smi.SmiRouter(
            api,
            calls=calls,
            version=smi_version,
        ),
    }
