"""Elastic IPs of owners whose ids are a prefix of each other, or differ in case only, on moto (whose tag filters
match as EC2's do: the whole value, case-sensitively): the sweeper and the release step of stack "team" free
only what is tagged nodecycle:owner=team."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import boto3
import pytest

from nodecycle.adapters.aws.addresses import Ec2Addresses
from nodecycle.domain.eip.release import ReleaseAddresses
from nodecycle.domain.model import Step, Transition
from nodecycle.domain.ports.addresses import ALLOCATED_AT_TAG, INSTANCE_TAG, OWNER_TAG, POOL_TAG
from nodecycle.wiring import sweeper
from nodecycle.wiring.eip import address_sweep
from tests.functions.eip.conftest import AwsLikeEc2, addresses, allocate, ec2, run_instances
from tests.support.fakes import T0, FakeMetrics
from tests.support.stack import Stack
from tests.unit.foundation.test_engine import make_record
from tests.unit.sweeper.test_orphans import AMPLE

__all__ = ["ec2"]  # (the AWS-like EC2 client fixture)

OTHERS = ("team-a", "Team", "tea", "team ", "TEAM")


def hour_ago() -> str:
    return (datetime.now(UTC) - timedelta(hours=1)).isoformat(timespec="seconds")


def test_the_sweep_of_owner_team_releases_no_address_of_team_a_nor_of_team_in_another_case(
    stack: Stack, ec2: AwsLikeEc2, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given stack "team", and for it and for each neighbouring owner id: an address leaked an hour ago and a pool
    # address; team-a's pool address still on an instance that is gone
    monkeypatch.setenv("NODECYCLE_OWNER_ID", "team")
    (gone,) = run_instances(1)
    leaked = {
        owner: allocate(**{OWNER_TAG: owner, ALLOCATED_AT_TAG: hour_ago()}) for owner in ("team", *OTHERS)
    }
    pooled = {owner: allocate(**{OWNER_TAG: owner, POOL_TAG: "ci"}) for owner in ("team", *OTHERS)}
    ec2.moto.associate_address(AllocationId=pooled["team-a"], InstanceId=gone, AllowReassociation=False)
    boto3.client("ec2").terminate_instances(InstanceIds=[gone])

    # When team's sweeper runs
    report = address_sweep(sweeper.settings(), sweeper.shared())(AMPLE)

    # Then team's leaked address is released, and every other owner's address is where it was
    left = {a["AllocationId"] for a in addresses()}
    assert leaked["team"] not in left
    assert {leaked[o] for o in OTHERS} <= left
    assert set(pooled.values()) <= left
    assert report.released == 1


def test_the_release_step_of_owner_team_takes_back_no_address_of_team_a_on_or_for_its_instance(
    stack: Stack, ec2: AwsLikeEc2
) -> None:
    # Given an instance of team's that terminates, holding an address of team-a's (someone moved it there), and
    # an address team-a allocated for it (a launch of the instance team-a took too, by mistake)
    (instance,) = run_instances(1)
    on_it = allocate(**{OWNER_TAG: "team-a", INSTANCE_TAG: instance, ALLOCATED_AT_TAG: hour_ago()})
    for_it = allocate(**{OWNER_TAG: "Team", INSTANCE_TAG: instance, ALLOCATED_AT_TAG: hour_ago()})
    ec2.moto.associate_address(AllocationId=on_it, InstanceId=instance, AllowReassociation=False)
    record = make_record((Step.RELEASE_EIP, Step.COMPLETE), owner="team", instance_id=instance)
    assert record.transition is Transition.TERMINATING

    # When team's release step runs for it
    outcome = ReleaseAddresses(owner="team", addresses=Ec2Addresses(), metrics=FakeMetrics())(record, T0)

    # Then both addresses are where they were, and the lifecycle goes on
    state = {a["AllocationId"]: a.get("InstanceId") or None for a in addresses()}
    assert state == {on_it: instance, for_it: None}
    assert outcome.then is None
