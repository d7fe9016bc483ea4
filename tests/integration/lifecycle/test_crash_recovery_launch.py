"""A launch's Lambda killed after each API call in turn: redelivery gives every instance one Elastic IP, passes
its readiness gate and completes its action once, CONTINUE, with no address left over (invariants 2, 4, 5).

The launch flow (intake -> EIP queue: allocate, associate, verify -> drain queue: the readiness gate ->
CompleteLifecycleAction) run by test_crash_recovery.py's pump, one message per invocation, a container dying
right after the chosen call. A baseline launch in a new container gives the calls; then as many launches as it
made calls, the N-th launch to be seen killed right after its N-th. No sweeper runs: a crash right after
AllocateAddress (the call has no idempotency token) must be repaired by the redelivery's look for the addresses
tagged for its instance, not left to a later sweep.

`make test` kills at a sample of these points (test_crash_recovery.py's `kill_points`), `make test-crash` at
every one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from nodecycle.domain.model import Transition
from nodecycle_sandbox import Sandbox, SandboxOptions
from nodecycle_sandbox.aws.group import GroupSpec, default_hooks
from nodecycle_sandbox.aws.records import LAUNCHING
from tests.integration.lifecycle.harness import FAST, ROOT, record_of, records
from tests.integration.lifecycle.test_crash_recovery import (
    Killed,
    Killer,
    Pump,
    calls_of_every_lifecycle,
    counting_calls,
    fresh_container,
    kill_points,
    kind,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:Dimension 'owner' has already been added"),
]

LAUNCH = f"/{Transition.LAUNCHING.short}/"


@dataclass
class LaunchKiller(Killer):
    """The kill points given to launches in the order they are first seen (their instance ids are not known
    before their group launches them): the N-th launch seen dies right after the k-th call of its point's kind."""

    points: list[tuple[str, int]] = field(default_factory=list)
    given: dict[str, tuple[str, int]] = field(default_factory=dict)  # record id -> its point, until reached

    def invocation(self, record: str | None) -> None:
        if record is not None and LAUNCH in record and record not in self.tried and self.points:
            self.given[record] = self.points.pop(0)
        super().invocation(record)

    def after_call(self, what: str) -> None:
        record = self.current
        if record is None or threading.get_ident() != self.thread or LAUNCH not in record:
            super().after_call(what)
            return
        self.tried[record][-1].append((what, True))
        made = self.calls.setdefault(record, [])
        made.append(what)
        point = (kind(what), sum(1 for call in made if kind(call) == kind(what)))
        if self.given.get(record) == point:
            del self.given[record]
        elif point[0] in self.anywhere:
            self.anywhere.remove(point[0])
        else:
            return
        self.kills.append((record.partition("/")[0], what))
        self.dead = True
        raise Killed(what)

    def launch_invocations(self, instance_id: str) -> list[list[tuple[str, bool]]]:
        return next((t for r, t in self.tried.items() if r.startswith(f"{instance_id}{LAUNCH}")), [])

    def launch_calls(self, instance_id: str) -> list[str]:
        return next((c for r, c in self.calls.items() if r.startswith(f"{instance_id}{LAUNCH}")), [])


@pytest.fixture(scope="module")
def launches() -> Iterator[tuple[Sandbox, Pump, LaunchKiller]]:
    options = SandboxOptions(
        root=ROOT,
        mode="process",
        sqs_sources_enabled=False,  # this test delivers the work queues itself
        schedules_enabled=False,  # no sweeper: redelivery alone must repair every crash
        parameters={
            **FAST,
            "ResumeGraceSeconds": "2",
            "HeartbeatMarginSeconds": "5",  # (see test_crash_recovery.py: a killed completer's claim)
            "EipMode": "allocate",
            "ReadinessGate": "true",
        },
        group=GroupSpec(size=0, hooks=default_hooks(heartbeat_timeout=1800)),
        node_ready_after=0.2,
    )
    killer = LaunchKiller()
    with Sandbox(options) as sandbox, counting_calls(killer):
        yield sandbox, Pump(sandbox, killer), killer


def launch(sandbox: Sandbox, pump: Pump, count: int, *, fresh: bool = True) -> list[str]:
    before = set(sandbox.asg.instances())
    sandbox.asg.set_desired(len(before) + count)
    # One record store for the whole wait, and a launch that is over read no more: the question is asked whenever
    # the pump finds the queues empty, and find_record for each instance (a new DynamoDB client and every action
    # read again, each) took most of the pump's thread: 47 s of the victims' 87 s, timed under load.
    lifecycle_records = records(sandbox)
    over: set[str] = set()

    def launched() -> bool:
        """Every new instance's launch action ended and its record finished (its last step may come after)."""
        new = set(sandbox.asg.instances()) - before
        if len(new) != count:
            return False
        actions = [a for a in sandbox.aws.actions() if a.instance_id in new and a.transition == LAUNCHING]
        if len(actions) != count or any(a.active for a in actions):
            return False
        for action in actions:
            if action.instance_id in over:
                continue
            found = lifecycle_records.get(f"{action.instance_id}/{Transition.LAUNCHING.short}/{action.token}")
            if found is None or not found.finished:
                return False
            over.add(action.instance_id)
        return True

    pump.until(launched, timeout=120, fresh=fresh, progress=sandbox.asg.instances)
    return sorted(set(sandbox.asg.instances()) - before)


def launch_action(sandbox: Sandbox, instance_id: str) -> Any:
    return next(
        a for a in sandbox.aws.actions() if a.instance_id == instance_id and a.transition == LAUNCHING
    )


def test_a_launch_killed_after_each_api_call_in_turn_still_gets_one_address_and_completes_once(
    launches: tuple[Sandbox, Pump, LaunchKiller], request: pytest.FixtureRequest
) -> None:
    sandbox, pump, killer = launches
    # Given one launch not counted (the first use of the cluster), then one in a new container, to learn the
    # calls a launch makes, and one more in the same container, to learn which a container makes once
    launch(sandbox, pump, 1)
    killer.calls.clear()
    fresh_container()
    (first,) = launch(sandbox, pump, 1, fresh=False)
    (second,) = launch(sandbox, pump, 1, fresh=False)
    fresh_container()
    calls = killer.launch_calls(first)
    assert {"ec2:AllocateAddress", "ec2:AssociateAddress", "autoscaling:CompleteLifecycleAction"} <= set(
        calls
    ), calls
    once_per_container = {kind(c) for c in calls} - {kind(c) for c in killer.launch_calls(second)}
    plan = calls_of_every_lifecycle(killer.launch_invocations(first))
    assert {kind(c) for c in plan} == {kind(c) for c in calls}, (plan, calls)

    # When as many launches run as there are kill points, the N-th seen killed right after the N-th point's call
    points = kill_points(plan, request.config)
    for index in points:
        call = plan[index]
        point = (kind(call), sum(1 for c in plan[: index + 1] if kind(c) == kind(call)))
        if point[0] in once_per_container:
            killer.anywhere.append(point[0])
        else:
            killer.points.append(point)
    killer.kills.clear()
    victims = launch(sandbox, pump, len(points))

    # Then most kill points were reached: where a launch's calls split into invocations depends on timing (an
    # address EC2 shows a read later, a node Ready at the gate's first look or its second), so on a loaded machine
    # a launch may make fewer calls of a kind than the baseline did
    unreached = len(killer.points) + len(killer.given) + len(killer.anywhere)
    assert unreached <= len(points) // 3, (killer.points, killer.given, killer.anywhere, killer.kills)
    # and every launch ended well: its action completed, CONTINUE, by a call (not a timeout), its record
    # finished; any call after that only a completion's repeat, or the heartbeat a completer that took over a
    # killed one's claim asks first (is the action still this token's? completion.py's _still_its_own), both
    # answered "no active lifecycle action"
    for victim in victims:
        action = launch_action(sandbox, victim)
        assert (action.outcome, action.result) == ("completed", "CONTINUE"), (victim, killer.kills)
        assert all(
            op in ("CompleteLifecycleAction", "RecordLifecycleActionHeartbeat")
            for _, _, op in action.late_calls
        ), action.late_calls
        record = record_of(sandbox, victim, Transition.LAUNCHING)
        assert record.finished, victim
    # each instance holds exactly one address of ours, and no address is left unassociated (leaked)
    addresses = sandbox.client("ec2").describe_addresses()["Addresses"]
    held = [a.get("InstanceId") for a in addresses if a.get("InstanceId") in victims]
    assert sorted(held) == sorted(victims), (held, killer.kills)
    assert [a for a in addresses if not a.get("AssociationId")] == [], killer.kills
    killed = {what.split(":", 1)[0] for _, what in killer.kills}
    assert {"kube", "dynamodb", "sqs", "autoscaling", "ec2"} <= killed, killed
