"""``nodecycle doctor`` on a node kept cordoned for a lifecycle the stack no longer has.

A drain that keeps its node cordoned after the completion (a warm pool, a maintenance ahead) marks it
``nodecycle.io/released-for`` its lifecycle, and that lifecycle's watch lifts the cordon once the instance is back
in service. Its record gone with the table (the stack deleted and deployed again: docs/runbook.md), nothing lifts it:
the node serves no pods while its instance runs, for ever, and no sweeper clears it (the mark names no owner). The
doctor named none of it. The cluster is the sandbox's Kubernetes API server, Auto Scaling moto's."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from kubernetes import client
from moto import mock_aws

from nodecycle.domain.model import Transition, record_id
from nodecycle_cli import cluster, doctor
from nodecycle_cli.deployment import find
from nodecycle_cli.doctor import Doctor, released
from nodecycle_cli.doctor.findings import Finding, Status
from nodecycle_sandbox.aws import autoscaling_names
from nodecycle_sandbox.kube import KubeServer
from nodecycle_sandbox.runner.cfn_yaml import load_template
from tests.functions.test_doctor_refused_reads import REGION
from tests.support.stack import TEMPLATE

LIFECYCLE_TABLE = load_template(TEMPLATE)["Resources"]["LifecycleTable"]["Properties"]

GROUP, OTHER = "workers", "theirs"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[boto3.Session, KubeServer, Any, dict[str, list[str]]]]:
    """Two groups of two InService instances each (this stack's, and one it does not manage), a node for each."""
    autoscaling_names.install()  # (at most 50 group names a DescribeAutoScalingGroups call, as Auto Scaling)
    with mock_aws(), KubeServer(tls=True) as server:
        aws = boto3.Session(region_name=REGION)
        autoscaling = aws.client("autoscaling")
        autoscaling.create_launch_configuration(
            LaunchConfigurationName="workers", ImageId="ami-12c6146b", InstanceType="t3.micro"
        )
        instances: dict[str, list[str]] = {}
        for group in (GROUP, OTHER):
            autoscaling.create_auto_scaling_group(
                AutoScalingGroupName=group,
                LaunchConfigurationName="workers",
                MinSize=0,
                MaxSize=4,
                DesiredCapacity=2,
                AvailabilityZones=[f"{REGION}a"],
            )
            (described,) = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[group])[
                "AutoScalingGroups"
            ]
            instances[group] = sorted(i["InstanceId"] for i in described["Instances"])
            for instance in instances[group]:
                server.add_node(node(instance), instance_id=instance, zone=f"{REGION}a")
        server.settle()
        kubeconfig = str(server.write_kubeconfig(tmp_path / "kubeconfig"))
        api = cluster.api_client(argparse.Namespace(kubeconfig=kubeconfig, context=None))
        yield aws, server, api, instances


def node(instance: str) -> str:
    return f"node-{instance}"


def kept(server: KubeServer, instance: str, lifecycle: str) -> None:
    """The node of ``instance`` as a cleanup leaves it for a warm pool: cordoned, marked released for
    ``lifecycle``."""
    client.CoreV1Api(server.api_client()).patch_node(
        node(instance),
        {
            "metadata": {"annotations": {"nodecycle.io/released-for": lifecycle}},
            "spec": {"unschedulable": True},
        },
    )


def found(aws: boto3.Session, api: Any, open_lifecycles: set[str]) -> list[Finding]:
    return released.kept_cordons(api, aws.client("autoscaling"), [GROUP], open_lifecycles)


def test_a_cordon_kept_for_a_lifecycle_the_stack_has_no_record_of_is_a_warning_naming_how_to_lift_it(
    world: tuple[boto3.Session, KubeServer, Any, dict[str, list[str]]],
) -> None:
    # Given, in this stack's group, a node kept cordoned for a lifecycle whose record went with the table (its
    # instance back InService), and one kept for a lifecycle still open (its watch lifts it); in a group the stack
    # does not manage, a node kept cordoned for a lifecycle of another stack
    aws, server, api, instances = world
    gone, watched = instances[GROUP]
    theirs = instances[OTHER][0]
    kept(server, gone, f"{gone}/terminate/old-token")
    kept(server, watched, f"{watched}/terminate/token")
    kept(server, theirs, f"{theirs}/terminate/their-token")

    # When the doctor looks at the kept cordons, this stack's open lifecycle the watched one's
    findings = found(aws, api, {f"{watched}/terminate/token"})

    # Then one warning names the orphaned one, its lifecycle, and the commands that lift it
    assert [f.status for f in findings] == [Status.WARNING], findings
    (warning,) = findings
    assert warning.check == released.CHECK
    assert node(gone) in warning.what
    assert f"{gone}/terminate/old-token" in warning.what
    for other in (watched, theirs):
        assert other not in warning.what
    assert (
        f"kubectl annotate node {node(gone)} nodecycle.io/released-for- && kubectl uncordon {node(gone)}"
        in warning.fix
    )


def test_a_cordon_kept_for_an_instance_leaving_service_is_no_finding(
    world: tuple[boto3.Session, KubeServer, Any, dict[str, list[str]]],
) -> None:
    # Given the node kept cordoned for a lifecycle closed, its instance terminating (the cordon kept on purpose
    # until the node goes)
    aws, server, api, instances = world
    leaving = instances[GROUP][0]
    kept(server, leaving, f"{leaving}/terminate/token")
    aws.client("autoscaling").set_instance_health(InstanceId=leaving, HealthStatus="Unhealthy")
    aws.client("autoscaling").terminate_instance_in_auto_scaling_group(
        InstanceId=leaving, ShouldDecrementDesiredCapacity=False
    )

    assert [f.status for f in found(aws, api, set())] == [Status.OK]


@pytest.mark.parametrize("transition", [Transition.REBALANCE, Transition.SPOT_INTERRUPTION])
def test_a_cordon_kept_until_a_disruption_without_a_hook_comes_is_no_finding(
    world: tuple[boto3.Session, KubeServer, Any, dict[str, list[str]]], transition: Transition
) -> None:
    # Given the node a rebalance recommendation's cordon (or a Spot interruption's drain) left cordoned and marked
    # released for its lifecycle, done: no watch lifts that cordon, kept on purpose while the instance is still
    # InService, until EC2 interrupts it (cleanup._coming_back: a disruption without a hook stays cordoned)
    aws, server, api, instances = world
    at_risk = instances[GROUP][0]
    kept(server, at_risk, record_id(at_risk, transition, "event-id"))

    # When the doctor looks at the kept cordons, the stack has no open lifecycle
    findings = found(aws, api, set())

    # Then it does not tell the operator to uncordon it: no lifecycle was lost
    assert [f.status for f in findings] == [Status.OK], findings


def test_a_stack_of_more_than_50_groups_has_its_kept_cordons_found(
    world: tuple[boto3.Session, KubeServer, Any, dict[str, list[str]]],
) -> None:
    # Given a stack that manages 60 groups (Auto Scaling describes at most 50 names a call), its group workers among
    # them, and a node of workers kept cordoned for a lifecycle whose record went with the table
    aws, server, api, instances = world
    gone = instances[GROUP][0]
    kept(server, gone, f"{gone}/terminate/old-token")
    groups = [GROUP, *(f"nodes-{n:02d}" for n in range(59))]

    # When the doctor looks at the kept cordons
    findings = released.kept_cordons(api, aws.client("autoscaling"), groups, set())

    # Then the node is named, as for a stack of fewer groups
    assert [f.status for f in findings] == [Status.WARNING], findings
    assert node(gone) in findings[0].what


def test_a_node_marked_but_not_cordoned_is_no_finding(
    world: tuple[boto3.Session, KubeServer, Any, dict[str, list[str]]],
) -> None:
    aws, server, api, instances = world
    instance = instances[GROUP][0]
    kept(server, instance, f"{instance}/terminate/token")
    client.CoreV1Api(server.api_client()).patch_node(node(instance), {"spec": {"unschedulable": False}})

    assert [f.status for f in found(aws, api, set())] == [Status.OK]


def test_the_doctor_of_a_stack_makes_the_check(
    world: tuple[boto3.Session, KubeServer, Any, dict[str, list[str]]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given stack nodecycle managing group workers on cluster prod (EKS's, the sandbox's API server taken for its
    # own), its lifecycle table empty (deployed again: the table before went with the stack), and a node of the
    # group kept cordoned for a lifecycle of the stack before
    aws, server, _, instances = world
    template = {
        "Parameters": {"ClusterName": {"Type": "String"}, "ManagedGroups": {"Type": "String"}},
        "Resources": {"Queue": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {"OwnerId": {"Value": "nodecycle"}, "LifecycleTableName": {"Value": "nodecycle-table"}},
    }
    aws.client("cloudformation").create_stack(
        StackName="nodecycle",
        TemplateBody=json.dumps(template),
        Parameters=[
            {"ParameterKey": "ClusterName", "ParameterValue": "prod"},
            {"ParameterKey": "ManagedGroups", "ParameterValue": GROUP},
        ],
    )
    aws.client("dynamodb").create_table(
        TableName="nodecycle-table",
        BillingMode=LIFECYCLE_TABLE["BillingMode"],
        AttributeDefinitions=LIFECYCLE_TABLE["AttributeDefinitions"],
        KeySchema=LIFECYCLE_TABLE["KeySchema"],
        GlobalSecondaryIndexes=LIFECYCLE_TABLE["GlobalSecondaryIndexes"],
    )
    aws.client("eks").create_cluster(
        name="prod",
        roleArn="arn:aws:iam::123456789012:role/eks",
        resourcesVpcConfig={"subnetIds": ["subnet-1"]},
    )
    gone = instances[GROUP][0]
    kept(server, gone, f"{gone}/terminate/old-token")
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
    findings = [f for f in Doctor(args, aws, find(aws, "nodecycle")).examine() if f.check == released.CHECK]

    # Then the kept cordon is among its findings
    assert [f.status for f in findings] == [Status.WARNING], findings
    assert node(gone) in findings[0].what
