"""Drains that wait for one budget slot, a Lambda killed after each write in turn: redelivery and the sweeper finish
every lifecycle, and at no moment do two nodes hold the slot (invariants 1, 2, 5, 10).

test_crash_recovery.py kills a terminate at each of its calls with a budget of 100%: nothing waits, so neither a
waiter's first ask, its wake-up nor the hand-over of a freed slot (the releasing invocation running the waiter's
step itself, engine.py) is ever cut short. Here the budget is one node: every lifecycle but the first waits, and
each release hands the slot over, so the kills fall in the middle of those too. The calls a lifecycle makes
depend on where it stood in the line (how often it asked, whether it ran a waiter's step), so a kill point is a
call's kind and number in the baseline: each write of the waiter's first ask for the slot and of the release
and hand-over (from the completion on, the waiter's steps run inline included), reached by most lifecycles.

The sweeper runs on a compressed schedule. A waiter whose own chain of messages a first crash cut (its
redelivery left a watch) and whose step a second crash then cut short in the releasing invocation has no message
left (the watch finds its seq moved on and ends): the releaser's redelivery picks it up, from the mark its commit
left (dispatch.HandOver; test_crash_hand_over_twice.py), not the sweeper.

`make test` kills at a sample of these points (test_crash_recovery.py's `kill_points`), `make test-crash` at
every one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from nodecycle.domain.ports.cluster import IN_PROGRESS_ANNOTATION, OWNER_ANNOTATION
from nodecycle_sandbox import Sandbox, SandboxOptions
from nodecycle_sandbox.aws.group import GroupSpec, default_hooks
from nodecycle_sandbox.checks import completed_before_drained, cordon_peaks, released_at, unsettled
from tests.integration.lifecycle.harness import FAST, ROOT, node_of, record_of
from tests.integration.lifecycle.test_crash_recovery import (
    Killer,
    Pump,
    _read_only,
    action_of,
    calls_of_every_lifecycle,
    counting_calls,
    fresh_container,
    kill_points,
    kind,
    launch,
    terminate_all,
)

# The sweeper's schedule, compressed: what redelivery does not repair is the sweeper's to resume, with the slot
# held meanwhile
SWEEP_EVERY = 15.0

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:Dimension 'owner' has already been added"),
]


@pytest.fixture(scope="module")
def contended() -> Iterator[tuple[Sandbox, Pump, Killer]]:
    options = SandboxOptions(
        root=ROOT,
        mode="process",
        sqs_sources_enabled=False,  # this test delivers the work queues itself
        schedules_enabled=False,  # the pump runs the sweeper itself, on its compressed schedule
        parameters={
            **FAST,
            "ResumeGraceSeconds": "2",
            "HeartbeatMarginSeconds": "5",  # (see test_crash_recovery.py: a killed completer's claim)
            "EipMode": "allocate",
            "BudgetMaxUnavailable": "1",
            "BudgetMaxUnavailablePerZone": "",
            "BudgetRetrySeconds": "2",
        },
        group=GroupSpec(size=0, hooks=default_hooks(heartbeat_timeout=1800)),
        node_ready_after=0.2,
        node_remove_after=3600.0,  # (see test_crash_recovery.py: the node's last state stays visible)
    )
    killer = Killer()
    with Sandbox(options) as sandbox, counting_calls(killer):
        yield sandbox, Pump(sandbox, killer, sweep_every=SWEEP_EVERY), killer


def test_drains_in_line_for_one_slot_killed_after_each_write_of_the_ask_and_hand_over_all_finish_one_at_a_time(
    contended: tuple[Sandbox, Pump, Killer], request: pytest.FixtureRequest
) -> None:
    sandbox, pump, killer = contended
    # Given the budget's first use (not counted), then two lifecycles at once in a new container: one holds the
    # slot and hands it over to the other when it is done. No sweep meanwhile: a sweep between the holder's
    # completion and its release frees the slot of a lifecycle that is over (sweep/budget_entries.py) and wakes
    # the waiter through the wake lane, and the baseline then had no hand-over to kill in ("the waiter's drain did
    # not run in the releasing invocation": 3 runs of 9 under load, the 2 timed ones each with such a sweep)
    pump.sweep_every = None
    warm_up, first, second = launch(sandbox, pump, 3)
    terminate_all(sandbox, pump, [warm_up], timeout=60)
    killer.calls.clear()
    fresh_container()
    terminate_all(sandbox, pump, [first, second], timeout=90, fresh=False)
    fresh_container()
    holder = max((first, second), key=lambda i: len(killer.terminate_calls(i)))
    plan = calls_of_every_lifecycle(killer.terminate_invocations(holder))
    assert len(plan) >= 15, plan

    ask = next(i for i, call in enumerate(plan) if call.startswith("kube:PUT") and "/configmaps/" in call)
    completion = plan.index("autoscaling:CompleteLifecycleAction")
    writes = [ask, *(i for i in range(completion, len(plan)) if not _read_only(plan[i]))]
    points = [writes[i] for i in kill_points([plan[i] for i in writes], request.config)]
    assert any(call.startswith("kube:POST") and call.endswith("/eviction") for call in plan[completion:]), (
        "the waiter's drain did not run in the releasing invocation",
        plan,
    )

    # When as many lifecycles wait in line, the N-th killed right after the write of the N-th point (the sweeper
    # on its schedule again, from now on)
    pump.sweep_every, pump.swept_at = SWEEP_EVERY, time.monotonic()
    victims = launch(sandbox, pump, len(points))
    nodes = {victim: node_of(sandbox, victim) for victim in victims}
    killer.calls.clear()
    killer.kills.clear()
    for victim, index in zip(victims, points, strict=True):
        call = plan[index]
        killer.kill_at[victim] = (kind(call), sum(1 for c in plan[: index + 1] if kind(c) == kind(call)))
    try:
        terminate_all(sandbox, pump, victims, timeout=120)
    except TimeoutError as error:
        # (what holds the slot, and who waits for it, tells a stalled line from a slow machine)
        budget = sandbox.kube.get_object("configmaps", "nodecycle-budget", "nodecycle")
        held = budget and budget["data"].get("budget.json")
        raise TimeoutError(f"{error}; kills: {killer.kills}; budget: {held}; sweeps: {pump.sweeps}") from None

    # Then most kills struck (where a lifecycle stood in the line changes its calls a little), and every
    # lifecycle ended well
    assert len(killer.kills) >= len(points) * 2 // 3, (killer.kills, killer.kill_at)
    actions = sandbox.aws.actions()
    assert unsettled([a for a in actions if a.instance_id in victims]) == []
    for victim in victims:
        action = action_of(sandbox, victim)
        assert (action.outcome, action.result) == ("completed", "CONTINUE"), (victim, killer.kills)
        record = record_of(sandbox, victim)
        assert record.finished, (victim, killer.kills)
        assert record.outcome == "drained", (victim, record.outcome, killer.kills)
    history = sandbox.kube.history()
    assert completed_before_drained(history, actions) == []
    # never two nodes cordoned at once for the one slot (a node counts until its action was completed)
    peak, _ = cordon_peaks(history, released_at(history, actions))
    assert peak <= 1, (peak, killer.kills)
    budget = sandbox.kube.get_object("configmaps", "nodecycle-budget", "nodecycle")
    assert budget is not None
    document = json.loads(budget["data"]["budget.json"])
    assert (document["holders"], document["waiters"]) == ([], [])
    for victim, node in nodes.items():
        states = [e.object for e in history if e.kind == "Node" and e.name == node and not e.removed]
        last = states[-1]["metadata"].get("annotations") or {}
        assert OWNER_ANNOTATION not in last, (victim, killer.kills)
        assert IN_PROGRESS_ANNOTATION not in last, (victim, killer.kills)
    addresses = sandbox.client("ec2").describe_addresses()["Addresses"]
    assert [a for a in addresses if a.get("InstanceId") in victims or not a.get("AssociationId")] == []
