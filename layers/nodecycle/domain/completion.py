"""The COMPLETE step: settle the lifecycle action with Auto Scaling, exactly once in effect."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from nodecycle.domain.engine import Outcome, completed_by_a_vanished_claim, confirmed_before_claim
from nodecycle.domain.errors import AccessRefused, TransientError
from nodecycle.domain.model import (
    ADDRESSES_LEFT,
    ENDED_BY,
    ENDS_ITS_INSTANCE,
    INSTANCE_STATE,
    SETTLED_ELSEWHERE,
    WARM_POOL,
    LifecycleRecord,
    Step,
    Transition,
)
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.instances import STOP_STATES
from nodecycle.domain.ports.lifecycle import Autoscaling, RecordStore
from nodecycle.domain.ports.runtime import Metrics

log = logging.getLogger(__name__)


def ended_by(record: LifecycleRecord, now: datetime) -> LifecycleRecord | None:
    """The instance's state-change lifecycle, over, as the terminate lifecycle ``record`` writes it when it
    completes its action; None when ``record``'s own steps do not free everything that lifecycle would.

    EC2 tells of every termination (shutting-down, terminated), through the hooks too, and each such state change
    would start a lifecycle that frees the instance's slot, annotations and addresses (FORGET_NODE, RELEASE_EIP):
    a dozen calls per terminated instance, for what this lifecycle frees itself. It does when the instance goes
    for good whatever the completion does (a terminating action confirmed with Auto Scaling: a timeout or an
    ABANDON terminates it too; not into or from a warm pool), its addresses are released by its own plan
    (RELEASE_EIP precedes COMPLETE, or follows it at once in an action settled near its global timeout; none
    left to the sweeper: ADDRESSES_LEFT) and its cleanup has a node to free (this owner's other entries of the
    instance, another lifecycle's annotations: ENDS_ITS_INSTANCE)."""
    kube = any(step in record.plan for step in (Step.ACQUIRE_SLOT, Step.CORDON, Step.EVICT))
    if (
        record.transition is not Transition.TERMINATING
        or record.verified_at is None
        or WARM_POOL in (record.origin, record.destination)
        or record.replaces_root_volume  # (the instance stays: its root volume alone is replaced)
        or record.extra.get(ADDRESSES_LEFT)
        or (kube and (Step.CLEANUP not in record.plan or record.node is None))
    ):
        return None
    return LifecycleRecord(
        id=record.state_change_id,
        owner=record.owner,
        instance_id=record.instance_id,
        transition=Transition.STATE_CHANGE,
        token=f"ended-by:{record.id}",
        group=record.group,
        hook="",
        plan=(Step.DONE,),
        step=Step.DONE,
        received_at=now,
        started_at=now,
        updated_at=now,
        due_at=now,
        heartbeat_timeout=0,
        heartbeat_deadline=now,
        global_deadline=now,
        outcome="ended-through-its-hook",
        finished_at=now,
        extra={ENDED_BY: record.id, INSTANCE_STATE: "shutting-down"},
    )


class NotCalled(TransientError):
    """A completion that failed before its call to Auto Scaling (the confirmation or heartbeat it asks first, throttled):
    nothing of it landed, and its claim is no completion that may have (see ``engine.claimed_for_completion``)."""


class CompleteAction:
    """``records``: where the terminate lifecycle's completion writes its instance's state-change lifecycle over
    (see ``ended_by``); None: not. The sweeper's settlement near the global timeout too: a completion cut short
    after that write (killed, or the call throttled) leaves EC2's state changes of the termination starting
    nothing, and only the completion that commits tells the cleanup to free what they would have."""

    def __init__(
        self, autoscaling: Autoscaling, metrics: Metrics, records: RecordStore | None = None
    ) -> None:
        self._autoscaling = autoscaling
        self._metrics = metrics
        self._records = records

    def __call__(self, record: LifecycleRecord, now: datetime, *, last: bool = False) -> Outcome:
        """``last``: no later try can complete the action before its global timeout (the sweep's last settlement):
        a heartbeat asked before the call that fails (throttled) does not keep the call from being made."""
        result = record.result or ActionResult.CONTINUE
        outcome = record.outcome or "completed"
        extra = record.extra
        if record.action_open:
            # Before the completion, so that the state changes that follow it find the record written
            if self._ends_its_instance(record, now):
                extra = {**extra, ENDS_ITS_INSTANCE: True}
            # Completing twice is harmless: "no active lifecycle action" means it is settled already.
            if self._confirmed(record, now, last) and self._autoscaling.complete(record.action, result):
                log.info("completed the lifecycle action with %s (%s)", result, outcome)
                self._metrics.count(
                    "LifecycleActionsCompleted", result=result.value, transition=record.transition.short
                )
                self._metrics.seconds("LifecycleDuration", (now - record.started_at).total_seconds())
            elif completed_by_a_vanished_claim(record) and (
                record.verified_at is not None or not record.token_known
            ):
                # The completer whose claim this one took over called and vanished before it recorded what its
                # call did (killed, its commit refused): its completion landed, with this result. Recorded so,
                # not as someone else's (the alarm); counted by that call, if its completer lived to count it.
                # (An action that timed out meanwhile is taken for it: nothing tells the two apart. One no step
                # confirmed is taken as settled elsewhere, as ``_confirmed`` would take it.)
                log.info(
                    "the lifecycle action was completed by a completer of ours that vanished: recorded so"
                )
            else:
                # Not counted as completed with this result: another delivery of this step completed it (and
                # counted it), it timed out with the hook's default result, or an operator settled it. (One of our
                # own completions whose answer was lost lands here too, on its retry.)
                # (Counted by its completer once its commit lands: ``engine.settled_elsewhere_counted``.)
                log.info("the lifecycle action was already settled; nothing to complete")
                extra = {**extra, SETTLED_ELSEWHERE: True}
        return Outcome.next(completed_at=now, result=result, outcome=outcome, extra=extra)

    def before_claim(self, record: LifecycleRecord, now: datetime) -> LifecycleRecord:
        """``record`` as its completer's claim writes it: an action no step confirmed, confirmed first (see
        ``engine.confirmed_before_claim``)."""
        return confirmed_before_claim(record, now, self._autoscaling)

    def _confirmed(self, record: LifecycleRecord, now: datetime, last: bool = False) -> bool:
        """Whether the action may be completed: confirmed by a step before (the engine's ``_verify``), or now,
        and still this token's where the hook holds the instance again next (``_still_its_own``). An action settled
        near its global timeout before any step confirmed it may be a forged notification dated so, pairing an
        instance with another instance's live token: if Auto Scaling takes the token alone (see
        ``Autoscaling.confirm``), the completion would settle that other action (a terminating instance
        undrained, a launch past its gate). Not confirmed, it is taken as settled elsewhere: nothing completed,
        and no disruptive step after it runs (``action_confirmed``). An adopted action is named by its instance
        alone (the adapter looks where it is)."""
        if not record.token_known:
            return True
        try:
            if record.verified_at is None:
                return self._autoscaling.confirm(record.action)
            return self._still_its_own(record, now, last)
        except TransientError as error:
            if isinstance(error, AccessRefused):
                raise
            raise NotCalled(str(error), retry_after=error.retry_after) from error

    def _still_its_own(self, record: LifecycleRecord, now: datetime, last: bool = False) -> bool:
        """Whether the action a step confirmed is still active, asked with its token (a heartbeat) before the
        completion, which names the instance alone and settles whatever action the hook holds for it *now* (see
        ``AutoscalingActions.complete``). An action that ended without this lifecycle knowing (its completion's
        call landed and its answer was lost, an operator completed it, it timed out under throttled heartbeats)
        would otherwise have its instance's next action under the same hook completed: one into the warm pool is
        followed under the same hook with no other action between, a launch into a running pool by its launch
        out of it (``Pending:Wait`` at once on a scale out: its address and readiness gate skipped), a scale-in
        back to the pool by the pool's shrinking (``Warmed:Terminating:Wait``).

        A launch into the group (out of the pool, or not through it) is followed under its hook only after a whole
        terminating action in between (a scale-in back to the pool, drained): asked only when its completion may
        have been called before (``_may_have_called``), since a retry comes at the engine's backoff (minutes), or
        after a claim taken over, and by then its call that landed has let the instance into service, back to the
        pool and out again (a new launch action: completed by the retry, its address and gate skipped, or the
        instance terminated by an ABANDON decided for the old one). Its first call asks nothing (no call per launch
        lifecycle): only an action ended by hand or by a timeout, and the instance through the pool and back while
        nothing of this lifecycle asked, is left so.

        Not asked (no call) for a termination not into the pool, which ends its instance whatever ends its action;
        nor for an action this step's run confirmed (its confirmation before the claim: an into-pool launch's first
        try), as any look leaves the moment after it. A retry of an into-pool completion asks (the call it retries
        may have landed), and so does a scale-in to the pool's completion after its drain: a call each. A heartbeat
        refused to this role (a denial of that call alone) leaves the completion to go on named by its instance,
        as the sweep completes an action whose heartbeat failed at its last chance; throttled, it is retried as
        the completion is, but at the ``last`` try before the global timeout (the sweep's last settlement) the
        completion goes on: the action's timeout with the hook's default result is certain then, a next action
        settled only if an earlier call landed and the instance moved on since."""
        if record.verified_at == now:
            return True
        # (a root volume replacement keeps its instance, as a launch does: its hook's next action of the instance is
        # after a whole launch in between, and is asked after as a launch's is)
        if record.destination != WARM_POOL and not (
            (record.transition is Transition.LAUNCHING or record.replaces_root_volume)
            and _may_have_called(record)
        ):
            return True
        try:
            return self._autoscaling.heartbeat(record.action)
        except AccessRefused as error:
            log.warning(
                "could not ask whether the lifecycle action is still active (completing it): %s", error
            )
            return True
        except TransientError as error:
            if not last:
                raise
            log.warning(
                "could not ask whether the lifecycle action is still active (completing it, at its last "
                "chance before its global timeout): %s",
                error,
            )
            return True

    def _ends_its_instance(self, record: LifecycleRecord, now: datetime) -> bool:
        """Whether this lifecycle wrote its instance's state-change lifecycle over (this run, or the one a crash
        cut short before its commit); not when EC2's event wrote it first: that lifecycle frees what it frees.
        The record of an earlier stop (into a warm pool: every instance that waited in one), over, is written
        over on its next seq, as a new disruption restarts it; one still at work finishes its own."""
        ended = ended_by(record, now) if self._records is not None and record.step is Step.COMPLETE else None
        if ended is None or self._records is None:
            return False
        if self._records.create(ended):
            return True
        known = self._records.get(ended.id)
        if known is None:
            return False
        if known.written_over_by(record.id):
            return True
        if known.finished and known.extra.get(INSTANCE_STATE) in STOP_STATES:
            return self._records.commit(
                ended.model_copy(update={"seq": known.seq + 1}), expected_seq=known.seq
            )
        return False


def _may_have_called(record: LifecycleRecord) -> bool:
    """Whether a completion of ``record``'s action may have been called before this one: an earlier try failed
    otherwise than refused (throttled, a 5xx or a read timeout after Auto Scaling took it: ``attempts`` counts
    every failed try since the step's last progress, ``refusals`` the refused ones), or this completer took over
    the claim of one that vanished (killed, its commit refused) after its call."""
    return record.attempts > record.refusals or completed_by_a_vanished_claim(record)


@dataclass(frozen=True)
class SettleResults:
    """The result for an action that must be settled before its work could finish (its global timeout is
    near): a terminating instance goes either way, and CONTINUE lets the group's other hooks run; a launch
    follows the failure policy of the step it was waiting in. None: this function never settles a launch at
    that step: it neither runs it nor ever moves a launch on to it (the engine's guard judges the step a run moved
    on to as well as the one it ran)."""

    eip: ActionResult | None = None  # a launch still assigning its address
    readiness: ActionResult | None = None  # a launch waiting for its node to be Ready

    def __call__(self, record: LifecycleRecord) -> ActionResult:
        if record.transition is Transition.TERMINATING:
            return ActionResult.CONTINUE
        result = self.eip if record.step is Step.ASSIGN_EIP else self.readiness
        if result is None:
            raise RuntimeError(f"no failure result for a launch settled at step {record.step}")
        return result
