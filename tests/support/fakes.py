"""In-memory fakes of the domain's ports, for tests that run without AWS or a cluster."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from nodecycle.domain.errors import TransientError
from nodecycle.domain.flow import Worker
from nodecycle.domain.model import WARM_POOL, ActionRef, LifecycleRecord, Transition, adopted_token
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.lifecycle import (
    ActionClaim,
    Claimed,
    Hook,
    Membership,
    TokenTaken,
    WaitingInstance,
    WorkMessage,
)

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
SQS_MAX_DELAY = 900  # seconds: the most DelaySeconds SQS accepts
SQS_MAX_MESSAGE = 1024 * 1024  # bytes: a queue's default MaximumMessageSize (the template sets none)


class FakeClock:
    def __init__(self, start: datetime = T0) -> None:
        self.current = start

    def now(self) -> datetime:
        return self.current

    def advance(self, seconds: float) -> None:
        self.current += timedelta(seconds=seconds)


class FakeMetrics:
    def __init__(self) -> None:
        self.counts: defaultdict[str, float] = defaultdict(float)
        self.timings: dict[str, list[float]] = {}

    def count(self, name: str, value: float = 1, **dimensions: str) -> None:
        self.counts[name] += value
        for key, dimension in dimensions.items():
            self.counts[f"{name}[{key}={dimension}]"] += value

    def seconds(self, name: str, value: float, **dimensions: str) -> None:
        self.timings.setdefault(name, []).append(value)


DYNAMODB_MAX_ITEM = 400 * 1024  # bytes: the largest item DynamoDB takes (names and values, UTF-8)


class ItemTooLarge(ValueError):
    """DynamoDB's ValidationException for an item past 400 KB, which the record store does not translate:
    no retry changes it (not a TransientError)."""


def _item(record: LifecycleRecord) -> dict[str, Any]:
    """The record as DynamoRecordStore writes it: JSON values, no None, no empty map."""
    data = record.model_dump(mode="json", exclude_none=True)
    return {key: value for key, value in data.items() if value != {}}


def _stored(record: LifecycleRecord) -> LifecycleRecord:
    """The record as it reads back from its item (what a field does not keep through JSON is lost)."""
    item = _item(record)
    if len(json.dumps(item, ensure_ascii=False).encode()) > DYNAMODB_MAX_ITEM:  # (over-counts a little)
        raise ItemTooLarge(f"Item size has exceeded the maximum allowed size: {record.id}")
    return LifecycleRecord.model_validate(item, strict=False)


def commit_fails_once(records: InMemoryRecords, error: Exception, *, landed: bool = False) -> None:
    """The next commit of ``records`` raises ``error``: after it landed when ``landed`` (its answer lost: a read
    timeout, a 500 after the write), before otherwise (refused: throttled past the client's retries, or a run killed
    before it); the commits after it answer as before."""
    commit = records.commit

    def once(record: LifecycleRecord, expected_seq: int) -> bool:
        records.commit = commit  # type: ignore[method-assign]
        if landed:
            assert commit(record, expected_seq)
        raise error

    records.commit = once  # type: ignore[method-assign]


class InMemoryRecords:
    """The lifecycle table as DynamoRecordStore answers for it (tests/contracts/test_records.py): conditional
    writes, where a write that meets its own item (botocore's retry of a write that landed) is its writer's
    success; records that read back through their item (a copy: no test or step holds the stored one); items
    past 400 KB refused, nothing written."""

    def __init__(self) -> None:
        self.items: dict[str, LifecycleRecord] = {}
        self.claims: dict[tuple[str, Transition, str], ActionClaim] = {}  # (instance, transition, hook) ->
        self.tokens: dict[str, str] = {}  # a known token -> the id of the record that holds it
        self.commits = 0
        self.progresses: dict[str, int] = {}  # an event's intake progress (IntakeProgress)

    def create(self, record: LifecycleRecord) -> bool:
        stored = _stored(record)
        if record.id in self.items:
            return self._landed(stored)
        self.items[record.id] = stored
        return True

    def get(self, record_id: str) -> LifecycleRecord | None:
        stored = self.items.get(record_id)
        return None if stored is None else stored.model_copy(deep=True)

    def get_many(self, record_ids: Collection[str]) -> dict[str, LifecycleRecord]:
        return {i: self.items[i].model_copy(deep=True) for i in record_ids if i in self.items}

    def commit(self, record: LifecycleRecord, expected_seq: int) -> bool:
        stored = _stored(record)
        current = self.items.get(record.id)
        if current is None or current.seq != expected_seq:
            return self._landed(stored)
        self.items[record.id] = stored
        self.commits += 1
        return True

    def _landed(self, stored: LifecycleRecord) -> bool:
        """Whether the item that failed a write's condition is that very write (its own earlier landing)."""
        current = self.items.get(stored.id)
        return current is not None and _item(current) == _item(stored)

    def progress(self, key: str) -> int:
        return self.progresses.get(key, 0)

    def save_progress(self, key: str, done: int, at: datetime) -> None:
        self.progresses[key] = max(done, self.progress(key))  # as DynamoRecordStore's condition keeps it

    def claim(self, action: ActionRef) -> ActionClaim | None:
        return self.claims.get((action.instance_id, action.transition, action.hook))

    def write_claimed(
        self,
        record: LifecycleRecord,
        expected: ActionClaim | None,
        expected_seq: int | None = None,
        *,
        displacing: str | None = None,
    ) -> Claimed | TokenTaken:
        stored = _stored(record)
        current = self.items.get(record.id)
        record_fails = (
            (current is not None)
            if expected_seq is None
            else (current is None or current.seq != expected_seq)
        )
        claim_fails = self.claim(record) != expected
        if record_fails and self._landed(stored):
            # as the store reads a cancelled transaction whose record's condition met its own item
            return Claimed.WRITTEN
        if record_fails:
            return Claimed.RECORD_TAKEN
        if claim_fails:
            return Claimed.CLAIM_TAKEN
        if record.token_known and self.tokens.get(record.token, record.id) not in (record.id, displacing):
            return TokenTaken(self.tokens[record.token])
        self.items[record.id] = stored
        self.claims[(record.instance_id, record.transition, record.hook)] = ActionClaim.of(record)
        if record.token_known:
            self.tokens[record.token] = record.id
        return Claimed.WRITTEN

    def open_records(self, owner: str) -> Iterator[LifecycleRecord]:
        # As the table's open-by-due index returns them: earliest due first (its sort key: whole seconds); in no
        # order DynamoDB promises within one second (here the last written first, unlike moto: by id)
        written = list(reversed(self.items.values()))
        for record in sorted(written, key=lambda r: int(r.due_at.timestamp())):
            if record.owner == owner and not record.finished:
                yield record.model_copy(deep=True)


@dataclass
class Sent:
    worker: Worker
    message: WorkMessage
    delay: int


class RecordingQueues:
    """The work queues, recording what is sent as the worker reads it (its JSON body parsed); like SQS, they
    refuse a ``DelaySeconds`` that is not a whole number of seconds from 0 to 900 (SQS answers
    InvalidParameterValue, botocore refuses a non-integer) and a body past the queue's 1 MiB
    (tests/contracts/test_queues.py)."""

    def __init__(self) -> None:
        self.sent: list[Sent] = []

    def send(self, worker: Worker, message: WorkMessage, delay_seconds: int = 0) -> None:
        if not isinstance(delay_seconds, int) or not 0 <= delay_seconds <= SQS_MAX_DELAY:
            raise ValueError(f"SQS refuses DelaySeconds={delay_seconds!r}: a whole number from 0 to 900")
        body = message.model_dump_json(exclude_defaults=True)  # as SqsWorkQueues sends it
        if len(body.encode()) > SQS_MAX_MESSAGE:
            raise ValueError(
                f"SQS refuses a message of {len(body.encode())} bytes: at most {SQS_MAX_MESSAGE}"
            )
        self.sent.append(Sent(worker, WorkMessage.model_validate_json(body), delay_seconds))

    def take(self) -> list[Sent]:
        sent, self.sent = self.sent, []
        return sent


@dataclass
class FakeAutoscaling:
    """Auto Scaling's lifecycle actions as the product's port sees them. Like Auto Scaling, it knows only the
    actions it started (``issued``: token -> the instance it was issued for, None: the first instance that
    uses it; the unit tests' records carry ``"token"``) and refuses a heartbeat or completion for any other
    (a known token with another instance included), for one already completed (or ended with its instance: a
    termination abandoned by another hook), and for one that timed out:
    an action lives ``action_timeout`` seconds from its start (``started``, T0 unless told) or its last
    accepted heartbeat, and never past its global timeout (100 heartbeat timeouts, at most 48 hours), by
    ``clock`` (give it the test's own)."""

    issued: dict[str, str | None] = field(default_factory=lambda: {"token": None})
    hooks: dict[tuple[str, str], Hook] = field(default_factory=dict)  # (group, name) -> the hook
    tags: dict[str, dict[str, str]] = field(default_factory=dict)
    completed: list[tuple[ActionRef, ActionResult]] = field(default_factory=list)
    heartbeats: list[ActionRef] = field(default_factory=list)
    active: bool = True  # False: every action timed out or was completed by someone else
    states: dict[str, str] = field(default_factory=dict)  # instance -> lifecycle state, for those a group has
    # instance -> the group that has it (those in ``states``); else the group its action's hook is issued under
    group_of: dict[str, str] = field(default_factory=dict)
    # instance -> (EC2 state, its aws:autoscaling:groupName tag), for those no group has and EC2 still describes
    in_ec2: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    clock: FakeClock = field(default_factory=FakeClock)
    action_timeout: int = 300  # seconds: the hooks' heartbeat timeout (the unit tests' records say 300)
    started: dict[str, datetime] = field(default_factory=dict)  # token -> when its action started (T0)
    renewed: dict[str, datetime] = field(default_factory=dict)  # token -> its last accepted heartbeat
    _hooks_of: dict[str, tuple[str, str]] = field(
        default_factory=dict
    )  # token -> its (group, hook), first used
    waiting: list[WaitingInstance] = field(default_factory=list)  # what hooks hold, every group's
    # token -> the lifecycle state its action holds its instance in (as issued, else as its first use says)
    _held_in: dict[str, str] = field(default_factory=dict)
    _ended: set[str] = field(default_factory=set)  # tokens of actions ended with their instance (abandoned)
    listings: list[tuple[tuple[str, ...], str | None]] = field(
        default_factory=list
    )  # waiting_instances calls
    # when Auto Scaling answered the heartbeat it accepted last, on ``clock`` (its answer's Date: see renewed_at)
    _answered_at: datetime | None = field(default=None, init=False)

    def complete(self, action: ActionRef, result: ActionResult) -> bool:
        # named as AutoscalingActions names a completion: by its instance alone, the action the hook holds for
        # the instance whatever the token (the token's, when it is the instance's own or not bound to one yet)
        own = action.token_known and self.issued.get(action.token, "") in (None, action.instance_id)
        named = (self._named(action) if own else None) or self._named(
            action.model_copy(update={"token": adopted_token(action.hook)})
        )
        if named is None:
            return False
        self.completed.append((named, result))
        if named.transition is Transition.TERMINATING and result is ActionResult.ABANDON:
            # "ABANDON ... stops any remaining actions, such as other lifecycle hooks" (AWS): the instance goes
            # at once, and the other hooks' actions that hold it with this one end with it
            held_in = self._held_in.get(named.token)
            self._ended |= {
                token
                for token, instance in self.issued.items()
                if instance == named.instance_id and self._held_in.get(token) == held_in
            }
        return True

    def heartbeat(self, action: ActionRef) -> bool:
        self._answered_at = None
        named = self._named(action)
        if named is None:
            return False
        self.heartbeats.append(action)
        self.renewed[named.token] = self._answered_at = self.clock.now()
        return True

    def renewed_at(self, now: datetime) -> datetime:
        """As AutoscalingActions tells it: the caller's ``now``, or the time of Auto Scaling's answer to the heartbeat
        just accepted (its Date: on ``clock``) when that is earlier (a caller's clock running ahead of it)."""
        return now if self._answered_at is None else min(now, self._answered_at)

    def confirm(self, action: ActionRef) -> bool:
        """A look at where the instance is, then a heartbeat, as AutoscalingActions confirms
        (tests/contracts/test_autoscaling.py): confirmed only while it waits in the state an action of the
        transition and move named holds it in (``holding_state``); a TransientError while its state is still
        the one before that wait (``Terminating`` for ``Terminating:Wait``: a read that lags the
        notification); not confirmed in any other. Where it is: where the test says (``states``), else where
        its action holds it (its hook's transition, when the test gave the hook; else the move the first call
        named). An adopted action (no token) is confirmed by its heartbeat alone, as the adapter does."""
        if not action.token_known:
            return self.heartbeat(action)
        # The look comes first, as the adapter's: an instance in another group than the one named (``group_of``,
        # else its token's hook's group) is not confirmed, and its action not heartbeated for it
        group = (
            self.group_of.get(action.instance_id) or self._hooks_of.get(action.token, (action.group, ""))[0]
        )
        state = (
            self.states.get(action.instance_id) or self._held_in.get(action.token) or holding_state(action)
        )
        holding = holding_state(action)
        if group != action.group:
            return False
        if state == holding:
            return self.heartbeat(action)
        if state == holding.removesuffix(":Wait"):
            self.heartbeat(action)  # (the group's own instance on its way into the wait: renewed meanwhile)
            raise TransientError(f"instance {action.instance_id} is {state}, not yet {holding}")
        return False

    def issue(
        self,
        token: str,
        instance_id: str | None = None,
        at: datetime | None = None,
        hook: tuple[str, str] | None = None,
        held_in: str | None = None,
    ) -> None:
        """An action Auto Scaling starts (at ``at``, default T0) under ``hook`` (group, name; default: the
        first that names it): its token becomes known. Its instance waits in ``held_in`` (default: the wait
        state of the hook's transition, when ``hooks`` has the hook; else where the first call that names it
        says)."""
        self.issued[token] = instance_id
        if at is not None:
            self.started[token] = at
        if hook is not None:
            self._hooks_of[token] = hook
        described = self.hooks.get(hook) if hook is not None else None
        if held_in is None and described is not None:
            held_in = "Pending:Wait" if described.transition is Transition.LAUNCHING else "Terminating:Wait"
        if held_in is not None:
            self._held_in[token] = held_in

    def kept_alive(self, token: str, at: datetime) -> None:
        """A heartbeat Auto Scaling accepted at ``at``, as the earlier runs of a long lifecycle sent them."""
        self.renewed[token] = at

    def expires_at(self, token: str) -> datetime:
        start = self.started.get(token, T0)
        timeout = timedelta(seconds=self.action_timeout)
        ends = start + min(100 * timeout, timedelta(hours=48))
        return min(self.renewed.get(token, start) + timeout, ends)

    def _named(self, action: ActionRef) -> ActionRef | None:
        """The active action ``action`` names, with its token; None when there is none. Without its token (an
        adopted lifecycle's), Auto Scaling finds the action the hook holds for the instance (one issued with
        its hook: by instance id alone, no call can be the first to name it)."""
        if action.token_known:
            return action if self._active(action) else None
        for token, instance in self.issued.items():
            if instance == action.instance_id and token in self._hooks_of:
                named = action.model_copy(update={"token": token})
                if self._active(named):
                    return named
        return None

    def _active(self, action: ActionRef) -> bool:
        """As Auto Scaling answers for this action: one it never started (or started for another instance),
        completed, or timed out, is not active."""
        if not self.active or action.token not in self.issued:
            return False
        if self.issued[action.token] is None:
            self.issued[action.token] = action.instance_id
        # Auto Scaling names an action by its group and hook too: the same token under another hook is none
        hook = self._hooks_of.setdefault(action.token, (action.group, action.hook))
        self._held_in.setdefault(action.token, holding_state(action))  # (unless issued so: as first named)
        return (
            hook == (action.group, action.hook)
            and self.issued[action.token] == action.instance_id
            and all(done.token != action.token for done, _ in self.completed)
            and action.token not in self._ended
            # (at its deadline itself it is over, as the emulation ends it: tests/contracts/test_autoscaling.py)
            and self.clock.now() < self.expires_at(action.token)
        )

    def hooks_of(self, group: str) -> dict[str, Hook]:
        return {name: hook for (g, name), hook in self.hooks.items() if g == group}

    def activity_started(self, group: str, instance_id: str, since: datetime) -> datetime | None:
        """As DescribeScalingActivities tells it: the start (``started``, T0 unless told) of the latest action still
        active of the instance under a hook of ``group`` (its first use's, unless issued with one), begun since
        ``since``; None when there is none."""
        starts = [
            self.started.get(token, T0)
            for token, instance in self.issued.items()
            if instance == instance_id
            and self._hooks_of.get(token, (group, ""))[0] == group
            and self.active
            and all(done.token != token for done, _ in self.completed)
            and token not in self._ended
            and self.clock.now() < self.expires_at(token)
        ]
        return max((start for start in starts if start >= since), default=None)

    def waiting_instances(self, names: tuple[str, ...], owner: str | None) -> list[WaitingInstance]:
        """As DescribeAutoScalingGroups filters them: the groups named, and those tagged for ``owner``."""
        self.listings.append((names, owner))
        return [
            w
            for w in self.waiting
            if w.group in names or (owner is not None and w.group_tags.get("nodecycle:owner") == owner)
        ]

    def hook(self, group: str, name: str) -> Hook | None:
        return self.hooks.get((group, name))

    def group_tags(self, group: str) -> dict[str, str] | None:
        return self.tags.get(group)

    def groups_tagged(self, owner: str) -> frozenset[str]:
        """The groups tagged nodecycle:owner=``owner`` (DescribeAutoScalingGroups filtered by the tag)."""
        return frozenset(group for group, tags in self.tags.items() if tags.get("nodecycle:owner") == owner)

    def lifecycle_state(self, instance_id: str) -> str | None:
        return self.states.get(instance_id)

    def membership(self, instance_id: str) -> Membership:
        """As AutoscalingActions says it (tests/contracts/test_autoscaling.py): the group that has the instance
        and its state there; for one no group has, EC2's state and group tag of it (``in_ec2``)."""
        state = self.states.get(instance_id)
        if state is not None:
            hooked = next(
                (
                    self._hooks_of[t]
                    for t, i in self.issued.items()
                    if i == instance_id and t in self._hooks_of
                ),
                None,
            )
            group = self.group_of.get(instance_id) or (hooked[0] if hooked is not None else None)
            return Membership(group=group, lifecycle_state=state)
        ec2_state, tagged = self.in_ec2.get(instance_id, (None, None))
        return Membership(group=tagged, lifecycle_state=None, ec2_state=ec2_state)


def holding_state(action: ActionRef) -> str:
    """The lifecycle state in which Auto Scaling holds an instance for an action of this transition and move:
    a launch in ``Pending:Wait``, a termination in ``Terminating:Wait``, and a warm pool's own: a launch into
    the pool and a scale in back to it in ``Warmed:Pending:Wait``, a termination out of it in
    ``Warmed:Terminating:Wait``."""
    if action.transition is Transition.LAUNCHING:
        return "Warmed:Pending:Wait" if action.destination == WARM_POOL else "Pending:Wait"
    if action.origin == WARM_POOL:
        return "Warmed:Terminating:Wait"
    return "Warmed:Pending:Wait" if action.destination == WARM_POOL else "Terminating:Wait"


@dataclass
class LaunchingGroup(FakeAutoscaling):
    """Auto Scaling holding every instance in ``Pending:Wait`` (its launch action open), unless ``states`` says
    otherwise: what the readiness gate asks it at its timeout (see ReadinessGate._timed_out)."""

    asked: int = 0

    def lifecycle_state(self, instance_id: str) -> str | None:
        self.asked += 1
        return self.states.get(instance_id, "Pending:Wait")
