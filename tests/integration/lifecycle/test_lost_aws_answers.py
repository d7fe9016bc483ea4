"""Lifecycles end to end while the answer of one of the functions' AWS calls is lost (``aws-lost-answer``: the
call lands, an address allocated, an action completed, an item written, a message sent, and is then answered with
the service's 5xx, so that botocore's retry meets what the first attempt did). For each operation a launch with an
Elastic IP (``EipMode`` allocate, and pool) and then its terminate with a drain see the operation's first answers
lost. What a user sees stays as without the fault: each action completed once with CONTINUE, by nodecycle and
recorded as its own (no LifecycleActionsSettledElsewhere, no settled_elsewhere); the instance in service with one
address of this owner while it runs, none after; no address of the owner left unassociated but a pool's, not even
the first allocation of a lost AllocateAddress (its retry allocated a second one): the launch releases it as a
spare of its instance (the sweeper would, past its grace, were it not listed yet). One sandbox per mode serves
every operation's case, each starting once the one before is over (``wait_quiet``)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from nodecycle.domain.model import ADDRESSES_LEFT, SETTLED_ELSEWHERE, Transition
from nodecycle.domain.ports.addresses import INSTANCE_TAG, OWNER_TAG, POOL_TAG
from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.aws.group import wait_for
from nodecycle_sandbox.aws.records import TERMINATING, ActionRecord
from nodecycle_sandbox.faults import Fault
from tests.integration.lifecycle.harness import (
    OWNER,
    POOL,
    pool_address,
    record_of,
    running,
    wait_quiet,
)

pytestmark = pytest.mark.slow

MODES = {
    "allocate": {"EipMode": "allocate"},
    "pool": {"EipMode": "pool", "EipPoolName": POOL},
}
# A lost answer is a 5xx to the caller: botocore backs off before each attempt again (up to 1 + 2 + 4 s for three
# lost): 27 s of the file's 145 on a loaded machine. The containers sleep a twentieth of it: the attempts, their
# answers and what the handlers make of them stay the same (nothing here judges the time a retry takes).
BACKOFF = {"SANDBOX_AWS_BACKOFF_SCALE": "0.05"}
POOL_SIZE = 3  # the pool's addresses: one for the instance in service, one per launch, one spare
# One deployment whose pods the terminate's drain evicts (a pod of it put on each new node: see below).
WORKLOADS: dict[str, Any] = {
    "namespaces": ["shop"],
    "daemonSets": [{"name": "node-agent", "namespace": "kube-system"}],
    "deployments": [
        {
            "name": "web",
            "namespace": "shop",
            "replicas": 2,
            "shutdownSeconds": 0.1,
            "pdb": {"maxUnavailable": 1},
        }
    ],
}
# What a lifecycle's record says of its end without any fault
OUTCOMES = {Transition.LAUNCHING: "node-ready", Transition.TERMINATING: "drained"}
# (operation, how many of its first answers are lost, the modes it is tried in: the address calls in each mode
# that makes them, the others, whose handling does not depend on the mode, in allocate mode alone: the suite's time)
CASES = [
    ("ec2.AllocateAddress", 1, ("allocate",)),
    ("ec2.AssociateAddress", 2, ("allocate", "pool")),
    ("ec2.DisassociateAddress", 1, ("allocate", "pool")),
    ("ec2.ReleaseAddress", 2, ("allocate",)),
    ("autoscaling.CompleteLifecycleAction", 1, ("allocate",)),
    ("autoscaling.RecordLifecycleActionHeartbeat", 3, ("allocate",)),
    ("dynamodb.PutItem", 2, ("allocate",)),
    ("dynamodb.TransactWriteItems", 3, ("allocate",)),
    ("sqs.SendMessage", 1, ("allocate",)),
]


@contextmanager
def eip_sandbox(mode: str, logs: Path) -> Iterator[Sandbox]:
    """One instance in service with its Elastic IP, in ``mode`` (pool: POOL_SIZE addresses in the pool ``POOL``,
    put before the launch), the functions' logs in ``logs``."""
    with running(
        size=0,
        parameters=MODES[mode],
        workloads=None,
        node_remove_after=0.2,
        log_dir=logs,
        settings=BACKOFF,
    ) as sandbox:
        if mode == "pool":
            for _ in range(POOL_SIZE):
                pool_address(sandbox)
        sandbox.asg.set_desired(1)
        sandbox.asg.wait_in_service(1, timeout=90)
        sandbox.kube.seed(WORKLOADS)
        sandbox.kube.settle(timeout=30)
        yield sandbox


def in_service(sandbox: Sandbox, instance: str) -> bool:
    """Whether the group lists the instance InService, as DescribeAutoScalingGroups says; asked only once the
    emulation's record has it come into service (an instance launched now is InService from that moment on, until
    it goes): a launch's seconds through lost answers and the readiness gate are waited out on the records over the
    pipe, not on a DescribeAutoScalingGroups every 50 ms (5 ms of CPU each, in this process and the AWS process)."""
    came = any(h.instance_id == instance and h.in_service_at is not None for h in sandbox.aws.instances())
    return came and instance in sandbox.asg.in_state("InService")


@pytest.fixture(scope="module")
def eip(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], tuple[Sandbox, Path]]]:
    """The sandbox of a mode (see ``eip_sandbox``) and the directory of its functions' logs: made at the mode's
    first case, stopped at the next mode's (the cases of a mode run one after another) or at the module's end.
    Not a fixture parametrised indirectly: pytest keys such a fixture by the index of the case's parameters,
    not by the mode, and made a sandbox for every case (11 where 2 serve)."""
    current: list[tuple[str, Sandbox, Path]] = []
    with ExitStack() as stack:

        def sandbox_of(mode: str) -> tuple[Sandbox, Path]:
            if current and current[0][0] == mode:
                return current[0][1:]
            stack.close()
            current.clear()
            logs = tmp_path_factory.mktemp(f"logs-{mode}")
            current.append((mode, stack.enter_context(eip_sandbox(mode, logs)), logs))
            return current[0][1:]

        yield sandbox_of


def owned(sandbox: Sandbox) -> list[dict[str, Any]]:
    """This owner's addresses, as EC2 describes them."""
    found = sandbox.client("ec2").describe_addresses(
        Filters=[{"Name": f"tag:{OWNER_TAG}", "Values": [OWNER]}]
    )
    return list(found["Addresses"])


def tags(address: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in address.get("Tags", [])}


def action_of(sandbox: Sandbox, instance_id: str, transition: str) -> ActionRecord | None:
    return next(
        (a for a in sandbox.aws.actions() if a.instance_id == instance_id and a.transition == transition),
        None,
    )


def assert_completed_by_nodecycle(sandbox: Sandbox, instance_id: str, transition: Transition) -> None:
    """The instance's action of ``transition``: completed once, with CONTINUE, and no call of nodecycle naming it
    after it ended but the retries of a lost completion; its record finished as nodecycle's own completion."""
    action = action_of(sandbox, instance_id, transition.value)
    assert action is not None
    assert (action.outcome, action.result) == ("completed", "CONTINUE"), action
    record = wait_for(
        lambda: (r := record_of(sandbox, instance_id, transition)).finished and r,
        30,
        f"the {transition.short} lifecycle of {instance_id} over",
    )
    assert record.result is not None
    assert record.result.value == "CONTINUE", record
    assert record.outcome == OUTCOMES[transition], record
    # (LifecycleActionsSettledElsewhere is counted exactly where this is written)
    assert SETTLED_ELSEWHERE not in record.extra, record
    assert ADDRESSES_LEFT not in record.extra, record  # (nothing left to the sweeper)


def log_ends(logs: Path) -> dict[Path, int]:
    """Where each function's log (the sandbox's ``log_dir``) ends now."""
    return {log: log.stat().st_size for log in logs.glob("*.log")}


def metrics_since(logs: Path, ends: dict[Path, int]) -> Counter[str]:
    """The metrics the functions emitted since ``ends`` (their Embedded Metric Format lines), summed by name."""
    found: Counter[str] = Counter()
    for log in logs.glob("*.log"):
        with log.open("rb") as text:
            text.seek(ends.get(log, 0))
            found += _metrics(text.read().decode("utf-8", "replace"))
    return found


def _metrics(output: str) -> Counter[str]:
    found: Counter[str] = Counter()
    for line in output.splitlines():
        if not line.startswith('{"_aws"'):
            continue
        document = json.loads(line)
        for directive in document["_aws"]["CloudWatchMetrics"]:
            for metric in directive["Metrics"]:
                found[metric["Name"]] += int(sum(document[metric["Name"]]))
    return found


@pytest.mark.parametrize(
    ("mode", "operation", "limit"),
    # (the cases of each mode together: one sandbox per mode; an operation only in the modes that call it)
    [
        pytest.param(mode, op, limit, id=f"{mode}-{op.split('.')[1]}")
        for mode in MODES
        for op, limit, modes in CASES
        if mode in modes
    ],
)
def test_a_launch_and_its_terminate_come_out_as_without_the_lost_answers(
    eip: Callable[[str], tuple[Sandbox, Path]], mode: str, operation: str, limit: int
) -> None:
    sandbox, logs = eip(mode)
    wait_quiet(sandbox)
    (holder,) = sandbox.asg.in_state("InService")
    ends = log_ends(logs)

    # Given the first ``limit`` answers of ``operation`` to the functions lost
    lost = [Fault("lost", "aws-lost-answer", target=operation, limit=limit)]
    sandbox.arm_faults(lost, seed=1)
    try:
        # When the group launches an instance
        sandbox.asg.set_desired(2)
        launched = wait_for(
            lambda: next(iter(set(sandbox.asg.instances()) - {holder}), None), 30, "the launch"
        )
        wait_for(lambda: in_service(sandbox, launched), 60, f"{launched} in service")

        # Then its launch action was completed by nodecycle, once, with CONTINUE
        assert_completed_by_nodecycle(sandbox, launched, Transition.LAUNCHING)
        # and it runs with exactly one address of this owner (as does the instance in service before)
        running_on = [str(a["InstanceId"]) for a in owned(sandbox) if a.get("InstanceId")]
        assert sorted(running_on) == sorted([holder, launched]), owned(sandbox)

        # When it is terminated (a pod on its node, under no PodDisruptionBudget: its drain evicts it), the
        # first answers of the operation lost again (the terminate's own, for an operation the launch called too)
        fired = [f for f in sandbox.fault_firings() if f.fault == "lost"]
        sandbox.arm_faults(lost, seed=2)
        node = wait_for(lambda: sandbox.kube.node_for_instance(launched), 30, "the node")
        sandbox.kube.seed(
            {
                "objects": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {
                            "name": f"on-{launched}",
                            "namespace": "shop",
                            "labels": {"app": "one-off"},
                        },
                        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox"}]},
                    }
                ]
            }
        )
        sandbox.kube.settle()
        sandbox.asg.terminate(launched, decrement=True)
        wait_for(
            lambda: (a := action_of(sandbox, launched, TERMINATING)) is not None and not a.active,
            60,
            f"the terminate action of {launched}",
        )

        # Then its terminate action was completed by nodecycle, once, with CONTINUE, after its drain
        assert_completed_by_nodecycle(sandbox, launched, Transition.TERMINATING)
        assert sandbox.kube.get_object("pods", f"on-{launched}", "shop") is None
        wait_quiet(sandbox)
        fired += [f for f in sandbox.fault_firings() if f.fault == "lost"]
    finally:
        sandbox.disarm_faults()
    emitted = metrics_since(logs, ends)

    # and the operation's answers were lost indeed
    assert 1 <= len(fired) <= 2 * limit, fired
    # and the metrics count two actions received and completed by nodecycle, none settled elsewhere, and the
    # address's allocation and release (allocate) or claim and return (pool) as nodecycle's own: the retry of a
    # lost ReleaseAddress or DisassociateAddress told from another caller's
    assert emitted["LifecycleActionsReceived"] == 2, emitted
    assert emitted["LifecycleActionsCompleted"] == 2, emitted
    assert emitted["LifecycleActionsSettledElsewhere"] == 0, emitted
    assert emitted["EipFailures"] == 0, emitted
    if mode == "pool":
        assert (emitted["EipsClaimed"], emitted["EipsReturned"]) == (1, 1), emitted
    else:
        # (the first allocation of a lost AllocateAddress, unseen, released as a spare of the instance)
        spares = 1 if operation == "ec2.AllocateAddress" else 0
        assert (emitted["EipsAllocated"], emitted["EipsReleased"]) == (1, 1 + spares), emitted
    # and no address is associated with the instance gone; the one in service keeps its own
    addresses = owned(sandbox)
    assert [a for a in addresses if a.get("InstanceId") == launched] == []
    assert [a["InstanceId"] for a in addresses if a.get("InstanceId")] == [holder], addresses
    # and no address of this owner is left unassociated but the pool's, free for the next launch. (Not even the
    # first allocation of a lost AllocateAddress, unseen: the launch releases it as a spare of its instance once
    # it holds its address; one EC2 did not list yet would be the sweeper's, once its grace is over.)
    free = [a for a in addresses if not a.get("InstanceId")]
    if mode == "pool":
        assert sorted(a["AllocationId"] for a in free) == sorted(
            a["AllocationId"] for a in addresses if tags(a).get(POOL_TAG) == POOL and not a.get("InstanceId")
        ), addresses
        assert len(addresses) == POOL_SIZE, addresses
        assert [a for a in free if INSTANCE_TAG in tags(a)] == [], free
    else:
        assert free == [], free
