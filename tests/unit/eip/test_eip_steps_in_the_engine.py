"""The EIP steps run by the step engine: waits become delayed messages on the EIP queue, the step's scratch
survives the commit, and a finished assignment hands over to the drain worker."""

from __future__ import annotations

import random
from datetime import timedelta

from nodecycle.domain.eip.assign import VERIFY_DELAY, AssignAddress
from nodecycle.domain.engine import EngineTiming, Handled, StepEngine
from nodecycle.domain.flow import Worker
from nodecycle.domain.model import Step
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.lifecycle import WorkMessage
from nodecycle.settings import EipSettings
from nodecycle.wiring.common import eip_policy
from tests.support.fakes import FakeAutoscaling, FakeClock, FakeMetrics, InMemoryRecords, RecordingQueues
from tests.unit.eip.fakes import GROUP, OWNER, T0, FakeAddresses, launch_record

INSTANCE = "i-0fedcba9876543210"


def test_an_association_that_does_not_show_yet_comes_back_on_the_eip_queue_and_then_hands_over() -> None:
    # Given the engine of the eip function, and EC2 that shows a new association only on the second read
    ec2, records, queues, clock = FakeAddresses(lag=1), InMemoryRecords(), RecordingQueues(), FakeClock(T0)
    ec2.launch(INSTANCE)
    settings = EipSettings.model_validate(
        {
            "owner_id": OWNER,
            "record_table": "records",
            "drain_queue_url": "https://sqs.example/drain",
            "eip_queue_url": "https://sqs.example/eip",
            "managed_groups": GROUP,
            "eip_mode": "allocate",
        }
    )
    engine = StepEngine(
        worker=Worker.EIP,
        steps={
            Step.ASSIGN_EIP: AssignAddress(
                owner=OWNER,
                policy=eip_policy(settings),
                addresses=ec2,
                metrics=FakeMetrics(),
                rng=random.Random(1),
            )
        },
        records=records,
        queues=queues,
        autoscaling=FakeAutoscaling(),
        clock=clock,
        metrics=FakeMetrics(),
        timing=EngineTiming(
            resume_grace=timedelta(minutes=3),
            heartbeat_margin=timedelta(seconds=60),
            redelivery=timedelta(0),
            settle_before=timedelta(seconds=60),
        ),
        failure_result=lambda record: ActionResult.ABANDON,
    )
    record = launch_record(INSTANCE)
    records.create(record)

    # When the launch's work message is handled
    assert engine.handle(WorkMessage(record_id=record.id, seq=0, step=Step.ASSIGN_EIP)) is Handled.RAN

    # Then the same step comes back on the EIP queue a moment later, with what it must verify committed
    (again,) = queues.take()
    assert (again.worker, again.message.step, again.message.seq, again.delay) == (
        Worker.EIP,
        Step.ASSIGN_EIP,
        1,
        VERIFY_DELAY,
    )
    waiting = records.get(record.id)
    assert waiting is not None
    assert waiting.extra["eip"]["verify"]["allocation_id"] == ec2.on(INSTANCE)[0].allocation_id

    # And when that message comes, the association shows and the readiness gate's message goes to drain
    clock.advance(VERIFY_DELAY)
    assert engine.handle(again.message) is Handled.RAN
    (handover,) = queues.take()
    assert (handover.worker, handover.message.step) == (Worker.DRAIN, Step.READY_GATE)
    done = records.get(record.id)
    assert done is not None
    assert done.allocation_id == ec2.on(INSTANCE)[0].allocation_id
    assert done.extra == {}
