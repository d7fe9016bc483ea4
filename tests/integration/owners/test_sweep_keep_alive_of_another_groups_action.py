"""The sweeper's keep-alive of open lifecycles, for a lifecycle no step confirmed yet whose message named this
stack's group with the instance and live token of another group's action (another stack's): if Auto Scaling takes
a token whatever group is named with it, the sweep's heartbeat keeps that other stack's action alive. The engine
heartbeats such a lifecycle through ``Autoscaling.confirm`` (which looks where the instance is first); the sweep
does not yet (domain/sweep/lifecycles.py ``LifecycleRepair._keep_alive``: a plain heartbeat of every open action
whose deadline comes before the next sweep)."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import ActionRef, Step
from tests.support.fakes import FakeAutoscaling, holding_state
from tests.unit.foundation.test_engine import PLAN, make_record
from tests.unit.sweeper.test_sweeper import Repair

THEIRS = "workers-b"  # the other stack's group


class TokenAlone(FakeAutoscaling):
    """Auto Scaling taking a call's token whatever group is named with it; its confirmation as the adapter's:
    a look at where the instance is (group and state) first, then a heartbeat."""

    def _active(self, action: ActionRef) -> bool:
        hook = self._hooks_of.get(action.token)
        if hook is not None and hook[1] == action.hook:
            action = action.model_copy(update={"group": hook[0]})
        return super()._active(action)

    def confirm(self, action: ActionRef) -> bool:
        if not action.token_known:
            return self.heartbeat(action)
        group, state = self.group_of.get(action.instance_id), self.states.get(action.instance_id)
        holding = holding_state(action)
        if group == action.group and state == holding.removesuffix(":Wait"):
            self.heartbeat(action)
            raise TransientError(f"instance {action.instance_id} is {state}, not yet {holding}")
        return group == action.group and state == holding and self.heartbeat(action)


def test_the_sweep_does_not_keep_alive_another_groups_action_named_with_this_stacks_group() -> None:
    # Given stack B's terminating instance (its action under B's group and the same hook name), and stack A's
    # open lifecycle of it, from a message that named A's group with its instance and token; no step of it ran
    # yet (its queue stalled), its heartbeat deadline within the next two sweeps
    repair = Repair(autoscaling=TokenAlone())
    record = make_record(PLAN, Step.ACQUIRE_SLOT, verified_at=None)
    repair.autoscaling.clock = repair.clock
    repair.autoscaling.issue(record.token, record.instance_id, hook=(THEIRS, record.hook))
    repair.autoscaling.states[record.instance_id] = "Terminating:Wait"
    repair.autoscaling.group_of[record.instance_id] = THEIRS
    repair.records.create(record)
    repair.clock.advance(timedelta(minutes=4).total_seconds())

    # When A's sweeper runs
    repair.run()

    # Then B's action was not heartbeated for A's lifecycle
    assert repair.autoscaling.heartbeats == []


def test_the_same_lifecycle_of_an_instance_of_this_stacks_group_is_kept_alive() -> None:
    # (the test above can fail: the sweep does heartbeat such a lifecycle when its instance is of the group named)
    repair = Repair(autoscaling=TokenAlone())
    record = make_record(PLAN, Step.ACQUIRE_SLOT, verified_at=None)
    repair.autoscaling.clock = repair.clock
    repair.autoscaling.issue(record.token, record.instance_id, hook=(record.group, record.hook))
    repair.autoscaling.states[record.instance_id] = "Terminating:Wait"
    repair.autoscaling.group_of[record.instance_id] = record.group
    repair.records.create(record)
    repair.clock.advance(timedelta(minutes=4).total_seconds())

    repair.run()

    assert [a.instance_id for a in repair.autoscaling.heartbeats] == [record.instance_id]
