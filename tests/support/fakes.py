"""In-memory fakes of the domain's ports, for tests that run without AWS or a cluster."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from nodecycle.domain.flow import Worker
from nodecycle.domain.model import ActionRef, LifecycleRecord
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.lifecycle import WorkMessage

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


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


class InMemoryRecords:
    def __init__(self) -> None:
        self.items: dict[str, LifecycleRecord] = {}
        self.commits = 0

    def create(self, record: LifecycleRecord) -> bool:
        if record.id in self.items:
            return False
        self.items[record.id] = record
        return True

    def get(self, record_id: str) -> LifecycleRecord | None:
        return self.items.get(record_id)

    def commit(self, record: LifecycleRecord, expected_seq: int) -> bool:
        current = self.items.get(record.id)
        if current is None or current.seq != expected_seq:
            return False
        self.items[record.id] = record
        self.commits += 1
        return True

    def open_records(self, owner: str) -> Iterator[LifecycleRecord]:
        for record in list(self.items.values()):
            if record.owner == owner and not record.finished:
                yield record


@dataclass
class Sent:
    worker: Worker
    message: WorkMessage
    delay: int


class RecordingQueues:
    def __init__(self) -> None:
        self.sent: list[Sent] = []

    def send(self, worker: Worker, message: WorkMessage, delay_seconds: int = 0) -> None:
        self.sent.append(Sent(worker, message, delay_seconds))

    def take(self) -> list[Sent]:
        sent, self.sent = self.sent, []
        return sent


@dataclass
class FakeAutoscaling:
    """Auto Scaling's lifecycle actions as the product's port sees them. Like Auto Scaling, it knows only the
    actions it started (``issued``: their tokens; the unit tests' records carry ``"token"``) and refuses a
    heartbeat or completion for any other, or for one already completed."""

    issued: set[str] = field(default_factory=lambda: {"token"})
    heartbeat_timeouts: dict[tuple[str, str], int] = field(default_factory=dict)
    tags: dict[str, dict[str, str]] = field(default_factory=dict)
    completed: list[tuple[ActionRef, ActionResult]] = field(default_factory=list)
    heartbeats: list[ActionRef] = field(default_factory=list)
    active: bool = True  # False: every action timed out or was completed by someone else
    states: dict[str, str] = field(default_factory=dict)  # instance -> lifecycle state, for those a group has

    def complete(self, action: ActionRef, result: ActionResult) -> bool:
        if not self._active(action):
            return False
        self.completed.append((action, result))
        return True

    def heartbeat(self, action: ActionRef) -> bool:
        if not self._active(action):
            return False
        self.heartbeats.append(action)
        return True

    def issue(self, token: str) -> None:
        """An action Auto Scaling starts: its token becomes known."""
        self.issued.add(token)

    def _active(self, action: ActionRef) -> bool:
        """As Auto Scaling answers for this action: one it never started, or completed, is not active."""
        return (
            self.active
            and action.token in self.issued
            and all(done.token != action.token for done, _ in self.completed)
        )

    def heartbeat_timeout(self, group: str, hook: str) -> int | None:
        return self.heartbeat_timeouts.get((group, hook))

    def group_tags(self, group: str) -> dict[str, str] | None:
        return self.tags.get(group)

    def lifecycle_state(self, instance_id: str) -> str | None:
        return self.states.get(instance_id)
