"""A completion names its instance alone (``AutoscalingActions.complete``), so Auto Scaling settles whatever action
the hook holds for the instance *now*. A launch out of the warm pool whose completion's call landed but was not
answered (throttled past botocore's retries after a lost answer) is retried minutes later, at the engine's backoff:
by then the instance may have been scaled in to the pool (ReuseOnScaleIn: drained and completed by its own
lifecycle) and drawn out of it again, held under the same launch hook by a new action. On moto with the sandbox's
lifecycle emulation, which answers a completion by instance as Auto Scaling documents it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from botocore.exceptions import ClientError

from nodecycle.adapters.aws.autoscaling import AutoscalingActions
from nodecycle.domain.completion import CompleteAction
from nodecycle.domain.engine import COMPLETION_CLAIM
from nodecycle.domain.model import SETTLED_ELSEWHERE, WARM_POOL, Step, Transition
from nodecycle.domain.policy import ActionResult
from nodecycle_sandbox.aws import LAUNCHING, TERMINATING
from nodecycle_sandbox.aws.group import AutoScalingGroup, HookSpec, WarmPoolSpec
from tests.sandbox.aws.conftest import Emulation, aws  # noqa: F401  (the emulation in process)
from tests.support.fakes import FakeMetrics
from tests.unit.foundation.test_engine import T0, make_record

HOOKS = (
    HookSpec("launch", LAUNCHING, heartbeat_timeout=60, default_result="ABANDON"),
    HookSpec("drain", TERMINATING, heartbeat_timeout=60, default_result="CONTINUE"),
)
# A pool of what the group scaled in from one instance
REUSED = WarmPoolSpec(min_size=0, max_group_prepared_capacity=1, reuse_on_scale_in=True)


def _held(group: AutoScalingGroup, hook: str) -> str:
    """The token of the one active action of ``hook``."""
    (token,) = [a.token for a in group.actions() if a.hook == hook and a.active]
    return token


def _by_instance(aws: Emulation, hook: str, instance_id: str) -> None:  # noqa: F811
    aws.autoscaling.complete_lifecycle_action(
        AutoScalingGroupName="workers",
        LifecycleHookName=hook,
        InstanceId=instance_id,
        LifecycleActionResult="CONTINUE",
    )


@pytest.mark.parametrize("retry", ["engine", "claim-taken-over"])
def test_a_retried_completion_of_a_launch_out_of_the_pool_leaves_the_instances_next_launch_action(
    aws: Emulation,  # noqa: F811
    retry: str,
) -> None:
    # Given an instance drawn out of a warm pool that takes instances back on scale in (Pending:Wait under the
    # launch hook), its lifecycle at its completion after its steps confirmed it, whose call landed unanswered:
    # retried by the engine at its backoff, or by the completer that took over the claim of one that was killed
    group = aws.group(*HOOKS, warm_pool=REUSED)
    ((pooled, _),) = group.pool_instances().items()
    _by_instance(aws, "launch", pooled)  # (its launch into the pool: stopped there)
    group.set_desired(1)
    assert group.instances() == {pooled: "Pending:Wait"}
    record = make_record(
        (Step.READY_GATE, Step.COMPLETE, Step.DONE),
        Step.COMPLETE,
        id=f"{pooled}/launch/out",
        instance_id=pooled,
        transition=Transition.LAUNCHING,
        token=_held(group, "launch"),
        group="workers",
        hook="launch",
        origin=WARM_POOL,
        destination="AutoScalingGroup",
        result=ActionResult.ABANDON,  # (its readiness gate timed out: the launch is to be abandoned)
        **(
            {"attempts": 1, "last_error": "Rate exceeded"}
            if retry == "engine"
            else {"extra": {COMPLETION_CLAIM: {"seq": 3, "at": T0.isoformat(), "over": True, "by": "engine"}}}
        ),
    )
    _by_instance(aws, "launch", pooled)  # (the call that landed unanswered)

    # When the instance, in service, is scaled in back to the pool (drained and completed by its own lifecycle),
    # drawn out of it again (a new launch action, for its own lifecycle: its address, its readiness gate), and the
    # completion's retry comes
    group.set_desired(0)
    assert group.pool_instances() == {pooled: "Warmed:Pending:Wait"}
    _by_instance(aws, "drain", pooled)
    group.set_desired(1)
    assert group.instances() == {pooled: "Pending:Wait"}
    drawn = _held(group, "launch")
    metrics = FakeMetrics()
    outcome = CompleteAction(AutoscalingActions(aws.autoscaling), metrics)(record, T0 + timedelta(minutes=3))

    # Then the new action is left to its own lifecycle, and the instance still waits for it
    (newer,) = [a for a in group.actions() if a.token == drawn]
    assert newer.active, f"the stale completion settled the instance's next launch action ({newer.result})"
    assert group.instances() == {pooled: "Pending:Wait"}
    # ...and this lifecycle's action is over: the vanished completer's call is recorded as its own, with its result
    # (ABANDON, as decided); the engine's retry cannot tell its call unanswered from a completion by hand
    assert outcome.changes["result"] is ActionResult.ABANDON
    assert bool(outcome.changes["extra"].get(SETTLED_ELSEWHERE)) is (retry == "engine")
    assert metrics.counts["LifecycleActionsCompleted"] == 0


def test_the_emulation_refuses_a_completion_by_instance_under_another_hook_or_with_no_action_held(
    aws: Emulation,  # noqa: F811
) -> None:
    # Given an instance held by the launch hook alone (its launch into the pool)
    group = aws.group(*HOOKS, warm_pool=REUSED)
    ((pooled, _),) = group.pool_instances().items()

    # When it is completed by instance id under the terminating hook, which holds nothing of it, and, once its
    # launch is completed, under the launch hook again
    with pytest.raises(ClientError) as other_hook:
        _by_instance(aws, "drain", pooled)
    _by_instance(aws, "launch", pooled)
    with pytest.raises(ClientError) as none_held:
        _by_instance(aws, "launch", pooled)

    # Then Auto Scaling's answer comes back for both, as it answers a completion by instance of no active action
    for raised in (other_hook, none_held):
        assert raised.value.response["Error"]["Code"] == "ValidationError"
        assert raised.value.response["Error"]["Message"] == (
            f"No active Lifecycle Action found with instance ID {pooled}"
        )
    assert group.pool_instances() == {pooled: "Warmed:Stopped"}
