"""Two nodecycle stacks of the region on one cluster (one ClusterName) whose BudgetNamespace differs: each reads and
writes its own ``nodecycle-budget`` ConfigMap, so neither sees the other's slots, and the cluster drains as many
nodes at once as both limits together allow (two stacks of ``BudgetMaxUnavailable=1``: two nodes), while
the README promises one budget across stacks, per cluster and per zone (invariant 1). A stack upgraded keeping
``BudgetNamespace=kube-system`` (as the README's upgrade note allows) beside one deployed with the default splits
the budget so, silently: the doctor of either stack said nothing of it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING

import boto3
import pytest
from moto import mock_aws

from nodecycle_cli.deployment import find
from nodecycle_cli.doctor import Doctor
from nodecycle_cli.doctor.findings import Finding, Status
from tests.functions.test_doctor_refused_reads import REGION
from tests.functions.test_doctor_stack_state import ARGS

if TYPE_CHECKING:
    from mypy_boto3_cloudformation.type_defs import ParameterTypeDef

CHECK = "cloudformation.budget"


@pytest.fixture
def aws() -> Iterator[boto3.Session]:
    with mock_aws():
        yield boto3.Session(region_name=REGION)


def stack(
    aws: boto3.Session,
    name: str,
    *,
    cluster: str,
    namespace: str | None = None,
    table: bool = True,
) -> None:
    """A stack of the region with its own owner id among its outputs (and a lifecycle table: a nodecycle stack's),
    ``cluster`` as its ClusterName and ``namespace`` as its BudgetNamespace (None: the parameter left to its
    default, ``nodecycle``)."""
    outputs = {"OwnerId": {"Value": name}}
    if table:
        outputs["LifecycleTableName"] = {"Value": f"{name}-LifecycleTable"}
    parameters = {
        "ClusterName": {"Type": "String"},
        "BudgetNamespace": {"Type": "String", "Default": "nodecycle"},
    }
    given: list[ParameterTypeDef] = [{"ParameterKey": "ClusterName", "ParameterValue": cluster}]
    if namespace is not None:
        given.append({"ParameterKey": "BudgetNamespace", "ParameterValue": namespace})
    template = {
        "Parameters": parameters,
        "Resources": {"Queue": {"Type": "AWS::SQS::Queue"}},
        "Outputs": outputs,
    }
    aws.client("cloudformation").create_stack(
        StackName=name, TemplateBody=json.dumps(template), Parameters=given
    )


def examined(aws: boto3.Session, name: str = "nodecycle") -> list[Finding]:
    return [f for f in Doctor(ARGS, aws, find(aws, name)).examine() if f.check == CHECK]


def test_another_stack_on_the_cluster_with_another_budget_namespace_is_a_problem_naming_both_namespaces(
    aws: boto3.Session,
) -> None:
    # Given this stack on cluster prod with the default namespace, another nodecycle stack on prod that kept
    # kube-system, one on prod with the default too, one on another cluster, and a stack of something else
    stack(aws, "nodecycle", cluster="prod")
    stack(aws, "nodecycle-legacy", cluster="prod", namespace="kube-system")
    stack(aws, "nodecycle-green", cluster="prod", namespace="nodecycle")
    stack(aws, "nodecycle-staging", cluster="staging", namespace="kube-system")
    stack(aws, "unrelated", cluster="prod", namespace="other", table=False)

    # When the doctor examines this stack
    found = examined(aws)

    # Then one problem names the stack whose budget is another, its namespace and this one's, and the fix
    assert [f.status for f in found] == [Status.PROBLEM]
    assert "nodecycle-legacy" in found[0].what
    assert "kube-system" in found[0].what
    assert "nodecycle" in found[0].what
    for other in ("nodecycle-green", "nodecycle-staging", "unrelated"):
        assert other not in found[0].what
    assert "BudgetNamespace=" in found[0].fix


def test_stacks_of_one_cluster_sharing_the_budget_namespace_are_fine(aws: boto3.Session) -> None:
    stack(aws, "nodecycle", cluster="prod", namespace="platform")
    stack(aws, "nodecycle-green", cluster="prod", namespace="platform")
    stack(aws, "nodecycle-staging", cluster="staging")

    assert [f.status for f in examined(aws)] == [Status.OK]


def test_a_stack_without_a_cluster_shares_no_budget(aws: boto3.Session) -> None:
    # Given this stack for a fleet without Kubernetes (EIPs only) and another with no cluster either
    stack(aws, "nodecycle", cluster="")
    stack(aws, "nodecycle-eips", cluster="", namespace="kube-system")

    assert [f.status for f in examined(aws)] == [Status.OK]
