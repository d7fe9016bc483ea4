"""An action retried because intake's answer about its hook was read before the action started says when its
retry can be answered (``retry_after``: once the hooks' ttl is past): the intake queue brings it back then
(``entrypoints.retry_in``), not 10 s on, when this container would give the same answer and retry it again, nor
after the queue's whole visibility timeout."""

from __future__ import annotations

import pytest

from nodecycle.domain.errors import TransientError
from nodecycle.domain.intake import IntakeOutcome
from nodecycle.domain.model import Transition
from nodecycle.domain.ports.lifecycle import Hook
from tests.support.fakes import FakeClock
from tests.unit.review.test_intake_invented_group_names import OURS, CountingHooks, a_stack, naming, ours


def test_an_action_retried_for_a_hook_read_before_it_started_comes_back_once_the_hooks_ttl_is_past() -> None:
    # Given a stack told of a hook its group did not have yet, 20 s ago, and the hook created since
    autoscaling, clock = CountingHooks(tags=ours().tags, hooks=ours().hooks), FakeClock()
    intake = a_stack(autoscaling, clock)
    assert intake.accept(naming(OURS, 1, clock, hook="late")) is IntakeOutcome.UNKNOWN_HOOK
    autoscaling.hooks[(OURS, "late")] = Hook(Transition.TERMINATING, heartbeat_timeout=300)
    clock.advance(20)

    # When an action of that hook arrives, Then it is retried, to come back in the 40 s left of the answer's ttl
    # (before: no retry_after, the queue's 10 s or its 180 s)
    with pytest.raises(TransientError) as retried:
        intake.accept(naming(OURS, 2, clock, hook="late"))
    assert retried.value.retry_after == pytest.approx(40)

    # And then it is taken in
    clock.advance(40)
    assert intake.accept(naming(OURS, 2, clock, hook="late")) is IntakeOutcome.ACCEPTED
