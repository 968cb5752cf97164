"""Fixtures for the mesh router tests: a client on the emulator, the mesh CRDs installed, and
the owner's Deployment `web` with its Service `web`."""

from __future__ import annotations

from typing import Any

import pytest
from kube.emulator import Kube

from .support import DEPLOYMENTS, NS, SERVICES, deployment, install_crds, service


@pytest.fixture
def owner(kube: Kube) -> dict[str, Any]:
    """The owner's Deployment `web` and Service `web`; returns the stored Deployment."""
    install_crds(kube)
    created = kube.store.create(DEPLOYMENTS, deployment(), namespace=NS)
    kube.store.create(SERVICES, service(), namespace=NS)
    return created
