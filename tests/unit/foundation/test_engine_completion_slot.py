"""A completion retried through a long throttling storm, on an action that did expire meanwhile, does not hold
its drain's budget slot until Auto Scaling answers: no step after the drain renews the slot, so it lapses a
holder TTL after the drain's last renewal and a waiter takes it (invariant 10), while the completion still
waits for an answer. (Harmless, shown here: the slot is released at the cleanup, after the completion.)"""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.budget import BudgetLimits, DisruptionBudget, SlotRequest
from nodecycle.domain.completion import CompleteAction
from nodecycle.domain.engine import Outcome
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import ActionRef, Step
from nodecycle.domain.policy import ActionResult, Quantity
from tests.support.fakes import FakeAutoscaling
from tests.unit.budget.fakes import FakeInventory, MemoryBudgetStore, RecordingMetrics
from tests.unit.foundation.test_engine import ONE_FAULT, PLAN, World, make_record

TTL = timedelta(seconds=600)  # the template's BudgetHolderTtlSeconds


class ThrottledCompletions(FakeAutoscaling):
    """Every CompleteLifecycleAction is throttled (botocore's retries spent); the action itself timed out."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0
        self.active = False

    def complete(self, action: ActionRef, result: ActionResult) -> bool:
        self.asked += 1
        raise TransientError("completing a lifecycle action: Throttling: Rate exceeded")


def test_a_completion_throttled_past_the_holder_ttl_leaves_its_slot_to_a_waiter() -> None:
    # Given a budget of one slot, held by a drain that ended (its last renewal now), whose lifecycle is at its
    # completion; its action has expired, and Auto Scaling throttles every completion
    world = World(redelivery=ONE_FAULT)
    world.autoscaling = ThrottledCompletions()
    budget = DisruptionBudget(
        store=MemoryBudgetStore(),
        nodes=FakeInventory(),
        clock=world.clock,
        metrics=RecordingMetrics(),
        limits=BudgetLimits(Quantity.parse("1")),
        holder_ttl=TTL,
        count_unavailable=False,
        owner="stack-a",
    )
    record = make_record(PLAN, Step.COMPLETE, node="n1", heartbeat_timeout=3600)
    held = SlotRequest(
        node="n1", instance_id=record.instance_id, zone="a", owner="stack-a", record_id=record.id
    )
    assert budget.acquire(held).granted
    world.records.create(record)
    engine = world.engine(
        {
            Step.COMPLETE: CompleteAction(world.autoscaling, world.metrics),
            Step.CLEANUP: lambda record, now: Outcome.next(),
        }
    )
    waiter = SlotRequest(node="n2", instance_id="i-0waiting", zone="a", owner="stack-a", record_id="w")
    assert not budget.acquire(waiter).granted

    # When the completion is retried at its backoff until a holder TTL has passed
    while world.clock.now() < record.updated_at + TTL:
        engine.handle(world.message())
        (sent,) = world.queues.take()
        world.clock.advance(max(sent.delay, 1))

    # Then it is still waiting for Auto Scaling's answer, at its completion, and the waiter's next ask takes
    # the slot: the completion's retries never renewed it
    assert world.autoscaling.asked >= 5
    assert world.record().step is Step.COMPLETE
    assert budget.acquire(waiter).granted
