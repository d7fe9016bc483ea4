"""The launch readiness gate on the real Kubernetes adapter, against the sandbox API server, for a node that
registers under a name other than its instance's private DNS name (a hostname override, a custom AMI's naming):
once a scan of the nodes found it, the gate looks it up by that name, not only at the next scan."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.adapters.kube.eks_access import EksCluster
from nodecycle.adapters.kube.events import KubeEvents
from nodecycle.domain.launch import SCAN_AFTER, SCAN_EVERY, ReadinessGate
from nodecycle.domain.model import LifecycleRecord
from nodecycle.domain.nodes import NodeFinder
from nodecycle.domain.ports.cluster import NodeInfo
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube.cluster import drain_server, eks_describing
from tests.support.fakes import FakeMetrics, LaunchingGroup
from tests.support.readiness_gates import Dns
from tests.unit.drain.test_drain_steps import INSTANCE, NODE, launching, readiness, wakes_to_nowhere

HOSTNAME = "worker-7.cluster.example"  # the node's name: not the instance's private DNS name


class Lookups(KubeCluster):
    """The adapter, recording each look of the gate that may list every node (a scan), and each list."""

    scans: list[bool]
    lists: int

    def find_node(
        self, instance_id: str, private_dns_name: str | None, *, scan: bool = True
    ) -> NodeInfo | None:
        self.scans.append(scan)
        return super().find_node(instance_id, private_dns_name, scan=scan)

    def _list_nodes(self, *, metadata_only: bool = False) -> Iterator[dict[str, Any]]:
        self.lists += 1
        return super()._list_nodes(metadata_only=metadata_only)


@pytest.fixture
def server() -> Iterator[KubeServer]:
    with drain_server({"nodes": []}, node_lease_renew_seconds=0.5) as kube:
        yield kube


@pytest.fixture
def cluster(server: KubeServer) -> Iterator[tuple[Lookups, ReadinessGate]]:
    with eks_describing(server):
        access = EksCluster("sandbox")
        lookups = Lookups(access.api_client)
        lookups.scans, lookups.lists = [], 0
        yield (
            lookups,
            ReadinessGate(
                finder=NodeFinder(lookups, Dns()),
                cluster=lookups,
                instances=Dns(),
                autoscaling=LaunchingGroup(),
                dispatcher=wakes_to_nowhere(),
                policy=readiness(),
                metrics=FakeMetrics(),
                events=KubeEvents(access.api_client, owner="nodecycle"),
            ),
        )


def test_a_node_named_otherwise_found_not_ready_by_a_scan_opens_the_gate_at_the_next_poll_once_ready(
    server: KubeServer, cluster: tuple[Lookups, ReadinessGate]
) -> None:
    lookups, gate = cluster
    policy = readiness()
    poll = timedelta(seconds=policy.poll_seconds)
    # Given a launch whose node registered under its hostname, not Ready yet (its CNI still starting)
    started = datetime.now(UTC) - timedelta(seconds=1)
    record: LifecycleRecord = launching(started_at=started)
    server.add_node(HOSTNAME, instance_id=INSTANCE, zone="eu-west-1a", ready=False)

    # When the gate polls until a scan of the nodes finds it, not Ready
    now = started
    while True:
        outcome = gate(record, now)
        assert outcome.again
        record = record.model_copy(update=dict(outcome.changes))
        now += poll
        if lookups.scans[-1]:
            break
    assert now - started > SCAN_AFTER
    # And the node turns Ready right after, and the gate polls on
    server.set_node_ready(HOSTNAME, True)
    server.settle()  # (and the node lifecycle controller lifts its not-ready taint)
    lists = lookups.lists
    opened_after = 0
    for _ in range(SCAN_EVERY):
        opened_after += 1
        outcome = gate(record, now)
        if not outcome.again:
            break
        record = record.model_copy(update=dict(outcome.changes))
        now += poll

    # Then it opens at its next poll, the node looked up by the name the scan found, not by listing every
    # node again six polls later
    assert (outcome.again, outcome.changes.get("outcome")) == (False, "node-ready")
    assert outcome.changes["node"] == HOSTNAME
    assert opened_after == 1
    assert lookups.lists == lists


def test_a_node_found_under_another_name_then_deleted_and_registered_by_its_dns_name_is_found_again(
    server: KubeServer, cluster: tuple[Lookups, ReadinessGate]
) -> None:
    lookups, gate = cluster
    poll = timedelta(seconds=readiness().poll_seconds)
    # Given a launch whose node a scan found under its hostname, not Ready
    started = datetime.now(UTC) - timedelta(seconds=1)
    record: LifecycleRecord = launching(started_at=started)
    server.add_node(HOSTNAME, instance_id=INSTANCE, zone="eu-west-1a", ready=False)
    now = started
    while not (lookups.scans and lookups.scans[-1]):
        outcome = gate(record, now)
        record = record.model_copy(update=dict(outcome.changes))
        now += poll
    assert outcome.again

    # When that node is deleted, and the kubelet registers again under the instance's DNS name, Ready
    assert server.remove_node(HOSTNAME)
    server.add_node(NODE, instance_id=INSTANCE, zone="eu-west-1a")
    # (registered tainted not-ready, as the API server taints every node created, until the node lifecycle
    # controller has seen it Ready: a gate looking before that waits a poll, as on a real cluster)
    server.settle()
    outcome = gate(record, now)

    # Then the gate finds it by the DNS name at its next poll, and opens
    assert (outcome.again, outcome.changes.get("outcome")) == (False, "node-ready")
    assert outcome.changes["node"] == NODE


def test_a_node_named_after_its_instance_id_opens_the_gate_at_its_first_poll_without_a_scan(
    server: KubeServer, cluster: tuple[Lookups, ReadinessGate]
) -> None:
    lookups, gate = cluster
    # Given a launch whose node registered under its instance id (a kubelet whose hostname is overridden to
    # it, as some AMIs and provisioners name nodes), Ready, its kubelet running since the launch began
    started = datetime.now(UTC) - timedelta(seconds=1)
    record: LifecycleRecord = launching(started_at=started)
    server.add_node(INSTANCE, instance_id=INSTANCE, zone="eu-west-1a")
    server.settle()  # (the node lifecycle controller's lift of the not-ready taint every new node is created with)

    # When the gate looks for it the first time, minutes before it may list every node
    outcome = gate(record, started)

    # Then it finds the node by that name and opens (not only at its first scan, two minutes on), listing no
    # node
    assert (outcome.again, outcome.changes.get("outcome")) == (False, "node-ready")
    assert outcome.changes["node"] == INSTANCE
    assert lookups.scans == [False]
    assert lookups.lists == 0
