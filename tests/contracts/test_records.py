"""The lifecycle record store: InMemoryRecords (the unit tests') and DynamoRecordStore on moto answer alike.

What the domain relies on: a conditional write that loses a race says so, one that meets its own earlier
landing (botocore's retry of a write whose answer was lost) does not; a record reads back as it was written
(through DynamoDB's types); open records come earliest due first, finished ones never; an item past DynamoDB's
400 KB is refused, and nothing is written."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Protocol

import pytest

from nodecycle.adapters.aws.records import DynamoRecordStore
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import ActionRef, LifecycleRecord, Step, Transition
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.lifecycle import (
    ActionClaim,
    Claimed,
    ClaimingRecordStore,
    IntakeProgress,
    TokenTaken,
)
from tests.contracts.conftest import aws
from tests.support.fakes import T0, InMemoryRecords
from tests.unit.foundation.test_engine import PLAN, make_record


class Store(ClaimingRecordStore, IntakeProgress, Protocol):
    """The record store with its claims and an event's intake progress, as both sides implement it."""


@pytest.fixture(params=["fake", "dynamodb"])
def store(request: pytest.FixtureRequest) -> Store:
    if request.param == "fake":
        return InMemoryRecords()
    table = request.getfixturevalue("lifecycle_table")
    return DynamoRecordStore(table, ttl=timedelta(days=14), dynamodb=aws("dynamodb"))


def other(instance: str = "i-0fedcba9876543210", **changes: object) -> LifecycleRecord:
    return make_record(PLAN).model_copy(
        update={"id": f"{instance}/terminate/token", "instance_id": instance, **changes}
    )


# -- reads ---------------------------------------------------------------------------------------------


def test_a_missing_record_claim_and_progress_read_as_none(store: Store) -> None:
    assert store.get("i-0123456789abcdef0/terminate/none") is None
    assert store.claim(make_record(PLAN)) is None
    assert store.progress("event-1") == 0
    assert list(store.open_records("stack-a")) == []


def test_a_record_reads_back_as_it_was_written_through_dynamodbs_types(store: Store) -> None:
    # Given a record with every kind of field: optional ones unset, a float and a nested dict in extra, an
    # empty list, microseconds in a time, a result
    record = make_record(
        PLAN,
        step=Step.EVICT,
        node="ip-10-0-1-10.eu-west-1.compute.internal",
        drain_started_at=T0 + timedelta(microseconds=123456),
        result=ActionResult.ABANDON,
        extra={"ratio": 0.25, "whole": 2.0, "nested": {"pods": ["a", "b"], "none": []}, "empty": {}},
    )

    # When it is written and read back
    assert store.create(record)

    # Then it is equal to what was written (the fake hands back no object the test still holds)
    read = store.get(record.id)
    assert read == record
    assert read is not record


# -- conditional writes: a lost race, and one's own retry ---------------------------------------------


def test_create_over_another_writers_record_is_a_lost_race(store: Store) -> None:
    assert store.create(make_record(PLAN))
    assert not store.create(make_record(PLAN, step=Step.CORDON))
    stored = store.get(make_record(PLAN).id)
    assert stored is not None
    assert stored.step is PLAN[0]


def test_create_sent_again_after_it_landed_is_the_writers_own_success(store: Store) -> None:
    # (botocore sends a request again when its answer was lost: the retry meets its own item)
    assert store.create(make_record(PLAN))
    assert store.create(make_record(PLAN))


def test_commit_over_the_expected_seq_wins_once_and_a_stale_one_loses(store: Store) -> None:
    record = make_record(PLAN)
    store.create(record)
    mine = record.model_copy(update={"step": Step.CORDON, "seq": 1})
    theirs = record.model_copy(update={"step": Step.EVICT, "seq": 1})

    assert store.commit(mine, expected_seq=0)
    assert store.commit(mine, expected_seq=0)  # its own retry: the stored item is its write
    assert not store.commit(theirs, expected_seq=0)  # another delivery from the same seq lost
    assert not store.commit(mine.model_copy(update={"seq": 3}), expected_seq=2)  # a seq never stored
    assert not store.commit(other(seq=1), expected_seq=0)  # no such record: nothing is created
    assert store.get(other().id) is None
    stored = store.get(record.id)
    assert stored is not None
    assert (stored.step, stored.seq) == (Step.CORDON, 1)


def test_an_action_claim_is_written_with_its_record_both_or_neither(store: Store) -> None:
    record = make_record(PLAN)
    action: ActionRef = record
    adopted = record.model_copy(
        update={"id": "i-0123456789abcdef0/terminate/adopted-1", "token": "adopted-1"}
    )

    # A first lifecycle: both written; the claim names it, since its action's start
    assert store.write_claimed(record, None) is Claimed.WRITTEN
    assert store.claim(action) == ActionClaim(record.id, T0)
    # Its own retry: written (as it landed)
    assert store.write_claimed(record, None) is Claimed.WRITTEN
    # Another delivery of the same record id, with another content: the record is taken
    assert store.write_claimed(record.model_copy(update={"step": Step.CORDON}), None) is Claimed.RECORD_TAKEN
    # A second lifecycle of the action (another record id) expecting no claim: the claim is taken, and its
    # record was not written either
    assert store.write_claimed(adopted, None) is Claimed.CLAIM_TAKEN
    assert store.get(adopted.id) is None
    # ... expecting the current claim: written, and the claim moves to it
    assert store.write_claimed(adopted, ActionClaim.of(record)) is Claimed.WRITTEN
    assert store.claim(action) == ActionClaim.of(adopted)


def test_a_claimed_write_over_a_seq_wants_the_record_at_that_seq(store: Store) -> None:
    record = make_record(PLAN)
    assert store.write_claimed(record, None) is Claimed.WRITTEN
    restarted = record.model_copy(update={"seq": 1, "started_at": T0 + timedelta(hours=1)})

    assert store.write_claimed(restarted, ActionClaim.of(record), expected_seq=5) is Claimed.RECORD_TAKEN
    assert store.write_claimed(other(seq=1), None, expected_seq=0) is Claimed.RECORD_TAKEN  # none to go over
    assert store.write_claimed(restarted, ActionClaim.of(record), expected_seq=0) is Claimed.WRITTEN
    assert store.claim(record) == ActionClaim.of(restarted)


def test_a_token_is_held_by_one_record_and_another_instances_is_refused(store: Store) -> None:
    # Auto Scaling issues a token for one action of one instance; a record of the token under another instance
    # is a message naming that instance with another's live token (forged or crossed), refused with nothing
    # written, the refusal naming the record that holds the token
    record = make_record(PLAN, verified_at=None)
    crossed = other(
        "i-0fedcba9876543210", token=record.token, id=f"i-0fedcba9876543210/terminate/{record.token}"
    )
    assert store.write_claimed(record, None) is Claimed.WRITTEN

    assert store.write_claimed(crossed, None) == TokenTaken(record.id)
    assert store.get(crossed.id) is None
    assert store.claim(crossed) is None
    # The record's own writes meet their own token: a retry that landed, a takeover over its seq (another hook)
    assert store.write_claimed(record, None) is Claimed.WRITTEN
    taken = record.model_copy(update={"hook": "other-hook", "seq": 1})
    assert store.write_claimed(taken, None, expected_seq=0) is Claimed.WRITTEN
    assert store.write_claimed(crossed, None) == TokenTaken(record.id)
    # Adopted lifecycles of two instances have one token (one per hook: no API tells theirs): not held
    for instance in ("i-00000000000000001", "i-00000000000000002"):
        adopted = other(instance, token="adopted:terminate", id=f"{instance}/terminate/adopted:terminate")
        assert store.write_claimed(adopted, None) is Claimed.WRITTEN
    # A record may take the token from the one that holds it, when it names that one (a lifecycle Auto Scaling
    # does not confirm: see intake), and only then
    third = other(
        "i-00000000000000003", token=record.token, id=f"i-00000000000000003/terminate/{record.token}"
    )
    assert store.write_claimed(third, None, displacing=crossed.id) == TokenTaken(record.id)
    assert store.write_claimed(crossed, None, displacing=record.id) is Claimed.WRITTEN
    assert store.write_claimed(third, None) == TokenTaken(crossed.id)


def test_each_refusal_names_the_holder_it_met_and_the_store_keeps_none(store: Store) -> None:
    # Given two tokens, each held, and a second store on the same table (another warm container's)
    first, second = (
        make_record(PLAN, verified_at=None),
        other(token="token-2", id="i-0fedcba9876543210/terminate/token-2"),
    )
    assert store.write_claimed(first, None) is Claimed.WRITTEN
    assert store.write_claimed(second, None) is Claimed.WRITTEN
    snapshot = _state(store)

    # When a write of each token under a third instance is refused, one after the other
    crossed = [
        other("i-00000000000000003", token=held.token, id=f"i-00000000000000003/terminate/{held.token}")
        for held in (first, second)
    ]
    refusals = [store.write_claimed(record, None) for record in crossed]

    # Then each refusal names its own token's holder, and the store holds nothing of either afterwards: no
    # answer of a refusal stays on a long-lived object for a later question (one never asked stayed there, a
    # second refusal overwrote the first)
    assert refusals == [TokenTaken(first.id), TokenTaken(second.id)]
    assert _state(store) == snapshot


def _state(store: Store) -> dict[str, object]:
    """What a store object holds between calls: its collections by their contents, the rest as they are."""
    return {
        key: copy.deepcopy(value) if isinstance(value, dict | list | set) else value
        for key, value in vars(store).items()
    }


def test_intake_progress_only_moves_forward(store: Store) -> None:
    store.save_progress("event-1", 3, T0)
    store.save_progress("event-1", 3, T0)  # its own retry
    store.save_progress("event-1", 2, T0)  # a delivery that got less far
    assert store.progress("event-1") == 3
    store.save_progress("event-1", 5, T0)
    assert (store.progress("event-1"), store.progress("event-2")) == (5, 0)


# -- the open records -----------------------------------------------------------------------------------


def test_open_records_are_the_owners_unfinished_ones_earliest_due_first(store: Store) -> None:
    # Given records of two owners, one finished, due in another order than written (one within the same
    # second as another: the index's key is whole seconds)
    later = other("i-00000000000000001", due_at=T0 + timedelta(minutes=5))
    sooner = other("i-00000000000000002", due_at=T0 + timedelta(minutes=1, milliseconds=500))
    soonest = other("i-00000000000000003", due_at=T0 + timedelta(minutes=1))
    finished = other("i-00000000000000004", step=Step.DONE, finished_at=T0)
    theirs = other("i-00000000000000005", owner="stack-b")
    for record in (later, sooner, soonest, finished, theirs):
        assert store.create(record)

    # When the owner's open records are listed
    listed = list(store.open_records("stack-a"))

    # Then they are its unfinished ones, by due time (whole seconds)
    assert {r.id for r in listed} == {later.id, sooner.id, soonest.id}
    assert listed[-1] == later
    dues = [int(r.due_at.timestamp()) for r in listed]
    assert dues == sorted(dues)

    # And a record that finishes leaves the list
    assert store.commit(later.model_copy(update={"step": Step.DONE, "seq": 1}), expected_seq=0)
    assert later.id not in {r.id for r in store.open_records("stack-a")}


# -- limits ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("write", ["create", "commit", "write_claimed"])
def test_an_item_over_400_kb_is_refused_and_nothing_is_written(store: Store, write: str) -> None:
    # Given a record whose item would pass DynamoDB's 400 KB (its scratch space grown without bound)
    record = make_record(PLAN)
    if write == "commit":
        store.create(record)
    huge = record.model_copy(update={"seq": 1, "extra": {"log": "x" * 410_000}})

    # When it is written, Then it is refused (no retry changes it: not transient), and nothing changed
    writes = {
        "create": lambda: store.create(huge),
        "commit": lambda: store.commit(huge, expected_seq=0),
        "write_claimed": lambda: store.write_claimed(huge, None),
    }
    with pytest.raises(Exception) as refused:
        writes[write]()
    assert not isinstance(refused.value, TransientError)
    stored = store.get(record.id)
    assert stored is None if write != "commit" else stored == record
    assert store.claim(record) is None


def test_an_item_just_under_400_kb_is_taken(store: Store) -> None:
    record = make_record(PLAN, extra={"log": "x" * 390_000})
    assert store.create(record)
    assert store.get(record.id) == record


def test_a_transition_short_name_is_part_of_the_claim(store: Store) -> None:
    # The claims of one instance under one hook name but different transitions are two claims
    launch = make_record(
        PLAN,
        id="i-0123456789abcdef0/launch/launch-token",
        token="launch-token",  # (a token is one action's: see the test of tokens above)
        transition=Transition.LAUNCHING,
        hook="terminate",
    )
    assert store.write_claimed(make_record(PLAN), None) is Claimed.WRITTEN
    assert store.write_claimed(launch, None) is Claimed.WRITTEN
    assert store.claim(launch) == ActionClaim.of(launch)
