"""The nodes as the sweeper sees them: FakeNodes (tests/unit/sweeper/test_sweeper.py) and SweepNodes over
KubeCluster on the sandbox's API server (the sweeper's RBAC) answer alike.

What the sweeper relies on: nodes by name, and those an owner annotated; a node released (its annotations
taken off) only while they are as it read them: one claimed again since (another lifecycle, another owner) is a
CONFLICT, one deleted is GONE, one that changed otherwise (a kubelet's status, someone's label) is released; a
release that went through takes them off, so the same listing cannot release it again."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Protocol

import pytest

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.ports.cluster import IN_PROGRESS_ANNOTATION, OWNER_ANNOTATION, Claim, OwnedNodes
from nodecycle.domain.sweep.nodes import SweepNodes
from nodecycle_sandbox.kube import KubeServer
from nodecycle_sandbox.kube.access import AccessEntry
from tests.integration.budget.conftest import RBAC, admin_api
from tests.unit.sweeper.test_sweeper import FakeNodes, annotated

SWEEPER_KEY = "AKIATESTSWEEPROLE000"
SWEEPER_ROLE = "arn:aws:iam::123456789012:role/nodecycle-SweeperFunctionRole"
NODES = {  # name -> (instance, owner)
    "ip-10-0-1-10.eu-west-1.compute.internal": ("i-0a1b2c3d4e5f60101", "stack-a"),
    "ip-10-0-1-11.eu-west-1.compute.internal": ("i-0a1b2c3d4e5f60102", "stack-a"),
    "ip-10-0-1-12.eu-west-1.compute.internal": ("i-0a1b2c3d4e5f60103", "stack-b"),
}


class Side(Protocol):
    def nodes(self) -> OwnedNodes:
        """The sweeper's view of the nodes, as a sweep lists them (once per sweep)."""
        ...

    def touch(self, name: str) -> None:
        """Someone else changes the node (a label, a kubelet's status)."""
        ...

    def claim_again(self, name: str) -> None:
        """The node's annotations are another lifecycle's since it was read."""
        ...

    def delete(self, name: str) -> None: ...


class FakeSide:
    def __init__(self) -> None:
        self.fake = FakeNodes(
            [annotated(name, owner, instance, "t") for name, (instance, owner) in NODES.items()]
        )

    def nodes(self) -> OwnedNodes:
        return self.fake

    def touch(self, name: str) -> None:
        self.fake.touch(name)

    def claim_again(self, name: str) -> None:
        self.fake.nodes = [
            node.model_copy(update={"in_progress": AGAIN}) if node.name == name else node
            for node in self.fake.nodes
        ]
        self.fake.touch(name)

    def delete(self, name: str) -> None:
        self.fake.nodes = [node for node in self.fake.nodes if node.name != name]


class ApiServerSide:
    def __init__(self, server: KubeServer) -> None:
        self.server = server
        self.admin = admin_api(server)

    def nodes(self) -> OwnedNodes:
        return SweepNodes(KubeCluster(lambda: self.server.api_client(SWEEPER_KEY)))

    def touch(self, name: str) -> None:
        self.admin.patch_node(name, {"metadata": {"labels": {"touched": "yes"}}})

    def claim_again(self, name: str) -> None:
        self.admin.patch_node(name, {"metadata": {"annotations": {IN_PROGRESS_ANNOTATION: AGAIN}}})

    def delete(self, name: str) -> None:
        self.admin.delete_node(name)


@pytest.fixture(params=["fake", "api-server"])
def side(request: pytest.FixtureRequest) -> Iterator[Side]:
    if request.param == "fake":
        yield FakeSide()
        return
    with KubeServer(tls=True) as kube:
        kube.apply(RBAC)
        kube.add_access_entries([AccessEntry(SWEEPER_ROLE, ("nodecycle-sweeper",))])
        kube.map_role(SWEEPER_KEY, SWEEPER_ROLE, "nodecycle-SweeperFunction")
        admin = admin_api(kube)
        for name, (instance, owner) in NODES.items():
            kube.add_node(name, instance_id=instance, zone="eu-west-1a")
            progress = {"instance": instance, "transition": "terminate", "token": "t", "started": "x"}
            annotations = {OWNER_ANNOTATION: owner, IN_PROGRESS_ANNOTATION: json.dumps(progress)}
            admin.patch_node(name, {"metadata": {"annotations": annotations}})
        yield ApiServerSide(kube)
        admin.api_client.close()


FIRST, SECOND, THEIRS = NODES
AGAIN = json.dumps(
    {"instance": "i-0a1b2c3d4e5f60101", "transition": "terminate", "token": "u", "started": "y"}
)


def test_nodes_by_name_and_by_owner(side: Side) -> None:
    nodes = side.nodes()
    assert nodes.node_names() == set(NODES)
    assert {n.name for n in nodes.nodes_owned_by("stack-a")} == {FIRST, SECOND}
    assert {n.name for n in nodes.nodes_owned_by("stack-c")} == set()


def test_a_node_is_released_once_as_it_was_read(side: Side) -> None:
    nodes = side.nodes()
    (first, _) = sorted(nodes.nodes_owned_by("stack-a"), key=lambda n: n.name)

    assert nodes.release_node(first) is Claim.CLAIMED
    assert nodes.release_node(first) is Claim.CONFLICT  # the release changed it: this reading is stale

    again = side.nodes()  # the next sweep
    assert {n.name for n in again.nodes_owned_by("stack-a")} == {SECOND}


def test_a_node_claimed_again_since_it_was_read_is_a_conflict(side: Side) -> None:
    nodes = side.nodes()
    (first, _) = sorted(nodes.nodes_owned_by("stack-a"), key=lambda n: n.name)
    side.claim_again(FIRST)

    assert nodes.release_node(first) is Claim.CONFLICT
    assert {n.name for n in side.nodes().nodes_owned_by("stack-a")} == {FIRST, SECOND}
    assert next(n for n in side.nodes().nodes_owned_by("stack-a") if n.name == FIRST).in_progress == AGAIN


def test_a_node_that_changed_otherwise_since_it_was_read_is_released(side: Side) -> None:
    # (a kubelet posts its node's status, controllers label it: a release conditional on the node's version lost
    # to them, sweep after sweep on a busy node)
    nodes = side.nodes()
    (first, _) = sorted(nodes.nodes_owned_by("stack-a"), key=lambda n: n.name)
    side.touch(FIRST)

    assert nodes.release_node(first) is Claim.CLAIMED
    assert {n.name for n in side.nodes().nodes_owned_by("stack-a")} == {SECOND}


def test_a_node_deleted_since_it_was_read_is_gone(side: Side) -> None:
    nodes = side.nodes()
    (_, second) = sorted(nodes.nodes_owned_by("stack-a"), key=lambda n: n.name)
    side.delete(SECOND)

    assert nodes.release_node(second) is Claim.GONE
    assert side.nodes().node_names() == {FIRST, THEIRS}
