"""The mark a drain's cleanup leaves on the node of an instance leaving service (``nodecycle.io/released-for``), on
the real Kubernetes adapter against the sandbox API server. It takes the node's lingering object out of a percent
limit's nodes until the cloud provider deletes it, also once the budget's own mark of the slot given back is lost
with its ConfigMap (see NodeState.released). A duplicate of the cleanup (a redelivery that read the record before
the first one's commit, a resume) found the node freed and marked for its own lifecycle and removed the mark:
the node counted again, cordoned, as unavailable, its slot taken from a refresh under a percent limit until the
node object went. Duplicates are harmless (invariant 6): the second cleanup leaves the node as the first left it."""

from __future__ import annotations

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.model import Step
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube import test_kube_drain_steps as drain_steps
from tests.integration.kube.test_kube_drain_steps import NODE, draining
from tests.support.fakes import T0, FakeAutoscaling
from tests.unit.drain.test_drain_steps import FakeSlots, cleanup, cordon

SEED = drain_steps.SEED
MARK = "nodecycle.io/released-for"


def test_a_duplicate_cleanup_leaves_the_released_mark_the_first_one_left_on_a_leaving_instances_node(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a terminating instance's node, drained, its action completed, and cleaned up once: marked released
    record = draining(Step.CORDON)
    claimed = cordon(cluster)(record, T0)
    record = record.model_copy(update={"step": Step.CLEANUP, "outcome": "drained", **claimed.changes})
    step = cleanup(cluster, FakeSlots(holders={NODE}, held_for={NODE: record.id}), FakeAutoscaling())
    assert not step(record, T0).again
    first = server.get_object("nodes", NODE)
    assert first is not None
    assert first["metadata"]["annotations"].get(MARK) == record.id

    # When a duplicate of the cleanup runs
    again = step(record, T0)

    # Then it ends as the first did, the node as the first left it: cordoned, marked released for the lifecycle
    assert (again.then, again.again) == (None, False)
    stored = server.get_object("nodes", NODE)
    assert stored is not None
    assert stored["metadata"]["annotations"].get(MARK) == record.id
    assert stored["spec"].get("unschedulable") is True
    assert stored["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
