"""Stack "nodecycle"'s sweeper while stack "nodecycle-b" is mid-drain of a node of its own group, with Elastic IPs
of its own: the sweep frees what is its own owner's (a leaked address) and nothing of the other stack's (its
addresses on its instances, one it leaked, its cordon, annotations and slot) nor an address of no owner."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nodecycle.domain.ports.addresses import ALLOCATED_AT_TAG, INSTANCE_TAG, OWNER_TAG
from nodecycle.domain.ports.cluster import OWNER_ANNOTATION
from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.aws.group import GroupSpec
from tests.integration.lifecycle.harness import FAST, node_of, pin, running, wait_for

pytestmark = pytest.mark.slow

DAY_AGO = (datetime.now(UTC) - timedelta(days=1)).isoformat(timespec="seconds")


def test_a_sweep_while_the_other_stack_drains_frees_its_own_leak_and_nothing_of_the_other_stack() -> None:
    # Given stack "nodecycle" (no Elastic IPs now) and stack "nodecycle-b", which gives its instances addresses
    # (no instance of its own: its sweep of addresses and of the cluster does not look at its group)
    with running(size=0, workloads=None) as sandbox:
        stack_b, group_b = sandbox.add_stack(
            "nodecycle-b",
            parameters={**FAST, "OwnerId": "nodecycle-b", "EipMode": "allocate"},
            group=GroupSpec(name="workers-b", size=2),
        )
        assert group_b is not None
        theirs = sorted(group_b.wait_in_service(2, timeout=90))
        ec2 = sandbox.client("ec2")
        on_theirs = wait_for(lambda: _associations(ec2, theirs), 60, "stack-b's addresses on its instances")
        # ...a pod on one of B's nodes that its budget will not let go, and B draining that node
        held = theirs[0]
        held_node = node_of(sandbox, held)
        pin(sandbox, held_node, namespace="b")
        group_b.terminate(held)
        wait_for(
            lambda: _owner(sandbox, held_node) == "nodecycle-b" or None, 60, "stack-b's claim of its node"
        )
        # ...and addresses left behind a day ago: one of each stack's (allocated for instances long gone), one of
        # no owner
        mine = _allocate(
            ec2, {OWNER_TAG: "nodecycle", INSTANCE_TAG: "i-0000000000000dead", ALLOCATED_AT_TAG: DAY_AGO}
        )
        leaked_b = _allocate(
            ec2, {OWNER_TAG: "nodecycle-b", INSTANCE_TAG: "i-0000000000000beef", ALLOCATED_AT_TAG: DAY_AGO}
        )
        nobodys = _allocate(ec2, {ALLOCATED_AT_TAG: DAY_AGO})

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

        # Then the sweep succeeded (nothing of another owner's was tried: IAM would refuse its release, and the
        # sweep fail, the address left where it is), its own leak is released, and everything of stack-b's (and
        # of nobody) is as it was
        assert [i.error for i in swept if not i.ok] == []
        left = {a["AllocationId"]: a.get("InstanceId") or None for a in ec2.describe_addresses()["Addresses"]}
        assert mine not in left
        assert {leaked_b, nobodys} <= set(left)
        assert {allocation: left.get(allocation) for allocation in on_theirs} == on_theirs
        assert _owner(sandbox, held_node) == "nodecycle-b"
        node = sandbox.kube.get_object("nodes", held_node)
        assert node is not None
        assert node["spec"].get("unschedulable") is True
        holders = json.loads(_budget(sandbox))["holders"]
        assert [(h["node"], h["owner"]) for h in holders] == [(held_node, "nodecycle-b")]
        assert stack_b.journal.invocations("EipFunction")  # stack-b's own functions gave the addresses


def _associations(ec2: Any, instances: list[str]) -> dict[str, str] | None:
    """Stack-b's addresses on ``instances`` (allocation id -> instance), once each instance has one."""
    found = {
        a["AllocationId"]: a["InstanceId"]
        for a in ec2.describe_addresses(Filters=[{"Name": f"tag:{OWNER_TAG}", "Values": ["nodecycle-b"]}])[
            "Addresses"
        ]
        if a.get("InstanceId") in instances
    }
    return found if set(found.values()) == set(instances) else None


def _allocate(ec2: Any, tags: dict[str, str]) -> str:
    specification: Any = [
        {"ResourceType": "elastic-ip", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
    ]
    return str(ec2.allocate_address(Domain="vpc", TagSpecifications=specification)["AllocationId"])


def _owner(sandbox: Sandbox, node: str) -> str | None:
    found = sandbox.kube.get_object("nodes", node)
    return None if found is None else (found["metadata"].get("annotations") or {}).get(OWNER_ANNOTATION)


def _budget(sandbox: Sandbox) -> str:
    configmap = sandbox.kube.get_object("configmaps", "nodecycle-budget", "nodecycle") or {}
    return str((configmap.get("data") or {}).get("budget.json", "{}"))
