"""The budget ConfigMap made immutable (``immutable: true``: a GitOps tool's generator, a kustomization, an operator
"freezing" it): kube-apiserver refuses every change of its data from then on (422 Forbidden), and no one can make
it mutable again; only deleting it and creating it again does. The budget can then grant, renew and give back
nothing: that is the ConfigMap's answer, as a refused read is (a drain's poll evicts nothing and tells why on its
node; an ask is retried up to its refused tries, then its message fails: the alarm), with the way out in its words;
not a transient error retried until the message is dead-lettered, logged as a document too large."""

from __future__ import annotations

from kubernetes import client

from nodecycle.adapters.kube.budget import BudgetImmutable
from nodecycle.domain.budget import SlotReason
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import NAMESPACE, admin_api, node_name
from tests.integration.budget.test_configmap_recreated import (
    budget_of,
    cordon,
    polled,
    recreate_the_configmap,
    request,
)
from tests.support.budget_refusals import CONFIGMAP, held_by_node_0, refusals_later


def test_an_immutable_budget_configmap_is_refused_with_its_way_out_and_nothing_is_sent_to_be_refused(
    server: KubeServer, core: client.CoreV1Api
) -> None:
    # Given a budget of 1 held by node 0's drain (claimed on its node)
    clock = held_by_node_0(server, core)
    cordon(core, request(0))
    # When the ConfigMap is made immutable, and node 1 asks, and node 0's drain renews its slot when it is due
    admin = admin_api(server)
    admin.patch_namespaced_config_map(CONFIGMAP, NAMESPACE, {"immutable": True})
    refusals = refusals_later(
        server,
        clock,
        lambda: budget_of(core, clock, "blue", "1", "1").acquire(request(1)),
        lambda: budget_of(core, clock, "blue", "1", "1").renew(polled(0)),
    )

    # Then each is refused, naming the ConfigMap and the way out, and no write was sent to be refused
    for refusal in refusals:
        assert isinstance(refusal, BudgetImmutable)
        assert f"{NAMESPACE}/nodecycle-budget is immutable" in str(refusal)
        assert "kubectl apply -f deploy/rbac.yaml" in str(refusal)
    assert ("update", "configmaps") not in server.counters()

    # And once it is deleted and created again (as its words say), node 0's drain is still counted: node 1 waits
    recreate_the_configmap(server)
    admin.api_client.close()
    after = budget_of(core, clock, "blue", "1", "1")
    assert after.acquire(request(1)).reason is SlotReason.NO_ROOM
    assert [h.node for h in after.snapshot().holders] == [node_name(0)]
