"""The mark a drain's cleanup leaves on the node of an instance leaving service (``nodecycle.io/released-for``), on
the real Kubernetes adapter against the sandbox API server. It takes the node's lingering object out of a percent
limit's nodes until the cloud provider deletes it, also once the budget's own mark of the slot given back is lost
with its ConfigMap (see NodeState.released). A duplicate of the cleanup (a redelivery that read the record before
the first one's commit, a resume) found the node freed and marked for its own lifecycle and removed the mark:
the node counted again, cordoned, as unavailable, its slot taken from a refresh under a percent limit until the
node object went. Duplicates are harmless (invariant 6): the second cleanup leaves the node as the first left it.

So too the watch after a maintenance drain, which ended when the instance was found not coming back (its group
terminating it, EC2 retiring it) by removing the mark: the node of an instance leaving service counted again in a
percent limit's nodes (4 nodes serving and the lingering one, 25% let 2 go) until the cloud provider deleted it."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.model import Step
from nodecycle.domain.ports.instances import ScheduledEvent
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube import test_kube_drain_steps as drain_steps
from tests.integration.kube.test_kube_drain_steps import INSTANCE, NODE, draining
from tests.support.fakes import T0, FakeAutoscaling
from tests.unit.drain.test_drain_steps import (
    REBOOT_AT,
    Ec2Maintenance,
    FakeEvents,
    FakeSlots,
    cleanup,
    cordon,
    maintenance,
    reboot,
)

SEED = drain_steps.SEED
MARK = "nodecycle.io/released-for"


def test_a_duplicate_cleanup_leaves_the_released_mark_the_first_one_left_on_a_leaving_instances_node(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a terminating instance's node, drained, its action completed, and cleaned up once: marked released
    record = draining(Step.CORDON)
    claimed = cordon(cluster)(record, T0)
    server.settle()  # (the node lifecycle controller's unschedulable taint of the cordoned node, a write of its own)
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


class Retiring(Ec2Maintenance):
    """EC2 listing the events of this module's instance (the sandbox's node's)."""

    def scheduled_events(self, instance_id: str) -> list[ScheduledEvent]:
        return list(self.events) if instance_id == INSTANCE else []


def test_a_maintenance_watch_that_finds_its_instance_leaving_leaves_the_released_mark_on_its_node(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given the instance's node cordoned and drained for a retirement EC2 will do in an hour, its cleanup done
    # (the node marked released for the lifecycle), watched for the retirement's end
    ids = {"id": f"{INSTANCE}/scheduled-change", "instance_id": INSTANCE}
    record = maintenance(Step.CORDON, REBOOT_AT, node=NODE, zone="eu-west-1a").model_copy(update=ids)
    claimed = cordon(cluster, slots=FakeSlots(holders={NODE}, held_for={NODE: record.id}))(record, T0)
    record = record.model_copy(update={"step": Step.CLEANUP, "outcome": "drained", **claimed.changes})
    ec2 = Retiring(known={INSTANCE: "running"}, events=[reboot("instance-retirement")])
    autoscaling, events = FakeAutoscaling(states={INSTANCE: "InService"}), FakeEvents()
    step = cleanup(cluster, FakeSlots(holders={NODE}, held_for={NODE: record.id}), autoscaling, events, ec2)
    first = step(record, T0)
    assert first.again
    watching = record.model_copy(update=first.changes)
    marked = server.get_object("nodes", NODE)
    assert marked is not None
    assert marked["metadata"]["annotations"].get(MARK) == record.id

    # When the retirement is over and the group terminates the instance (its node object lingering)
    ec2.events = []
    autoscaling.states = {INSTANCE: "Terminating:Wait"}
    done = step(watching, REBOOT_AT + timedelta(minutes=5))

    # Then the watch ends with the node as its cleanup left it: cordoned, marked released for the lifecycle (out
    # of a percent limit's nodes), and an Event tells why it stays cordoned
    assert (done.then, done.again) == (None, False)
    stored = server.get_object("nodes", NODE)
    assert stored is not None
    assert stored["metadata"]["annotations"].get(MARK) == record.id
    assert stored["spec"].get("unschedulable") is True
    assert (NODE, "CordonKeptAfterMaintenance", "Normal") in events.written
