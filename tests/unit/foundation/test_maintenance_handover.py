"""The next maintenance of an instance, told while the lifecycle of the one before it has drained the node and its
cleanup waits for that maintenance's window (one record per instance and cause): the record is handed over to the
next one's lifecycle at once, not when the window opens, however late intake took its event."""

from __future__ import annotations

from collections.abc import Collection
from datetime import timedelta

from nodecycle.domain.model import DisruptionEvent, Step, Transition
from nodecycle.domain.ports.instances import InstanceFacts, ScheduledEvent
from tests.support.fakes import T0, FakeAutoscaling
from tests.unit.drain.test_drain_steps import (
    INSTANCE,
    NODE,
    Ec2Maintenance,
    FakeSlots,
    cleanup,
    cordoned_for_maintenance,
    drained_for,
)
from tests.unit.foundation.test_engine import World
from tests.unit.foundation.test_intake import GROUP, intake

REBOOT_AT = T0 + timedelta(seconds=62)  # the reboot's window opens (as the integration test schedules it)
RETIREMENT_AT = T0 + timedelta(days=10)


class BothListed:
    """EC2 as intake asks it: the instance runs in the managed group, and EC2 lists the reboot and the retirement
    as pending."""

    events = (
        ScheduledEvent(code="system-reboot", not_before=REBOOT_AT, not_after=REBOOT_AT + timedelta(hours=2)),
        ScheduledEvent(code="instance-retirement", not_before=RETIREMENT_AT),
    )

    def facts(self, instance_id: str) -> InstanceFacts | None:
        return InstanceFacts(instance_id, "running", GROUP, {}, spot_request=None)

    def facts_of(self, instance_ids: Collection[str]) -> dict[str, InstanceFacts]:
        return {i: facts for i in instance_ids if (facts := self.facts(i)) is not None}

    def scheduled_events(self, instance_id: str) -> list[ScheduledEvent]:
        return list(self.events)

    def spot_interruption_noticed(self, spot_request: str) -> bool:
        return False


def test_the_next_maintenance_told_while_the_drained_ones_cleanup_waits_for_its_window_takes_over_at_once() -> (
    None
):
    # Given a reboot's lifecycle whose drain is over, its cleanup asleep until the reboot's window opens (62 s on):
    # it keeps the cordon until the reboot is over, and nothing else wakes it
    world = World()
    world.records.create(drained_for(REBOOT_AT).model_copy(update={"due_at": T0}))
    ec2 = Ec2Maintenance(known={INSTANCE: "running"}, events=list(BothListed.events[:1]))
    autoscaling = FakeAutoscaling(states={INSTANCE: "InService"})
    engine = world.engine(
        {Step.CLEANUP: cleanup(cordoned_for_maintenance(), FakeSlots(holders={NODE}), autoscaling, ec2=ec2)}
    )
    engine.handle(world.message(f"{INSTANCE}/scheduled-change"))
    asleep = world.record()
    assert (asleep.step, asleep.due_at) == (Step.CLEANUP, REBOOT_AT)
    world.queues.take()

    # When intake takes the retirement's Health event only now, 5 s on (a slow invocation on a loaded machine),
    # EC2 listing both maintenances
    world.clock.current = T0 + timedelta(seconds=5)
    retirement = DisruptionEvent(
        instance_id=INSTANCE,
        cause=Transition.SCHEDULED_CHANGE,
        event_id="5d3c2b1a-0f9e-4d8c-9b7a-6f5e4d3c2b1a",
        happened_at=T0,
        strikes_at=RETIREMENT_AT,
        delivery="eventbridge",
    )
    taking = intake(FakeAutoscaling(), world.records, world.clock, world.queues, BothListed())
    taking.accept_disruption(retirement)

    # and the lifecycle's messages are handled, each when it is due, until the record is the retirement's (or the
    # reboot's window has opened)
    pending = [(world.clock.current + timedelta(seconds=s.delay), s.message) for s in world.queues.take()]
    while pending and world.record().token != retirement.event_id:
        pending.sort(key=lambda due: due[0])
        at, message = pending.pop(0)
        world.clock.current = max(world.clock.current, at)
        engine.handle(message)
        pending += [
            (world.clock.current + timedelta(seconds=s.delay), s.message) for s in world.queues.take()
        ]

    # Then the reboot's lifecycle ended and the retirement's started on the record at once, waiting for its own lead
    # time with the node still cordoned: not 57 s later, when the reboot's window opens
    record = world.record()
    assert (record.token, record.step, record.global_deadline) == (
        retirement.event_id,
        Step.ACQUIRE_SLOT,
        RETIREMENT_AT,
    )
    assert world.clock.current == T0 + timedelta(seconds=5)
