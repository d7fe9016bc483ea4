"""RELEASE_EIP of a pool's address claimed moments ago, EC2's reads not monotonic: a replica behind lists nothing on
the instance, and DisassociateAddress may answer the association made seconds ago as unknown
(InvalidAssociationID.NotFound) while a read shows it on the instance. Neither is taken for the address being off
the instance: the listing is asked again, and the address is disassociated again at a later run, counted returned
once it is off."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from nodecycle.domain.eip.release import RELEASE_DELAY, ReleaseAddresses
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import LifecycleRecord
from nodecycle.domain.ports.addresses import Address
from tests.support.fakes import FakeMetrics
from tests.unit.eip.fakes import OWNER, T0, FakeAddresses, terminate_record

INSTANCE = "i-0a1b2c3d4e5f60720"
POOL = "ci"


def run(ec2: FakeAddresses, metrics: FakeMetrics, record: LifecycleRecord, runs: int = 5) -> list[Any]:
    """The step run again when it asks, up to ``runs`` times; its outcomes."""
    release = ReleaseAddresses(owner=OWNER, addresses=ec2, metrics=metrics)
    outcomes = [release(record, T0)]
    while outcomes[-1].again and len(outcomes) < runs:
        record = record.model_copy(update={**outcomes[-1].changes, "seq": record.seq + 1})
        outcomes.append(release(record, T0 + timedelta(seconds=RELEASE_DELAY * len(outcomes))))
    return outcomes


def test_a_listing_from_a_replica_behind_showing_nothing_on_the_instance_is_asked_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given an instance holding a pool's address, and EC2's first listing by instance answered from before the
    # claim (nothing on it)
    ec2, metrics = FakeAddresses(), FakeMetrics()
    ec2.launch(INSTANCE)
    pooled = ec2.add(pool=POOL, on=INSTANCE)
    listings = 0
    find = ec2.find

    def behind_once(owner: str, **filters: Any) -> list[Address]:
        nonlocal listings
        found = find(owner, **filters)
        if filters.get("instance_id") is not None:
            listings += 1
            if listings == 1:
                return []
        return found

    monkeypatch.setattr(ec2, "find", behind_once)

    # When its terminate's RELEASE_EIP runs
    outcomes = run(ec2, metrics, terminate_record(INSTANCE))

    # Then the address is returned to its pool, free, counted once
    assert ec2.eips[pooled].instance_id is None
    assert metrics.counts["EipsReturned"] == 1
    assert not outcomes[-1].again


def test_a_disassociation_answered_unknown_while_the_address_shows_on_the_instance_is_made_again_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given an instance holding a pool's address claimed seconds ago, whose association EC2's DisassociateAddress
    # does not know yet at the first try (it answers InvalidAssociationID.NotFound: the port says False)
    ec2, metrics = FakeAddresses(), FakeMetrics()
    ec2.launch(INSTANCE)
    pooled = ec2.add(pool=POOL, on=INSTANCE)
    disassociate = ec2.disassociate
    tries = 0

    def unknown_at_first(association_id: str) -> bool:
        nonlocal tries
        tries += 1
        return False if tries == 1 else disassociate(association_id)

    monkeypatch.setattr(ec2, "disassociate", unknown_at_first)

    # When its terminate's RELEASE_EIP runs, and again when it asks
    outcomes = run(ec2, metrics, terminate_record(INSTANCE))

    # Then its first run leaves the address, not counted returned, and runs again shortly; the next one
    # disassociates it: returned, free, counted once
    assert outcomes[0].again
    assert outcomes[0].delay == RELEASE_DELAY
    assert len(outcomes) == 2
    assert not outcomes[-1].again
    assert ec2.eips[pooled].instance_id is None
    assert tries == 2
    assert metrics.counts["EipsReturned"] == 1


def test_a_pending_address_ec2_took_off_the_instance_since_is_counted_returned_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a pool's address whose disassociation EC2 answered unknown at the first run, and the instance
    # terminated before the next (EC2 disassociates its addresses)
    ec2, metrics = FakeAddresses(), FakeMetrics()
    ec2.launch(INSTANCE)
    pooled = ec2.add(pool=POOL, on=INSTANCE)
    monkeypatch.setattr(ec2, "disassociate", lambda association_id: False)
    first = run(ec2, metrics, terminate_record(INSTANCE), runs=1)
    assert first[0].again
    assert metrics.counts.get("EipsReturned", 0) == 0
    ec2.terminate(INSTANCE)

    # When the step runs again
    record = terminate_record(INSTANCE).model_copy(update={**first[0].changes, "seq": 2})
    outcomes = run(ec2, metrics, record)

    # Then the address, off the instance now, is counted returned once, and the lifecycle goes on
    assert not outcomes[-1].again
    assert ec2.eips[pooled].instance_id is None
    assert metrics.counts["EipsReturned"] == 1


def test_a_pool_address_whose_disassociation_went_unanswered_and_still_on_the_instance_is_taken_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given an instance holding a pool's address whose DisassociateAddress went unanswered (EC2 throttled it: it
    # did not land), and EC2's listings by instance answered by a replica behind (nothing on it)
    ec2, metrics = FakeAddresses(), FakeMetrics()
    ec2.launch(INSTANCE)
    pooled = ec2.add(pool=POOL, on=INSTANCE)
    ec2.faults["disassociate"].append(TransientError("Throttling"))
    release = ReleaseAddresses(owner=OWNER, addresses=ec2, metrics=metrics)
    first = release(terminate_record(INSTANCE), T0)
    assert first.again
    assert ec2.eips[pooled].instance_id == INSTANCE
    find = ec2.find

    def behind(owner: str, **filters: Any) -> list[Address]:
        found = find(owner, **filters)
        return [] if filters.get("instance_id") is not None else found

    monkeypatch.setattr(ec2, "find", behind)

    # When the step runs again
    record = terminate_record(INSTANCE).model_copy(update={**first.changes, "seq": 2})
    outcomes = run(ec2, metrics, record)

    # Then the address, read still on the instance by its id, is disassociated: returned, free, counted once
    assert not outcomes[-1].again
    assert ec2.eips[pooled].instance_id is None
    assert metrics.counts["EipsReturned"] == 1
