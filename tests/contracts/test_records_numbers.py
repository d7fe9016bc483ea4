"""The lifecycle record store's own retry, for a record whose ``extra`` holds numbers DynamoDB does not keep as they
were sent: InMemoryRecords (the unit tests') and DynamoRecordStore on the sandbox's DynamoDB answer alike.

A record's ``extra`` holds what its steps keep, floats included (test_records.py writes ``2.0`` and ``0.25``). The
store tells its own write, sent again by botocore after its answer was lost, from another writer's by the item the
failed condition returns (``ReturnValuesOnConditionCheckFailure``). DynamoDB keeps the number, not the string it
was sent: "Leading and trailing zeroes are trimmed" (developer guide, Number), so ``2.0`` comes back as ``2`` and
``1e+20`` as ``100000000000000000000``. moto gave back the string as sent, and the comparison always held; the
sandbox now keeps numbers as DynamoDB does (nodecycle_sandbox/aws/dynamodb_numbers.py). Read as a lost race, the
writer's own success stops its lifecycle (the engine sends no next message: the sweeper resumes it minutes later)
or drops an intake's first message (invariant 5: a lost answer is repaired by the retry, with nothing lost).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.adapters.aws.records import DynamoRecordStore
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.ports.lifecycle import Claimed, ClaimingRecordStore
from nodecycle_sandbox.aws import install
from tests.contracts.conftest import aws
from tests.support.fakes import InMemoryRecords
from tests.unit.foundation.test_engine import PLAN, make_record

# numbers a step may keep whose DynamoDB form is not the one sent: a whole float, a large and a tiny one
NUMBERS = {"whole": 2.0, "ratio": 0.25, "large": 1e20, "tiny": 1e-7, "nested": {"seconds": [30.0, 1.5]}}


@pytest.fixture(params=["fake", "dynamodb"])
def store(request: pytest.FixtureRequest) -> ClaimingRecordStore:
    if request.param == "fake":
        return InMemoryRecords()
    install()  # the sandbox's DynamoDB: numbers kept as DynamoDB keeps them
    table = request.getfixturevalue("lifecycle_table")
    return DynamoRecordStore(table, ttl=timedelta(days=14), dynamodb=aws("dynamodb"))


def _with_numbers(step: Step | None = None) -> LifecycleRecord:
    return make_record(PLAN, step, extra=NUMBERS)


def test_a_create_sent_again_after_it_landed_is_the_writers_own_success(store: ClaimingRecordStore) -> None:
    assert store.create(_with_numbers())
    assert store.create(_with_numbers())  # botocore's retry meets its own item
    assert not store.create(_with_numbers(Step.CORDON))  # another writer's: a lost race


def test_a_commit_sent_again_after_it_landed_is_the_writers_own_success(store: ClaimingRecordStore) -> None:
    record = _with_numbers()
    assert store.create(record)
    mine = record.model_copy(update={"step": Step.CORDON, "seq": 1})

    assert store.commit(mine, expected_seq=0)
    assert store.commit(mine, expected_seq=0)  # its own retry
    assert not store.commit(mine.model_copy(update={"step": Step.EVICT}), expected_seq=0)  # another's
    stored = store.get(record.id)
    assert stored is not None
    assert (stored.step, stored.seq, stored.extra) == (Step.CORDON, 1, NUMBERS)


def test_a_claimed_write_sent_again_after_it_landed_is_written(store: ClaimingRecordStore) -> None:
    record = _with_numbers()
    assert store.write_claimed(record, None) is Claimed.WRITTEN
    assert store.write_claimed(record, None) is Claimed.WRITTEN  # its own retry
    assert store.write_claimed(record.model_copy(update={"step": Step.CORDON}), None) is Claimed.RECORD_TAKEN
