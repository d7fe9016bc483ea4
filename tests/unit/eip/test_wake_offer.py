"""The address a release offers to the waiter it wakes (nodecycle.domain.eip.wake.Offer): tried directly by the
woken look only while it is fresh, once per association ended, never moving an address; an offer that could not
be written still wakes the waiter (its look lists the pool)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from nodecycle.domain.eip.assign import AssignAddress
from nodecycle.domain.eip.line import line_key
from nodecycle.domain.eip.wake import OFFERED_FOR, LineWaker, Offer
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.policy import EipFailurePolicy, EipMode, EipPolicy
from tests.support.fakes import FakeAutoscaling, FakeMetrics, InMemoryRecords, RecordingQueues
from tests.unit.eip.fakes import OWNER, T0, FakeAddresses, FakeLines, launch_record

KEY = line_key(OWNER, "ci")


class FakeOffers:
    def __init__(self) -> None:
        self.offers: dict[tuple[str, str], Offer] = {}
        self.refusing = False

    def offer(self, key: str, lifecycle: str, offer: Offer) -> None:
        if self.refusing:
            raise TransientError("ProvisionedThroughputExceededException")
        self.offers[(key, lifecycle)] = offer

    def offered(self, key: str, lifecycle: str) -> Offer | None:
        return self.offers.get((key, lifecycle))


class Launch:
    """ASSIGN_EIP of one launch in pool mode, its outcomes applied to its record as the engine commits them."""

    def __init__(self, ec2: FakeAddresses, offers: FakeOffers, instance: str) -> None:
        self.ec2, self.offers, self.records = ec2, offers, InMemoryRecords()
        policy = EipPolicy(
            mode=EipMode.POOL,
            pool="ci",
            grow_pool=False,
            on_failure=EipFailurePolicy.ABANDON,
            wait=timedelta(minutes=10),
        )
        self.lines = FakeLines()
        self.assign = AssignAddress(
            owner=OWNER,
            policy=policy,
            addresses=ec2,
            metrics=FakeMetrics(),
            lines=self.lines,
            records=self.records,
            groups=FakeAutoscaling(),
            offers=offers,
        )
        self.record: LifecycleRecord = launch_record(ec2.launch(instance))
        assert self.records.create(self.record)

    def look(self, now: datetime) -> None:
        outcome = self.assign(self.record, now)
        self.record = self.record.model_copy(update=dict(outcome.changes))

    def offer(self, allocation_id: str, ended: str, at: datetime) -> None:
        self.offers.offer(KEY, self.record.id, Offer("ci", allocation_id, "192.0.2.1", ended, at))


def waiting_for_a_pool_of_one() -> tuple[FakeAddresses, Launch, str]:
    ec2 = FakeAddresses()
    ec2.launch("i-old")
    pooled = ec2.add(pool="ci", on="i-old")
    launch = Launch(ec2, FakeOffers(), "i-new")
    launch.look(T0)
    assert launch.record.step is Step.ASSIGN_EIP
    return ec2, launch, pooled


def given_back_unseen(ec2: FakeAddresses, monkeypatch: pytest.MonkeyPatch) -> str:
    """The old instance's address disassociated in EC2's own state, its listings still showing it there (EC2's
    reads behind its writes); the association ended."""
    stale = ec2.find(OWNER, pool="ci")
    (old,) = ec2.on("i-old")
    ended = old.association_id
    assert ended is not None
    old.instance_id = old.association_id = None
    monkeypatch.setattr(ec2, "find", lambda *args, **kwargs: stale)
    return ended


def test_an_offer_older_than_its_freshness_is_not_tried() -> None:
    # Given a launch in line, offered an address given back longer than OFFERED_FOR ago (since taken back by the
    # instance it came from, its listing shows)
    ec2, launch, pooled = waiting_for_a_pool_of_one()
    launch.offer(pooled, "eipassoc-ended", T0)

    # When it looks
    launch.look(T0 + OFFERED_FOR + timedelta(seconds=1))

    # Then it does not reach for the offer: it waits
    assert ec2.count("associate") == 0
    assert launch.record.step is Step.ASSIGN_EIP


def test_an_offer_refused_is_not_tried_again_and_moves_nothing() -> None:
    # Given a launch in line, offered an address another instance holds by now
    ec2, launch, pooled = waiting_for_a_pool_of_one()
    launch.offer(pooled, "eipassoc-ended", T0)

    # When it looks, and looks again
    launch.look(T0 + timedelta(seconds=1))
    launch.look(T0 + timedelta(seconds=16))

    # Then the offer was tried once, refused (the address stays where it is), and the launch waits in line
    assert ec2.count("associate") == 1
    assert [eip.allocation_id for eip in ec2.on("i-old")] == [pooled]
    assert ec2.on("i-new") == []
    assert launch.record.step is Step.ASSIGN_EIP


def test_a_fresh_offer_of_a_free_address_is_taken_at_the_woken_look(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a launch in line, offered an address given back a second ago, which its listing shows taken still
    ec2, launch, pooled = waiting_for_a_pool_of_one()
    ended = given_back_unseen(ec2, monkeypatch)
    launch.offer(pooled, ended, T0)

    # When it looks
    launch.look(T0 + timedelta(seconds=1))

    # Then it associated the offered address with its instance
    assert [eip.allocation_id for eip in ec2.on("i-new")] == [pooled]
    assert ec2.count("associate") == 1


def test_a_waiter_whose_offer_could_not_be_written_is_woken_all_the_same() -> None:
    # Given a launch in line, and a table refusing the offer's write
    _, launch, pooled = waiting_for_a_pool_of_one()
    queues = RecordingQueues()
    launch.offers.refusing = True
    waker = LineWaker(
        owner=OWNER, lines=launch.lines, records=launch.records, queues=queues, offers=launch.offers
    )
    assert launch.records.commit(launch.record, expected_seq=launch.record.seq)

    # When an address is given back, offered to it
    waker.given_back({"ci": 1}, T0, offered=[Offer("ci", pooled, "192.0.2.1", "eipassoc-ended", T0)])

    # Then it is sent its look (which lists the pool), the offer lost
    assert [sent.message.record_id for sent in queues.take()] == [launch.record.id]
    assert launch.offers.offers == {}


def test_an_offer_from_a_release_whose_clock_runs_a_little_ahead_is_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a launch in line, offered a free address by a release whose container's clock is two seconds ahead
    ec2, launch, pooled = waiting_for_a_pool_of_one()
    ended = given_back_unseen(ec2, monkeypatch)
    launch.offer(pooled, ended, T0 + timedelta(seconds=3))

    # When it looks, a second after the release by its own clock
    launch.look(T0 + timedelta(seconds=1))

    # Then it takes the address offered
    assert [eip.allocation_id for eip in ec2.on("i-new")] == [pooled]
