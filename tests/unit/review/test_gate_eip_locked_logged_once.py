"""An address AWS locked is logged at ERROR once, by whoever meets it first; met again (an instance's release run
again, a sweep at its next try), it is a WARNING saying when it is tried next (nodecycle.domain.eip.locked)."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from nodecycle.domain.eip.locked import LOCK_RETRY_FIRST, LockedReleases
from nodecycle.domain.eip.release import ReleaseAddresses
from tests.support.fakes import FakeMetrics
from tests.unit.eip.fakes import OWNER, T0, FakeAddresses, FakeLines, terminate_record

INSTANCE = "i-0000000000000a001"


def test_a_locked_address_met_again_by_its_instance_s_release_is_logged_at_error_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given an instance whose address AWS locked
    ec2 = FakeAddresses()
    ec2.launch(INSTANCE)
    address = ec2.add(allocated_for=INSTANCE, allocated_at=T0 - timedelta(days=1), on=INSTANCE)
    ec2.locked.add(address)
    lines, metrics = FakeLines(), FakeMetrics()
    locked = LockedReleases(owner=OWNER, locks=lines, metrics=metrics)
    step = ReleaseAddresses(owner=OWNER, addresses=ec2, metrics=metrics, lines=lines, locked=locked)
    ip = ec2.eips[address].public_ip

    # When its terminate's release runs, and runs again past the lock's next try (a redelivered message)
    with caplog.at_level(logging.INFO):
        step(terminate_record(INSTANCE), T0)
        first = [r for r in caplog.records if ip in r.getMessage()]
        caplog.clear()
        step(terminate_record(INSTANCE), T0 + LOCK_RETRY_FIRST)
        again = [r for r in caplog.records if ip in r.getMessage()]

    # Then the first meeting is an ERROR (counted once), the second no ERROR but a WARNING naming its next try
    assert ec2.count("release") == 2, "the second run did not meet the lock"
    assert [r.levelname for r in again if r.levelno >= logging.WARNING] == ["WARNING"], [
        (r.levelname, r.getMessage()) for r in again
    ]
    (warning,) = (r for r in again if r.levelno == logging.WARNING)
    assert "tried again at" in warning.getMessage()
    assert [r.levelno for r in first].count(logging.ERROR) == 1, [
        (r.levelname, r.getMessage()) for r in first
    ]
    assert metrics.counts["EipFailures"] == 1
