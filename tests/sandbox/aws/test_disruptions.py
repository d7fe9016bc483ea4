"""The disruptions no hook starts, as EC2 and AWS Health show them: Spot capacity and its requests, the
interruption warning two minutes (here: compressed) before EC2 reclaims the instance, the group's terminate
hook shortly after the warning, rebalance recommendations, scheduled events in DescribeInstanceStatus and
AWS Health, and state changes for what is stopped or terminated outside the hooks. Shapes compared with
the samples in events/."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nodecycle_sandbox.aws.group import AutoScalingGroup, GroupSpec, default_hooks, wait_for
from nodecycle_sandbox.aws.records import TERMINATING
from nodecycle_sandbox.iam.template import StaticResources
from nodecycle_sandbox.runner.cfn_yaml import load_template
from nodecycle_sandbox.runner.intrinsics import Intrinsics
from nodecycle_sandbox.runner.patterns import matches
from tests.sandbox.aws.conftest import REGION, Emulation

ACCOUNT = "123456789012"  # moto's default, the emulation's
ROOT = Path(__file__).resolve().parents[3]


def sample(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((ROOT / "events" / name).read_text())
    return loaded


def shape(value: Any) -> Any:
    """The keys (recursively) and value types of an event: what must equal the sample's."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shape(item) for item in value[:1]]
    return type(value).__name__


def named(health: dict[str, Any]) -> list[str]:
    """The instances a Health event names (by their ARNs)."""
    return [e["entityValue"].rsplit("/", 1)[-1] for e in health["detail"]["affectedEntities"]]


def intake_patterns() -> list[dict[str, Any]]:
    """The intake rules' patterns, resolved as CloudFormation would in the emulation's account and region
    (they match on both)."""
    template = load_template(ROOT / "template.yaml")
    resources = StaticResources(template, stack_name="nodecycle", region=REGION, account=ACCOUNT)
    resources.intrinsics = Intrinsics(
        template, resources=resources, stack_name="nodecycle", region=REGION, account=ACCOUNT, parameters={}
    )
    events = template["Resources"]["IntakeFunction"]["Properties"]["Events"]
    return [
        resources.intrinsics.resolve(e["Properties"]["Pattern"])
        for e in events.values()
        if e["Type"] == "EventBridgeRule"
    ]


def spot_group(
    aws: Emulation,
    *,
    size: int,
    on_demand_percentage: int = 0,
    base: int = 0,
    capacity_rebalance: bool = False,
) -> AutoScalingGroup:
    group = AutoScalingGroup(
        autoscaling=aws.autoscaling, ec2=aws.ec2, control=aws.control, region=REGION, name="spot"
    )
    spec = GroupSpec(
        name="spot",
        size=0,
        hooks=(default_hooks()[1],),  # terminate hook only: launches go in service at once
        on_demand_percentage=on_demand_percentage,
        on_demand_base=base,
        capacity_rebalance=capacity_rebalance,
    )
    group.create(spec)
    group.set_desired(size)
    return group


def ec2_events(aws: Emulation, detail_type: str) -> list[dict[str, Any]]:
    return [e for e in aws.bus.events if e["detail-type"] == detail_type]


def test_a_mixed_instances_group_launches_spot_per_its_distribution_each_with_its_spot_request(
    aws: Emulation,
) -> None:
    # Given a group with one On-Demand instance as base and 50% On-Demand above it
    group = spot_group(aws, size=5, on_demand_percentage=50, base=1)

    # Then 1 + 2 On-Demand and 2 Spot instances, each Spot one with a fulfilled Spot request naming it
    spot = group.spot_instances()
    assert len(group.instances()) == 5
    assert len(spot) == 2
    described = aws.ec2.describe_instances(InstanceIds=spot)["Reservations"]
    requests = {i["SpotInstanceRequestId"]: i["InstanceId"] for r in described for i in r["Instances"]}
    answered = aws.ec2.describe_spot_instance_requests(SpotInstanceRequestIds=list(requests))
    assert {r["SpotInstanceRequestId"]: r["InstanceId"] for r in answered["SpotInstanceRequests"]} == requests
    assert {r["Status"]["Code"] for r in answered["SpotInstanceRequests"]} == {"fulfilled"}


def test_a_spot_interruption_warns_marks_the_request_starts_the_hook_then_reclaims_the_instance(
    aws: Emulation,
) -> None:
    # Given a Spot group of two, with a terminate hook nobody completes
    group = spot_group(aws, size=2)
    victim = sorted(group.instances())[0]
    request = aws.ec2.describe_instances(InstanceIds=[victim])["Reservations"][0]["Instances"][0][
        "SpotInstanceRequestId"
    ]

    # When EC2 interrupts one, with 8 s of warning and the hook 6 s after it (room for the checks below on a
    # loaded machine: the instance must still be in service when they run; with the hook 2 s after, a CI run at
    # load 15 found it in Terminating:Wait already)
    group.interrupt_spot(victim, warning_seconds=8.0, hook_after=6.0)

    # Then at once: the instance still in service, the warning, in the sample's shape, matching intake's rule;
    # the request marked
    assert group.instances()[victim] == "InService"
    (warning,) = ec2_events(aws, "EC2 Spot Instance Interruption Warning")
    assert shape(warning) == shape(sample("eventbridge-spot-interruption.json"))
    assert warning["detail"] == {"instance-id": victim, "instance-action": "terminate"}
    assert warning["resources"][0].startswith(f"arn:aws:ec2:{REGION}")
    assert warning["resources"][0].endswith(f":instance/{victim}")
    assert any(matches(p, warning) for p in intake_patterns())
    status = aws.ec2.describe_spot_instance_requests(SpotInstanceRequestIds=[request])
    assert status["SpotInstanceRequests"][0]["Status"]["Code"] == "marked-for-termination"
    # ...then the group's terminate hook, and a replacement
    wait_for(lambda: group.instances().get(victim) == "Terminating:Wait", 10, "the terminate hook")
    (action,) = group.actions(transition=TERMINATING)
    assert action.instance_id == victim
    # ...then EC2 reclaims it, though the hook was never completed, and says so
    wait_for(lambda: victim not in group.instances(), 10, "the reclaim")
    state = aws.ec2.describe_instances(InstanceIds=[victim])["Reservations"][0]["Instances"][0]["State"]
    assert state["Name"] == "terminated"
    assert [a.outcome for a in group.actions(transition=TERMINATING)] == ["cancelled"]
    changes = [e["detail"]["state"] for e in ec2_events(aws, "EC2 Instance State-change Notification")]
    assert changes == ["shutting-down", "terminated"]
    closed = aws.ec2.describe_spot_instance_requests(SpotInstanceRequestIds=[request])[
        "SpotInstanceRequests"
    ][0]
    assert (closed["State"], closed["Status"]["Code"]) == ("closed", "instance-terminated-no-capacity")
    wait_for(lambda: len([s for s in group.instances().values() if s == "InService"]) == 2, 5, "replacement")


def test_a_spot_interruption_comes_with_the_rebalance_recommendation_ec2_had_not_sent_yet(
    aws: Emulation,
) -> None:
    # Given a Spot group of two, one instance recommended for rebalancing already
    group = spot_group(aws, size=2)
    recommended, other = sorted(group.instances())
    group.recommend_rebalance(recommended)

    # When EC2 interrupts both
    group.interrupt_spot(recommended, warning_seconds=30.0, hook_after=20.0)
    group.interrupt_spot(other, warning_seconds=30.0, hook_after=20.0)

    # Then the one never recommended gets its recommendation with its warning ("the rebalance recommendation signal
    # can arrive along with the two-minute interruption notice": EC2 User Guide), the other not a second one
    told = [e["detail"]["instance-id"] for e in ec2_events(aws, "EC2 Instance Rebalance Recommendation")]
    assert sorted(told) == sorted([recommended, other])
    warned = [e["detail"]["instance-id"] for e in ec2_events(aws, "EC2 Spot Instance Interruption Warning")]
    assert warned == [recommended, other]


def test_a_spot_instance_whose_hook_completes_first_leaves_through_its_hook_and_is_terminated_once(
    aws: Emulation,
) -> None:
    # Given a Spot instance interrupted, whose terminate hook is completed before the warning runs out (4 s of
    # it, room for the wait and the completion on a loaded machine: with 1 s, a completion 1.1 s after the
    # hook found the instance reclaimed, no active action)
    group = spot_group(aws, size=1)
    (victim,) = group.instances()
    group.interrupt_spot(victim, warning_seconds=4.0, hook_after=0.0)
    wait_for(lambda: group.actions(transition=TERMINATING), 5, "the terminate hook")
    aws.autoscaling.complete_lifecycle_action(
        AutoScalingGroupName="spot",
        LifecycleHookName="nodecycle-terminate",
        InstanceId=victim,
        LifecycleActionResult="CONTINUE",
    )
    (action,) = group.actions(transition=TERMINATING)
    assert action.outcome == "completed"
    # ...and at the reclaim time, EC2 has nothing left to terminate: the instance changed state once, when its
    # hook let it go (EC2 tells of every state change, whoever asked for it)
    wait_for(lambda: spot_request(aws, victim)["State"] == "closed", 10, "the reclaim time")
    changes = ec2_events(aws, "EC2 Instance State-change Notification")
    assert [(e["detail"]["instance-id"], e["detail"]["state"]) for e in changes] == [
        (victim, "shutting-down"),
        (victim, "terminated"),
    ]


def spot_request(aws: Emulation, instance: str) -> dict[str, Any]:
    found = aws.ec2.describe_instances(InstanceIds=[instance])["Reservations"][0]["Instances"][0]
    answer = aws.ec2.describe_spot_instance_requests(SpotInstanceRequestIds=[found["SpotInstanceRequestId"]])
    request: dict[str, Any] = answer["SpotInstanceRequests"][0]
    return request


def test_only_spot_instances_can_be_interrupted_or_get_a_rebalance_recommendation(aws: Emulation) -> None:
    group = aws.group(*default_hooks(), size=1)
    (instance,) = group.instances()
    with pytest.raises(ValueError, match="not a Spot instance"):
        group.interrupt_spot(instance)
    with pytest.raises(ValueError, match="not a Spot instance"):
        group.recommend_rebalance(instance)
    assert aws.bus.events == [e for e in aws.bus.events if e["source"] == "aws.autoscaling"]


def test_a_rebalance_recommendation_is_an_event_in_the_samples_shape(aws: Emulation) -> None:
    group = spot_group(aws, size=1)
    (instance,) = group.instances()
    group.recommend_rebalance(instance)
    (event,) = ec2_events(aws, "EC2 Instance Rebalance Recommendation")
    assert shape(event) == shape(sample("eventbridge-rebalance-recommendation.json"))
    assert event["detail"] == {"instance-id": instance}
    assert any(matches(p, event) for p in intake_patterns())
    assert group.instances() == {instance: "InService"}


def test_a_rebalance_recommendation_under_capacity_rebalancing_replaces_the_instance_then_terminates_it_by_its_hook(
    aws: Emulation,
) -> None:
    # Given a Spot group of one with Capacity Rebalancing on
    group = spot_group(aws, size=1, capacity_rebalance=True)
    (old,) = group.instances()

    # When EC2 recommends rebalancing its instance
    group.recommend_rebalance(old)

    # Then Auto Scaling launches a replacement and, once it is in service, terminates the old instance through its
    # terminate hook (Auto Scaling User Guide, Capacity Rebalancing: "When a new Spot Instance launches, Amazon EC2
    # Auto Scaling waits until the new instance passes its health checks before it proceeds with terminating the
    # previous instance"), the group's desired capacity unchanged
    wait_for(lambda: group.actions(transition=TERMINATING), 5, "the terminate hook")
    (action,) = group.actions(transition=TERMINATING)
    assert action.instance_id == old
    instances = group.instances()
    (new,) = [instance for instance in instances if instance != old]
    assert instances == {old: "Terminating:Wait", new: "InService"}
    history = {h.instance_id: h for h in aws.control.instances()}
    in_service, leaving = history[new].in_service_at, history[old].terminate_started_at
    assert in_service is not None
    assert leaving is not None
    assert in_service <= leaving
    assert history[old].termination_cause == "capacity-rebalance"
    described = aws.autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=["spot"])
    assert described["AutoScalingGroups"][0]["DesiredCapacity"] == 1


def test_scheduled_maintenance_is_in_the_instance_status_and_an_aws_health_event(aws: Emulation) -> None:
    group = aws.group(size=2)
    instances = sorted(group.instances())
    group.schedule_maintenance(instances, starts_in=3600)

    (event,) = ec2_events(aws, "AWS Health Event")
    assert shape(event) == shape(sample("eventbridge-health-scheduled-retirement.json"))
    assert event["detail"]["eventTypeCode"] == "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED"
    # (each instance by its ARN, as Health's EventBridge schema documents its sample retirement)
    assert [e["entityValue"] for e in event["detail"]["affectedEntities"]] == [
        f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/{instance}" for instance in instances
    ]
    assert any(matches(p, event) for p in intake_patterns())
    statuses = aws.ec2.describe_instance_status(InstanceIds=instances, IncludeAllInstances=True)
    for status in statuses["InstanceStatuses"]:
        (scheduled,) = status["Events"]
        assert scheduled["Code"] == "instance-retirement"
        assert scheduled["NotBefore"].strftime("%a, %d %b %Y %H:%M:%S GMT") == event["detail"]["startTime"]


def test_scheduled_maintenance_carried_out_or_called_off_is_listed_so_and_a_retirement_stops_the_instance(
    aws: Emulation,
) -> None:
    # Given a reboot of one instance and the retirement of another, each in an hour, and a later reboot
    group = aws.group(size=2)
    rebooted, retired = sorted(group.instances())
    group.schedule_maintenance([rebooted], code="system-reboot", starts_in=3600)
    group.schedule_maintenance([retired], starts_in=3600)
    group.schedule_maintenance([rebooted], code="instance-reboot", starts_in=7200)

    # When EC2 carries out the first of each, then calls off the later reboot
    group.end_maintenance([rebooted, retired])
    group.end_maintenance([rebooted], canceled=True)

    # Then EC2 lists them completed (canceled), the rebooted instance runs, the retired one is stopped
    statuses = aws.ec2.describe_instance_status(InstanceIds=[rebooted, retired], IncludeAllInstances=True)
    listed = {
        status["InstanceId"]: (status["InstanceState"]["Name"], [e["Description"] for e in status["Events"]])
        for status in statuses["InstanceStatuses"]
    }
    assert listed == {
        rebooted: ("running", ["[Completed] scheduled reboot", "[Canceled] scheduled reboot"]),
        retired: ("stopped", ["[Completed] The instance is running on degraded hardware"]),
    }
    changes = ec2_events(aws, "EC2 Instance State-change Notification")
    assert [(e["detail"]["instance-id"], e["detail"]["state"]) for e in changes] == [
        (retired, "stopping"),
        (retired, "stopped"),
    ]
    with pytest.raises(Exception, match="no pending scheduled event"):
        group.end_maintenance([retired])


def test_a_scheduled_reboot_carried_out_reboots_the_instance_and_one_called_off_does_not(
    aws: Emulation,
) -> None:
    # Given EC2's system reboot of one instance and an instance reboot of another, each in an hour, the reboot
    # taking half a second
    aws.control.configure(boot_seconds=0.5)
    group = aws.group(size=2)
    rebooted, spared = sorted(group.instances())
    group.schedule_maintenance([rebooted], code="system-reboot", starts_in=3600)
    group.schedule_maintenance([spared], code="instance-reboot", starts_in=3600)
    node, other = aws.nodes.node_for_instance(rebooted), aws.nodes.node_for_instance(spared)

    # When EC2 carries out the first and calls off the second
    group.end_maintenance([rebooted])
    group.end_maintenance([spared], canceled=True)

    # Then the first instance reboots: its kubelet gone at once (EC2 lists the reboot completed already), back
    # once it has booted, the instance running all along; the second is left alone
    assert node in aws.nodes.stopped
    assert other not in aws.nodes.stopped
    wait_for(lambda: node not in aws.nodes.stopped, 10, "the kubelet back from the reboot")
    history = {i.instance_id: i for i in aws.control.instances()}
    assert (len(history[rebooted].rebooted_at), history[spared].rebooted_at) == (1, [])
    statuses = aws.ec2.describe_instance_status(InstanceIds=[rebooted, spared], IncludeAllInstances=True)
    assert {s["InstanceState"]["Name"] for s in statuses["InstanceStatuses"]} == {"running"}
    assert ec2_events(aws, "EC2 Instance State-change Notification") == []


def test_a_scheduled_event_rescheduled_is_listed_at_its_new_start_and_no_health_event_tells_of_it(
    aws: Emulation,
) -> None:
    # Given a reboot of an instance in an hour, which may be moved up to a week on (its deadline), told by AWS Health
    group = aws.group(size=1)
    (instance,) = group.instances()
    group.schedule_maintenance([instance], code="system-reboot", starts_in=3600, deadline_in=7 * 86400)
    (before,) = aws.ec2.describe_instance_status(InstanceIds=[instance])["InstanceStatuses"][0]["Events"]
    told = len(ec2_events(aws, "AWS Health Event"))

    # When it is moved three days later (ModifyInstanceEventStartTime)
    group.reschedule_maintenance([instance], starts_in=3 * 86400)

    # Then EC2 lists the same event at its new start, its window as long, and no Health event tells of the move
    (after,) = aws.ec2.describe_instance_status(InstanceIds=[instance])["InstanceStatuses"][0]["Events"]
    assert after["InstanceEventId"] == before["InstanceEventId"]
    assert (after["NotBefore"] - before["NotBefore"]).total_seconds() == pytest.approx(
        3 * 86400 - 3600, abs=5
    )
    assert after["NotAfter"] - after["NotBefore"] == before["NotAfter"] - before["NotBefore"]
    assert len(ec2_events(aws, "AWS Health Event")) == told
    assert after["NotBeforeDeadline"] == before["NotBeforeDeadline"]
    # ...and EC2 refuses to move it past its deadline
    with pytest.raises(Exception, match="deadline"):
        group.reschedule_maintenance([instance], starts_in=8 * 86400)
    # ...or to move an event that has no deadline (a retirement, as scheduled without one)
    group.end_maintenance([instance], canceled=True)
    group.schedule_maintenance([instance], code="instance-retirement", starts_in=3600)
    (retirement,) = [
        e
        for e in aws.ec2.describe_instance_status(InstanceIds=[instance])["InstanceStatuses"][0]["Events"]
        if e["Code"] == "instance-retirement"
    ]
    assert "NotBeforeDeadline" not in retirement
    with pytest.raises(Exception, match="no deadline"):
        group.reschedule_maintenance([instance], starts_in=7200)
    # ...and an event already begun cannot be moved (EC2 refuses it)
    group.end_maintenance([instance], canceled=True)
    group.schedule_maintenance([instance], code="instance-reboot", starts_in=-60, deadline_in=86400)
    with pytest.raises(Exception, match="has begun"):
        group.reschedule_maintenance([instance], starts_in=3600)


def test_instances_stopped_or_terminated_outside_the_hooks_publish_their_state_changes(
    aws: Emulation,
) -> None:
    group = aws.group(*default_hooks(), size=2)
    stopped, terminated = sorted(group.instances())
    aws.ec2.stop_instances(InstanceIds=[stopped])
    aws.ec2.terminate_instances(InstanceIds=[terminated])
    # (the stopped instance's node stays, stopped, until the instance starts again)
    stopped_node = aws.nodes.node_for_instance(stopped)
    assert stopped_node is not None
    assert aws.nodes.stopped == {stopped_node}
    aws.control.configure(boot_seconds=0.2)
    aws.ec2.start_instances(InstanceIds=[stopped])
    # (its kubelet back once the instance has booted)
    assert aws.nodes.stopped == {stopped_node}
    wait_for(lambda: aws.nodes.stopped == set(), 10, "the started instance's kubelet back")

    changes = ec2_events(aws, "EC2 Instance State-change Notification")
    assert [(e["detail"]["instance-id"], e["detail"]["state"]) for e in changes] == [
        (stopped, "stopping"),
        (stopped, "stopped"),
        (terminated, "shutting-down"),
        (terminated, "terminated"),
    ]
    assert shape(changes[0]) == shape(sample("eventbridge-instance-stopped.json"))
    assert changes[0]["resources"] == [f"arn:aws:ec2:{REGION}:123456789012:instance/{stopped}"]
    assert all(any(matches(p, e) for p in intake_patterns()) for e in changes)
    # the terminate hook was not consulted for the terminated one
    assert all(a.instance_id != terminated for a in group.actions(transition=TERMINATING))


def test_instances_the_group_terminates_through_its_hooks_publish_their_state_changes_too(
    aws: Emulation,
) -> None:
    # Given a group of two under nodecycle's hooks
    group = aws.group(*default_hooks(), size=2)
    for instance in group.in_state("Pending:Wait"):
        aws.autoscaling.complete_lifecycle_action(
            AutoScalingGroupName=group.name,
            LifecycleHookName="nodecycle-launch",
            InstanceId=instance,
            LifecycleActionResult="CONTINUE",
        )
    victim = sorted(group.in_state("InService"))[0]

    # When one leaves through its terminate hook
    group.terminate(victim, decrement=True)
    assert ec2_events(aws, "EC2 Instance State-change Notification") == []  # held: still running
    aws.autoscaling.complete_lifecycle_action(
        AutoScalingGroupName=group.name,
        LifecycleHookName="nodecycle-terminate",
        InstanceId=victim,
        LifecycleActionResult="CONTINUE",
    )

    # Then EC2 tells of its shutting down and termination, as of any instance's ("Amazon EC2 sends an EC2
    # Instance State-change Notification event to Amazon EventBridge when the state of an instance changes"),
    # and intake's rule takes them
    changes = ec2_events(aws, "EC2 Instance State-change Notification")
    assert [(e["detail"]["instance-id"], e["detail"]["state"]) for e in changes] == [
        (victim, "shutting-down"),
        (victim, "terminated"),
    ]
    assert all(any(matches(p, e) for p in intake_patterns()) for e in changes)


def test_scheduled_maintenance_ended_is_told_by_its_health_event_closed(aws: Emulation) -> None:
    # Given a retirement of one instance and a reboot of another, each told by AWS Health (upcoming)
    group = aws.group(size=2)
    retired, rebooted = sorted(group.instances())
    group.schedule_maintenance([retired], starts_in=3600)
    group.schedule_maintenance([rebooted], code="system-reboot", starts_in=7200)

    # When EC2 carries out the retirement and calls off the reboot
    group.end_maintenance([retired])
    group.end_maintenance([rebooted], canceled=True)

    # Then AWS Health sends each event again, closed, under its ARN (a new EventBridge id), as it does for every
    # scheduled change it closes
    told = ec2_events(aws, "AWS Health Event")
    assert [(e["detail"]["statusCode"], named(e)) for e in told] == [
        ("upcoming", [retired]),
        ("upcoming", [rebooted]),
        ("closed", [retired]),
        ("closed", [rebooted]),
    ]
    assert told[2]["detail"]["eventArn"] == told[0]["detail"]["eventArn"]
    assert told[3]["detail"]["eventArn"] == told[1]["detail"]["eventArn"]
    assert told[2]["id"] != told[0]["id"]
    assert shape(told[2]) == shape(sample("eventbridge-health-scheduled-retirement.json"))


def test_one_health_event_of_many_instances_is_told_again_with_each_instances_status(aws: Emulation) -> None:
    # Given one AWS Health event scheduling the retirement of two instances (Health names every affected instance
    # of an account in one event, each with its status: PENDING until its part is done, RESOLVED after)
    group = aws.group(size=2)
    first, second = sorted(group.instances())
    group.schedule_maintenance([first, second], code="system-reboot", starts_in=3600)

    # When EC2 carries out the first's, then calls off the second's
    group.end_maintenance([first])
    group.end_maintenance([second], canceled=True)

    # Then Health sends the event again under its ARN, naming both each time: still upcoming while one instance's
    # part waits, closed once none does
    told = ec2_events(aws, "AWS Health Event")
    statuses = [
        (e["detail"]["statusCode"], [(named_one(x), x["status"]) for x in e["detail"]["affectedEntities"]])
        for e in told
    ]
    assert statuses == [
        ("upcoming", [(first, "PENDING"), (second, "PENDING")]),
        ("upcoming", [(first, "RESOLVED"), (second, "PENDING")]),
        ("closed", [(first, "RESOLVED"), (second, "RESOLVED")]),
    ]
    assert len({e["detail"]["eventArn"] for e in told}) == 1
    assert len({e["id"] for e in told}) == 3


def named_one(entity: dict[str, Any]) -> str:
    return str(entity["entityValue"]).rsplit("/", 1)[-1]
