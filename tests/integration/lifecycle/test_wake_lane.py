"""A freed budget slot reaches its waiter through the wake lane, whatever the drain queue holds: SQS has no
priority within a queue, so a wake-up sent to the drain queue would wait behind every poll there."""

from __future__ import annotations

import json

import pytest

from nodecycle_sandbox import Sandbox
from tests.integration.lifecycle.harness import (
    find_record,
    held_by_a_budget,
    node_of,
    running,
    wait_for,
)

pytestmark = pytest.mark.slow


def cordoned(sandbox: Sandbox, node: str) -> bool:
    return bool(((sandbox.kube.get_object("nodes", node) or {}).get("spec") or {}).get("unschedulable"))


def handled(sandbox: Sandbox, function: str, record_id: str, after: float = 0.0) -> list[str]:
    """The sources of ``function``'s invocations since ``after`` that carried a message of ``record_id``."""
    return [
        invocation.source
        for invocation in sandbox.runner.journal.invocations(function=function)
        if invocation.started_at >= after
        and any(
            json.loads(r["body"]).get("record_id") == record_id
            for r in (invocation.event or {}).get("Records", [])
        )
    ]


def test_a_waiter_woken_by_a_freed_slot_is_cordoned_while_the_drain_function_takes_nothing_from_its_queue() -> (
    None
):
    # Given a drain held by a pod whose disruption budget never allows its eviction, holding the one slot,
    # and another node waiting for it (its own retry minutes away: only a wake-up can move it sooner)
    parameters = {"BudgetMaxUnavailable": "1", "DrainConcurrency": "2", "BudgetRetrySeconds": "300"}
    with running(parameters=parameters, size=2) as sandbox:
        _, holder = held_by_a_budget(sandbox)
        waiter = next(i for i in sandbox.asg.in_state("InService") if i != holder)
        holder_node, waiter_node = node_of(sandbox, holder), node_of(sandbox, waiter)
        sandbox.asg.terminate(holder)
        wait_for(lambda: cordoned(sandbox, holder_node), 30, "the holder's node cordoned")
        sandbox.asg.terminate(waiter)
        wait_for(
            lambda: (r := find_record(sandbox, waiter)) is not None and r.slot_waiting_since is not None,
            30,
            "the other node waiting for a slot",
        )
        # ...and the drain function's containers all busy: its queue's mapping takes nothing from it (the
        # limit of a backlog of polls ahead of any message sent now)
        sandbox.runner.set_sources_enabled("DrainFunction", False)
        paused_at = sandbox.runner.journal.invocations()[-1].finished_at

        # When the holder's instance goes (ended in EC2 by hand), its node with it as the cloud controller deletes
        # it, and the sweeper frees its slot and wakes the waiter. (A node deleted while its instance runs would
        # not do: its pods stay bound to its name, the PodDisruptionBudget's pod with them, and its drain still
        # evicts them under its slot.)
        sandbox.client("ec2").terminate_instances(InstanceIds=[holder])
        sandbox.kube.remove_node(holder_node)
        sandbox.runner.fire_schedule("SweeperFunction")

        # Then the waiter is cordoned all the same, by the wake lane's function (the journal has an
        # invocation once it has ended: after its inline steps)
        wait_for(lambda: cordoned(sandbox, waiter_node), 30, "the waiter's node cordoned")
        record = find_record(sandbox, waiter)
        assert record is not None
        wait_for(
            lambda: handled(sandbox, "WakeFunction", record.id, after=paused_at),
            30,
            "the wake function's invocation in the journal",
        )
        assert handled(sandbox, "WakeFunction", record.id, after=paused_at) == ["sqs:WakeQueue"]
        assert handled(sandbox, "DrainFunction", record.id, after=paused_at) == []

        # ...and what its drain sends next goes back to the drain queue, handled there once it moves again
        sandbox.runner.set_sources_enabled("DrainFunction", True)
        wait_for(
            lambda: handled(sandbox, "DrainFunction", record.id, after=paused_at),
            30,
            "the woken drain's next step on the drain queue",
        )
        assert handled(sandbox, "WakeFunction", record.id, after=paused_at) == ["sqs:WakeQueue"]
