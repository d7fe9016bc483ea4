"""EC2 instances: what the drain, the EIP steps and the sweeper need to know about them."""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterator
from datetime import datetime
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from nodecycle.adapters.aws.clients import LazyClient, error_code, transient_errors
from nodecycle.domain.ports.instances import GONE_STATES, InstanceFacts, ScheduledEvent, up

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_ec2.type_defs import InstanceTypeDef

INSTANCE_FILTER_MAX = 200  # values one DescribeInstances filter accepts
UNKNOWN_INSTANCE = "InvalidInstanceID.NotFound"  # EC2's error for an instance id it does not know
GROUP_NAME_TAG = "aws:autoscaling:groupName"  # Auto Scaling tags the instances of a group with its name


class Ec2Instances:
    def __init__(self, ec2: EC2Client | None = None) -> None:
        self._ec2: LazyClient[EC2Client] = LazyClient("ec2", ec2)

    def private_dns_name(self, instance_id: str) -> str | None:
        return next((item.get("PrivateDnsName") or None for item in self.describe([instance_id])), None)

    def states(self, instance_ids: Collection[str]) -> dict[str, str]:
        """Instance id -> state name, for those of ``instance_ids`` EC2 still knows (batched calls)."""
        return {item["InstanceId"]: item["State"]["Name"] for item in self.describe(instance_ids)}

    def alive(self, instance_ids: Collection[str]) -> set[str]:
        """The instances among ``instance_ids`` that exist and are not terminating."""
        return {instance for instance, state in self.states(instance_ids).items() if state not in GONE_STATES}

    def last_started(self, instance_id: str) -> datetime | None:
        # (state and LaunchTime of one answer: a lagging one shows the stop with the LaunchTime from before the start)
        found = next(iter(self.describe([instance_id])), None)
        if found is None or not up(found["State"]["Name"]):
            return None
        return found.get("LaunchTime")

    def describe(self, instance_ids: Collection[str]) -> Iterator[InstanceTypeDef]:
        """The instances among ``instance_ids`` that EC2 knows, as DescribeInstances answers them."""
        # Filtering by instance-id (rather than InstanceIds=) answers nothing for an unknown id instead of
        # failing the whole batch with InvalidInstanceID.NotFound.
        paginator = self._ec2().get_paginator("describe_instances")
        with transient_errors("describing instances"):
            for batch in itertools.batched(sorted(set(instance_ids)), INSTANCE_FILTER_MAX):
                for page in paginator.paginate(Filters=[{"Name": "instance-id", "Values": list(batch)}]):
                    for reservation in page.get("Reservations", []):
                        yield from reservation.get("Instances", [])

    def facts(self, instance_id: str) -> InstanceFacts | None:
        found = next(iter(self.describe([instance_id])), None)
        return None if found is None else _facts(found)

    def facts_of(self, instance_ids: Collection[str]) -> dict[str, InstanceFacts]:
        return {found["InstanceId"]: _facts(found) for found in self.describe(instance_ids)}

    def spot_interruption_noticed(self, spot_request: str) -> bool:
        with transient_errors("describing a Spot request"):
            found = self._ec2().describe_spot_instance_requests(SpotInstanceRequestIds=[spot_request])
        codes = {
            request.get("Status", {}).get("Code", "") for request in found.get("SpotInstanceRequests", [])
        }
        return any(code.startswith("marked-for-") for code in codes)

    def scheduled_events(self, instance_id: str) -> list[ScheduledEvent]:
        try:
            with transient_errors("describing an instance's scheduled events"):
                found = self._ec2().describe_instance_status(
                    InstanceIds=[instance_id], IncludeAllInstances=True
                )
        except ClientError as error:
            # Naming an instance EC2 no longer knows (forgotten about an hour after its termination: TerminateInstances
            # in the EC2 API Reference) fails the whole call; such an instance has no maintenance to come
            if error_code(error) == UNKNOWN_INSTANCE:
                return []
            raise
        # An event over, or called off, stays listed for a week with its description so prefixed; one without
        # a start says nothing of when to drain.
        return [
            ScheduledEvent(code=event["Code"], not_before=event["NotBefore"], not_after=event.get("NotAfter"))
            for status in found.get("InstanceStatuses", [])
            for event in status.get("Events", [])
            if not event.get("Description", "").startswith(("[Completed]", "[Canceled]"))
            and "NotBefore" in event
        ]


def _facts(found: InstanceTypeDef) -> InstanceFacts:
    tags = {tag["Key"]: tag.get("Value", "") for tag in found.get("Tags", [])}
    return InstanceFacts(
        instance_id=found["InstanceId"],
        state=found["State"]["Name"],
        group=tags.get(GROUP_NAME_TAG),
        tags=tags,
        spot_request=found.get("SpotInstanceRequestId"),
    )
