"""EventBridge's send to a rule target's dead-letter queue, judged by the queue's policy as the template writes it:
only the rules it names, as events.amazonaws.com; a queue without a policy lets no service in."""

from __future__ import annotations

from pathlib import Path

from nodecycle_sandbox.iam.resource_policies import service_may
from nodecycle_sandbox.iam.template import StaticResources
from nodecycle_sandbox.runner.cfn_yaml import load_template
from nodecycle_sandbox.runner.intrinsics import Intrinsics

ROOT = Path(__file__).resolve().parents[3]
ACCOUNT = "123456789012"
EVENTS = "events.amazonaws.com"


class WithRules(StaticResources):
    """The deployment's names, and its rules' ARNs (resources SAM generates from a function's Events)."""

    def get_att(self, logical_id: str, attribute: str) -> str:
        if logical_id not in self._resources:
            return f"arn:aws:events:eu-west-1:{ACCOUNT}:rule/nodecycle-{logical_id}"
        return super().get_att(logical_id, attribute)


def queue_policy(logical_id: str) -> dict[str, object]:
    template = load_template(ROOT / "template.yaml")
    resources = WithRules(template, stack_name="nodecycle", region="eu-west-1", account=ACCOUNT)
    resources.intrinsics = Intrinsics(
        template,
        resources=resources,
        stack_name="nodecycle",
        region="eu-west-1",
        account=ACCOUNT,
        parameters={"ClusterName": "prod", "ManagedGroups": "nodes"},
    )
    document = resources.intrinsics.resolve(template["Resources"][logical_id]["Properties"]["PolicyDocument"])
    assert isinstance(document, dict)
    return document


def test_the_sweeper_dead_letter_queue_takes_the_events_of_the_sweepers_rule_only() -> None:
    policy = queue_policy("SweeperDeadLetterQueuePolicy")
    queue = f"arn:aws:sqs:eu-west-1:{ACCOUNT}:nodecycle-SweeperDeadLetterQueue"
    rule = f"arn:aws:events:eu-west-1:{ACCOUNT}:rule/nodecycle-SweeperFunctionSweep"

    def may(service: str = EVENTS, source_arn: str = rule, resource: str = queue) -> bool:
        return service_may(
            policy,
            service=service,
            action="sqs:SendMessage",
            resource=resource,
            source_arn=source_arn,
            source_account=ACCOUNT,
        )

    assert may()
    assert not may(source_arn=f"arn:aws:events:eu-west-1:{ACCOUNT}:rule/someone-elses")
    assert not may(service="sns.amazonaws.com")
    assert not may(resource=f"arn:aws:sqs:eu-west-1:{ACCOUNT}:nodecycle-IntakeDeadLetterQueue")


def test_a_queue_without_a_policy_lets_no_service_in() -> None:
    queue = f"arn:aws:sqs:eu-west-1:{ACCOUNT}:undelivered"
    call = {
        "service": EVENTS,
        "action": "sqs:SendMessage",
        "resource": queue,
        "source_arn": f"arn:aws:events:eu-west-1:{ACCOUNT}:rule/r",
        "source_account": ACCOUNT,
    }
    assert not service_may(None, **call)
    assert not service_may("", **call)
