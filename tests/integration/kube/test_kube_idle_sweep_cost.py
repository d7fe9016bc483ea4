"""What one sweep costs as the cluster grows: the sweeper function on moto, acting on the sandbox API server as
the sweeper (its group, its RBAC), its requests counted by both."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from types import ModuleType

import pytest
from kubernetes.client import CoreV1Api

from nodecycle.adapters.kube.budget import ConfigMapBudgetStore
from nodecycle.domain.budget import BudgetDocument, Holder
from nodecycle_sandbox.aws.eks import point_cluster
from nodecycle_sandbox.aws.install import install
from nodecycle_sandbox.kube import KubeServer
from nodecycle_sandbox.kube.access import AccessEntry
from tests.functions.intake.conftest import GROUP, make_group
from tests.integration.budget.conftest import NAMESPACE, RBAC, instance_of, node_name, zone_of
from tests.integration.kube.cluster import ACCOUNT
from tests.support.events import load_event
from tests.support.functions import AwsLatency, LambdaContext, load_function
from tests.support.stack import Stack

SWEEPER_ROLE = "arn:aws:iam::123456789012:role/nodecycle-SweeperFunctionRole"
BUDGET = "nodecycle-budget"


@pytest.fixture
def server() -> Iterator[KubeServer]:
    with KubeServer(tls=True) as kube:
        kube.apply(RBAC)
        kube.add_access_entries([AccessEntry(SWEEPER_ROLE, ("nodecycle-sweeper",))])
        # mock_aws signs the EKS token with its own fake key: it stands for the sweeper's role here
        kube.map_role("FOOBARKEY", SWEEPER_ROLE, "nodecycle-SweeperFunction")
        yield kube


@dataclass
class Sweeps:
    """The sweeper function of a stack of one managed group, on a cluster none of whose nodes are its own."""

    server: KubeServer
    sweeper: ModuleType
    calls: AwsLatency

    def one(self) -> tuple[Counter[str], Counter[str], Counter[str]]:
        """One sweep's AWS calls, Kubernetes requests and Kubernetes response bytes."""
        self.server.reset_counters()
        self.calls.operations.clear()
        self.sweeper.handler(load_event("sweeper-schedule.json"), LambdaContext(remaining_millis=300_000))
        kube = Counter({f"{verb} {resource}": n for (verb, resource), n in self.server.counters().items()})
        sent = Counter({f"{verb} {resource}": n for (verb, resource), n in self.server.bytes_sent().items()})
        return Counter(self.calls.operations), kube, sent

    def grow_to(self, size: int) -> None:
        for index in range(len(self.server.objects("nodes")), size):
            self.server.add_node(node_name(index), instance_id=instance_of(index), zone=zone_of(index))


@pytest.fixture
def sweeps(server: KubeServer, stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[Sweeps]:
    install()
    monkeypatch.setenv("NODECYCLE_BUDGET_NAMESPACE", NAMESPACE)
    point_cluster(
        account=ACCOUNT,
        region="eu-west-1",
        name="sandbox",
        endpoint=server.url,
        ca_pem=server.ca_pem.decode(),
    )
    make_group(GROUP)
    calls = AwsLatency(per_call=0)
    with calls.counting():
        yield Sweeps(server, load_function("sweeper"), calls)


def test_an_idle_sweep_makes_the_same_requests_at_50_and_at_2000_nodes(sweeps: Sweeps) -> None:
    # Given a cluster of 50 nodes, none of them this owner's, and nothing to repair; a sweeper warm (its
    # cluster endpoint and its hooks read once per container)
    sweeps.grow_to(50)
    sweeps.one()
    small = sweeps.one()

    # When the cluster grows to 2,000 nodes and the next sweep has nothing more to do
    sweeps.grow_to(2_000)
    large = sweeps.one()

    # Then it makes the same AWS calls and Kubernetes requests: one metadata-only list of the nodes (the
    # leftover annotations; annotations cannot be selected on), read in one response from the watch cache,
    # and the budget's ConfigMap
    assert large[:2] == small[:2]
    assert small[1]["list nodes"] == 1


def test_an_idle_sweep_reads_the_budget_configmap_once(sweeps: Sweeps) -> None:
    # Given a cluster of 50 nodes, an empty budget, nothing to repair, and a sweeper warm
    sweeps.grow_to(50)
    sweeps.one()

    # When it sweeps
    _, kube, _ = sweeps.one()

    # Then it reads the budget's ConfigMap once: the read its conditional write (had there been one) would
    # have carried the resourceVersion of
    assert kube["get configmaps"] == 1


def test_a_sweep_with_budget_entries_lists_the_nodes_once(sweeps: Sweeps) -> None:
    # Given a cluster of 50 nodes and a budget holding a slot of this owner for a node whose instance is gone
    sweeps.grow_to(50)
    sweeps.one()
    now = datetime.now(UTC)
    holder = Holder(
        node=node_name(0),
        instance_id=instance_of(0),
        zone=zone_of(0),
        owner="stack-a",
        record_id=f"{instance_of(0)}/terminate/a",
        renewed_at=now,
        ttl_seconds=300,
        acquired_at=now,
    )
    # (written as a stack writes it: a document someone else set is seeded from the nodes first)
    admin = CoreV1Api(sweeps.server.api_client())
    ConfigMapBudgetStore(lambda: admin, NAMESPACE).update(lambda _: (BudgetDocument(holders=(holder,)), None))
    admin.api_client.close()

    # When it sweeps
    _, kube, _ = sweeps.one()

    # Then the holder is swept, and the nodes were listed once for the budget and the leftover annotations
    # both (of their metadata only: their names and annotations)
    stored = sweeps.server.get_object("configmaps", BUDGET, NAMESPACE)
    assert stored is not None
    assert BudgetDocument.from_json(stored["data"]["budget.json"]).holders == ()
    assert kube["list nodes"] == 1
