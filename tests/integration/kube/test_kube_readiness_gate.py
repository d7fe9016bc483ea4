"""The launch readiness gate on the real Kubernetes adapter, against the sandbox API server: a node object says
Ready for the node monitor grace period (40 s) after its instance stopped, while its kubelet's Lease in
kube-node-lease, renewed only while the kubelet runs, tells whether it does; read under deploy/rbac.yaml, and
under an older RBAC that does not let it be read."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes.client import RbacAuthorizationV1Api

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.adapters.kube.eks_access import EksCluster
from nodecycle.adapters.kube.events import KubeEvents
from nodecycle.domain.launch import BACK_NO_SOONER, CLOCK_SKEW, ReadinessGate
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.nodes import NodeFinder
from nodecycle_sandbox.aws.group import wait_for
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube.cluster import drain_server, eks_describing
from tests.support.fakes import T0, FakeMetrics, LaunchingGroup
from tests.support.readiness_gates import Dns
from tests.unit.drain.test_drain_steps import INSTANCE, NODE, launching, readiness, wakes_to_nowhere

SEED = {"nodes": [{"privateIp": "10.0.1.23", "instanceId": INSTANCE, "zone": "eu-west-1a"}]}
LEASES = "kube-node-lease"
# How long a booted kubelet posts its node's status after its first Lease renewal (see set_boot_status_lag)
STATUS_LAG = 3.0


@pytest.fixture
def server() -> Iterator[KubeServer]:
    # kubelets that renew their Leases every 0.5 s: a revived one's renewal is seen at once
    with drain_server(SEED, node_lease_renew_seconds=0.5) as kube:
        yield kube


@pytest.fixture
def gate(server: KubeServer) -> Iterator[ReadinessGate]:
    """The gate as the drain function builds it: the adapter and Events through EKS access."""
    with eks_describing(server):
        access = EksCluster("sandbox")
        cluster = KubeCluster(access.api_client)
        yield ReadinessGate(
            finder=NodeFinder(cluster, Dns()),
            cluster=cluster,
            instances=Dns(),
            autoscaling=LaunchingGroup(),
            dispatcher=wakes_to_nowhere(),
            policy=readiness(),
            metrics=FakeMetrics(),
            events=KubeEvents(access.api_client, owner="nodecycle"),
        )


def renewed(server: KubeServer) -> datetime:
    """When the node's kubelet last renewed its Lease, as the API server holds it."""
    lease = server.get_object("leases", NODE, LEASES)
    assert lease is not None, "the node has no Lease"
    return datetime.fromisoformat(lease["spec"]["renewTime"].replace("Z", "+00:00"))


def says_ready(server: KubeServer) -> bool:
    node = server.get_object("nodes", NODE) or {}
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def test_an_instance_back_from_a_stopped_warm_pool_waits_while_its_node_is_still_ready_from_before_the_stop(
    server: KubeServer, gate: ReadinessGate
) -> None:
    # Given a node whose instance was stopped into its warm pool: its kubelet is gone, its node object says Ready
    # until the node controller marks it Unknown (after 40 s)
    server.kill_kubelet(NODE)
    last = renewed(server)

    # When the instance is taken out of the pool 20 s after its kubelet's last renewal (its launch action
    # starts) and the gate looks, while the instance boots
    returned = last + timedelta(seconds=20)
    outcome = gate(launching(origin="WarmPool", started_at=returned), returned)

    # Then the gate waits for the kubelet: the node's Ready is from before the stop
    assert says_ready(server)
    assert outcome.again
    assert outcome.changes["gate_deadline"] == returned + timedelta(seconds=300)


def test_an_instance_back_from_a_short_stay_in_its_warm_pool_waits_for_its_kubelet_to_run_again(
    server: KubeServer, gate: ReadinessGate
) -> None:
    # Given a node whose instance was hibernated into its warm pool: its kubelet asleep, its node object Ready
    server.kill_kubelet(NODE)
    last = renewed(server)

    # When the instance is taken out of the pool 3 s after its kubelet's last renewal (a scale-in, then a scale-out
    # moments later: within the clock allowance of a renewal since the launch began) and the gate looks
    returned = last + timedelta(seconds=3)
    record = launching(origin="WarmPool", started_at=returned, received_at=returned + timedelta(seconds=1))
    first = gate(record, returned + timedelta(seconds=1))

    # Then the gate waits: that renewal is the sleeping kubelet's, older than the launch
    assert says_ready(server)
    assert first.again

    # and opens once the kubelet, running again, has renewed the Lease since
    server.revive_kubelet(NODE)
    wait_for(lambda: renewed(server) > last, 10, "the kubelet's renewal")
    opened = gate(record.model_copy(update=dict(first.changes)), returned + timedelta(seconds=6))
    assert (opened.again, opened.changes["outcome"]) == (False, "node-ready")


def test_the_gate_opens_once_the_kubelet_of_an_instance_back_from_its_warm_pool_renews_its_lease(
    server: KubeServer, gate: ReadinessGate
) -> None:
    # Given an instance taken out of its Stopped warm pool, the gate waiting at its first look: its node says
    # Ready from before the stop
    server.kill_kubelet(NODE)
    returned = renewed(server) + CLOCK_SKEW + timedelta(seconds=1)
    record = launching(origin="WarmPool", started_at=returned)
    waiting = gate(record, returned)
    assert waiting.again

    # When its kubelet, started again by the boot, renews its Lease
    server.revive_kubelet(NODE)
    wait_for(lambda: renewed(server) >= returned - CLOCK_SKEW, 10, "the kubelet's renewal")

    # Then the gate opens at its next look
    opened = gate(record.model_copy(update=dict(waiting.changes)), returned + timedelta(seconds=5))
    assert (opened.again, opened.changes["outcome"]) == (False, "node-ready")


def tainted_not_ready(server: KubeServer) -> bool:
    node = server.get_object("nodes", NODE) or {}
    taints = (node.get("spec") or {}).get("taints") or []
    return any(t["key"] == "node.kubernetes.io/not-ready" for t in taints)


def boot_id(server: KubeServer) -> str:
    node = server.get_object("nodes", NODE) or {}
    return str(((node.get("status") or {}).get("nodeInfo") or {}).get("bootID", ""))


def waits_for_the_booted_kubelets_status(
    server: KubeServer, gate: ReadinessGate, record: LifecycleRecord, before: str, looked_at: datetime
) -> None:
    """The gate's look at ``looked_at`` waits, its node still Ready on the boot ``before`` the stop and the booted
    kubelet's status still to come; a look while that status says NotReady (its network plugin not ready yet: see
    Controllers.boot_network_lag) waits too; once it says Ready, the gate's next look (2 s later) opens."""
    looked = gate(record, looked_at)
    assert says_ready(server)
    assert boot_id(server) == before, "the kubelet posted its status before the look: the lag is too short"
    assert looked.again, "the launch completed on the Ready of the node's boot from before the stop"
    wait_for(lambda: boot_id(server) != before, 10, "the booted kubelet's status")
    record = record.model_copy(update=dict(looked.changes))
    if not says_ready(
        server
    ):  # (a second at most: a look this late, on a busy machine, finds it Ready already)
        waiting = gate(record, looked_at + timedelta(seconds=1))
        if not says_ready(server):
            assert waiting.again, "the launch completed on a NotReady node"
        record = record.model_copy(update=dict(waiting.changes))
    # (and the node lifecycle controller's not-ready taint, which that NotReady brought, lifted: the gate waits for it)
    wait_for(lambda: says_ready(server) and not tainted_not_ready(server), 10, "the booted kubelet's Ready")
    opened = gate(record, max(renewed(server), looked_at) + timedelta(seconds=2))
    assert (opened.again, opened.changes["outcome"]) == (False, "node-ready")


def test_an_instance_back_from_a_short_stop_in_its_warm_pool_waits_for_its_booted_kubelet_to_post_its_status(
    server: KubeServer, gate: ReadinessGate
) -> None:
    # Given an instance stopped into its warm pool and taken out of it within the node monitor's grace (its node
    # still Ready from before the stop), whose kubelet, once booted, renews its Lease at once but posts the node's
    # status (the new boot's id, its own Ready) only STATUS_LAG seconds later, as a real kubelet's status loop waits
    # for its first runtime check while its Lease controller runs from the start
    server.set_boot_status_lag(STATUS_LAG, node=NODE)
    server.instance_stopped(NODE)
    last, before = renewed(server), boot_id(server)
    returned = last + timedelta(seconds=20)
    record = launching(origin="WarmPool", started_at=returned)
    waiting = gate(record, returned)
    assert waiting.again

    # When the instance boots and its kubelet renews the Lease, the node still Ready on the boot from before the stop
    server.instance_started(NODE)
    wait_for(lambda: renewed(server) > last, 10, "the booted kubelet's renewal")
    record = record.model_copy(update=dict(waiting.changes))

    # Then the gate waits for the kubelet's status, and opens once it is posted
    waits_for_the_booted_kubelets_status(server, gate, record, before, returned + timedelta(seconds=5))


def test_without_the_lease_rule_a_ready_node_opens_the_gate_and_a_warning_on_the_node_says_why(
    server: KubeServer, gate: ReadinessGate
) -> None:
    # Given a deployment whose RBAC predates the Lease rule: the drain's group may not read Leases
    RbacAuthorizationV1Api(server.api_client()).delete_namespaced_role_binding(
        "nodecycle-drain-node-leases", LEASES
    )
    returned = renewed(server)

    # When the gate finds the node Ready
    outcome = gate(launching(started_at=returned), returned)

    # Then it opens on the Ready condition alone, as it did before it read Leases, and the node's events say
    # that the Lease could not be read and what to apply
    assert (outcome.again, outcome.changes["outcome"]) == (False, "node-ready")
    (warning,) = [e for e in server.objects("events", "default") if e["reason"] == "NodeLeaseUnreadable"]
    assert (warning["type"], warning["involvedObject"]["name"]) == ("Warning", NODE)
    assert "forbidden" in warning["message"]
    assert "nodecycle rbac" in warning["message"]


def test_a_role_that_may_not_read_nodes_keeps_the_gate_looking_until_its_timeout_then_settles_it(
    server: KubeServer, gate: ReadinessGate
) -> None:
    # Given a deployment whose drain role may not read nodes (its binding removed)
    RbacAuthorizationV1Api(server.api_client()).delete_cluster_role_binding("nodecycle-drain")
    record = launching()

    # When the gate looks, then looks again at its timeout
    first = gate(record, T0)
    record = record.model_copy(update=dict(first.changes))
    last = gate(record, T0 + timedelta(seconds=300))

    # Then the first look waits for the next poll (not an error the queue retries and dead-letters), and the
    # last settles the launch with the failure policy's result, naming the refusal
    assert (first.again, first.changes["gate_deadline"]) == (True, T0 + timedelta(seconds=300))
    assert (last.then, last.changes["outcome"]) == (Step.COMPLETE, "readiness-refused")
    assert "forbidden" in last.changes["last_error"]


def test_a_first_look_after_the_booted_kubelets_renewal_waits_for_its_status_too(
    server: KubeServer, gate: ReadinessGate
) -> None:
    # Given an instance stopped into its warm pool and taken out of it at once (its launch action starts), within the
    # node monitor's grace; its booted kubelet renews its Lease at once and posts its status STATUS_LAG seconds later
    server.set_boot_status_lag(STATUS_LAG, node=NODE)
    server.instance_stopped(NODE)
    last, before = renewed(server), boot_id(server)
    # (the launch begins past the clock allowance of the old kubelet's last status post, its stop's time at least)
    returned = last + CLOCK_SKEW + timedelta(seconds=0.5)
    record = launching(origin="WarmPool", started_at=returned)

    # When the gate's first look comes after the booted kubelet's renewal (its launch held before the gate: an
    # address step asked again 15 s on, a throttled function), the node still Ready on the boot from before the stop
    wait_for(lambda: datetime.now(UTC) > returned, 10, "the launch's start")
    server.instance_started(NODE)
    wait_for(lambda: renewed(server) > returned, 10, "the booted kubelet's renewal")
    # (and past BACK_NO_SOONER of the start, which no Stopped pool's instance is back within: the sandbox's is at once)
    looked = max(renewed(server) + timedelta(seconds=1), returned + BACK_NO_SOONER + timedelta(seconds=1))

    # Then the gate waits for the kubelet's status, and opens once it is posted
    waits_for_the_booted_kubelets_status(server, gate, record, before, looked)


def test_a_launch_the_intake_timed_a_minute_early_waits_for_the_booted_kubelets_status(
    server: KubeServer, gate: ReadinessGate
) -> None:
    # Given an instance stopped into its warm pool and taken out of it 20 s after its kubelet's last renewal, within
    # the node monitor's grace; its launch taken in by an intake whose clock runs a minute behind (it timed the launch
    # from its own clock: started_at == received_at, a minute early); its booted kubelet posts its status STATUS_LAG
    # seconds after its first renewal
    server.set_boot_status_lag(STATUS_LAG, node=NODE)
    server.instance_stopped(NODE)
    last, before = renewed(server), boot_id(server)
    returned = last + timedelta(seconds=20)
    early = returned - timedelta(seconds=60)
    record = launching(origin="WarmPool", started_at=early, received_at=early)
    waiting = gate(record, returned)
    assert waiting.again

    # When the instance boots and its kubelet renews the Lease, the node still Ready on the boot from before the stop
    server.instance_started(NODE)
    wait_for(lambda: renewed(server) > last, 10, "the booted kubelet's renewal")
    record = record.model_copy(update=dict(waiting.changes))

    # Then the gate waits for the kubelet's status (the kubelet asleep as the gate first read its Lease, by the drain
    # function's clock), and opens once it is posted
    waits_for_the_booted_kubelets_status(server, gate, record, before, returned + timedelta(seconds=5))
