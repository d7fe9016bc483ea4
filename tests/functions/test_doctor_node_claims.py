"""``nodecycle doctor`` on a node claimed (``nodecycle.io/owner``) by an owner no stack of the region is any more.

Since a stack leaves alone a node another owner claims when that owner writes nothing in its budget (a stack of
another BudgetNamespace, or one removed more than a day ago), a removed stack's leftover claim keeps every drain of
that node away for up to nine days (CLAIM_OUTLIVED): each terminate action of its instance is completed at its drain
timeout with the node undrained (``node-owned-by:OWNER``), a NodeClaimedElsewhere event the only sign. The doctor
lists the claims whose owner has no nodecycle stack in the region, with the command that clears each; a claim of a
live stack (another budget's drain in progress, this stack's own) is no finding. The cluster is the sandbox's
Kubernetes API server, the stacks moto's CloudFormation."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from kubernetes import client
from moto import mock_aws

from nodecycle_cli import cluster, doctor
from nodecycle_cli.deployment import find
from nodecycle_cli.doctor import Doctor, claims
from nodecycle_cli.doctor.findings import Finding, Status
from nodecycle_sandbox.kube import KubeServer
from tests.functions.test_doctor_refused_reads import REGION

ACCOUNT = "123456789012"  # moto's

LEFTOVER, SHARED, OWN, FREE = (f"ip-10-0-{n}-{n}.eu-west-1.compute.internal" for n in range(1, 5))
STARTED = "2026-12-01T08:00:00+00:00"


def stack(aws: boto3.Session, name: str, *, owner: str | None = None, namespace: str = "nodecycle") -> None:
    """A nodecycle stack of the region (a lifecycle table among its outputs) on cluster prod, owner id ``owner``
    (its name when None, as the template's OwnerId left empty)."""
    template = {
        "Parameters": {"ClusterName": {"Type": "String"}, "BudgetNamespace": {"Type": "String"}},
        "Resources": {"Queue": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {
            "OwnerId": {"Value": owner or name},
            "LifecycleTableName": {"Value": f"{name}-LifecycleTable"},
            "DrainFunctionName": {"Value": f"{name}-DrainFunction"},
        },
    }
    aws.client("cloudformation").create_stack(
        StackName=name,
        TemplateBody=json.dumps(template),
        Parameters=[
            {"ParameterKey": "ClusterName", "ParameterValue": "prod"},
            {"ParameterKey": "BudgetNamespace", "ParameterValue": namespace},
        ],
    )


def claim(server: KubeServer, node: str, owner: str, started: str | None = STARTED) -> None:
    """Annotate ``node`` as a drain's cordon does: its owner, and its drain in progress (when ``started``)."""
    annotations = {"nodecycle.io/owner": owner}
    if started is not None:
        annotations["nodecycle.io/in-progress"] = json.dumps(
            {"instance": "i-0123456789abcdef0", "transition": "terminate", "token": "t", "started": started}
        )
    client.CoreV1Api(server.api_client()).patch_node(node, {"metadata": {"annotations": annotations}})


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[boto3.Session, KubeServer, Any]]:
    with mock_aws(), KubeServer(tls=True) as server:
        for n, node in enumerate((LEFTOVER, SHARED, OWN, FREE), start=1):
            server.add_node(node, instance_id=f"i-0{n:016x}", zone="eu-west-1a")
        server.settle()
        kubeconfig = str(server.write_kubeconfig(tmp_path / "kubeconfig"))
        api = cluster.api_client(argparse.Namespace(kubeconfig=kubeconfig, context=None))
        yield boto3.Session(region_name=REGION), server, api


def found(aws: boto3.Session, api: Any) -> list[Finding]:
    return claims.leftover_claims(aws.client("cloudformation"), api, find(aws, "nodecycle"))


def test_a_node_claimed_by_an_owner_no_stack_of_the_region_has_is_a_warning_naming_how_to_clear_it(
    world: tuple[boto3.Session, KubeServer, Any],
) -> None:
    # Given this stack, a stack of another budget namespace (owner team-b) on the cluster, a node claimed by an
    # owner no stack has (nodecycle-old, removed), one by team-b, one by this stack, and one claimed by none
    aws, server, api = world
    stack(aws, "nodecycle")
    stack(aws, "nodecycle-b", owner="team-b", namespace="team-b")
    claim(server, LEFTOVER, "nodecycle-old")
    claim(server, SHARED, "team-b")
    claim(server, OWN, "nodecycle")

    # When the doctor looks at the nodes' claims
    findings = found(aws, api)

    # Then one warning names the leftover claim's node, owner and start, and the command that clears it
    assert [f.status for f in findings] == [Status.WARNING], findings
    (warning,) = findings
    assert warning.check == claims.CHECK
    assert LEFTOVER in warning.what
    assert "nodecycle-old" in warning.what
    assert STARTED in warning.what
    for other in (SHARED, OWN, FREE, "team-b"):
        assert other not in warning.what
    assert "undrained" in warning.why
    assert "NodeClaimedElsewhere" in warning.why
    assert f"kubectl annotate node {LEFTOVER} nodecycle.io/owner- nodecycle.io/in-progress-" in warning.fix


def test_a_claim_without_its_drain_annotation_is_named_with_its_start_unknown(
    world: tuple[boto3.Session, KubeServer, Any],
) -> None:
    aws, server, api = world
    stack(aws, "nodecycle")
    claim(server, LEFTOVER, "nodecycle-old", started=None)

    (warning,) = found(aws, api)

    assert warning.status is Status.WARNING
    assert LEFTOVER in warning.what
    assert "unknown" in warning.what


def test_a_claim_of_a_stack_deleted_is_named(world: tuple[boto3.Session, KubeServer, Any]) -> None:
    # Given the stack that claimed the node deleted since (DescribeStacks without a stack name lists it no more: a
    # deleted stack is reached by its unique id only)
    aws, server, api = world
    stack(aws, "nodecycle")
    stack(aws, "nodecycle-old")
    claim(server, LEFTOVER, "nodecycle-old")
    aws.client("cloudformation").delete_stack(StackName="nodecycle-old")

    (warning,) = found(aws, api)

    assert warning.status is Status.WARNING
    assert "nodecycle-old" in warning.what


def test_claims_of_live_stacks_only_are_fine(world: tuple[boto3.Session, KubeServer, Any]) -> None:
    # Given every claim of a stack of the region: this stack's, and another budget namespace's drain in progress
    aws, server, api = world
    stack(aws, "nodecycle")
    stack(aws, "nodecycle-b", owner="team-b", namespace="team-b")
    claim(server, SHARED, "team-b")
    claim(server, OWN, "nodecycle")

    assert [f.status for f in found(aws, api)] == [Status.OK]


def test_the_doctor_of_a_stack_makes_the_check(
    world: tuple[boto3.Session, KubeServer, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given this stack on cluster prod (EKS's), the sandbox's API server taken for prod's (its endpoint is not
    # moto's), and a node claimed by an owner no stack has
    aws, server, _ = world
    stack(aws, "nodecycle")
    claim(server, LEFTOVER, "nodecycle-old")
    aws.client("eks").create_cluster(
        name="prod",
        roleArn="arn:aws:iam::123456789012:role/eks",
        resourcesVpcConfig={"subnetIds": ["subnet-1"]},
    )
    monkeypatch.setattr(doctor, "mismatch", lambda *_: None)
    args = argparse.Namespace(
        group=[],
        cluster=None,
        rbac=None,
        verbose=False,
        kubeconfig=str(tmp_path / "kubeconfig"),
        context=None,
    )

    # When the doctor examines the stack
    findings = [f for f in Doctor(args, aws, find(aws, "nodecycle")).examine() if f.check == claims.CHECK]

    # Then the claim is among its findings
    assert [f.status for f in findings] == [Status.WARNING], findings
    assert LEFTOVER in findings[0].what


def test_a_claim_named_after_a_stack_whose_owner_id_is_another_is_named(
    world: tuple[boto3.Session, KubeServer, Any],
) -> None:
    # Given stack nodecycle-b, whose functions drain as owner team-b (its OwnerId set, or set since its first
    # deployment), and an unrelated stack of the region named nodecycle-old (no OwnerId of its own: not nodecycle's),
    # and a node claimed by each name: claims no stack's functions will renew or clear
    aws, server, api = world
    stack(aws, "nodecycle")
    stack(aws, "nodecycle-b", owner="team-b", namespace="team-b")
    aws.client("cloudformation").create_stack(
        StackName="nodecycle-old",
        TemplateBody=json.dumps({"Resources": {"Queue": {"Type": "AWS::SQS::Queue"}}}),
    )
    claim(server, LEFTOVER, "nodecycle-b")
    claim(server, SHARED, "nodecycle-old")

    (warning,) = found(aws, api)

    # Then both are named: an owner is what a stack's functions drain as, not any stack's name
    assert warning.status is Status.WARNING
    assert LEFTOVER in warning.what
    assert SHARED in warning.what


def test_a_stack_without_its_outputs_yet_counts_by_its_owner_id_parameter_or_its_name() -> None:
    # Given a nodecycle stack being created (no outputs yet: its OwnerId parameter, empty for its name), another with
    # its OwnerId parameter set, and a stack of another template
    pages = [
        {
            "Stacks": [
                {
                    "StackName": "nodecycle-new",
                    "Parameters": [{"ParameterKey": "OwnerId", "ParameterValue": ""}],
                },
                {
                    "StackName": "nodecycle-c",
                    "Parameters": [{"ParameterKey": "OwnerId", "ParameterValue": "c"}],
                },
                {"StackName": "web", "Parameters": [{"ParameterKey": "Env", "ParameterValue": "prod"}]},
            ]
        }
    ]

    class Paginator:
        def paginate(self) -> list[dict[str, Any]]:
            return pages

    class CloudFormation:
        def get_paginator(self, name: str) -> Paginator:
            assert name == "describe_stacks"
            return Paginator()

    # Then the owners are the first's name and the second's parameter, not the other template's stack
    assert claims.stack_owners(CloudFormation()) == {"nodecycle-new", "c"}


def budget(server: KubeServer, writers: dict[str, datetime], held: tuple[str, str] | None = None) -> None:
    """The budget ConfigMap of namespace nodecycle, its document with the limits ``writers`` last wrote (each owner's
    update time), and ``held``'s node (a node and its owner) holding a slot."""
    from nodecycle.domain.budget.document import BudgetDocument, Holder, OwnerLimits, ResolvedLimits

    limits = {
        owner: OwnerLimits(
            max_unavailable="1",
            max_unavailable_per_zone=None,
            count_unavailable=False,
            nodes_in_scope=None,
            resolved=ResolvedLimits(total=1, per_zone=None),
            updated_at=at,
        )
        for owner, at in writers.items()
    }
    now = datetime.now(UTC)
    holders: tuple[Holder, ...] = ()
    if held is not None:
        node, owner = held
        holders = (
            Holder(
                node=node,
                instance_id="i-0123456789abcdef0",
                zone="eu-west-1a",
                owner=owner,
                record_id="i-0123456789abcdef0/terminate/t",
                renewed_at=now,
                acquired_at=now,
                ttl_seconds=600,
            ),
        )
    document = BudgetDocument(holders=holders, limits=limits)
    core = client.CoreV1Api(server.api_client())
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="nodecycle")))
    core.create_namespaced_config_map(
        "nodecycle",
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="nodecycle-budget"), data={"budget.json": document.to_json()}
        ),
    )


def test_a_claim_of_an_owner_that_writes_in_this_budget_is_no_finding(
    world: tuple[boto3.Session, KubeServer, Any],
) -> None:
    # Given this stack, and a node claimed by owner nodecycle-west, no stack of this region (a stack of another
    # region on the same cluster, sharing this budget), which holds the node's slot in this stack's budget: its
    # drain is alive, and this stack's drains leave the node to it while it holds the slot and adopt it once it
    # holds it no more (SlotRequest.claimed_by: an owner that writes in the budget is told dead by it)
    aws, server, api = world
    stack(aws, "nodecycle")
    claim(server, LEFTOVER, "nodecycle-west")
    budget(
        server,
        {"nodecycle-west": datetime.now(UTC) - timedelta(minutes=5)},
        held=(LEFTOVER, "nodecycle-west"),
    )

    # When the doctor looks at the nodes' claims
    findings = found(aws, api)

    # Then it is no leftover: clearing it (what the warning advises) would have a drain of this stack start on a node
    # another stack is draining, two drains on one node, one outside the budget
    assert [f.status for f in findings] == [Status.OK], findings


def test_a_claim_of_an_owner_that_wrote_in_this_budget_over_a_day_ago_is_named(
    world: tuple[boto3.Session, KubeServer, Any],
) -> None:
    # Given the claim's owner's last write in this budget more than a day old (LIMITS_RETENTION: a budget that
    # forgot it, as this stack's drains do)
    aws, server, api = world
    stack(aws, "nodecycle")
    claim(server, LEFTOVER, "nodecycle-old")
    budget(server, {"nodecycle-old": datetime.now(UTC) - timedelta(days=2)})

    (warning,) = found(aws, api)

    assert warning.status is Status.WARNING
    assert LEFTOVER in warning.what


def test_a_claim_of_a_stack_whose_deletion_failed_is_named_with_its_state(
    world: tuple[boto3.Session, KubeServer, Any],
) -> None:
    # Given the stack that claimed the node DELETE_FAILED: DescribeStacks still lists it, its outputs (OwnerId among
    # them) with it, though its deletion removed its rules and functions before it stopped at what it could not
    # delete (they depend on its roles, queues and table, deleted after them): nothing of it drains or sweeps
    aws, server, api = world
    stack(aws, "nodecycle")
    stack(aws, "nodecycle-old")
    claim(server, LEFTOVER, "nodecycle-old")
    from moto.cloudformation.models import cloudformation_backends

    (old,) = (
        s for s in cloudformation_backends[ACCOUNT][REGION].stacks.values() if s.name == "nodecycle-old"
    )
    old.status = "DELETE_FAILED"

    (warning,) = found(aws, api)

    # Then its claim is named, with the stack's state, which is why the owner looks there still
    assert warning.status is Status.WARNING, warning
    assert LEFTOVER in warning.what
    assert "nodecycle-old" in warning.what
    assert "DELETE_FAILED" in warning.what
    assert "aws lambda get-function --function-name nodecycle-old-DrainFunction" in warning.fix


@pytest.mark.parametrize("status", ["ROLLBACK_COMPLETE", "ROLLBACK_FAILED", "REVIEW_IN_PROGRESS"])
def test_a_stack_whose_creation_never_completed_drains_as_no_owner(status: str) -> None:
    # Given a stack of the owner's name whose creation failed and was rolled back (ROLLBACK_COMPLETE: "any resources
    # that were created during the create stack operation are deleted"; ROLLBACK_FAILED: the rollback stopped half
    # way, its functions deleted first) or never began (REVIEW_IN_PROGRESS: a change set not executed, "without any
    # templates or resources"): DescribeStacks lists it, with its parameters and no outputs. A removed stack deployed
    # again under its name, whose first deployment failed, is one
    pages = [
        {
            "Stacks": [
                {
                    "StackName": "nodecycle-old",
                    "StackStatus": status,
                    "Parameters": [{"ParameterKey": "OwnerId", "ParameterValue": ""}],
                },
            ]
        }
    ]

    class Paginator:
        def paginate(self) -> list[dict[str, Any]]:
            return pages

    class CloudFormation:
        def get_paginator(self, name: str) -> Paginator:
            return Paginator()

    # Then its owner is no live stack's: the leftover claims of the stack removed before are named, with its state
    failed: dict[str, tuple[str, str, str]] = {}
    assert claims.stack_owners(CloudFormation(), failed) == set()
    assert failed == {"nodecycle-old": ("nodecycle-old", status, "")}
