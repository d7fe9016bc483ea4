"""The lifecycle's ports: the record store, the work queues and the messages on them, Auto Scaling."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel, ConfigDict

from nodecycle.domain.flow import Worker
from nodecycle.domain.model import ActionRef, LifecycleRecord, Step, Transition, adopted_token
from nodecycle.domain.policy import ActionResult


class WorkMessage(BaseModel):
    """One unit of work: run the current step of a lifecycle record, if ``seq`` is still current."""

    model_config = ConfigDict(frozen=True)

    record_id: str
    seq: int
    step: Step  # informative: the record is the authority on what runs
    watch: int | None = None  # a watch: resend the step if the record is still at this seq (see engine)
    wake: bool = False  # run the waiting step now, before its due time (a budget slot was freed for it)
    # a wake's lifecycle: a record starts over under another token (the next maintenance), which a wake-up
    # meant for the last one must not bring forward
    token: str | None = None


class RecordStore(Protocol):
    def create(self, record: LifecycleRecord) -> bool:
        """Write a new record; False when a record with this id already exists."""
        ...

    def get(self, record_id: str) -> LifecycleRecord | None: ...

    def commit(self, record: LifecycleRecord, expected_seq: int) -> bool:
        """Replace the record if its stored seq is still ``expected_seq``; False when another delivery won."""
        ...

    def open_records(self, owner: str) -> Iterator[LifecycleRecord]:
        """The unfinished records of ``owner`` (read in pages, for the sweeper and the status command)."""
        ...


class WorkQueues(Protocol):
    def send(self, worker: Worker, message: WorkMessage, delay_seconds: int = 0) -> None: ...


@dataclass(frozen=True)
class Hook:
    """A lifecycle hook as Auto Scaling describes it: which transition it holds and for how long."""

    transition: Transition  # launching or terminating
    heartbeat_timeout: int  # seconds


@dataclass(frozen=True)
class WaitingInstance:
    """An instance that a group's lifecycle hooks hold (``Pending:Wait`` or ``Terminating:Wait``), with its
    group's tags (what decides whether the group is this stack's)."""

    group: str
    group_tags: Mapping[str, str]
    instance_id: str
    transition: Transition

    def action(self, hook: str) -> ActionRef:
        """Its action under ``hook``, named as an adopted one is (no API tells its token: see adopted_token)."""
        return ActionRef(
            group=self.group,
            hook=hook,
            instance_id=self.instance_id,
            token=adopted_token(hook),
            transition=self.transition,
        )


class Autoscaling(Protocol):
    def complete(self, action: ActionRef, result: ActionResult) -> bool:
        """Complete the action; False when it was no longer active (completed before, or timed out)."""
        ...

    def heartbeat(self, action: ActionRef) -> bool:
        """Record a heartbeat; False when the action is no longer active."""
        ...

    def hook(self, group: str, name: str) -> Hook | None:
        """The group's hook of that name; None when it does not exist."""
        ...

    def group_tags(self, group: str) -> dict[str, str] | None:
        """The group's tags; None when the group does not exist."""
        ...

    def hooks_of(self, group: str) -> dict[str, Hook]:
        """The group's hooks by name (none when the group does not exist)."""
        ...

    def waiting_instances(self, names: tuple[str, ...], owner: str | None) -> list[WaitingInstance]:
        """The instances hooks hold in the groups named, and in those tagged ``nodecycle:owner=<owner>`` (when
        ``owner`` is given): read in pages, not per group or instance."""
        ...

    def lifecycle_state(self, instance_id: str) -> str | None:
        """The instance's lifecycle state in its group (``InService``, ``Terminating:Wait``...); None when
        no group has it (any more)."""
        ...
