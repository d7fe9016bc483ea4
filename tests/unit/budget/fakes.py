"""Fakes of the budget's ports: a store that can lose races and crash, a clock that tests move, metrics
that remember."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from nodecycle.adapters.kube.budget import BudgetContention, BudgetNotInstalled
from nodecycle.domain.budget import BudgetDocument, DisruptionBudget, NodeState, SlotRequest
from nodecycle.domain.budget.errors import WriteOutcomeUnknown
from nodecycle.domain.errors import TransientError

START = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
MAX_CONFIGMAP_BYTES = 1024 * 1024  # the API server's bound on a ConfigMap's data

BudgetFactory = Callable[..., DisruptionBudget]  # the make_budget fixture


class Crash(Exception):
    """The function died at this point (the Lambda timed out, the container was killed)."""


class FakeClock:
    def __init__(self, now: datetime = START) -> None:
        self.current = now

    def now(self) -> datetime:
        return self.current

    def advance(self, seconds: float) -> None:
        self.current += timedelta(seconds=seconds)


@dataclass
class RecordingMetrics:
    emitted: list[tuple[str, float]] = field(default_factory=list)

    def count(self, name: str, value: float = 1, **dimensions: str) -> None:
        self.emitted.append((name, value))

    def seconds(self, name: str, value: float, **dimensions: str) -> None:
        self.emitted.append((name, value))

    def values(self, name: str) -> list[float]:
        return [value for emitted, value in self.emitted if emitted == name]


class FakeInventory:
    def __init__(self, nodes: list[NodeState] | None = None) -> None:
        self.nodes = list(nodes or [])
        self.calls = 0

    def nodes_in_scope(self) -> list[NodeState]:
        self.calls += 1
        return list(self.nodes)


class MemoryBudgetStore:
    """The BudgetStore contract over a JSON string and a version counter, like the ConfigMap (as
    ConfigMapBudgetStore answers: tests/contracts/test_budget_store.py).

    Faults on demand, each for the next update only:
    - ``interleave(fn)``: ``fn`` (another writer) runs between this update's read and its write, so the
      write conflicts and the update starts over;
    - ``conflicts(n)``: the next ``n`` writes lose a race to a writer that changes nothing;
    - ``crash(before_write=...)``: the caller dies before or after its write;
    - ``lose_answer()``: the write is done, and the caller told of a transient error whose outcome is unknown
      (``WriteOutcomeUnknown``, as ConfigMapBudgetStore raises it).
    """

    def __init__(self, max_attempts: int = 5) -> None:
        # As the cluster holds it: the ConfigMap is shipped, empty, with the RBAC (an empty budget never
        # written: ``text`` ""). Not installed (``text`` None), it reads as nothing, and a write fails as the
        # adapter's does: nodecycle may not create it.
        self.text: str | None = ""
        self.version = 0
        # When the ConfigMap was created, as ConfigMapBudgetStore tells it (its creationTimestamp) with each document
        # it reads; None: not told
        self.created_at: datetime | None = None
        self.max_attempts = max_attempts
        self.conflicts_seen = 0
        self._interleaved: list[Callable[[], object]] = []
        self._forced_conflicts = 0
        self._crash: bool | None = None  # True: before the write, False: after it
        self._lose_answer = False

    def read(self) -> BudgetDocument | None:
        if self.text is None:
            return None
        doc = BudgetDocument.from_json(self.text) if self.text else BudgetDocument(unwritten=True)
        return doc if self.created_at is None else doc.model_copy(update={"created_at": self.created_at})

    def uninstall(self) -> None:
        """The ConfigMap deleted (by a person, a GitOps tool): an update that read it before loses its write
        (a 404, as a 409) and reads again."""
        self.text = None
        self.version += 1

    def reinstall(self, at: datetime | None = None) -> None:
        """The ConfigMap created again as shipped (empty), after :meth:`uninstall`: a new object, whose
        version no update that read the old one has; created ``at``, when told."""
        self.text = ""
        self.version += 1
        self.created_at = at

    def lose_answer(self, lose: bool = True) -> None:
        """The next write is done, and its answer lost (the connection closed before the response): a
        transient error, as ConfigMapBudgetStore raises it. (``False``: no longer, if nothing was written.)"""
        self._lose_answer = lose

    def interleave(self, writer: Callable[[], object]) -> None:
        self._interleaved.append(writer)

    def conflicts(self, count: int) -> None:
        self._forced_conflicts = count

    def crash(self, *, before_write: bool) -> None:
        self._crash = before_write

    def update[T](self, mutate: Callable[[BudgetDocument | None], tuple[BudgetDocument | None, T]]) -> T:
        crash, self._crash = self._crash, None
        for _ in range(self.max_attempts):
            version = self.version
            current = self.read()
            new, result = mutate(current)
            if crash is True:
                raise Crash("before the write")
            if self._interleaved:
                self._interleaved.pop(0)()
            if new is current:  # nothing to write, nothing to conflict with
                if crash is False:
                    raise Crash("after deciding, with nothing to write")
                return result
            if self._forced_conflicts:
                self._forced_conflicts -= 1
                self.version += 1
            if version != self.version:
                self.conflicts_seen += 1
                continue
            assert new is not None
            if self.text is None:
                raise BudgetNotInstalled("nodecycle", "nodecycle-budget")
            text = new.to_json()
            if len(text.encode()) > MAX_CONFIGMAP_BYTES:
                # the API server's 422, which ConfigMapBudgetStore raises as transient
                raise TransientError(f"the API server refused the budget ConfigMap ({len(text)} bytes)")
            self.text = text
            self.version += 1
            if crash is False:
                raise Crash("after the write")
            if self._lose_answer:
                self._lose_answer = False
                raise WriteOutcomeUnknown("the connection closed before the answer to the budget's write")
            return result
        raise BudgetContention(f"the budget document kept changing: {self.max_attempts} conflicting writes")


def slot(node: str, zone: str | None = "a", owner: str = "blue") -> SlotRequest:
    return SlotRequest(node=node, instance_id=f"i-{node}", zone=zone, owner=owner, record_id=f"rec-{node}")


def node(
    name: str,
    zone: str | None = "a",
    *,
    schedulable: bool = True,
    ready: bool = True,
    shut_down: bool = False,
    released: bool = False,
) -> NodeState:
    return NodeState(
        name=name, zone=zone, schedulable=schedulable, ready=ready, shut_down=shut_down, released=released
    )
