"""A rule's target put again by hand (``aws events put-targets`` replaces the whole target) may lack the RetryPolicy
the template gives it, or carry another: EventBridge then retries an event it cannot deliver for its default 24 hours
(a lifecycle action or a Spot warning reaches intake long after anything can be done for it), or gives up sooner
than the template means. The doctor compared the target's dead-letter queue with the template's, not its retry
policy. The stack is the sandbox's deployment of template.yaml, examined through its CloudFormation record; each
finding's fix is applied as given, and the doctor run again."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from nodecycle_cli.doctor import RULE_OUTPUTS, Doctor
from nodecycle_cli.doctor.aws_checks import RETRY_POLICIES
from nodecycle_cli.doctor.findings import Finding, Status
from nodecycle_sandbox.runner.cfn_yaml import load_template

from .test_doctor_rule_dead_letters import deployed, rule_findings

__all__ = ["deployed"]

ROOT = Path(__file__).resolve().parents[2]


def problems(doctor: Doctor) -> dict[str, Finding]:
    return {check: f for check, f in rule_findings(doctor).items() if f.status is not Status.OK}


def apply(events: Any, fix: str) -> None:
    """An ``aws events put-targets --rule R --targets JSON`` fix, as the shell would pass it."""
    words = shlex.split(fix)
    assert words[:3] == ["aws", "events", "put-targets"], fix
    options = dict(zip(words[3::2], words[4::2], strict=True))
    events.put_targets(Rule=options["--rule"], Targets=json.loads(options["--targets"]))


def the_target(doctor: Doctor, events: Any, output: str) -> tuple[str, dict[str, Any]]:
    rule = doctor._deployment.output(output)  # type: ignore[union-attr]
    (target,) = events.list_targets_by_rule(Rule=rule)["Targets"]
    return rule, target


def test_the_doctors_retry_policies_are_the_templates() -> None:
    template = load_template(ROOT / "template.yaml")
    declared = {}
    for what, output in RULE_OUTPUTS:
        rule = template["Outputs"][output]["Value"]["Ref"]
        function, event = next(
            (f, e)
            for f, resource in template["Resources"].items()
            for e in (resource.get("Properties") or {}).get("Events") or {}
            if f"{f}{e}" == rule
        )
        declared[what] = template["Resources"][function]["Properties"]["Events"][event]["Properties"].get(
            "RetryPolicy"
        )
    assert declared == RETRY_POLICIES
    # (a comparison that cannot pass with the policies lost: the template gives most rules one)
    assert [what for what, policy in declared.items() if policy] == [
        "lifecycle actions",
        "EC2 disruptions",
        "scheduled maintenance",
    ]


def test_a_target_put_back_without_its_retry_policy_is_a_problem_whose_fix_fixes_it(
    deployed: tuple[Doctor, Any],
) -> None:
    # Given the EC2 disruptions' target put again by hand without its RetryPolicy (its dead-letter queue kept)
    doctor, events = deployed
    rule, target = the_target(doctor, events, "DisruptionRuleName")
    policy = target.pop("RetryPolicy")
    events.put_targets(Rule=rule, Targets=[target])

    # When the doctor examines the stack, then that target's retry policy alone is a problem
    found = problems(doctor)
    assert set(found) == {"eventbridge.rule.EC2 disruptions.retry-policy"}
    finding = found["eventbridge.rule.EC2 disruptions.retry-policy"]
    assert finding.status is Status.PROBLEM
    assert "185 retries within 24 hours" in finding.what
    assert "10 retries within 120 s" in finding.what

    # And its fix puts the template's back: the doctor finds nothing more
    apply(events, finding.fix)
    assert the_target(doctor, events, "DisruptionRuleName")[1] == {**target, "RetryPolicy": policy}
    assert problems(doctor) == {}


def test_a_target_put_back_bare_has_both_problems_and_either_fix_fixes_both(
    deployed: tuple[Doctor, Any],
) -> None:
    # Given the lifecycle actions' target put again with the function alone
    doctor, events = deployed
    rule, target = the_target(doctor, events, "LifecycleRuleName")
    events.put_targets(Rule=rule, Targets=[{"Id": target["Id"], "Arn": target["Arn"]}])

    found = problems(doctor)
    assert set(found) == {
        "eventbridge.rule.lifecycle actions.dead-letters",
        "eventbridge.rule.lifecycle actions.retry-policy",
    }

    apply(events, found["eventbridge.rule.lifecycle actions.dead-letters"].fix)
    assert the_target(doctor, events, "LifecycleRuleName")[1] == target
    assert problems(doctor) == {}


def test_a_retry_policy_the_template_does_not_give_is_a_problem_too(deployed: tuple[Doctor, Any]) -> None:
    # Given the sweeper's schedule, which the template leaves to EventBridge's default, given no retries by hand
    doctor, events = deployed
    rule, target = the_target(doctor, events, "SweepRuleName")
    assert "RetryPolicy" not in target
    events.put_targets(
        Rule=rule,
        Targets=[{**target, "RetryPolicy": {"MaximumRetryAttempts": 0, "MaximumEventAgeInSeconds": 60}}],
    )

    found = problems(doctor)
    assert set(found) == {"eventbridge.rule.sweeper schedule.retry-policy"}

    apply(events, found["eventbridge.rule.sweeper schedule.retry-policy"].fix)
    assert "RetryPolicy" not in the_target(doctor, events, "SweepRuleName")[1]
    assert problems(doctor) == {}
