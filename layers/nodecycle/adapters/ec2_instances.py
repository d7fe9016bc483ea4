"""EC2 instances: what the drain and the sweeper need to know about them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from botocore.exceptions import ClientError

from nodecycle.adapters.aws import client, error_code, transient_errors

_GONE = frozenset({"shutting-down", "terminated"})
_BATCH = 200  # instance ids per DescribeInstances call


class Ec2Instances:
    def __init__(self, ec2: Any = None) -> None:
        self._client = ec2

    @property
    def _ec2(self) -> Any:
        if self._client is None:
            self._client = client("ec2")
        return self._client

    def private_dns_name(self, instance_id: str) -> str | None:
        found = self._describe([instance_id])
        return next((item.get("PrivateDnsName") or None for item in found), None)

    def alive(self, instance_ids: Iterable[str]) -> set[str]:
        """The instances among ``instance_ids`` that exist and are not terminating (batched calls)."""
        ids = sorted(set(instance_ids))
        alive: set[str] = set()
        for start in range(0, len(ids), _BATCH):
            for item in self._describe(ids[start : start + _BATCH]):
                if item.get("State", {}).get("Name") not in _GONE:
                    alive.add(item["InstanceId"])
        return alive

    def _describe(self, instance_ids: list[str]) -> list[dict[str, Any]]:
        # Filtering by instance-id (rather than InstanceIds=) answers an empty list for unknown ids instead
        # of failing the whole batch with InvalidInstanceID.NotFound.
        paginator = self._ec2.get_paginator("describe_instances")
        pages = paginator.paginate(Filters=[{"Name": "instance-id", "Values": instance_ids}])
        try:
            with transient_errors("describing instances"):
                return [
                    instance
                    for page in pages
                    for reservation in page.get("Reservations", [])
                    for instance in reservation.get("Instances", [])
                ]
        except ClientError as error:
            if error_code(error) == "InvalidInstanceID.Malformed":
                return []
            raise
