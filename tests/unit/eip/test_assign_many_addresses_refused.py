"""A pool of many free addresses, most of which EC2 refuses to associate for their own sake (UnauthorizedOperation,
a denial by a condition on their tags; AuthFailure, "an Elastic IP address that is not yours"), and one it associates. A look tries REFUSED_PER_LOOK refused addresses
before it waits: a launch whose good address comes after 8 refused ones (in its instance's order) used up its
REFUSED_ATTEMPTS looks on them and met its failure policy with that address free. A look that was refused only
addresses never tried before, others still untried, is progress: the next look skips those refused (remembered for
the lifecycle, a bounded number) and goes on; the policy decides once nothing untried is left, with a reason that
says so."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from nodecycle.domain.eip.assign import MAX_REFUSED_KEPT, REFUSED_ATTEMPTS, _draw
from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import LifecycleRecord
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.addresses import AddressRefused
from tests.support.fakes import FakeMetrics
from tests.unit.eip.fakes import T0, FakeAddresses, Wiring, launch_record, refusing
from tests.unit.eip.test_assign_address import POOL, step

INSTANCE = "i-0fedcba9876543210"


def run(ec2: FakeAddresses, record: LifecycleRecord, looks: int) -> tuple[Outcome, timedelta]:
    """The launch's step as often as it asks to run again, up to ``looks``; its last outcome and the time it took."""
    assign = step(
        ec2, FakeMetrics(), Wiring(), eip_mode="pool", eip_pool_name=POOL, eip_failure_policy="abandon"
    )
    now = T0
    for _ in range(looks):
        outcome = assign(record, now)
        if not outcome.again:
            break
        record = record.model_copy(update={**outcome.changes, "seq": record.seq + 1})
        now += timedelta(seconds=outcome.delay or 0)
    return outcome, now - T0


@pytest.mark.parametrize("code", ["AuthFailure", "UnauthorizedOperation"])
def test_a_launch_reaches_the_good_address_past_many_refused_ones(code: str) -> None:
    # Given a pool of 12 free addresses, the one EC2 associates coming last in the instance's order
    ec2 = FakeAddresses()
    ec2.launch(INSTANCE)
    pool = [ec2.add(pool=POOL, allocated_at=None) for _ in range(12)]
    *bad, good = sorted(pool, key=lambda allocation_id: _draw(INSTANCE, allocation_id))
    tried = refusing(ec2, set(bad), code)

    outcome, took = run(ec2, launch_record(INSTANCE), 30)

    # Then the launch takes it, each refused address tried once, within a few minutes
    assert outcome.changes.get("result") is not ActionResult.ABANDON, outcome.changes.get("outcome")
    assert outcome.changes.get("allocation_id") == good
    assert ec2.eips[good].instance_id == INSTANCE
    assert sorted(tried) == sorted(pool)
    assert took <= timedelta(minutes=3)


def test_a_pool_of_none_but_refused_addresses_meets_the_policy_saying_why() -> None:
    # Given a pool of 12 free addresses, every one refused for its own sake
    ec2 = FakeAddresses()
    ec2.launch(INSTANCE)
    pool = [ec2.add(pool=POOL, allocated_at=None) for _ in range(12)]
    tried = refusing(ec2, set(pool), "AuthFailure")

    outcome, took = run(ec2, launch_record(INSTANCE), 30)

    # Then its policy decides once each was tried, promptly, the reason naming the refusal and how many
    assert outcome.changes.get("result") is ActionResult.ABANDON
    assert sorted(tried) == sorted(pool)
    reason = str(outcome.changes.get("outcome"))
    assert "AuthFailure" in reason
    assert f"12 address(es) of pool {POOL!r}" in reason
    assert took <= timedelta(minutes=3)


def test_the_refused_addresses_a_launch_remembers_are_bounded() -> None:
    # Given a pool far larger than the launch remembers refusals of, every address refused
    ec2 = FakeAddresses(quota=MAX_REFUSED_KEPT * 3)
    ec2.launch(INSTANCE)
    for _ in range(MAX_REFUSED_KEPT * 2):
        ec2.add(pool=POOL, allocated_at=None)
    tried = refusing(ec2, {"*"}, "UnauthorizedOperation")

    outcome, _ = run(ec2, launch_record(INSTANCE), MAX_REFUSED_KEPT * 2)

    # Then its policy decides having asked about as many as it remembers, not the whole pool
    assert outcome.changes.get("result") is ActionResult.ABANDON
    assert len(tried) <= MAX_REFUSED_KEPT + 2


def test_a_launch_past_many_refused_addresses_still_has_its_tries_for_another_refusal() -> None:
    # Given a pool of 12 free addresses, the one EC2 associates last in the instance's order, and the first read of
    # its association refused (a denial, IAM still propagating)
    ec2 = FakeAddresses()
    ec2.launch(INSTANCE)
    pool = [ec2.add(pool=POOL, allocated_at=None) for _ in range(12)]
    *bad, good = sorted(pool, key=lambda allocation_id: _draw(INSTANCE, allocation_id))
    refusing(ec2, set(bad), "AuthFailure")
    associate = ec2.associate

    def then_refuse_its_read(allocation_id: str, instance_id: str) -> str:
        association = associate(allocation_id, instance_id)
        ec2.faults["describe"].append(AddressRefused("UnauthorizedOperation: DescribeAddresses"))
        return association

    ec2.associate = then_refuse_its_read  # type: ignore[method-assign]

    outcome, _ = run(ec2, launch_record(INSTANCE), 30)

    # Then the refusal is asked again, as for any launch, not taken for its last try
    assert outcome.changes.get("result") is not ActionResult.ABANDON, outcome.changes.get("outcome")
    assert outcome.changes.get("allocation_id") == good


def test_a_pool_that_grows_grows_past_many_refused_addresses() -> None:
    # Given a pool that grows when empty, of 10 free addresses every one of which EC2 refuses for its own sake
    ec2 = FakeAddresses(quota=20)
    ec2.launch(INSTANCE)
    pool = {ec2.add(pool=POOL, allocated_at=None) for _ in range(10)}
    tried = refusing(ec2, set(pool), "AuthFailure")
    assign = step(
        ec2,
        FakeMetrics(),
        Wiring(),
        eip_mode="pool",
        eip_pool_name=POOL,
        eip_failure_policy="abandon",
        eip_pool_allocate_when_empty=True,
    )
    record, now = launch_record(INSTANCE), T0
    for _ in range(30):
        outcome = assign(record, now)
        if not outcome.again:
            break
        record = record.model_copy(update={**outcome.changes, "seq": record.seq + 1})
        now += timedelta(seconds=outcome.delay or 0)

    # Then, each tried once, it grows the pool by one address and takes it, as with a pool of a few
    assert outcome.changes.get("result") is not ActionResult.ABANDON, outcome.changes.get("outcome")
    (grown,) = set(ec2.eips) - pool
    assert outcome.changes.get("allocation_id") == grown
    assert sorted(tried) == sorted([*pool, grown])


def test_the_looks_that_go_on_past_refused_addresses_are_not_told_as_tries_beyond_the_last(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a pool of 20 free addresses, every one refused
    ec2 = FakeAddresses()
    ec2.launch(INSTANCE)
    for _ in range(20):
        ec2.add(pool=POOL, allocated_at=None)
    refusing(ec2, {"*"}, "UnauthorizedOperation")

    # When the launch goes on past them till its policy decides
    with caplog.at_level(logging.WARNING, logger="nodecycle.domain.eip.assign"):
        outcome, _ = run(ec2, launch_record(INSTANCE), 30)

    # Then no look is told as a try beyond the last one ("EC2 refused (9 of 4)")
    assert outcome.changes.get("result") is ActionResult.ABANDON
    messages = [r.getMessage() for r in caplog.records]
    tries = [m for m in messages if m.startswith("EC2 refused (")]
    assert all(int(m.split("(")[1].split(" of ")[0]) <= REFUSED_ATTEMPTS for m in tries), tries
    assert (
        sum("goes on past them" in m for m in messages) == 9
    )  # (20 addresses, two a look, the tenth decides)
