"""A terminate lifecycle that completes its action frees everything its instance held itself (its addresses
before the completion, its slot and annotations in its cleanup): EC2's state changes of that termination,
which follow every termination, find the instance's state-change lifecycle written over already and start
nothing (no second lifecycle of a dozen calls per terminated instance)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.domain.budget import BudgetLimits, DisruptionBudget, SlotRequest
from nodecycle.domain.completion import CompleteAction
from nodecycle.domain.dispatch import Dispatcher
from nodecycle.domain.drain.cleanup import Cleanup
from nodecycle.domain.eip import SCRATCH
from nodecycle.domain.eip.release import RELEASE_ATTEMPTS, ReleaseAddresses
from nodecycle.domain.engine import Outcome, advance
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import (
    ENDED_BY,
    ENDS_ITS_INSTANCE,
    INSTANCE_STATE,
    WARM_POOL,
    ActionRef,
    LifecycleRecord,
    Step,
    Transition,
    record_id,
)
from nodecycle.domain.policy import ActionResult, Quantity
from nodecycle.domain.ports.addresses import AddressInUse
from tests.support.fakes import (
    T0,
    FakeAutoscaling,
    FakeClock,
    FakeMetrics,
    InMemoryRecords,
    RecordingQueues,
)
from tests.unit.budget.fakes import FakeInventory, MemoryBudgetStore, RecordingMetrics
from tests.unit.drain.test_drain_steps import (
    INSTANCE,
    NODE,
    Ec2Maintenance,
    FakeCluster,
    FakeEvents,
    maintenance,
    node,
    terminating,
)
from tests.unit.eip.fakes import OWNER, FakeAddresses, state_change_record, terminate_record
from tests.unit.foundation.test_engine import MARGIN, PLAN, Script, World, make_record

STATE_CHANGE = record_id(INSTANCE, Transition.STATE_CHANGE, "")


def completed(
    record: LifecycleRecord, records: InMemoryRecords, autoscaling: FakeAutoscaling
) -> LifecycleRecord:
    """``record`` after its COMPLETE step ran."""
    outcome = CompleteAction(autoscaling, FakeMetrics(), records)(record, T0)
    return record.model_copy(update=outcome.changes)


def test_the_completion_of_a_termination_writes_its_instances_state_change_lifecycle_over_before_completing() -> (
    None
):
    # Given a terminate lifecycle that drained its node and is to complete its action
    records, autoscaling = InMemoryRecords(), FakeAutoscaling()
    record = terminating(Step.COMPLETE, node=NODE, zone="eu-west-1a", drain_started_at=T0)

    # When its COMPLETE step runs
    after = completed(record, records, autoscaling)

    # Then the action is completed, and the instance's state-change lifecycle is on the record as over, ended
    # by this lifecycle (whose cleanup is told to free what that one would)
    assert [result for _, result in autoscaling.completed] == ["CONTINUE"]
    ended = records.get(STATE_CHANGE)
    assert ended is not None
    assert (ended.finished, ended.extra.get(ENDED_BY), ended.owner) == (True, record.id, record.owner)
    assert after.extra.get(ENDS_ITS_INSTANCE) is True
    # and a redelivery of the step (a crash before its commit) finds that record its own
    again = completed(record, records, autoscaling)
    assert again.extra.get(ENDS_ITS_INSTANCE) is True


@pytest.mark.parametrize(
    ("why", "changes"),
    [
        ("into its warm pool: the instance is stopped, and comes back", {"destination": WARM_POOL}),
        ("from its warm pool: no drain, no cleanup of a node", {"origin": WARM_POOL}),
        ("never confirmed with Auto Scaling: perhaps no termination at all", {"verified_at": None}),
        ("its node never found: a cleanup with nothing to free", {"node": None}),
    ],
)
def test_a_termination_whose_own_steps_do_not_free_all_its_instance_held_leaves_the_state_change_its_lifecycle(
    why: str, changes: dict[str, object]
) -> None:
    records, autoscaling = InMemoryRecords(), FakeAutoscaling()
    record = terminating(Step.COMPLETE, node=NODE, zone="eu-west-1a", drain_started_at=T0).model_copy(
        update=changes
    )

    after = completed(record, records, autoscaling)

    assert records.get(STATE_CHANGE) is None, why
    assert ENDS_ITS_INSTANCE not in after.extra, why


def test_the_state_change_lifecycle_a_redelivery_finds_written_by_ec2s_event_is_not_taken_for_its_own() -> (
    None
):
    # Given the instance's state-change lifecycle started by EC2's event before this completion ran again
    records, autoscaling = InMemoryRecords(), FakeAutoscaling()
    record = terminating(Step.COMPLETE, node=NODE, zone="eu-west-1a", drain_started_at=T0)
    told = maintenance(Step.DONE, T0).model_copy(
        update={
            "id": STATE_CHANGE,
            "transition": Transition.STATE_CHANGE,
            "token": "event-1",
            "extra": {INSTANCE_STATE: "shutting-down"},
        }
    )
    records.create(told)

    after = completed(record, records, autoscaling)

    # Then that lifecycle frees what it frees, and this cleanup does only its own
    assert ENDS_ITS_INSTANCE not in after.extra
    assert records.get(STATE_CHANGE) == told


@pytest.mark.parametrize("finished", [True, False])
def test_the_record_of_an_earlier_stop_is_written_over_once_that_stops_lifecycle_is_over(
    finished: bool,
) -> None:
    # Given an instance stopped once before (into its warm pool, say), whose state-change lifecycle of that stop
    # is over, or still going on
    records, autoscaling = InMemoryRecords(), FakeAutoscaling()
    record = terminating(Step.COMPLETE, node=NODE, zone="eu-west-1a", drain_started_at=T0)
    stopped = maintenance(Step.DONE if finished else Step.FORGET_NODE, T0).model_copy(
        update={
            "id": STATE_CHANGE,
            "transition": Transition.STATE_CHANGE,
            "token": "event-0",
            "seq": 3,
            "extra": {INSTANCE_STATE: "stopped"},
        }
    )
    records.create(stopped)

    # When its terminate lifecycle completes its action (and again, a redelivery)
    after = completed(record, records, autoscaling)
    again = completed(record, records, autoscaling)

    # Then an earlier stop's record over is written over, on the next seq, as a new record would be: EC2's state
    # changes of this termination start nothing. One still at work is left to finish its own.
    written = records.get(STATE_CHANGE)
    assert written is not None
    if finished:
        assert (written.extra.get(ENDED_BY), written.seq, written.finished) == (record.id, 4, True)
        assert after.extra.get(ENDS_ITS_INSTANCE) is again.extra.get(ENDS_ITS_INSTANCE) is True
    else:
        assert written == stopped
        assert ENDS_ITS_INSTANCE not in after.extra


def budget_of(clock: FakeClock) -> DisruptionBudget:
    return DisruptionBudget(
        store=MemoryBudgetStore(max_attempts=8),
        nodes=FakeInventory(),
        clock=clock,
        metrics=RecordingMetrics(),
        limits=BudgetLimits(Quantity.parse("2")),
        holder_ttl=timedelta(seconds=300),
        count_unavailable=False,
        owner="stack-a",
    )


@pytest.mark.parametrize("ends_its_instance", [True, False])
def test_the_cleanup_of_a_termination_that_ends_its_instance_frees_what_its_other_lifecycles_hold_in_the_budget(
    ends_its_instance: bool,
) -> None:
    # Given the terminate lifecycle holding its node's slot, and a maintenance lifecycle of the same instance
    # (days ahead) waiting for that slot
    clock = FakeClock(T0 + timedelta(seconds=5))
    budget = budget_of(clock)
    record = terminating(Step.CLEANUP, node=NODE, zone="eu-west-1a", drain_started_at=T0, completed_at=T0)
    if ends_its_instance:
        record = record.model_copy(update={"extra": {ENDS_ITS_INSTANCE: True}})
    later = maintenance(Step.ACQUIRE_SLOT, T0 + timedelta(days=3))
    for lifecycle in (record, later):
        request = SlotRequest(
            node=NODE,
            instance_id=INSTANCE,
            zone="eu-west-1a",
            owner="stack-a",
            record_id=lifecycle.id,
            token=lifecycle.token,
        )
        budget.acquire(request)
    assert [w.record_id for w in budget.snapshot().waiters] == [later.id]

    # When its cleanup runs
    records, queues = InMemoryRecords(), RecordingQueues()
    records.create(later)
    Cleanup(
        cluster=FakeCluster(nodes={NODE: node(owner="stack-a")}),
        slots=budget,
        dispatcher=Dispatcher(records=records, queues=queues, clock=clock, metrics=FakeMetrics()),
        autoscaling=FakeAutoscaling(),
        metrics=FakeMetrics(),
        events=FakeEvents(),
        instances=Ec2Maintenance(),
    )(record, clock.now())

    # Then, when the instance goes for good, nothing of it stays in the budget: the state change's lifecycle,
    # which would have forgotten it, does not run. (Otherwise the slot passes on to the lifecycle that waited.)
    view = budget.snapshot()
    held = [(h.node, h.record_id) for h in view.holders]
    if ends_its_instance:
        assert (held, view.waiters) == ([], [])
    else:
        assert held == [(NODE, later.id)]


def test_a_completion_throttled_after_it_ended_its_instance_still_tells_its_cleanup_so_when_the_action_is_found_gone() -> (
    None
):
    # Given a drain at its completion near its action's heartbeat deadline, whose call Auto Scaling throttles
    # (botocore's retries take a minute) after the completion wrote its instance's state-change lifecycle over;
    # the action times out meanwhile
    world = World()
    record = make_record(PLAN, Step.COMPLETE, node=NODE)
    world.records.create(record)
    world.clock.current = record.heartbeat_deadline - timedelta(seconds=MARGIN / 2)
    throttles = [TransientError("Rate exceeded")]
    complete = world.autoscaling.complete

    def throttled(action: ActionRef, result: ActionResult) -> bool:
        if throttles:
            world.clock.advance(MARGIN)
            raise throttles.pop()
        return complete(action, result)

    world.autoscaling.complete = throttled  # type: ignore[method-assign]
    engine = world.engine(
        {
            Step.COMPLETE: CompleteAction(world.autoscaling, world.metrics, world.records),
            Step.CLEANUP: Script([Outcome.wait(5)] * 2),
        }
    )

    # When its step runs, and what it sends next
    engine.handle(world.message())
    for sent in world.queues.take():
        world.clock.current = max(world.clock.now(), world.records.get(record.id).due_at)  # type: ignore[union-attr]
        engine.handle(sent.message)

    # Then the lifecycle reaches its cleanup told that it ends its instance, which frees what the state
    # change's lifecycle would have: nothing else will at once
    moved = world.records.get(record.id)
    assert moved is not None
    assert (moved.step, moved.extra.get(ENDS_ITS_INSTANCE)) == (Step.CLEANUP, True)


def test_a_termination_whose_release_left_an_address_to_the_sweeper_leaves_the_state_change_its_lifecycle() -> (
    None
):
    # Given a terminate lifecycle whose release gave up on the address allocated for its instance: EC2 still
    # showed it in use (its disassociation settling) at the step's last attempt, so it is left to the sweeper
    ec2 = FakeAddresses()
    ec2.launch(INSTANCE)
    address = ec2.add(allocated_for=INSTANCE, allocated_at=T0 - timedelta(hours=1))
    ec2.faults["release"].append(AddressInUse("InvalidIPAddress.InUse"))
    record = terminate_record(
        INSTANCE, node=NODE, extra={SCRATCH: {"release_attempts": RELEASE_ATTEMPTS - 1}}
    )
    released = advance(
        record, ReleaseAddresses(owner=OWNER, addresses=ec2, metrics=FakeMetrics())(record, T0), T0
    )
    assert (released.step, address in ec2.eips) == (Step.COMPLETE, True)

    # When its completion runs
    records = InMemoryRecords()
    completed(released, records, FakeAutoscaling())

    # Then the instance's state-change lifecycle is left to EC2's events of the termination: its release,
    # once the instance is gone, takes the address back at once, not the sweeper after its grace
    assert records.get(STATE_CHANGE) is None
    ec2.terminate(INSTANCE)
    taken_back = ReleaseAddresses(owner=OWNER, addresses=ec2, metrics=FakeMetrics())(
        state_change_record(INSTANCE), T0
    )
    assert (taken_back.again, address in ec2.eips) == (False, False)
