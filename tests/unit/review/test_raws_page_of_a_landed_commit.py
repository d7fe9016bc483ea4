"""A lifecycle found past its action (``LifecycleActionsExpired``, ``LifecycleActionsUnknown``) pages once its commit
lands (``engine.gone_counted``). But a commit can land with its answer lost, and no retry of botocore's tell it: a read
timeout then a retry the run's time does not allow (``CallOutOfTime``), or a 500 at every attempt after the first
landed. The commit raises (a TransientError), the run counts nothing; its message delivered again is stale (the
record moved on to the seq it wrote) and is dropped: nobody paged for an action that timed out with the hook's
default result. A commit that raises is now read back: the record as the run wrote it, the page is counted."""

from __future__ import annotations

import pytest

from nodecycle.domain.errors import TransientError
from tests.support.fakes import commit_fails_once
from tests.unit.foundation.test_smalls_pages_after_commit import GONE, lifecycle_gone


@pytest.mark.parametrize("found_at", list(GONE))
def test_a_commit_past_a_gone_action_that_landed_with_its_answer_lost_pages_it_once(found_at: str) -> None:
    # Given a lifecycle whose action is gone, whose commit past it lands but whose answer is lost (raised)
    world, engine, page, outcome = lifecycle_gone(found_at)
    commit_fails_once(
        world.records,
        TransientError("writing a lifecycle record: attempt 2 not sent, 1.2 s left of the run's time"),
        landed=True,
    )
    message = world.message()
    with pytest.raises(TransientError):
        engine().handle(message)

    # When its message is delivered again (stale: the record moved on)
    world.clock.advance(5)
    engine().handle(message)

    # Then the lifecycle is past its action (its next step left to the sweep of due records), and paged once
    # (before: never)
    assert world.record().outcome == outcome
    assert world.metrics.counts[page] == 1
