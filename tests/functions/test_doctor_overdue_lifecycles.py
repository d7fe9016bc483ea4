"""The doctor's finding of lifecycles that stopped moving sends the operator to the runbook entry of what it
saw: an overdue step the sweeper has not resumed five times in a row is a stall (Lifecycles stalled: no step
runs, the function throttled or its queue's mapping disabled; it moves on by itself once that is fixed), not a
lifecycle whose resends keep failing (Lifecycles stuck)."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.model import LifecycleRecord
from nodecycle_cli.doctor.aws_checks import MAX_RESUMES, stuck_lifecycles
from tests.functions.test_cli_status import NOW, record

GRACE = timedelta(seconds=60)


def overdue(index: int, *, resumes: int) -> LifecycleRecord:
    """A drain's lifecycle (as ``nodecycle status``'s tests build one) whose step has been due for 10 minutes."""
    return record(index, f"{index:08d}-1111-4111-8111-{'1' * 12}").model_copy(
        update={
            "received_at": NOW - timedelta(minutes=12),
            "started_at": NOW - timedelta(minutes=12),
            "updated_at": NOW - timedelta(minutes=11),
            "due_at": NOW - timedelta(minutes=10),
            "resumes": resumes,
        }
    )


def test_an_overdue_lifecycle_not_resumed_five_times_is_a_stall() -> None:
    # Given a lifecycle whose step is 10 minutes overdue, resumed once (its resend sits in a queue nothing reads)
    found = stuck_lifecycles([overdue(1, resumes=1)], NOW, GRACE, "nodecycle")

    # Then the doctor sends the operator to the stall's entry
    assert found.fix == "nodecycle status --stack nodecycle; then docs/runbook.md#lifecycles-stalled"


def test_a_lifecycle_resumed_five_times_in_a_row_is_stuck() -> None:
    found = stuck_lifecycles([overdue(1, resumes=MAX_RESUMES)], NOW, GRACE, "nodecycle")

    assert found.fix == "nodecycle status --stack nodecycle; then docs/runbook.md#lifecycles-stuck"


def test_stalled_and_stuck_lifecycles_together_name_both_entries() -> None:
    found = stuck_lifecycles(
        [overdue(1, resumes=0), overdue(2, resumes=MAX_RESUMES + 1)], NOW, GRACE, "nodecycle"
    )

    assert found.fix == (
        "nodecycle status --stack nodecycle; then docs/runbook.md#lifecycles-stalled (those resumed "
        f"{MAX_RESUMES} times in a row: docs/runbook.md#lifecycles-stuck)"
    )
