"""Each pool address RELEASE_EIP gives back is offered to the launch woken for it (nodecycle.domain.eip.wake), the
one an instance going into its warm pool returns from its launch's claim (AddressLines.held, no listing showing it)
too: the woken look's listing, behind, may still show the claim, and without the offer it waited the first in line's
15 s, the address idle meanwhile."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from nodecycle.domain.eip.release import ReleaseAddresses
from nodecycle.domain.eip.wake import LineWaker, Offer
from nodecycle.domain.model import WARM_POOL
from tests.support.fakes import FakeMetrics
from tests.unit.eip.fakes import OWNER, T0, terminate_record
from tests.unit.eip.test_release_of_the_held_pool_address import (
    INSTANCE,
    POOL,
    given_a_claim_no_listing_shows,
    hiding_listings,
)


class RecordingWaker(LineWaker):
    """What the release gives the waker: the addresses freed by pool, and those offered."""

    def __init__(self) -> None:  # (nothing of a real waker's: it wakes no one)
        self.given: list[tuple[dict[str | None, int], list[Offer]]] = []

    def given_back(
        self,
        freed: Mapping[str | None, int],
        now: datetime,
        *,
        passing_over: str | None = None,
        offered: Sequence[Offer] = (),
    ) -> None:
        self.given.append((dict(freed), list(offered)))


def test_the_claim_a_warm_pool_release_returns_unlisted_is_offered_to_the_waiter_woken_for_it() -> None:
    ec2, lines, address = given_a_claim_no_listing_shows()
    hiding_listings(ec2)
    association = ec2.eips[address].association_id
    waker = RecordingWaker()
    release = ReleaseAddresses(owner=OWNER, addresses=ec2, metrics=FakeMetrics(), lines=lines, waker=waker)

    outcome = release(terminate_record(INSTANCE, destination=WARM_POOL), T0)

    assert not outcome.again
    assert ec2.eips[address].instance_id is None
    offer = Offer(POOL, address, ec2.eips[address].public_ip, str(association), T0)
    assert waker.given == [({POOL: 1}, [offer])]
