"""A Spot instance EC2 stopped and started again before the node monitor's grace was over: its node still says Ready
as the kubelet left it before the stop, on the old boot, while the instance boots. The watch after the interruption
lifts the cordon only once the kubelet is back (its new boot id), on the real adapters: the node on the sandbox API
server, the instance on moto's EC2."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import boto3
import pytest

from nodecycle.adapters.aws.instances import Ec2Instances
from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.drain.cleanup import Cleanup
from nodecycle.domain.model import Step
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube.cluster import drain_server
from tests.integration.kube.test_kube_drain_steps import NODE
from tests.integration.kube.test_kube_drain_steps import SEED as DRAIN_STEPS_SEED
from tests.integration.kube.test_kube_spot_stop_restart import (
    REGION,
    ec2,
    looked,
    ready,
    unschedulable,
    warned_at_its_cordon,
)
from tests.support.fakes import FakeAutoscaling, FakeMetrics
from tests.unit.drain.test_drain_steps import FakeEvents, FakeSlots, cordon, wakes_to_nowhere

__all__ = ["ec2"]  # (the fixture, shared with the stop and start's own tests)


@pytest.fixture
def server(ec2: tuple[Ec2Instances, str]) -> Iterator[KubeServer]:
    """The drain steps' cluster, its node the launched instance's; a node Ready for a minute after its kubelet is
    lost (the node monitor's grace: 40 s by default, 50 s in newer releases)."""
    _, instance = ec2
    nodes = [{**DRAIN_STEPS_SEED["nodes"][0], "instanceId": instance}, *DRAIN_STEPS_SEED["nodes"][1:]]  # type: ignore[index]
    with drain_server({**DRAIN_STEPS_SEED, "nodes": nodes}, node_monitor_grace_seconds=60) as kube:
        yield kube


def boot_id(server: KubeServer) -> str:
    stored = server.get_object("nodes", NODE) or {}
    return str(stored["status"]["nodeInfo"]["bootID"])


def test_a_node_whose_spot_instance_was_started_again_stays_cordoned_until_its_kubelet_is_back(
    cluster: KubeCluster, server: KubeServer, ec2: tuple[Ec2Instances, str]
) -> None:
    instances, instance = ec2
    client = boto3.client("ec2", region_name=REGION)
    now = datetime.now(UTC).replace(microsecond=0)
    before = boot_id(server)
    # Given a Spot interruption whose warning said EC2 stops the instance, its node cordoned by its drain, released
    record = warned_at_its_cordon(instance, now, "stop")
    strikes = record.global_deadline
    claimed = cordon(cluster)(record, now)
    assert claimed.then is None, claimed
    record = record.model_copy(
        update={"step": Step.CLEANUP, "outcome": "drained", "drain_started_at": now, **claimed.changes}
    )
    events = FakeEvents()
    step = Cleanup(
        cluster=cluster,
        slots=FakeSlots(holders={NODE}, held_for={NODE: record.id}),
        dispatcher=wakes_to_nowhere(),
        autoscaling=FakeAutoscaling(),
        metrics=FakeMetrics(),
        events=events,
        instances=instances,
    )
    released, record = looked(step, record, strikes - timedelta(seconds=8))
    assert released.again

    # When EC2 stops the instance (its kubelet gone, the node Ready still for the node monitor's grace), a look sees
    # it stopped, and EC2 starts it again at once, the instance booting, its kubelet not back yet
    client.stop_instances(InstanceIds=[instance])
    server.instance_stopped(NODE)
    _, record = looked(step, record, strikes + timedelta(seconds=30))
    client.start_instances(InstanceIds=[instance])
    assert ready(cluster)  # (the Ready the kubelet left before the stop)
    at = strikes + timedelta(minutes=1)
    for _ in range(3):  # (the watch's looks meanwhile)
        outcome, record = looked(step, record, at)
        at += timedelta(seconds=max(outcome.delay, 1))

        # Then the node stays cordoned: no kubelet runs there to take pods
        assert outcome.again
        assert unschedulable(server), "uncordoned on the Ready the kubelet left before the stop"

    # When the kubelet is back, posting Ready from the new boot
    server.instance_started(NODE)
    assert boot_id(server) != before
    outcome, record = looked(step, record, at)

    # Then the cordon is lifted
    assert not outcome.again
    assert not unschedulable(server)
    assert (NODE, "UncordonedAfterSpotInterruption", "Normal") in events.written
