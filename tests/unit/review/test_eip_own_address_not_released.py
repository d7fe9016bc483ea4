"""A launch whose own address is past taking (older than TAKE_OWN_WITHIN, never associated) releases it before it
allocates another, through release_unassociated, which since 18943a2 leaves an address its tags, read right before,
say is a pool's (tagged into one by hand since: adopted) or was allocated into one. The launch then logged
"released address ... before allocating another" of the address it left, which an operator reading the log takes
for gone."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from nodecycle.domain.ports.addresses import POOL_TAG
from tests.support.fakes import FakeMetrics
from tests.unit.eip.fakes import T0, FakeAddresses, Wiring, launch_record
from tests.unit.eip.test_assign_address import INSTANCE, step


def test_an_own_address_adopted_into_a_pool_since_is_not_said_released(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a launch that allocated an address five minutes ago, never associated, which an operator has since
    # tagged into a pool
    ec2 = FakeAddresses()
    ec2.launch(INSTANCE)
    mine = ec2.add(allocated_for=INSTANCE, allocated_at=T0 - timedelta(minutes=5))
    eip = ec2.eips[mine]
    allocated = {"allocation_id": mine, "public_ip": eip.public_ip, "tags": dict(eip.tags), "seen": True}
    eip.tags[POOL_TAG] = "adopted"
    record = launch_record(INSTANCE, extra={"eip": {"allocated": allocated, "restarts": 2}})
    metrics = FakeMetrics()

    # When it runs again
    with caplog.at_level(logging.INFO):
        step(ec2, metrics, Wiring())(record, T0)

    # Then the address is the pool's, kept, and nothing says it was released
    assert mine in ec2.eips
    assert metrics.counts["EipsReleased"] == 0
    assert not [
        r for r in caplog.records if "released address" in r.getMessage() and eip.public_ip in r.getMessage()
    ]
