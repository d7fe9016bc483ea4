"""A maintenance drained with a minute's lead (MaintenanceLeadMinutes=1), on a node with a pod its
PodDisruptionBudget never lets go. No lifecycle action is completed for a maintenance, so its drain keeps evicting
under the budgets until its timeout policy must act for the pods' grace to be over before the start: the force then,
not a second into the drain (a deadline capped as a terminate hook's, whose action must be completed minutes before
its global timeout, was past before the drain began, and the force deleted what the budgets still held: the
PodDisruptionBudget breach of shop/web seen in a maintenance drain, its pods crowded on the node by drains before
it)."""

from __future__ import annotations

import time

import pytest

from nodecycle.domain.model import Step, Transition
from nodecycle_sandbox.aws.group import wait_for
from nodecycle_sandbox.checks import last_pod_gone, pdb_breaches
from tests.integration.lifecycle.harness import node_of, pin, records, running

pytestmark = pytest.mark.slow

# MaintenanceLeadMinutes=1 drains a maintenance 35 s ahead at once; its force must act 15 s before the start (the
# forced pods' grace and the look's slack), some 18 s into the drain, not a second into it. (It was 62 s, the drain
# from 2 s on and the force 45 s into it: a wait of 30 s more that told nothing more.)
STARTS_IN = 35.0
FORCE_GRACE = 10  # ForceGraceSeconds' default: the forced pods' grace, over before the start
LOOK = 5  # the look at the force's deadline and at the grace's end


def test_a_maintenance_drain_a_minute_ahead_evicts_under_the_budgets_until_the_force_must_act() -> None:
    with running(size=3, parameters={"MaintenanceLeadMinutes": "1"}) as sandbox:
        instance = sorted(sandbox.asg.in_state("InService"))[0]
        node = node_of(sandbox, instance)
        store = records(sandbox)
        # Given a node with a pod whose PodDisruptionBudget never lets it go
        pin(sandbox, node)
        sandbox.kube.reset_history()

        # When AWS Health schedules its instance's retirement 35 s from now
        sandbox.asg.schedule_maintenance([instance], starts_in=STARTS_IN)
        starts = time.time() + STARTS_IN - 1  # (Health's times have whole seconds)
        record = wait_for(
            lambda: (
                (r := store.get(f"{instance}/{Transition.SCHEDULED_CHANGE.short}"))
                and r.step in (Step.CLEANUP, Step.DONE)
                and r
            ),
            STARTS_IN + 5,
            "the maintenance drain",
        )
        history = sandbox.kube.history()

        # Then the pinned pod is deleted by the force policy only where the force must act for its grace to be
        # over before the start, not a second into the drain; the budgets are kept until then
        assert record.outcome == "drain-timeout-forced"
        deletes = [
            e.time
            for e in history
            if e.kind == "Pod" and e.source == "api" and e.verb == "delete" and e.resource == "pods"
        ]
        assert deletes, "the force deleted nothing"
        forced = min(deletes)
        assert forced >= starts - FORCE_GRACE - LOOK - 2, (
            f"forced {starts - forced:.1f} s before the maintenance, told {STARTS_IN:.0f} s ahead"
        )
        assert [b for b in pdb_breaches(history) if b.time < forced] == []
        assert {b.budget for b in pdb_breaches(history)} <= {"pinned/pinned"}
        emptied = last_pod_gone(history, node)
        assert emptied is not None
        assert emptied < starts
