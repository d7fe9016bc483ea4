"""A ``MaintenanceLeadMinutes`` shorter than a whole drain: a scheduled maintenance is drained that long before its
start, and its drain's deadline is capped so that the force grace, 5 s of looks and the load balancer delay are
over by the start (layers/nodecycle/domain/drain/common.py, ``_maintenance_tail``). With less lead than
``DrainTimeoutSeconds`` and that tail, every maintenance's drain takes its budget slot at once whether the budget
has room or not (no wait in line fits any more), and force deletes what its evictions have not moved by its capped
deadline, PodDisruptionBudgets or not. Nothing in the stack says so (the template lets 0 to 10080 minutes through,
whatever the drain timeout is): the doctor of the stack does."""

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

CHECK = "settings.maintenance-lead"


@pytest.fixture
def aws() -> Iterator[boto3.Session]:
    with mock_aws():
        yield boto3.Session(region_name=REGION)


def examined(aws: boto3.Session, **values: str) -> list[Finding]:
    """The doctor's findings of this check on a nodecycle stack of cluster prod whose parameters are ``values``
    (those not given left out of its description, as a stack from an older template has them)."""
    values = {"ClusterName": "prod", **values}
    template = {
        "Parameters": {name: {"Type": "String"} for name in values},
        "Resources": {"Queue": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {"OwnerId": {"Value": "nodecycle"}, "LifecycleTableName": {"Value": "nodecycle-Table"}},
    }
    given: list[ParameterTypeDef] = [{"ParameterKey": k, "ParameterValue": v} for k, v in values.items()]
    aws.client("cloudformation").create_stack(
        StackName="nodecycle", TemplateBody=json.dumps(template), Parameters=given
    )
    return [f for f in Doctor(ARGS, aws, find(aws, "nodecycle")).examine() if f.check == CHECK]


def test_a_maintenance_lead_shorter_than_a_whole_drain_is_a_warning_naming_both_and_the_minimum(
    aws: boto3.Session,
) -> None:
    # Given a stack draining maintenances 10 minutes ahead, with the default 900 s drain timeout, a 30 s force
    # grace and a 60 s load balancer delay: a whole drain is 900 + 30 + 5 + 60 = 995 s, over 16 minutes
    found = examined(
        aws,
        MaintenanceLeadMinutes="10",
        DrainTimeoutSeconds="900",
        ForceGraceSeconds="30",
        LbDeregistrationDelaySeconds="60",
    )

    # Then a warning names the lead, the drain's parts, their sum and the least lead that fits it, and the fix
    assert [f.status for f in found] == [Status.WARNING]
    what = found[0].what
    for part in ("MaintenanceLeadMinutes 10", "DrainTimeoutSeconds 900", "ForceGraceSeconds 30"):
        assert part in what
    assert "LbDeregistrationDelaySeconds 60" in what
    assert "995 s" in what
    assert "17 minutes" in what
    assert "budget" in found[0].why
    assert "MaintenanceLeadMinutes=17" in found[0].fix


def test_a_maintenance_lead_that_fits_a_whole_drain_is_fine(aws: boto3.Session) -> None:
    # 16 minutes: 960 s, a whole drain of 900 + 10 + 5 + 0 = 915 s fits
    found = examined(
        aws,
        MaintenanceLeadMinutes="16",
        DrainTimeoutSeconds="900",
        ForceGraceSeconds="10",
        LbDeregistrationDelaySeconds="0",
    )

    assert [f.status for f in found] == [Status.OK]


def test_a_stack_that_leaves_the_parameters_to_the_templates_defaults_is_judged_by_them(
    aws: boto3.Session,
) -> None:
    # The defaults: 60 minutes ahead, a 900 s drain: fits
    assert [f.status for f in examined(aws)] == [Status.OK]


def test_the_default_lead_is_too_short_for_a_drain_timeout_of_two_hours(aws: boto3.Session) -> None:
    # The lead left at its default of an hour, the drain timeout at two: 7200 + 10 + 5 + 0 = 7215 s
    found = examined(aws, DrainTimeoutSeconds="7200")

    assert [f.status for f in found] == [Status.WARNING]
    assert "MaintenanceLeadMinutes 60" in found[0].what
    assert "MaintenanceLeadMinutes=121" in found[0].fix


def test_a_lead_of_zero_drains_each_maintenance_at_its_start_and_is_a_warning(aws: boto3.Session) -> None:
    found = examined(aws, MaintenanceLeadMinutes="0", DrainTimeoutSeconds="60", ForceGraceSeconds="0")

    assert [f.status for f in found] == [Status.WARNING]
    assert "MaintenanceLeadMinutes=2" in found[0].fix


def test_a_stack_without_a_cluster_drains_no_maintenance_and_is_fine(aws: boto3.Session) -> None:
    # Given a stack for a fleet without Kubernetes (EIPs only): no node to drain, whatever the lead
    found = examined(aws, ClusterName="", MaintenanceLeadMinutes="0")

    assert [f.status for f in found] == [Status.OK]
    assert "ClusterName" in found[0].what
