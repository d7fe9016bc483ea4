"""An orphaned action's adoption on Auto Scaling as the sandbox emulates it (AutoscalingActions on moto): a
sweeper container that starts cold finds an action that earlier sweeps kept alive for hours without adopting
it (intake refused), and dates it by the group's scaling activity that holds the instance
(DescribeScalingActivities; "Verify a scaling activity for an Auto Scaling group", Amazon EC2 Auto Scaling user
guide: the activity begins before the hooks hold the instance), not by its own first sighting: Auto Scaling
reckons the global timeout from the action's start."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
from moto import mock_aws

from nodecycle.domain.catalog import LifecycleHooks, ManagedGroups
from nodecycle.domain.errors import AccessRefused
from nodecycle.domain.intake import Intake
from nodecycle.domain.model import Transition, adopted_token, global_deadline, record_id
from nodecycle.domain.policy import PlanPolicy
from nodecycle.domain.ports.lifecycle import WaitingInstance
from nodecycle.domain.sweep.orphans import OrphanedActions
from nodecycle.domain.sweep.sweeper import SweepFailed
from nodecycle_sandbox.aws import AwsControl, install
from tests.contracts.conftest import REGION
from tests.contracts.test_autoscaling import OWNER, Emulation
from tests.sandbox.aws.conftest import FakeNodes, RecordingBus
from tests.support.fakes import FakeMetrics, InMemoryRecords, RecordingQueues
from tests.unit.sweeper.test_orphans import AMPLE

HEARTBEAT = 900  # the hooks' heartbeat timeout: Auto Scaling's global timeout is 100 of them
INTERVAL = timedelta(minutes=5)
HOOKS = ("drain", "eip")  # the emulated group's terminate hooks, both this stack's


@pytest.fixture
def emulation() -> Iterator[tuple[AwsControl, RecordingBus]]:
    install()
    with mock_aws():
        control = AwsControl(region=REGION)
        bus = RecordingBus()
        control.connect(events=bus, nodes=FakeNodes())
        yield control, bus
        control.close()


class SideClock:
    """The emulation's clock, as the domain reads it."""

    def __init__(self, side: Emulation) -> None:
        self._side = side

    def now(self) -> datetime:
        return self._side.now()


class Sweeper:
    """The orphans' parts of a sweeper container over the emulated group."""

    def __init__(self, side: Emulation, intake: Intake, records: InMemoryRecords) -> None:
        clock = SideClock(side)
        self.records = records
        self.part = OrphanedActions(
            groups=groups(side),
            hooks=LifecycleHooks(side.port, clock),
            autoscaling=side.port,
            intake=intake,
            records=records,
            metrics=FakeMetrics(),
            adopt_after=INTERVAL / 2,
        )
        self.side = side

    def sweep(self) -> int:
        now = self.side.now()
        open_records = list(self.records.open_records(OWNER))
        self.part.keep_alive(open_records, now, AMPLE)
        return self.part.adopt(open_records, now, AMPLE)["LifecyclesAdopted"]


def groups(side: Emulation) -> ManagedGroups:
    return ManagedGroups(
        owner=OWNER,
        names=(side.group,),
        by_tag=False,
        hooks=HOOKS,
        autoscaling=side.port,
        clock=SideClock(side),
    )


def test_a_cold_container_dates_an_orphan_kept_alive_for_hours_by_its_groups_activity(
    emulation: tuple[AwsControl, RecordingBus], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an instance the stack's terminate hooks hold, whose event never became a record
    side = Emulation(*emulation, monkeypatch, heartbeat=HEARTBEAT)
    held = side.hold()
    started = side.now()
    records, clock = InMemoryRecords(), SideClock(side)
    intake = Intake(
        owner=OWNER,
        plan=PlanPolicy(kubernetes=True, eip=False, readiness_gate=True),
        records=records,
        queues=RecordingQueues(),
        groups=groups(side),
        hooks=LifecycleHooks(side.port, clock),
        autoscaling=side.port,
        clock=clock,
        metrics=FakeMetrics(),
        resume_grace=timedelta(seconds=60),
        retry_window=timedelta(seconds=210),
    )

    # and a container whose sweeps kept it alive for three hours, its adoptions refused (the table's writes
    # denied until the role was fixed)
    def refused(waiting: WaitingInstance, hook: str, since: datetime) -> object:
        raise AccessRefused("putting a lifecycle record", "AccessDeniedException", "not authorized")

    warm = Sweeper(side, intake, records)
    with monkeypatch.context() as patched:
        patched.setattr(intake, "adopt", refused)
        for sweep in range(36):
            if sweep == 0:
                assert warm.sweep() == 0  # (found: kept alive, adopted at the next)
            else:
                with pytest.raises(SweepFailed):
                    warm.sweep()
            side.advance(INTERVAL.total_seconds())
    assert records.items == {}

    # When the fix's deploy brings a cold container, whose sweeps find the actions and adopt them
    calls: list[str] = []
    side.autoscaling.meta.events.register(
        "before-call.autoscaling.DescribeScalingActivities", lambda **_: calls.append("call")
    )
    cold = Sweeper(side, intake, records)
    assert cold.sweep() == 0
    side.advance(INTERVAL.total_seconds())
    assert cold.sweep() == len(HOOKS)

    # Then each lifecycle settles by Auto Scaling's global timeout, reckoned from the action's start (before: from
    # an interval before the cold container's first sighting, three hours late, and Auto Scaling applied the hook's
    # default result, an undrained termination, while the lifecycle's guard still waited)
    for hook in HOOKS:
        record = records.get(record_id(held.action.instance_id, Transition.TERMINATING, adopted_token(hook)))
        assert record is not None
        assert record.global_deadline <= global_deadline(started, HEARTBEAT)
    # ... at one DescribeScalingActivities page for the instance's adoptions, none for the sweeps that kept them alive
    assert calls == ["call"]
