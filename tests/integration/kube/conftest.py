"""The fixtures of the adapter-level tests: the sandbox API server seeded with the test module's ``SEED`` (and
started with its ``SERVER_OPTIONS``, when it has some), and the real Kubernetes adapter on it. A module that
needs another set-up defines its own ``server`` or ``cluster``, which pytest takes instead."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube.cluster import drain_cluster, drain_server


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[KubeServer]:
    with drain_server(request.module.SEED, **getattr(request.module, "SERVER_OPTIONS", {})) as kube:
        yield kube


@pytest.fixture
def cluster(server: KubeServer) -> Iterator[KubeCluster]:
    with drain_cluster(server) as adapter:
        yield adapter
