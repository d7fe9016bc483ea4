"""A slot handed over in the invocation that freed it, two crashes in a row: the waiter's own chain of messages cut
first (its container killed right after the write that put it in line, before its retry was sent), then the
releasing invocation killed in the hand-over (engine.py: the waiter's step run there, once the releaser's record is
committed): right after that commit (the waiter kept, not run yet), after the waiter's commit of its slot, or after
its cordon. Nothing of the waiter's is left in the queues but the watch its redelivered message sent, which finds
its seq moved on and ends (or comes back only after the waiter's own retry was due, a minute here); the releaser's
redelivery finds its own lifecycle over. That delivery must pick the waiter up (invariants 5 and 1; the work
conservation of the budget's line): no sweeper runs here, and without it the waiter held the slot idle until the
next sweep (SweepIntervalMinutes) or its own retry."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from botocore.client import BaseClient
from kubernetes.client import rest

from nodecycle.domain.model import Step
from nodecycle_sandbox import Sandbox, SandboxOptions
from nodecycle_sandbox.aws.group import GroupSpec, default_hooks
from nodecycle_sandbox.checks import completed_before_drained, cordon_peaks, released_at, unsettled
from tests.integration.lifecycle.harness import FAST, ROOT, node_of, record_of
from tests.integration.lifecycle.test_crash_recovery import (
    Killed,
    Killer,
    Pump,
    action_of,
    counting_calls,
    launch,
    terminate_all,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:Dimension 'owner' has already been added"),
]

# How long the waiter's lifecycle may stand still after the second crash: a redelivery (1 s here) and a watch
# (ResumeGraceSeconds, 2 s here) repair it in seconds; the next sweep, on AWS, minutes later.
REPAIRED_WITHIN = 30.0

# A rule of a kill: given the record id of the message in hand, the calls its invocation made so far (the last one
# just answered: "dynamodb:PutItem", "kube:PATCH /v1/nodes/ip-...") and, for a PutItem, the record id it wrote and
# its item, whether the container dies right after that call
Rule = Callable[[str, list[str], str | None, dict[str, Any]], bool]


@contextmanager
def killed_after(killer: Killer, rules: list[Rule]) -> Iterator[list[tuple[str, str]]]:
    """Kill the container right after a call that a rule of ``rules`` picks; each rule strikes once. Yields the
    kills: (the message's record id, the call)."""
    # (counting_calls's, installed before: the calls are counted, then judged here)
    aws_call = BaseClient._make_api_call  # type: ignore[attr-defined]
    kube_call = rest.RESTClientObject.request
    kills: list[tuple[str, str]] = []

    def judged(what: str, item: dict[str, Any]) -> None:
        current = killer.current
        if current is None or killer.dead or threading.get_ident() != killer.thread:
            return
        made = [call for call, _ in killer.tried[current][-1]]
        written = str((item.get("id") or {}).get("S", "")) if item else None
        rule = next((r for r in rules if r(current, made, written, item)), None)
        if rule is None:
            return
        rules.remove(rule)
        kills.append((current, what))
        killer.dead = True
        raise Killed(f"after {what} in the invocation of {current}")

    def aws(client: Any, operation: str, params: Any) -> Any:
        result = aws_call(client, operation, params)
        item = (params.get("Item") or {}) if operation == "PutItem" else {}
        judged(f"{client.meta.service_model.service_name}:{operation}", item)
        return result

    def kube(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        result = kube_call(self, method, url, *args, **kwargs)
        judged(f"kube:{method} {url.split('?')[0].split('/api', 1)[-1]}", {})
        return result

    BaseClient._make_api_call = aws  # type: ignore[attr-defined]
    rest.RESTClientObject.request = kube  # type: ignore[method-assign]
    try:
        yield kills
    finally:
        BaseClient._make_api_call = aws_call  # type: ignore[attr-defined]
        rest.RESTClientObject.request = kube_call  # type: ignore[method-assign]


def released(made: list[str]) -> bool:
    """Whether the invocation wrote the budget's ConfigMap: after the waiter is in line, only a release does."""
    return any(call.startswith("kube:PUT") and "/configmaps/" in call for call in made)


class Line:
    """The waiter, once a lifecycle's first ask put it in line (its container killed right after that write, its
    retry never sent), and the kill point of the releasing invocation that hands it the slot."""

    def __init__(self, point: str, nodes: dict[str, str]) -> None:
        self.point = point
        self.nodes = nodes  # instance id -> its node
        self.waiter: str | None = None

    def in_line(self, current: str, made: list[str], written: str | None, item: dict[str, Any]) -> bool:
        step = (item.get("step") or {}).get("S")
        if written == current and step == Step.ACQUIRE_SLOT.value and "slot_waiting_since" in item:
            self.waiter = written
            return True
        return False

    def hand_over(self, current: str, made: list[str], written: str | None, item: dict[str, Any]) -> bool:
        if self.waiter is None or current == self.waiter or not released(made):
            return False
        last = made[-1]
        if self.point == "the-releasers-commit":  # (the waiter kept to run here, not run yet)
            return last == "dynamodb:PutItem" and written == current
        if self.point == "the-waiters-slot":  # (its slot taken, committed: its cordon next)
            return last == "dynamodb:PutItem" and written == self.waiter
        # the-waiters-cordon: its node cordoned and annotated, not committed
        node = self.nodes[self.waiter.split("/", 1)[0]]
        return last.startswith("kube:PATCH") and last.endswith(f"/nodes/{node}")


@pytest.fixture(scope="module")
def one_slot() -> Iterator[tuple[Sandbox, Pump, Killer]]:
    options = SandboxOptions(
        root=ROOT,
        mode="process",
        sqs_sources_enabled=False,  # this test delivers the work queues itself
        schedules_enabled=False,  # no sweeper: redelivery alone must repair both crashes
        parameters={
            **FAST,
            "ResumeGraceSeconds": "2",
            "HeartbeatMarginSeconds": "5",  # (see test_crash_recovery.py: a killed completer's claim)
            "BudgetMaxUnavailable": "1",
            "BudgetMaxUnavailablePerZone": "",
            # The waiter asks again a minute later: its watch (the redelivery of the message the first crash
            # cut) comes back after that, when the slot was handed over long since
            "BudgetRetrySeconds": "60",
        },
        group=GroupSpec(size=0, hooks=default_hooks(heartbeat_timeout=1800)),
        node_ready_after=0.2,
        node_remove_after=3600.0,  # (see test_crash_recovery.py: the node's last state stays visible)
    )
    killer = Killer()
    with Sandbox(options) as sandbox, counting_calls(killer):
        pump = Pump(sandbox, killer)
        # the budget's first use (seeded from the nodes: calls no later lifecycle makes)
        (warm_up,) = launch(sandbox, pump, 1)
        terminate_all(sandbox, pump, [warm_up], timeout=60)
        yield sandbox, pump, killer


@pytest.mark.parametrize("point", ["the-releasers-commit", "the-waiters-slot", "the-waiters-cordon"])
def test_a_waiter_cut_off_then_killed_in_the_hand_over_is_picked_up_by_the_releasers_redelivery(
    one_slot: tuple[Sandbox, Pump, Killer], point: str
) -> None:
    sandbox, pump, killer = one_slot
    # Given two nodes for one slot
    pair = launch(sandbox, pump, 2)

    # When both terminate at once: the one that finds no room is killed right after the write that puts it in
    # line (its retry never sent), and the one holding the slot, once done, is killed in the invocation that
    # releases it and hands it over, right after the call of ``point``
    line = Line(point, {instance: node_of(sandbox, instance) for instance in pair})
    with killed_after(killer, [line.in_line, line.hand_over]) as kills:
        started = time.monotonic()
        try:
            terminate_all(sandbox, pump, pair, timeout=REPAIRED_WITHIN)
        except TimeoutError as error:
            budget = sandbox.kube.get_object("configmaps", "nodecycle-budget", "nodecycle")
            held = budget and budget["data"].get("budget.json")
            raise AssertionError(f"{error}; kills: {kills}; budget: {held}") from None
        took = time.monotonic() - started

    # Then both crashes struck, and both lifecycles ended well, one node drained at a time
    assert line.waiter is not None
    assert [current for current, _ in kills][:1] == [line.waiter], kills  # (the waiter's own invocation)
    assert len(kills) == 2, kills
    assert kills[1][0] != line.waiter, kills  # (the releaser's)
    actions = sandbox.aws.actions()
    assert unsettled([a for a in actions if a.instance_id in pair]) == []
    for instance in pair:
        action = action_of(sandbox, instance)
        assert (action.outcome, action.result) == ("completed", "CONTINUE"), instance
        record = record_of(sandbox, instance)
        assert record.finished, instance
        assert record.outcome == "drained", (instance, record.outcome)
    history = sandbox.kube.history()
    assert completed_before_drained(history, actions) == []
    peak, _ = cordon_peaks(history, released_at(history, actions))
    assert peak <= 1, peak
    budget = sandbox.kube.get_object("configmaps", "nodecycle-budget", "nodecycle")
    assert budget is not None
    document = json.loads(budget["data"]["budget.json"])
    assert (document["holders"], document["waiters"]) == ([], [])
    # well before the waiter's own retry would have come (a minute): the redelivery repaired it, not a retry
    assert took < 60, took
