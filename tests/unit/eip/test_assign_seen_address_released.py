"""ASSIGN_EIP's own new address once EC2 has shown it (listed it), then released behind the launch's back: EC2
answering that it does not exist is then its release, not EC2 not knowing it yet. Tried for a minute, the launch
counts a failure and takes another address, where one EC2 never showed is waited for to EipWaitSeconds."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.engine import Outcome
from nodecycle.domain.ports.addresses import AddressNotFound
from nodecycle.wiring.common import eip_policy
from tests.support.fakes import FakeMetrics
from tests.unit.eip.fakes import FakeAddresses, Wiring, launch_record
from tests.unit.eip.test_assign_take_throttled import INSTANCE, T0, settings, went_on


def test_an_address_ec2_listed_then_released_behind_our_back_is_replaced_within_a_minute() -> None:
    # Given a launch whose new address EC2 did not know at its first association, and listed at the next run,
    # released by someone else right then (before that run's association)
    ec2, metrics, wiring = FakeAddresses(), FakeMetrics(), Wiring()
    ec2.launch(INSTANCE)
    ec2.faults["associate"].append(AddressNotFound("InvalidAllocationID.NotFound"))
    settings_ = settings().model_copy(update={"eip_wait_seconds": 600})
    assign = wiring.assign(ec2, metrics, eip_policy(settings_))
    record, now = launch_record(INSTANCE), T0
    outcomes: list[Outcome] = [assign(record, now)]
    (first,) = ec2.eips
    ec2.before["associate"] = lambda allocation_id, instance_id: ec2.eips.pop(allocation_id)

    # When the step runs, each run when the last one's wait is over, until it goes on
    while not went_on(outcomes[-1]) and outcomes[-1].then is None and len(outcomes) < 40:
        record = record.model_copy(update={**outcomes[-1].changes, "seq": record.seq + 1})
        now += timedelta(seconds=outcomes[-1].delay)
        outcomes.append(assign(record, now))

    # Then, EC2 having shown it, its answer that the address does not exist was taken for its release within a
    # minute or so of tries: one failure counted, another address taken, the launch gone on with it
    assert went_on(outcomes[-1])
    assert outcomes[-1].changes["allocation_id"] != first
    assert [eip.allocation_id for eip in ec2.on(INSTANCE)] == [outcomes[-1].changes["allocation_id"]]
    assert sum(outcome.delay for outcome in outcomes[:-1]) < 120
    assert metrics.counts["EipFailures"] == 1
