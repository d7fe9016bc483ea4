"""What ``nodecycle doctor`` says to do about a resource of the stack deleted outside it, and where it sends the
operator, is what works: ``sam deploy`` does not bring such a resource back (CloudFormation still counts it as
its own: a deploy without a change does nothing, one with a change fails to update it), so a fix that says so
leaves the stack without it. The dead-letter queues' fix is run in test_doctor_dead_letters."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from nodecycle_cli.doctor import RULE_OUTPUTS, aws_checks, cluster_checks
from nodecycle_cli.doctor.findings import Status
from tests.functions.test_operations_template import anchors

ROOT = Path(__file__).resolve().parents[2]
RUNBOOK = (ROOT / "docs" / "runbook.md").read_text()
REGION = "eu-west-1"


def deploy_recreates(text: str) -> list[str]:
    """The sentences of ``text`` that say a `sam deploy` recreates, restores or brings back something."""
    text = " ".join(text.split())
    said = []
    for deploy in re.finditer(r"sam deploy", text, flags=re.I):
        (sentence, *_) = re.split(r"[.;]\s", text[deploy.start() :], maxsplit=1)
        if re.search(r"recreat|restor|bring", sentence, flags=re.I) and not re.search(r"\bnot\b", sentence):
            said.append(sentence)
    return said


def test_what_says_sam_deploy_recreates_is_found() -> None:
    # (the doctor's words for a deleted rule and dead-letter queue, and the runbook's for the sweeper's rule, before)
    assert deploy_recreates(
        "sam deploy (CloudFormation recreates it after a drift: or delete and redeploy it)"
    )
    assert deploy_recreates(
        "enable the rule or `sam deploy` again to restore the schedule and its target; remove"
    )
    assert not deploy_recreates("`sam deploy` does not bring it back: CloudFormation does not notice it")


@pytest.fixture
def events() -> Iterator[object]:
    with mock_aws():
        yield boto3.client("events", region_name=REGION)


@pytest.mark.parametrize("what", [what for what, _ in RULE_OUTPUTS])
def test_the_fix_of_a_rule_deleted_outside_the_stack_is_not_sam_deploy(events: object, what: str) -> None:
    # Given a rule of the stack deleted by hand
    name = f"nodecycle-{what.replace(' ', '-')}-AbC123"

    # When the doctor checks it
    (finding,) = aws_checks.rules(events, {what: name})

    # Then it is a problem whose fix recreates it under its name, with the runbook entry that says how, and
    # nothing says a deploy brings it back
    assert finding.status is Status.PROBLEM
    assert f"aws events put-rule --name {name}" in finding.fix
    (entry,) = re.findall(r"docs/runbook\.md#([\w-]+)", finding.fix)
    assert entry in anchors(RUNBOOK)
    assert "sam deploy does not bring it back" in finding.why
    assert not deploy_recreates(f"{finding.why} {finding.fix}")


def test_every_runbook_entry_the_cli_names_exists() -> None:
    named = set()
    for source in (ROOT / "cli" / "nodecycle_cli").rglob("*.py"):
        text = re.sub(r"\"\s*\n\s*f?\"", "", source.read_text())  # string literals continued on the next line
        for entry in re.findall(r"docs/runbook\.md#([\w{}-]+)", text):
            named |= {entry.replace("{what}", what) for what in ("intake", "drain", "eip", "sweeper")}
    assert {"drain-dead-letters", "sweeper-dead-letters", "lifecycles-stuck"} <= named  # the scan found them
    assert not named - anchors(RUNBOOK), "the CLI sends operators to runbook entries that do not exist"


def test_the_runbook_does_not_say_sam_deploy_recreates_what_was_deleted() -> None:
    assert not deploy_recreates(RUNBOOK)


class NoAccessEntries:
    """EKS for a cluster where no role has an access entry (each deleted, or never made)."""

    def describe_access_entry(self, clusterName: str, principalArn: str) -> dict[str, object]:
        raise ClientError(
            {
                "Error": {
                    "Code": "ResourceNotFoundException",
                    "Message": "The specified principalArn could not be found",
                }
            },
            "DescribeAccessEntry",
        )


ROLES = {"drain": "arn:aws:iam::123456789012:role/nodecycle-DrainFunctionRole-X"}


def test_an_access_entry_deleted_from_a_stack_that_makes_them_is_recreated_by_hand() -> None:
    # Given a stack that makes its access entries (CreateAccessEntries=true, the default), whose drain entry was
    # deleted outside it
    findings, _ = cluster_checks.access_entries(
        NoAccessEntries(), "prod", ROLES, "nodecycle", stack_makes_them=True
    )

    # Then the fix creates it again, and nothing sends the operator to a deploy, which would not make it again
    (finding,) = findings
    assert finding.fix == (
        "aws eks create-access-entry --cluster-name prod --principal-arn "
        "arn:aws:iam::123456789012:role/nodecycle-DrainFunctionRole-X --kubernetes-groups nodecycle-drain"
    )
    assert "sam deploy does not bring it back" in finding.why
    assert not deploy_recreates(f"{finding.why} {finding.fix}")


def test_a_missing_access_entry_of_a_stack_that_makes_none_may_be_made_by_the_stack() -> None:
    # Given a stack deployed with CreateAccessEntries=false, on a cluster that takes access entries
    findings, _ = cluster_checks.access_entries(
        NoAccessEntries(), "prod", ROLES, "nodecycle", stack_makes_them=False
    )

    # Then the fix may also be the stack's own entries
    (finding,) = findings
    assert finding.fix.endswith("(or deploy with CreateAccessEntries=true)")
