"""The sweep's settlement reads the lifecycle again before it claims it, and judged the claim on it by that read, but
built its own claim from the version it read first. A completer's write at the same seq in between (the engine's
completion refused to its last try, which withdraws its claim: its call did not land) was undone: the settlement's
claim said it took over a completer's claim (``over``), and its "no active lifecycle action" (an operator's
completion meanwhile) was recorded as that refused call's completion, not as the action settled elsewhere."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.completion import SETTLED_ELSEWHERE
from nodecycle.domain.engine import claim_recorded, claimed_for_completion
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.policy import ActionResult
from tests.unit.sweeper.test_sweeper import MARGIN, Repair, stalled_at_its_last_chance


def test_a_claim_withdrawn_between_the_sweeps_two_reads_is_not_taken_over() -> None:
    # Given a completion at the sweeper's last chance that the engine claimed, refused to its last try: its claim
    # still on the record when the sweep reads it first, withdrawn (the call did not land) before the sweep's second
    # read; and an operator who completed the action by hand meanwhile
    repair = Repair()
    record_id = stalled_at_its_last_chance(
        repair, step=Step.COMPLETE, result=ActionResult.CONTINUE, outcome="completed", refusals=7
    )
    read = repair.records.get(record_id)
    assert read is not None
    now = repair.clock.now()
    claimed = claimed_for_completion(read, now - MARGIN, now - timedelta(seconds=1))
    assert repair.records.commit(claimed, expected_seq=read.seq)
    get = repair.records.get
    reads: list[LifecycleRecord | None] = []

    def withdrawn_before_the_second_read(record_id: str) -> LifecycleRecord | None:
        if len(reads) == 1:
            withdrawn = claim_recorded(claimed).model_copy(update={"refusals": claimed.refusals + 1})
            assert repair.records.commit(withdrawn, expected_seq=claimed.seq)
        reads.append(get(record_id))
        return reads[-1]

    repair.records.get = withdrawn_before_the_second_read  # type: ignore[method-assign]
    repair.autoscaling.active = False

    # When the sweep settles it
    counts = repair.run()

    # Then it is recorded as settled elsewhere (no completion of ours landed)
    assert counts["LifecyclesSettled"] == 1
    settled = get(record_id)
    assert settled is not None
    assert settled.completed_at is not None
    assert settled.extra.get(SETTLED_ELSEWHERE) is True
