"""Elastic IPs that follow the instance: the ASSIGN_EIP and RELEASE_EIP steps (the sweeper's part is in
:mod:`nodecycle.domain.sweep.addresses`).

Everything here talks to EC2 through the :class:`~nodecycle.domain.ports.addresses.Addresses` port and decides
by the tags nodecycle writes when it allocates (owner, instance, group, allocated-at, pool, allocated-into), not by
the current settings: a pool address is never released (nor one nodecycle allocated into a pool, its pool tag
removed since), and an address of another owner is never touched.
"""

from __future__ import annotations

import logging
from typing import Any

from nodecycle.domain.model import LifecycleRecord
from nodecycle.domain.ports.addresses import Addresses, AddressInUse, AddressNotFound

log = logging.getLogger(__name__)

# The EIP steps keep what they must remember between two runs of a step under this key of record.extra.
SCRATCH = "eip"


def without_scratch(record: LifecycleRecord) -> dict[str, Any]:
    """The record's extra without the EIP steps' scratch: what a step that is done leaves behind."""
    return {key: value for key, value in record.extra.items() if key != SCRATCH}


def release_unassociated(addresses: Addresses, allocation_id: str) -> bool:
    """Release the address only if EC2 shows it unassociated now; whether this call released it: with its
    answer, or with the answer lost (a read timeout, a 5xx) and botocore's retry told InvalidAllocationID.NotFound
    (the port's release tells that as this call's: see Ec2Addresses.release). Every caller counts it as released,
    and as room under the quota. False when it was gone when looked at, or gone at the first attempt of the
    release (another released it within that round trip: a sweep, a concurrent delivery): no caller counts it.

    EC2 refuses to release an associated address of a nondefault VPC (``InvalidIPAddress.InUse``), but one of
    a default VPC it disassociates and releases without a word: an address that a launch associated since it
    was listed would be taken from its instance. So it is looked at again, by its allocation id, right before
    (one round trip of a window remains: EC2 has no conditional release). Raises :class:`AddressInUse` when it
    is associated, or EC2 says it is in use. An address whose tags, read then, say it is a pool's (or was allocated
    into one) is never released: False.
    """
    try:
        current = addresses.describe(allocation_id)
    except AddressNotFound:
        return False
    if current.pool is not None or current.allocated_into is not None:
        # A pool's (tagged so now, or allocated into one): never released, whatever a listing of it showed
        log.warning("address %s is a pool's (its tags say so now): not released", current.public_ip)
        return False
    if current.associated:
        holder = current.instance_id or "a network interface"
        raise AddressInUse(f"address {current.public_ip} is associated with {holder}")
    return addresses.release(allocation_id)
