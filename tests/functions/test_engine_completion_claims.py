"""The claim the engine writes before its CompleteLifecycleAction (engine.claimed_for_completion) after a call
that certainly did not land: a completion refused to the role until its message fails leaves no claim that the
next completer would take for a completion of ours."""

from __future__ import annotations

import pytest

from nodecycle.domain.completion import SETTLED_ELSEWHERE, CompleteAction
from nodecycle.domain.engine import COMPLETION_CLAIM, Handled, Outcome
from nodecycle.domain.errors import AccessRefused, TransientError
from nodecycle.domain.model import ActionRef, LifecycleRecord, Step
from nodecycle.domain.policy import ActionResult
from tests.support.fakes import FakeAutoscaling
from tests.unit.foundation.test_engine import PLAN, Script, World, make_record
from tests.unit.foundation.test_engine_faults import refused_to_its_last_try

ONE_FAULT = 150


class RefusedThenSettledByHand(FakeAutoscaling):
    """CompleteLifecycleAction denied to the role until ``refusing`` is cleared (the policy fixed), by which time
    an operator has completed the action by hand."""

    refusing = True

    def complete(self, action: ActionRef, result: ActionResult) -> bool:
        if self.refusing:
            raise AccessRefused("completing a lifecycle action", "AccessDenied", "not authorized")
        return super().complete(action, result)


def test_a_completion_refused_until_its_message_fails_leaves_no_claim_taken_for_a_completion_of_ours() -> (
    None
):
    # Given a lifecycle at its completion, refused to the role at every try until its message fails
    world = World(redelivery=ONE_FAULT)
    world.autoscaling = autoscaling = RefusedThenSettledByHand()
    world.records.create(make_record(PLAN, Step.COMPLETE))
    engine = world.engine(
        {
            Step.COMPLETE: CompleteAction(world.autoscaling, world.metrics),
            Step.CLEANUP: Script([Outcome.wait(5)]),
        }
    )
    failing = refused_to_its_last_try(world, engine)
    assert COMPLETION_CLAIM not in world.record().extra  # (its call refused: nothing that may have landed)

    # When the policy is fixed after an operator completed the action by hand, and the failed message comes
    # again (Lambda's redelivery), then the watch it sends, then the step re-sent
    autoscaling.refusing, autoscaling.active = False, False
    handled = [engine.handle(failing)]
    while world.record().completed_at is None and (queued := world.queues.take()):
        world.clock.advance(queued[0].delay)
        handled.append(engine.handle(queued[0].message))

    # Then the record says the action was settled elsewhere, as it was: not completed by a call of ours (every
    # one was refused)
    record = world.record()
    assert record.completed_at is not None
    assert record.extra.get(SETTLED_ELSEWHERE) is True
    assert world.metrics.counts["LifecycleActionsSettledElsewhere[transition=terminate]"] == 1
    # (the failed message's redelivery runs the completion itself, as it fails while refused: see the next test)
    assert handled == [Handled.RAN]


def test_a_completion_refused_to_its_last_try_fails_its_message_at_every_receive_until_dead_lettered() -> (
    None
):
    # Given a lifecycle at its completion, refused to the role at every try until its message fails (a denial
    # that stays)
    world = World(redelivery=ONE_FAULT)
    world.autoscaling = RefusedThenSettledByHand()
    world.records.create(make_record(PLAN, Step.COMPLETE))
    engine = world.engine({Step.COMPLETE: CompleteAction(world.autoscaling, world.metrics)})
    failing = refused_to_its_last_try(world, engine)

    # When SQS delivers the failed message again, a visibility timeout apart, up to the queue's maxReceiveCount (5)
    received: list[Handled | str] = []
    for _ in range(4):
        world.clock.advance(ONE_FAULT)
        try:
            received.append(engine.handle(failing))
        except AccessRefused:
            received.append("refused")

    # Then each receive fails, refused again, and SQS moves it to the dead-letter queue (its alarm), nothing
    # completed nor sent on (before: the claim had moved the record's seq, so the first receive only watched and
    # succeeded, and the watch re-sent the step: a denial that stays looped unseen by the dead-letter queue)
    assert received == ["refused"] * 4
    assert world.queues.take() == []
    assert world.autoscaling.completed == []
    record = world.record()
    assert (record.step, record.completed_at) == (Step.COMPLETE, None)
    assert COMPLETION_CLAIM not in record.extra


class CommitRefusedAfterTheCall(FakeAutoscaling):
    """Auto Scaling, and the record's commit DynamoDB refuses (throttled past the client's retries) once, right
    after the first completion lands: the action done, the record claimed and open."""

    def __init__(self, world: World) -> None:
        super().__init__()
        self.world = world
        self.refusing = True

    def complete(self, action: ActionRef, result: ActionResult) -> bool:
        completed = super().complete(action, result)
        records = self.world.records
        if completed and self.refusing:
            self.refusing = False
            commit = records.commit

            def refused_once(record: LifecycleRecord, expected_seq: int) -> bool:
                records.commit = commit  # type: ignore[method-assign]
                raise TransientError("ProvisionedThroughputExceededException")

            records.commit = refused_once  # type: ignore[method-assign]
        return completed


def test_an_unconfirmed_completion_whose_commit_is_refused_after_its_call_is_recorded_as_completed() -> None:
    # Given a lifecycle whose plan confirms nothing before its completion (no step that disrupts), its action
    # never confirmed, whose completion lands and whose commit DynamoDB refuses right after
    world = World(redelivery=ONE_FAULT)
    world.autoscaling = autoscaling = CommitRefusedAfterTheCall(world)
    autoscaling.clock = world.clock
    world.records.create(make_record((Step.COMPLETE, Step.DONE), Step.COMPLETE, verified_at=None))
    engine = world.engine({Step.COMPLETE: CompleteAction(autoscaling, world.metrics)})
    message = world.message()
    with pytest.raises(TransientError):
        engine.handle(message)

    # When its message comes again (the queue's visibility timeout), and what it leads to, each at its time
    world.clock.advance(ONE_FAULT)
    handled = [engine.handle(message)]
    while (queued := world.queues.take()) and world.record().completed_at is None:
        world.clock.advance(queued[0].delay)
        handled.append(engine.handle(queued[0].message))

    # Then the completion that landed is recorded as this lifecycle's: its claim said the action was confirmed
    # before the call (before: the next completer's confirmation found the action gone and took it for one never
    # confirmed: settled elsewhere, its alarm)
    record = world.record()
    assert record.completed_at is not None
    assert SETTLED_ELSEWHERE not in record.extra
    assert record.action_confirmed
    assert world.metrics.counts.get("LifecycleActionsSettledElsewhere[transition=terminate]", 0) == 0
    assert len(autoscaling.completed) == 1
