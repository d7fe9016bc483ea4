"""A pool of several free addresses, one of which EC2 will not associate (AuthFailure or UnauthorizedOperation for
that address alone: a service control policy or a permissions boundary on one address's tags, an address of a
BYOIP range the role may not use). The refusal is that address's, not the launch's: the launch takes another free
address of its pool. A launch refused REFUSED_PER_LOOK addresses at a look (the refusal as likely the instance's) asks
again later, not those addresses, and meets its failure policy after REFUSED_ATTEMPTS looks at least (a denial may
be IAM still propagating), once none is left untried: each address once, not one per pool address at every look."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.domain.eip.assign import REFUSED_ATTEMPTS
from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import LifecycleRecord
from nodecycle.domain.policy import ActionResult
from tests.support.fakes import FakeMetrics
from tests.unit.eip.fakes import T0, FakeAddresses, Wiring, launch_record, refusing
from tests.unit.eip.test_assign_address import POOL, step

INSTANCE = "i-0fedcba9876543210"


def run(ec2: FakeAddresses, metrics: FakeMetrics, record: LifecycleRecord) -> Outcome:
    """The launch's step, as often as it asks to run again (its delays not waited)."""
    assign = step(ec2, metrics, Wiring(), eip_mode="pool", eip_pool_name=POOL, eip_failure_policy="abandon")
    now = T0
    for _ in range(REFUSED_ATTEMPTS + 2):
        outcome = assign(record, now)
        if not outcome.again:
            return outcome
        record = record.model_copy(update={**outcome.changes, "seq": record.seq + 1})
        now += timedelta(seconds=outcome.delay or 0)
    return outcome


@pytest.mark.parametrize("code", ["AuthFailure", "UnauthorizedOperation"])
def test_a_launch_takes_another_free_address_of_its_pool_than_the_one_ec2_refuses(code: str) -> None:
    ec2 = FakeAddresses()
    ec2.launch(INSTANCE)
    pool = {ec2.add(pool=POOL, allocated_at=None) for _ in range(3)}
    metrics = FakeMetrics()
    first = refusing(ec2, set(), code)
    run(ec2, FakeMetrics(), launch_record(INSTANCE))  # (the address the launch tries first, on a copy of it)
    refused = first[0]
    for allocation_id in pool:
        ec2.eips[allocation_id].instance_id = ec2.eips[allocation_id].association_id = None
    tried = refusing(ec2, {refused}, code)

    outcome = run(ec2, metrics, launch_record(INSTANCE))

    assert outcome.changes.get("result") is not ActionResult.ABANDON
    assert outcome.changes["allocation_id"] in pool - {refused}
    assert ec2.eips[outcome.changes["allocation_id"]].instance_id == INSTANCE
    assert ec2.eips[refused].instance_id is None
    assert tried[0] == refused
    assert metrics.counts["EipFailures"] >= 1  # (told: an operator fixes what refuses that address)


def test_a_launch_every_address_of_whose_pool_is_refused_meets_its_failure_policy_in_a_few_calls() -> None:
    # Given a pool of many free addresses, every association of which EC2 refuses to the instance (a policy on the
    # instance's side: the refusal is the launch's)
    ec2 = FakeAddresses()
    ec2.launch(INSTANCE)
    for _ in range(12):
        ec2.add(pool=POOL, allocated_at=None)
    tried = refusing(ec2, {"*"}, "UnauthorizedOperation")

    outcome = run(ec2, FakeMetrics(), launch_record(INSTANCE))

    # Then its policy decides after REFUSED_ATTEMPTS looks at least, each trying a few addresses, never one twice (not
    # every address of the pool at every look). Each is tried once: refused all but one, a launch takes that one
    # (test_assign_many_addresses_refused), and the two cannot be told apart before it is asked for
    assert outcome.changes.get("result") is ActionResult.ABANDON
    assert len(tried) <= 12
    assert len(set(tried)) == len(tried)
