"""Two stacks deployed with one owner id by mistake (parameters copied from one stack to the next), each with a group
of its own. Stack "nodecycle-b" drains a node of its group under owner id "nodecycle", the id of stack "nodecycle":
its node's annotations and its budget slot name owner "nodecycle" and a lifecycle of nodecycle-b's records table.
Stack "nodecycle"'s sweeper must not take them for its own lifecycles that are over (their records are not in its
table): freed, the slot went to another node while that drain evicts, and the node's annotations went under a drain
in progress (invariants 1 and 3). It leaves them, and fails loudly, naming the owner id shared and the group."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodecycle.domain.ports.cluster import OWNER_ANNOTATION
from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.aws.group import GroupSpec
from tests.integration.lifecycle.harness import FAST, OWNER, node_of, pin, running, wait_for

pytestmark = pytest.mark.slow


def test_a_sweep_leaves_the_drain_of_another_stack_of_its_owner_id_and_fails_naming_the_shared_owner_id(
    tmp_path: Path,
) -> None:
    # Given stack "nodecycle" (owner id "nodecycle", no instance now) and stack "nodecycle-b" deployed with the same
    # owner id, managing group workers-b
    with running(size=0, workloads=None, log_dir=tmp_path) as sandbox:
        stack_b, group_b = sandbox.add_stack(
            "nodecycle-b",
            parameters={**FAST, "OwnerId": OWNER},
            group=GroupSpec(name="workers-b", size=1),
        )
        assert group_b is not None
        (theirs,) = sorted(group_b.wait_in_service(1, timeout=90))
        node = node_of(sandbox, theirs)
        # ...and nodecycle-b draining that node, held up by a pod whose PodDisruptionBudget will not let it go
        pin(sandbox, node, namespace="b")
        group_b.terminate(theirs)
        wait_for(lambda: _holders(sandbox) or None, 60, "nodecycle-b's slot")
        wait_for(lambda: _owner(sandbox, node) == OWNER or None, 60, "nodecycle-b's claim of its node")
        claimed = _annotations(sandbox, node)

        # When stack "nodecycle"'s sweeper runs
        sweeps = len(sandbox.runner.journal.invocations("SweeperFunction"))
        sandbox.runner.fire_schedule("SweeperFunction")
        swept = wait_for(
            lambda: [
                i for i in sandbox.runner.journal.invocations("SweeperFunction")[sweeps:] if i.finished_at
            ],
            60,
            "stack nodecycle's sweep",
        )

        # Then nodecycle-b's slot, cordon and annotations are as they were
        assert [(h["node"], h["owner"]) for h in _holders(sandbox)] == [(node, OWNER)]
        assert _annotations(sandbox, node) == claimed
        found = sandbox.kube.get_object("nodes", node)
        assert found is not None
        assert found["spec"].get("unschedulable") is True
        # ...and the sweep failed (its dead-letter alarm), its log naming the owner id shared and the other group
        assert [i for i in swept if not i.ok], "the sweep succeeded, silent about the owner id it shares"
        told = _errors(tmp_path, "nodecycle-SweeperFunction")
        assert any("workers-b" in e and f"owner id {OWNER} is another stack's" in e for e in told), told
        assert stack_b.journal.invocations("DrainFunction")


def _errors(logs: Path, function: str) -> list[str]:
    """The messages the function logged at level ERROR (its JSON lines in the sandbox's logs)."""
    found = []
    for log in logs.glob("*.log"):
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("{") and '"level":"ERROR"' in line:
                entry = json.loads(line)
                if entry.get("function_name") == function:
                    found.append(str(entry.get("message")))
    return found


def _owner(sandbox: Sandbox, node: str) -> str | None:
    return _annotations(sandbox, node).get(OWNER_ANNOTATION)


def _annotations(sandbox: Sandbox, node: str) -> dict[str, str]:
    found = sandbox.kube.get_object("nodes", node)
    return {} if found is None else dict(found["metadata"].get("annotations") or {})


def _holders(sandbox: Sandbox) -> list[dict[str, str]]:
    configmap = sandbox.kube.get_object("configmaps", "nodecycle-budget", "nodecycle") or {}
    holders: list[dict[str, str]] = json.loads((configmap.get("data") or {}).get("budget.json", "{}")).get(
        "holders", []
    )
    return holders
