"""A launch EC2 refuses every association to (a denial on the instance's side) whose pool has fewer free addresses
than its looks would try (REFUSED_PER_LOOK at each of REFUSED_ATTEMPTS looks). The addresses refused at earlier
looks are skipped; once they are all the pool has free, a look found "nothing free": the launch waited in line for
EipWaitSeconds instead of meeting its failure policy after REFUSED_ATTEMPTS looks, kept the launches after it from
the free address it would never take, and, where the pool grows when empty, allocated an address into the pool at
each look (never released: nodecycle:allocated-into). A pool that grows still grows past addresses refused for
their own sake (a policy on their tags), once: an address it grew by refused too (or the quota reached), the
refusal is the instance's."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from nodecycle.domain.eip.assign import REFUSED_ATTEMPTS, REFUSED_PER_LOOK
from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import LifecycleRecord
from nodecycle.domain.policy import ActionResult
from tests.support.fakes import FakeMetrics
from tests.unit.eip.fakes import T0, FakeAddresses, Wiring, launch_record, refusing
from tests.unit.eip.test_assign_address import POOL, step

INSTANCE = "i-0fedcba9876543210"
LATER = "i-0aaaaaaaaaaaaaaaa"


def looks(
    ec2: FakeAddresses,
    record: LifecycleRecord,
    grow: bool,
    count: int,
    wiring: Wiring | None = None,
    start: datetime = T0,
) -> tuple[Outcome, int]:
    """The launch's step run ``count`` times as the engine runs it (its delays not waited), wired to ``wiring``'s
    records and lines: the last outcome and the number of looks it took to leave."""
    assign = step(
        ec2,
        FakeMetrics(),
        wiring or Wiring(),
        eip_mode="pool",
        eip_pool_name=POOL,
        eip_failure_policy="abandon",
        eip_pool_allocate_when_empty=grow,
    )
    now = start
    for done in range(1, count + 1):
        outcome = assign(record, now)
        if not outcome.again:
            return outcome, done
        record = record.model_copy(update={**outcome.changes, "seq": record.seq + 1})
        now += timedelta(seconds=outcome.delay or 0)
    return outcome, count


@pytest.mark.parametrize("free", range(1, REFUSED_PER_LOOK * (REFUSED_ATTEMPTS - 1) + 1))
@pytest.mark.parametrize("grow", [False, True], ids=["fixed-pool", "growing-pool"])
def test_a_launch_refused_every_address_meets_its_policy_whatever_its_pool_holds(
    free: int, grow: bool
) -> None:
    # Given a pool of a few free addresses and an instance EC2 refuses every association to
    ec2 = FakeAddresses()
    ec2.launch(INSTANCE)
    pool = {ec2.add(pool=POOL, allocated_at=None) for _ in range(free)}
    tried = refusing(ec2, {"*"}, "UnauthorizedOperation", to=INSTANCE)

    outcome, taken = looks(ec2, launch_record(INSTANCE), grow, REFUSED_ATTEMPTS + 2)

    # Then its failure policy decides at its REFUSED_ATTEMPTS-th look, as with a larger pool
    assert outcome.changes.get("result") is ActionResult.ABANDON
    assert taken == REFUSED_ATTEMPTS
    # having asked EC2 a few times, and grown the pool (an address allocated into it is never released) by one
    # address at most: the one whose refusal too says the instance is refused, not its pool's addresses
    assert 0 < len(tried) <= REFUSED_ATTEMPTS * REFUSED_PER_LOOK
    assert pool <= set(ec2.eips)
    assert len(set(ec2.eips) - pool) <= (1 if grow else 0)  # (none past the quota)


def test_a_launch_refused_the_only_free_address_of_a_pool_that_grows_takes_a_new_one() -> None:
    # Given a pool that grows when empty, whose only free address EC2 refuses (a policy on its tags: the
    # address's refusal, not the instance's)
    ec2 = FakeAddresses()
    ec2.launch(INSTANCE)
    refused = ec2.add(pool=POOL, allocated_at=None)
    refusing(ec2, {refused}, "UnauthorizedOperation")

    outcome, _ = looks(ec2, launch_record(INSTANCE), True, REFUSED_ATTEMPTS + 2)

    # Then the launch grows the pool by an address it takes, not asking for the refused one till its policy
    assert outcome.changes.get("result") is not ActionResult.ABANDON
    (grown,) = set(ec2.eips) - {refused}
    assert outcome.changes.get("allocation_id") == grown
    assert ec2.eips[grown].instance_id == INSTANCE


def test_a_launch_refused_the_only_free_address_does_not_keep_it_from_the_next_launch() -> None:
    # Given a pool of one free address, which EC2 refuses to one instance (its side) and not to the next
    ec2 = FakeAddresses()
    ec2.launch(INSTANCE)
    ec2.launch(LATER)
    (address,) = {ec2.add(pool=POOL, allocated_at=None)}
    refusing(ec2, {"*"}, "UnauthorizedOperation", to=INSTANCE)
    wiring = Wiring()
    first, _ = looks(
        ec2, launch_record(INSTANCE), False, 2, wiring
    )  # (its second look, after the first refusal)
    assert first.again

    # When the next instance launches
    outcome, _ = looks(ec2, launch_record(LATER), False, 1, wiring, T0 + timedelta(minutes=1))

    # Then it takes the address the refused launch would never take (not waiting behind it in the pool's line)
    assert outcome.changes.get("allocation_id") == address
    assert ec2.eips[address].instance_id == LATER
