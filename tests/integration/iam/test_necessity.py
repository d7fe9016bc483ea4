"""Every permission the deployment grants is needed: nodecycle runs its paths on the sandbox (launch with an
address, a drain forced past a PodDisruptionBudget, the address taken back, a sweep that repairs what a
crash left; a tag-managed EIP-only stack with a pool), then each IAM statement (and each action of it), and
each RBAC verb on each resource, is taken away in turn and the recorded, allowed calls are evaluated
again (``nodecycle_sandbox.iam.necessity`` says why that equals re-running): some call must fail without
it. So must each resource of a statement with several (a queue, a table's index). A Deny is needed when
it refused a call (a probe of what it forbids).

What the sandbox cannot exercise is listed in ``NOT_EXERCISED`` with the reason; the test also fails if a
listed permission turns out to be exercised, so the list stays exact.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from botocore.exceptions import ClientError
from kubernetes.client import CoreV1Api

from nodecycle.adapters.clock import SystemClock
from nodecycle.adapters.kube.budget import ConfigMapBudgetStore, KubeNodeInventory
from nodecycle.domain.budget import BudgetLimits, DisruptionBudget, SlotRequest
from nodecycle.domain.policy import Quantity
from nodecycle_sandbox import Sandbox, SandboxOptions
from nodecycle_sandbox.aws.group import SANDBOX_AMI, GroupSpec, default_hooks, wait_for
from nodecycle_sandbox.aws.records import LAUNCHING, TERMINATING
from nodecycle_sandbox.iam.necessity import Finding, aws_findings, rbac_findings
from nodecycle_sandbox.runner import Runner
from tests.integration.lifecycle.harness import FAST, ROOT, wait_terminated
from tests.support.fakes import FakeMetrics

pytestmark = pytest.mark.slow

OWNER = "nodecycle"
POOLED = "pooled"  # the second stack: an EIP-only fleet managed by tag, with an address pool
# What the sandbox does not exercise, and why: "<role>/<policy>:<Sid>" (a statement) or "... <action>".
TRACING = "X-Ray is not emulated: tracing is off in the sandbox (no daemon, no segments)"
LOGS = "Lambda's own log delivery is not emulated: the sandbox keeps the functions' logs on stdout"
REPAIR = (
    "the sweeper's repair of a lifecycle whose messages were all lost (tests/functions/sweeper covers it on "
    "moto); this scenario loses none"
)
NEAR_TIMEOUT = (
    "completion near the global timeout: no scenario of the suite waits for one (tests/functions/sweeper)"
)
MULTI_INTERFACE = (
    "the primary interface of a multi-interface instance: moto associates with any instance "
    "(tests/functions/eip/conftest.py's AwsLikeEc2 refuses as EC2 does)"
)
STILL_IN_SERVICE = (
    "a terminating instance whose action is gone yet which stays InService: Auto Scaling has no path there "
    "(Terminating:Wait ends in termination); the check guards against a node left cordoned if one ever does "
    "(tests/unit/drain/test_drain_steps.py)"
)
ADOPTION = (
    "the adoption of an action held with no record (its event dead-lettered): this scenario loses no event "
    "(tests/integration/lifecycle/test_lost_intake.py adopts one under the same enforced policy); but a sweep "
    "that comes while a launch's event is still on its way sees an action with no record yet and reads the "
    "group's hooks, so this scenario may exercise it or not (its timing): neither is a finding"
)
MAINTENANCE = (
    "the watch for the end of a scheduled maintenance a node was drained for: the queued retirement of the Spot "
    "instance here is drained for only if the Spot interruption's drain is over before the scenario ends, as "
    "timing falls (tests/integration/lifecycle/test_maintenance_and_stops.py needs it, under the same enforced "
    "policy)"
)
WARM_POOL = (
    "the held instances of a warm pool: this scenario's group has none (tests/integration/lifecycle/test_warm_pool.py "
    "has the sweeper read them under the same enforced policy)"
)
LEFT_ON_A_GONE_INSTANCE = (
    "an address left on an instance shutting down, or on an interface that outlived its instance: EC2 "
    "disassociates a terminated instance's addresses itself, as the sandbox does now, so a sweep needs it only "
    "if it comes while an instance of the scenario is shutting down (its timing); "
    "tests/functions/eip/test_address_sweep_on_ec2.py covers both cases"
)
INTAKE_FAILURE = (
    "the on-failure destination of an intake invocation that failed every retry (Lambda sends it with the "
    "function's role): no intake invocation fails here (tests/integration/test_dead_letters.py)"
)
EIP_WAIT = (
    "the EIP step's own next look (Outcome.wait: an empty pool, an association not settled yet): the pool "
    "here has an address for each launch and moto associates at once "
    "(tests/integration/lifecycle/test_eip_pool_line.py waits on an empty pool under the same enforced policy)"
)
WAKE_UP = (
    "a budget waiter woken by the drain that gives its slot back (Engine.send_wake): a drain here waits for a "
    "slot or not, as the two stacks' drains fall (tests/integration/lifecycle/test_wake_lane.py wakes one "
    "under the same enforced policy)"
)
INTAKE_CONFIRMS = (
    "intake's look at where an instance waits: a token taken in under other naming (a forged pair), or a late "
    "event whose action Auto Scaling no longer holds; no such event here (tests/functions/test_template_role_calls.py "
    "makes both calls under the template's policy)"
)
CARRY_OVER = (
    "the date of the action a crossed lifecycle is carried over to (DescribeScalingActivities): no message here names "
    "an instance with another's token (tests/functions/test_template_role_calls.py makes the call under the "
    "template's policy)"
)
ADOPTION_DATED = (
    "the date of an adopted action (DescribeScalingActivities, domain/sweep/orphans.py): this scenario loses no "
    "event (tests/functions/test_template_role_calls.py makes the call under the template's policy)"
)
NOT_EXERCISED = {
    "DrainFunctionRole/drain:ScalingActivities": CARRY_OVER,
    "SweeperFunctionRole/sweeper:ScalingActivities": ADOPTION_DATED,
    "IntakeFunctionRole/intake:InstanceLifecycleState": INTAKE_CONFIRMS,
    "IntakeFunctionRole/intake:SendWork on arn:aws:sqs:eu-west-1:123456789012:nodecycle-IntakeDeadLetterQueue": (
        INTAKE_FAILURE
    ),
    "EipFunctionRole/eip:SendWork on arn:aws:sqs:eu-west-1:123456789012:nodecycle-EipQueue": EIP_WAIT,
    **{
        f"{role}/{policy}:Tracing": TRACING
        for role, policy in (
            ("IntakeFunctionRole", "intake"),
            ("DrainFunctionRole", "drain"),
            ("EipFunctionRole", "eip"),
            ("SweeperFunctionRole", "sweeper"),
        )
    },
    **{
        f"{role}/logs:OwnLogGroup": LOGS
        for role in ("IntakeFunctionRole", "DrainFunctionRole", "EipFunctionRole", "SweeperFunctionRole")
    },
    "SweeperFunctionRole/sweeper:Records dynamodb:PutItem": REPAIR,
    "SweeperFunctionRole/sweeper:CompleteByName": NEAR_TIMEOUT,
    "SweeperFunctionRole/sweeper:CompleteByTag": NEAR_TIMEOUT,
    "EipFunctionRole/eip:InterfaceSide ec2:AssociateAddress": MULTI_INTERFACE,
    "SweeperFunctionRole/sweeper:OrphanedActions autoscaling:DescribeWarmPool": WARM_POOL,
}
# Exercised or not, as the scenario's timing falls: exempt from both checks.
MAYBE_EXERCISED = {
    "IntakeFunctionRole/intake:SendWork on arn:aws:sqs:eu-west-1:123456789012:nodecycle-IntakeQueue": (
        "a lifecycle action's event from EventBridge retried on purpose, handed to the intake queue: only when an "
        "event comes before its hook or group is read again here, as timing falls "
        "(tests/functions/intake/test_eventbridge_retries_by_the_queue.py sends one on moto)"
    ),
    "DrainFunctionRole/drain:SendWork on arn:aws:sqs:eu-west-1:123456789012:nodecycle-WakeQueue": WAKE_UP,
    "IntakeFunctionRole/intake:PollIntakeQueue sqs:ChangeMessageVisibility": (
        "an intake queue record retried on purpose, brought back sooner than the queue's visibility timeout: only "
        "when a record is retried (a throttle, a hook read before its action started), as timing falls "
        "(tests/functions/intake/test_retries_come_back_sooner.py; the role's grant: "
        "tests/sandbox/iam/test_intake_redelivery_permission.py)"
    ),
    **dict.fromkeys(
        (
            "DrainFunctionRole/drain:PollDrainQueue sqs:ChangeMessageVisibility",
            "EipFunctionRole/eip:PollEipQueue sqs:ChangeMessageVisibility",
        ),
        "a work queue record retried on purpose (drain, wake, eip), brought back sooner than the queue's visibility "
        "timeout: only when a step is retried (a throttle, a claim held elsewhere), as timing falls "
        "(tests/functions/test_requeue_work_queues.py; the roles' grants: tests/functions/test_requeue_permissions.py)",
    ),
    "SweeperFunctionRole/sweeper:SendWork": f"{REPAIR}; but a wake-up of a waiter by the sweep's budget part "
    "goes through it too, when a sweep finds a finished lifecycle's slot not yet given back (its timing)",
    "SweeperFunctionRole/sweeper:OrphanedActions autoscaling:DescribeLifecycleHooks": ADOPTION,
    "DrainFunctionRole/drain:MaintenanceOver": MAINTENANCE,
    "DrainFunctionRole/drain:InstanceLifecycleState": f"{STILL_IN_SERVICE}; and {MAINTENANCE}",
    "SweeperFunctionRole/sweeper:InstanceLifecycleState": (
        "the instance's lifecycle state read before the sweeper completes an action it adopted (completed by "
        "instance id: 02d9115) or that no step confirmed (df5da81): the sweeper completes nothing here unless a "
        f"lifecycle comes near its global timeout as timing falls ({NEAR_TIMEOUT}); "
        "tests/functions/test_engine_adopted_actions.py and test_forged_action_pairs.py read it on moto"
    ),
    **dict.fromkeys(
        (
            "SweeperFunctionRole/sweeper:InterfaceSide",
            "SweeperFunctionRole/sweeper:OwnedAddresses ec2:DisassociateAddress",
            # (whose interface an address alone is on: a NAT gateway's is not the sweep's to disassociate)
            "SweeperFunctionRole/sweeper:DescribeInterfaces",
        ),
        LEFT_ON_A_GONE_INSTANCE,
    ),
    "EipFunctionRole/eip:Describe ec2:DescribeInstances": f"{MULTI_INTERFACE}; but the release of the "
    "addresses of an instance EC2 tells terminated (as it tells of every termination, those through the hooks "
    "too) reads the instance's state first, when it runs before the scenario ends (its timing)",
}


@pytest.fixture(scope="module")
def exercised() -> Iterator[Sandbox]:
    parameters = {
        **FAST,
        "EipMode": "allocate",
        "TimeoutPolicy": "force",
        "DrainTimeoutSeconds": "3",
        "ForceGraceSeconds": "0",
        "BudgetMaxUnavailable": "50%",  # a percent: the budget lists the nodes in scope
        "HeartbeatMarginSeconds": "5",
        "SweepGraceSeconds": "300",
    }
    group = GroupSpec(size=2, hooks=default_hooks(heartbeat_timeout=30))
    options = SandboxOptions(root=ROOT, parameters=parameters, group=group, node_ready_after=0.3)
    with Sandbox(options) as sandbox:
        sandbox.asg.wait_in_service(2, timeout=90)
        yield sandbox


def test_every_permission_is_needed_by_some_path(exercised: Sandbox) -> None:
    sandbox = exercised
    # Given the paths of the default stack: launches (an address each, the readiness gate) happened; a
    # workload whose PodDisruptionBudget never lets a pod go, so the drain times out and deletes
    sandbox.kube.seed(
        {
            "namespaces": ["shop"],
            "deployments": [
                {
                    "name": "web",
                    "namespace": "shop",
                    "replicas": 2,
                    "shutdownSeconds": 0.1,
                    "pdb": {"minAvailable": 2},
                }
            ],
        }
    )
    sandbox.kube.settle(timeout=30)
    hook_notifying_the_intake_queue(sandbox)
    pooled = pooled_stack(sandbox)

    # When an instance of each stack terminates (its lifecycle event delivered twice), and the default
    # stack's sweeper runs
    victim = sandbox.asg.in_state("InService")[0]
    sandbox.asg.terminate(victim)
    assert wait_terminated(sandbox, victim, timeout=90).result == "CONTINUE"
    deliver_again(sandbox, victim)
    pooled_instance = wait_for(lambda: sandbox_in_service(sandbox, "pooled-fleet"), 60, "the pooled launch")
    sandbox.client("autoscaling").terminate_instance_in_auto_scaling_group(
        InstanceId=pooled_instance, ShouldDecrementDesiredCapacity=True
    )
    wait_for(lambda: terminated(sandbox, pooled_instance), 60, "the pooled terminate")
    deliver_again(sandbox, pooled_instance, pooled)
    disruptions_by_the_queue(sandbox)
    leftovers(sandbox)
    sandbox.runner.fire_schedule("SweeperFunction")
    wait_for(lambda: swept(sandbox.runner), 60, "the sweep")
    probes(sandbox, pooled)

    # Then, taking any permission away, some call the functions made would have been refused
    journal = sandbox.aws.authorizations()
    findings = merge(
        aws_findings(sandbox.runner.roles, journal) + aws_findings(pooled.roles, journal)
    ) + rbac_findings((ROOT / "deploy" / "rbac.yaml").read_text(), sandbox.kube.access.journal())
    report = "\n".join(f.line() for f in findings)
    unneeded = [f for f in findings if not f.needed and not exempt(f) and not exempt(f, MAYBE_EXERCISED)]
    listed = "\n".join(f.line() for f in unneeded)
    assert unneeded == [], f"permissions no path needed:\n{listed}\n\nall of them:\n{report}"
    surprising = [f for f in findings if f.needed and exempt(f)]
    assert surprising == [], f"exercised after all, remove from NOT_EXERCISED:\n{report}"


def exempt(finding: Finding, listed: dict[str, str] = NOT_EXERCISED) -> bool:
    return any(
        key in finding.permission or key in f"{finding.subject}/{finding.permission}" for key in listed
    )


def merge(findings: list[Finding]) -> list[Finding]:
    """Both stacks deploy the same template: a statement (or a resource of it, named by this stack's ARNs)
    is needed if either needed it."""
    merged: dict[tuple[str, str], Finding] = {}
    for finding in findings:
        finding = replace(finding, permission=re.sub(rf"(?<=[:/]){POOLED}-", f"{OWNER}-", finding.permission))
        key = (finding.subject, finding.permission)
        previous = merged.get(key)
        if previous is None or finding.needed_by > previous.needed_by:
            merged[key] = finding
    return list(merged.values())


# -- the paths ---------------------------------------------------------------------------------------------


def disruptions_by_the_queue(sandbox: Sandbox) -> None:
    """A Spot instance carrying the owner's tag, interrupted and scheduled for retirement, its events also
    routed to the intake queue (an operator's EventBridge rule with the queue as target): intake confirms
    them with EC2 (the instance, its Spot request's status, its scheduled events) before acting."""
    group = sandbox.add_group(
        GroupSpec(
            name="spot-fleet", size=1, hooks=(), tags={"nodecycle:owner": OWNER}, on_demand_percentage=0
        )
    )
    (instance,) = group.wait_in_service(1, timeout=60)
    group.interrupt_spot(instance, warning_seconds=600)
    group.schedule_maintenance([instance], starts_in=3600)
    queue = sandbox.runner.queue("IntakeQueue").url
    for detail_type in ("EC2 Spot Instance Interruption Warning", "AWS Health Event"):
        event = next(
            n.payload for n in sandbox.aws.notifications() if n.payload.get("detail-type") == detail_type
        )
        before = len(sandbox.runner.journal.invocations())
        sandbox.client("sqs").send_message(QueueUrl=queue, MessageBody=json.dumps(event))
        wait_for(functools.partial(queued_intake_done, sandbox, before), 30, f"the queued {detail_type}")


def queued_intake_done(sandbox: Sandbox, since: int) -> bool:
    """Whether an intake invocation from the queue (an SQS batch) finished after the first ``since``."""
    return any(
        i.function == "IntakeFunction" and bool(i.finished_at) and "Records" in i.event
        for i in sandbox.runner.journal.invocations()[since:]
        if isinstance(i.event, dict)
    )


def leftovers(sandbox: Sandbox) -> None:
    """What a crash leaves for the sweeper: an address on a gone instance, a node annotated for a lifecycle
    that is over, a budget holder for a node that is gone (made once the drains are over: it holds a slot)."""
    ec2 = sandbox.client("ec2")
    image = SANDBOX_AMI
    gone = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    old = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    tags = {"nodecycle:owner": OWNER, "nodecycle:instance-id": gone, "nodecycle:allocated-at": old}
    spec = [{"ResourceType": "elastic-ip", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]
    allocation = ec2.allocate_address(Domain="vpc", TagSpecifications=spec)["AllocationId"]
    ec2.associate_address(AllocationId=allocation, InstanceId=gone)
    ec2.terminate_instances(InstanceIds=[gone])

    admin = CoreV1Api(sandbox.kube.api_client())
    # A node of the default group in service: the Spot instance's node is being drained for its interruption,
    # and that drain's own annotations could replace these before the sweep (the sweeper then rightly leaves
    # them, and its part here goes unexercised); the nodes are listed by name, so "the last" was any of them.
    in_service = set(sandbox.asg.in_state("InService"))
    node = next(
        n["metadata"]["name"]
        for n in sandbox.kube.objects("nodes")
        if n["spec"].get("providerID", "").rsplit("/", 1)[-1] in in_service
    )
    stale = '{"instance": "i-0123456789abcdef0", "transition": "terminate", "token": "7d6c2a1e-0000-4000-8000-000000000000"}'
    admin.patch_node(
        node, {"metadata": {"annotations": {"nodecycle.io/owner": OWNER, "nodecycle.io/in-progress": stale}}}
    )
    budget = DisruptionBudget(
        store=ConfigMapBudgetStore(lambda: admin, "nodecycle"),
        nodes=KubeNodeInventory(lambda: admin),
        clock=SystemClock(),
        metrics=FakeMetrics(),
        limits=BudgetLimits(max_unavailable=Quantity(value=5)),
        holder_ttl=timedelta(minutes=10),
        count_unavailable=False,
        owner=OWNER,
    )
    assert budget.acquire(
        SlotRequest("gone-node", "i-0ffffffffffffffff", "eu-west-1a", OWNER, "rec-gone")
    ).granted


def hook_notifying_the_intake_queue(sandbox: Sandbox) -> None:
    """A hook that notifies the intake queue with the hook role: Auto Scaling's test notification goes
    through the role's trust and policy, and the intake queue's mapping receives and deletes it."""
    autoscaling, ec2 = sandbox.client("autoscaling"), sandbox.client("ec2")
    ec2.create_launch_template(
        LaunchTemplateName="notify-only", LaunchTemplateData={"ImageId": "ami-12c6146b"}
    )
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName="notify-only",
        LaunchTemplate={"LaunchTemplateName": "notify-only"},
        MinSize=0,
        MaxSize=1,
        AvailabilityZones=["eu-west-1a"],
    )
    autoscaling.put_lifecycle_hook(
        AutoScalingGroupName="notify-only",
        LifecycleHookName="notify",
        LifecycleTransition=LAUNCHING,
        NotificationTargetARN=sandbox.runner.queue("IntakeQueue").arn,
        RoleARN=sandbox.runner.roles["HookNotificationRole"]["arn"],
    )


def pooled_stack(sandbox: Sandbox) -> Runner:
    """A node group managed by its tag, claiming addresses from a pool."""
    ec2 = sandbox.client("ec2")
    for _ in range(2):
        tags = [{"Key": "nodecycle:owner", "Value": POOLED}, {"Key": "nodecycle:pool", "Value": "blue"}]
        ec2.allocate_address(Domain="vpc", TagSpecifications=[{"ResourceType": "elastic-ip", "Tags": tags}])
    runner, group = sandbox.add_stack(
        POOLED,
        parameters={
            **FAST,
            "ManagedGroups": "",
            "ManagedByTag": "true",
            "EipMode": "pool",
            "EipPoolName": "blue",
            "HeartbeatMarginSeconds": "5",
            # the workload's pods may land on its node too, and never leave under their budget
            "DrainTimeoutSeconds": "3",
            "TimeoutPolicy": "force",
            "ForceGraceSeconds": "0",
        },
        group=GroupSpec(
            name="pooled-fleet",
            size=1,
            hooks=default_hooks(heartbeat_timeout=30),
            tags={"nodecycle:owner": POOLED},
        ),
    )
    assert group is not None
    return runner


def probes(sandbox: Sandbox, pooled: Runner) -> None:
    """What the Deny statements forbid: releasing a pool address, and one allocated into a pool whose pool tag was
    removed by hand (retired: the operator's), tried with each function's own key."""
    ec2 = sandbox.client("ec2")
    owned = {"Key": "nodecycle:owner", "Value": OWNER}
    pooled_address = ec2.allocate_address(
        Domain="vpc",
        TagSpecifications=[
            {"ResourceType": "elastic-ip", "Tags": [owned, {"Key": "nodecycle:pool", "Value": "blue"}]}
        ],
    )
    retired_address = ec2.allocate_address(
        Domain="vpc",
        TagSpecifications=[
            {
                "ResourceType": "elastic-ip",
                "Tags": [
                    owned,
                    {"Key": "nodecycle:allocated-at", "Value": "2026-01-01T00:00:00+00:00"},
                    {"Key": "nodecycle:allocated-into", "Value": "blue"},
                ],
            }
        ],
    )
    for function in ("EipFunction", "SweeperFunction"):
        client = boto3.client(
            "ec2",
            endpoint_url=sandbox.endpoint_url,
            region_name=sandbox.options.region,
            aws_access_key_id=sandbox.runner.access_key(function),
            aws_secret_access_key="x",
        )
        for address in (pooled_address, retired_address):
            with pytest.raises(ClientError, match="explicit deny"):
                client.release_address(AllocationId=address["AllocationId"])


def deliver_again(sandbox: Sandbox, instance: str, runner: Runner | None = None) -> None:
    """EventBridge delivers at least once: the same terminate event again, which intake recognizes. This one
    comes late (its action started 25 s before, of a 30 s heartbeat timeout), so intake heartbeats it first:
    the action is over by now, and Auto Scaling refuses, but the call is the one a late action needs."""
    runner = runner or sandbox.runner
    event = next(
        i.event
        for i in runner.journal.invocations()
        if i.function == "IntakeFunction"
        and isinstance(i.event, dict)
        and (i.event.get("detail") or {}).get("EC2InstanceId") == instance
        and (i.event.get("detail") or {}).get("LifecycleTransition") == TERMINATING
    )
    late = {**event, "time": (datetime.now(UTC) - timedelta(seconds=25)).isoformat()}
    sandbox.publish(late)
    # (its own invocation: the first of intake's to end after the publish was, in two runs of two, one of EC2's
    # state changes of the terminated instance)
    wait_for(
        lambda: any(i.function == "IntakeFunction" and i.event == late for i in runner.journal.invocations()),
        30,
        "the second delivery",
    )


def sandbox_in_service(sandbox: Sandbox, group: str) -> str | None:
    groups = sandbox.client("autoscaling").describe_auto_scaling_groups(AutoScalingGroupNames=[group])
    instances = groups["AutoScalingGroups"][0]["Instances"]
    return next((i["InstanceId"] for i in instances if i["LifecycleState"] == "InService"), None)


def terminated(sandbox: Sandbox, instance: str) -> bool:
    return any(
        a.instance_id == instance and a.transition == TERMINATING and not a.active
        for a in sandbox.aws.actions()
    )


def swept(runner: Runner) -> bool:
    return any(i.function == "SweeperFunction" and i.finished_at for i in runner.journal.invocations())
