"""A first cordon dates its drain from the PATCH's answer, not from the step's start: what the step does before the
PATCH (the node's read, the slot's confirmation in the budget's ConfigMap) is the slot's time, and the pods are
promised the whole drain timeout after the cordon (README: "after DrainTimeoutSeconds the TimeoutPolicy applies")."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import timedelta

from nodecycle.domain.drain.cordon import CORDON_FAILING, CORDON_REFUSED
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import Step
from nodecycle.domain.ports.cluster import Claim, NodeInfo, Refused
from tests.support.fakes import T0, FakeClock
from tests.unit.drain.test_drain_steps import NODE, FakeCluster, cordon, node, policy, terminating

CONFIRMED = 2.0  # seconds the step took before its PATCH: the node's read and the slot's confirmation
ANSWERED = 0.3  # seconds the PATCH took to be answered


@dataclass
class SlowPatch(FakeCluster):
    """The API server as a loaded one: the clock has moved on by the step's reads when the PATCH is sent, and moves
    on again until its answer; ``answer``: the claim's answer (None: the node claimed), or the error it raises."""

    clock: FakeClock = field(default_factory=FakeClock)
    answer: Exception | None = None
    sent_at: list[object] = field(default_factory=list)

    def claim_node(
        self, node: NodeInfo, *, owner: str, in_progress: str, cordon: bool, exclude_from_lb: bool
    ) -> Claim:
        self.sent_at.append(self.clock.now())
        self.clock.advance(ANSWERED)
        if self.answer is not None:
            raise self.answer
        return super().claim_node(
            node, owner=owner, in_progress=in_progress, cordon=cordon, exclude_from_lb=exclude_from_lb
        )


def slow_patch(answer: Exception | None = None) -> SlowPatch:
    cluster = SlowPatch(nodes={NODE: node()}, answer=answer)
    cluster.clock.advance(CONFIRMED)  # (the step began at T0; its reads took that long)
    return cluster


def test_a_first_cordon_dates_its_drain_from_the_patchs_answer() -> None:
    # Given a cordon step begun at T0 whose PATCH is sent 2 s later and answered 0.3 s after that
    cluster = slow_patch()

    # When it runs
    outcome = cordon(cluster, clock=cluster.clock)(terminating(Step.CORDON, node=NODE), T0)

    # Then its drain starts at the answer, with the whole drain timeout after it, and the in-progress annotation
    # carries the clock as the PATCH was sent (what a retry after a crash reads)
    answered = T0 + timedelta(seconds=CONFIRMED + ANSWERED)
    assert outcome.changes["drain_started_at"] == answered
    assert outcome.changes["drain_deadline"] == answered + policy().timeout
    (patch,) = cluster.patches
    assert json.loads(str(patch["in_progress"]))["started"] == (T0 + timedelta(seconds=CONFIRMED)).isoformat()


def test_a_first_cordon_refused_or_failing_times_its_drain_from_the_answer() -> None:
    for answer, mark in (
        (Refused('admission webhook "guard" denied the request'), CORDON_REFUSED),
        (TransientError("connection reset"), CORDON_FAILING),
    ):
        # Given a cordon step begun at T0 whose PATCH, sent 2 s later, is refused or fails 0.3 s after that
        cluster = slow_patch(answer)

        # When it runs
        outcome = cordon(cluster, clock=cluster.clock)(terminating(Step.CORDON, node=NODE), T0)

        # Then the drain's time runs from that answer: the first try of the cordon is its PATCH, not the reads
        assert outcome.again, mark
        noted = outcome.changes["extra"][mark]
        assert noted == (T0 + timedelta(seconds=CONFIRMED + ANSWERED)).isoformat(), mark


def test_a_cordon_whose_drain_began_keeps_its_time() -> None:
    # Given a drain cordoning its node again (uncordoned under it) with its start and deadline
    cluster = slow_patch()
    deadline = T0 + policy().timeout
    record = terminating(Step.CORDON, node=NODE, drain_started_at=T0, drain_deadline=deadline)

    # When it runs later
    outcome = cordon(cluster, clock=cluster.clock)(record, T0 + timedelta(seconds=30))

    # Then it keeps them
    assert (outcome.changes["drain_started_at"], outcome.changes["drain_deadline"]) == (T0, deadline)
