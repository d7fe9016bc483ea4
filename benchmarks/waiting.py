"""Benchmark: what a lifecycle waiting for a budget slot costs in AWS calls per hour.

A waiter's step runs every ``BudgetRetrySeconds`` (30 s): the engine reads its record (DynamoDB GetItem), the
step asks and finds no slot, the engine commits the record (PutItem) and sends its next message (SQS
SendMessage), and records a heartbeat (Auto Scaling RecordLifecycleActionHeartbeat) when the hook's deadline
needs one. The step is the product's own (``AcquireSlot``) for a terminate hook, whose asks read the records of
the disruptions of its instance (a Spot interruption's, a maintenance's, a rebalance's: more GetItems) and whose
first ask reads the instance's DNS name (EC2 DescribeInstances). An hour of that is simulated on the real step
engine, wired with the template's default timing (heartbeat margin 60 s, the work queues' visibility timeout
150 s, resume grace 60 s), over in-memory ports and a fake clock: the figures are counts of the calls the engine
and the step make, exact and not timing-sensitive. The Kubernetes side of a waiter's step (a node GET, a
ConfigMap GET) is the budget's and is left out; its node, which no disruption drains, changes as a kubelet posts
its status (every ``nodeStatusReportFrequency``, 5 minutes by default).

Each run is also checked for the one-fault guarantee: its next run, even retried after a dead invocation
or a lost message, still comes a margin before the heartbeat deadline. The minimum the deadline needs is
one heartbeat per ``timeout - margin - one fault`` window (less the retry interval, since a heartbeat can
only be recorded when a step runs).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from benchmarks.report import Result, Row
from nodecycle.domain.budget.requests import SlotDecision, SlotReason, SlotRequest
from nodecycle.domain.dispatch import Dispatcher
from nodecycle.domain.drain.acquire import AcquireSlot
from nodecycle.domain.engine import EngineTiming, StepEngine
from nodecycle.domain.errors import TransientError
from nodecycle.domain.flow import Worker
from nodecycle.domain.model import ActionRef, LifecycleRecord, Step, Transition, global_deadline
from nodecycle.domain.nodes import NodeFinder
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.cluster import NodeInfo
from nodecycle.domain.ports.lifecycle import Hook, Membership, WaitingInstance, WorkMessage
from nodecycle.settings import DrainSettings
from nodecycle.wiring.common import common, drain_policy
from nodecycle.wiring.engines import engine_timing

T0 = datetime(2026, 1, 1, tzinfo=UTC)
RETRY_SECONDS = 30  # BudgetRetrySeconds, the template's default
HOOK_TIMEOUTS = (300, 600, 3600)  # a short hook, the README's example, Auto Scaling's default
# Seconds into the hour during which every heartbeat is throttled: over the first heartbeat a 600 s hook needs
# (330 s in) and until a minute before its deadline.
THROTTLED = (300, 540)
VERIFICATION = 1  # the engine's heartbeat before the first disruptive step: proof that the action is real
PLAN = (Step.ACQUIRE_SLOT, Step.CORDON, Step.EVICT, Step.COMPLETE, Step.CLEANUP, Step.DONE)
INSTANCE = "i-0123456789abcdef0"
NODE = "ip-10-0-1-23.eu-west-1.compute.internal"
STATUS_POSTED_EVERY = (
    300  # seconds: the kubelet's nodeStatusReportFrequency (its default), which moves the node
)
# The template's defaults, through the product's own settings and wiring.
_ENV = {
    "NODECYCLE_OWNER_ID": "bench",
    "NODECYCLE_MANAGED_GROUPS": "nodes",
    "NODECYCLE_RECORD_TABLE": "records",
    "NODECYCLE_DRAIN_QUEUE_URL": "https://sqs.invalid/drain",
    "NODECYCLE_EIP_QUEUE_URL": "https://sqs.invalid/eip",
    "NODECYCLE_WAKE_QUEUE_URL": "https://sqs.invalid/wake",
}


@dataclass
class Calls:
    get_item: int = 0  # the engine's reads of the waiter's record
    step_get_item: int = 0  # the step's reads of another record, one at a time
    batch_get_item: int = 0  # the step's reads of other records together (the disruptions' of the instance)
    put_item: int = 0
    send_message: int = 0
    describe_instances: int = 0
    heartbeats: int = 0  # RecordLifecycleActionHeartbeat calls, refused (throttled) ones included
    throttled: int = 0

    @property
    def total(self) -> int:
        return (
            self.get_item
            + self.step_get_item
            + self.batch_get_item
            + self.put_item
            + self.send_message
            + self.describe_instances
            + self.heartbeats
        )


class _Clock:
    def __init__(self) -> None:
        self.current = T0

    def now(self) -> datetime:
        return self.current


class _Records:
    def __init__(self, calls: Calls) -> None:
        self._calls = calls
        self.items: dict[str, LifecycleRecord] = {}

    def create(self, record: LifecycleRecord) -> bool:
        self.items[record.id] = record
        return True

    def get(self, record_id: str) -> LifecycleRecord | None:
        self._calls.get_item += 1
        return self.items.get(record_id)

    def commit(self, record: LifecycleRecord, expected_seq: int) -> bool:
        self._calls.put_item += 1
        if self.items[record.id].seq != expected_seq:
            return False
        self.items[record.id] = record
        return True

    def open_records(self, owner: str) -> Iterator[LifecycleRecord]:
        return iter(())


class _StepRecords:
    """The records as the step reads them: one a GetItem, several together a BatchGetItem."""

    def __init__(self, records: _Records, calls: Calls) -> None:
        self._records = records
        self._calls = calls

    def get(self, record_id: str) -> LifecycleRecord | None:
        self._calls.step_get_item += 1
        return self._records.items.get(record_id)

    def get_many(self, record_ids: Collection[str]) -> dict[str, LifecycleRecord]:
        self._calls.batch_get_item += 1
        return {i: self._records.items[i] for i in record_ids if i in self._records.items}

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"a waiter's ask {name}s no record")


@dataclass
class _Cluster:
    """The waiter's node, which no disruption drains: its version moves as its kubelet posts its status."""

    clock: _Clock

    def _node(self) -> NodeInfo:
        posts = int((self.clock.now() - T0).total_seconds() // STATUS_POSTED_EVERY)
        return NodeInfo(
            name=NODE,
            instance_id=INSTANCE,
            zone="eu-west-1a",
            uid="uid-1",
            ready=True,
            owner=None,
            in_progress=None,
            resource_version=str(1000 + posts),
        )

    def find_node(
        self, instance_id: str, private_dns_name: str | None, *, scan: bool = True
    ) -> NodeInfo | None:
        return self._node()

    def get_node(self, name: str) -> NodeInfo | None:
        return self._node()

    def node_version(self, name: str) -> tuple[str | None, str] | None:
        node = self._node()
        return node.uid, node.resource_version

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"a waiter's ask calls no {name}")


class _Instances:
    def __init__(self, calls: Calls) -> None:
        self._calls = calls

    def private_dns_name(self, instance_id: str) -> str | None:
        self._calls.describe_instances += 1
        return NODE

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"a waiter's ask calls no {name}")


class _FullBudget:
    """A budget without room, the waiter first in line."""

    def acquire(self, request: SlotRequest) -> SlotDecision:
        return SlotDecision(
            granted=False, reason=SlotReason.NO_ROOM, holders=1, waiting=1, position=1, ahead=0, room=1
        )

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"a waiter's ask calls no {name}")


class _Events:
    def on_node(self, *args: object, **kwargs: object) -> None:
        pass


class _Queues:
    def __init__(self, calls: Calls) -> None:
        self._calls = calls

    def send(self, worker: Worker, message: WorkMessage, delay_seconds: int = 0) -> None:
        self._calls.send_message += 1


@dataclass
class _Autoscaling:
    calls: Calls
    clock: _Clock
    throttled: tuple[float, float] | None
    deadlines: list[datetime] = field(default_factory=list)

    def heartbeat(self, action: ActionRef) -> bool:
        self.calls.heartbeats += 1
        if self.throttled is not None:
            start, end = self.throttled
            if start <= (self.clock.now() - T0).total_seconds() < end:
                self.calls.throttled += 1
                raise TransientError("Throttling: Rate exceeded")
        return True

    def renewed_at(self, now: datetime) -> datetime:
        return now  # (one clock: the benchmark's)

    def confirm(self, action: ActionRef) -> bool:
        return self.heartbeat(action)  # (a waiter's action was confirmed before its first disruptive step)

    def complete(self, action: ActionRef, result: ActionResult) -> bool:
        raise AssertionError("a waiter completes nothing")

    def activity_started(self, group: str, instance_id: str, since: datetime) -> datetime | None:
        raise AssertionError("a waiter carries nothing over")

    def hook(self, group: str, name: str) -> Hook | None:
        return None

    def group_tags(self, group: str) -> dict[str, str] | None:
        return None

    def hooks_of(self, group: str) -> dict[str, Hook]:
        raise AssertionError("a waiter lists no hooks (the sweeper does)")

    def waiting_instances(self, names: tuple[str, ...], owner: str | None) -> list[WaitingInstance]:
        raise AssertionError("a waiter lists no groups (the sweeper does)")

    def lifecycle_state(self, instance_id: str) -> str | None:
        return "Terminating:Wait"

    def membership(self, instance_id: str) -> Membership:
        raise AssertionError("a waiter's action is confirmed: nothing asks where its instance went")


class _Metrics:
    def count(self, name: str, value: float = 1, **dimensions: str) -> None:
        pass

    def seconds(self, name: str, value: float, **dimensions: str) -> None:
        pass


@dataclass(frozen=True)
class Waited:
    heartbeat_timeout: int
    throttled: tuple[float, float] | None
    hours: float
    runs: int
    calls: Calls
    expired: bool  # the action's heartbeat deadline passed while it waited
    worst_slack: float  # seconds: min over runs of deadline - (next run retried after a fault + margin)
    timing: EngineTiming

    @property
    def minimum_heartbeats(self) -> int:
        """What the design needs: the one heartbeat that confirms the action is Auto Scaling's before the
        first disruptive step (a forged or replayed message touches nothing), and what the deadline needs: a
        step can only heartbeat when it runs, so the first keep-alive comes one retry before ``timeout -
        margin - one fault`` and the next ones one such window apart."""
        timing = self.timing
        window = (
            self.heartbeat_timeout
            - (timing.heartbeat_margin + timing.redelivery).total_seconds()
            - RETRY_SECONDS
        )
        if window <= 0:
            return self.runs
        return VERIFICATION + math.floor((self.hours * 3600 - window) / window) + 1


def timing() -> EngineTiming:
    return engine_timing(common(DrainSettings.from_env(_ENV)))


def simulate(
    heartbeat_timeout: int, *, hours: float = 1.0, throttled: tuple[float, float] | None = None
) -> Waited:
    calls = Calls()
    clock = _Clock()
    records = _Records(calls)
    autoscaling = _Autoscaling(calls, clock, throttled)
    engine_timing = timing()
    queues = _Queues(calls)
    ask = AcquireSlot(
        finder=NodeFinder(_Cluster(clock), _Instances(calls)),  # type: ignore[arg-type]
        cluster=_Cluster(clock),  # type: ignore[arg-type]
        slots=_FullBudget(),  # type: ignore[arg-type]
        dispatcher=Dispatcher(records=records, queues=queues, clock=clock, metrics=_Metrics()),
        policy=drain_policy(DrainSettings.from_env(_ENV)),
        metrics=_Metrics(),
        events=_Events(),  # type: ignore[arg-type]
        records=_StepRecords(records, calls),
    )
    engine = StepEngine(
        worker=Worker.DRAIN,
        steps={Step.ACQUIRE_SLOT: ask},
        records=records,
        queues=queues,
        autoscaling=autoscaling,
        clock=clock,
        metrics=_Metrics(),
        timing=engine_timing,
        failure_result=lambda record: ActionResult.CONTINUE,
    )
    record = _waiter(heartbeat_timeout)
    records.create(record)
    end = T0 + timedelta(hours=hours)
    runs, expired, worst = 0, False, math.inf
    one_fault = engine_timing.redelivery + engine_timing.heartbeat_margin
    # (throttled heartbeats warn at each retry, and each ask tells it found no slot)
    engine_log = logging.getLogger("nodecycle.domain")
    level, engine_log.level = engine_log.level, logging.ERROR
    try:
        while (current := records.items[record.id]).due_at <= end and current.action_open:
            clock.current = max(clock.current, current.due_at)
            if clock.current > current.heartbeat_deadline:
                expired = True
                break
            engine.handle(WorkMessage(record_id=current.id, seq=current.seq, step=current.step))
            runs += 1
            after = records.items[record.id]
            worst = min(worst, (after.heartbeat_deadline - (after.due_at + one_fault)).total_seconds())
    finally:
        engine_log.level = level
    return Waited(heartbeat_timeout, throttled, hours, runs, calls, expired, worst, engine_timing)


def _waiter(heartbeat_timeout: int) -> LifecycleRecord:
    return LifecycleRecord(
        id=f"{INSTANCE}/terminate/bench",
        owner="bench",
        instance_id=INSTANCE,
        transition=Transition.TERMINATING,
        token="bench",
        group="nodes",
        hook="nodecycle-terminate",
        plan=PLAN,
        step=Step.ACQUIRE_SLOT,
        received_at=T0,
        started_at=T0,
        updated_at=T0,
        due_at=T0,
        heartbeat_timeout=heartbeat_timeout,
        heartbeat_deadline=T0 + timedelta(seconds=heartbeat_timeout),
        global_deadline=global_deadline(T0, heartbeat_timeout),
    )


def run(*, hours: float = 1.0) -> list[Waited]:
    found = [simulate(timeout, hours=hours) for timeout in HOOK_TIMEOUTS]
    found.append(simulate(HOOK_TIMEOUTS[1], hours=hours, throttled=THROTTLED))
    return found


def result(found: list[Waited]) -> Result:
    rows = []
    details = []
    for waited in found:
        per_hour = 1 / waited.hours
        hook = f"hook {waited.heartbeat_timeout} s"
        if waited.throttled is None:
            rows.append(
                Row(
                    f"AWS calls per waiting lifecycle per hour, {hook}",
                    waited.calls.total * per_hour,
                    None,
                    "",
                    "-",
                )
            )
            rows.append(
                Row(
                    f"heartbeats per waiting lifecycle per hour, {hook} vs the minimum",
                    waited.calls.heartbeats * per_hour,
                    waited.minimum_heartbeats * per_hour,
                    "",
                    "<= 1.10",
                    waited.calls.heartbeats <= 1.1 * waited.minimum_heartbeats and not waited.expired,
                )
            )
        else:
            start, end = waited.throttled
            seconds = end - start
            rows.append(
                Row(
                    f"heartbeat calls while throttled for {seconds:.0f} s, {hook} vs one every 5 s",
                    waited.calls.throttled,
                    seconds / 5,
                    "",
                    "backs off",
                    waited.calls.throttled < seconds / 5 and not waited.expired,
                )
            )
        calls = waited.calls
        throttle = (
            ""
            if waited.throttled is None
            else f", throttled {waited.throttled[0]:.0f}-{waited.throttled[1]:.0f} s"
        )
        details.append(
            f"{hook}{throttle}: {waited.runs} runs; GetItem {calls.get_item} (and {calls.step_get_item} of other "
            f"records), BatchGetItem {calls.batch_get_item}, PutItem {calls.put_item}, "
            f"SendMessage {calls.send_message}, "
            f"DescribeInstances {calls.describe_instances}, RecordLifecycleActionHeartbeat {calls.heartbeats} "
            f"({calls.throttled} throttled); {'EXPIRED' if waited.expired else 'never expired'}; "
            f"worst slack for one fault {waited.worst_slack:.0f} s"
        )
    timing_used = found[0].timing
    details.insert(
        0,
        f"simulated {found[0].hours:g} h of a waiter retrying every {RETRY_SECONDS} s on the step engine with "
        f"the template's timing (margin {timing_used.heartbeat_margin.total_seconds():.0f} s, one fault "
        f"{timing_used.redelivery.total_seconds():.0f} s); Kubernetes calls left out",
    )
    return Result("waiting for a budget slot: AWS calls per hour", rows, details)
