"""``nodecycle status`` shows what the runbook says it shows: a lifecycle the sweeper adopted (an action whose
event never became a record, Intake dead letters) is told apart from one intake took in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nodecycle.domain.model import LifecycleRecord, Step, Transition, adopted_token
from nodecycle_cli.status import render

NOW = datetime(2026, 12, 4, 23, 0, tzinfo=UTC)


def record(index: int, token: str) -> LifecycleRecord:
    instance = f"i-{index:017x}"
    return LifecycleRecord(
        id=f"{instance}/terminate/{token}",
        group="nodecycle-workers",
        hook="nodecycle-terminate",
        instance_id=instance,
        token=token,
        transition=Transition.TERMINATING,
        owner="nodecycle",
        plan=(Step.ACQUIRE_SLOT, Step.CORDON, Step.EVICT, Step.COMPLETE, Step.CLEANUP, Step.DONE),
        step=Step.EVICT,
        seq=3,
        received_at=NOW - timedelta(minutes=2),
        started_at=NOW - timedelta(minutes=2),
        updated_at=NOW - timedelta(minutes=1),
        due_at=NOW + timedelta(seconds=5),
        heartbeat_timeout=600,
        heartbeat_deadline=NOW + timedelta(minutes=5),
        global_deadline=NOW + timedelta(hours=16),
    )


def test_a_lifecycle_the_sweeper_adopted_is_marked_so() -> None:
    # Given an open lifecycle intake took in, and one the sweeper adopted (Intake dead letters: its event lost)
    taken_in = record(1, f"{'1' * 8}-1111-4111-8111-{'1' * 12}")
    adopted = record(2, adopted_token("nodecycle-terminate"))

    # When the operator looks, as the runbook's Intake dead letters entry says
    lines = render([taken_in, adopted], NOW, finished_too=False)

    # Then the adopted one is marked with the hook it was adopted under, and only it
    rows = {line.split()[0]: line for line in lines[2:] if line}
    assert "adopted:nodecycle-terminate" in rows[adopted.instance_id]
    assert "adopted" not in rows[taken_in.instance_id]
