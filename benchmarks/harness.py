"""The sandbox as the integration tests run it (process mode: handlers in warm worker processes, moto and the
lifecycle emulation in their own process), and the waits every benchmark needs."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from benchmarks.records import BUDGET_KEY, BUDGET_NAME, BUDGET_NAMESPACE
from nodecycle_sandbox import Sandbox, SandboxOptions
from nodecycle_sandbox.aws.group import GroupSpec, default_hooks, wait_for
from nodecycle_sandbox.aws.records import TERMINATING

ROOT = Path(__file__).resolve().parents[1]
ZONES = ("a", "b", "c")
NODE_READY_AFTER = 0.5  # a launched instance's kubelet turns Ready this long after it registers
# On EKS a node object outlives its instance for a while, so the drain's clean-up still finds it and clears
# its annotations: with 0 that PATCH would be skipped and the API call counts would flatter nodecycle.
NODE_REMOVE_AFTER = 2.0
# Fast polls as in the integration tests (production defaults: 5 s and 60 s); the same for every benchmark.
BASE_PARAMETERS = {"DrainPollSeconds": "1", "ResumeGraceSeconds": "60"}
# Started before anything is measured, every container each may run at once: a cold start in the sandbox is
# a process importing the handler, and a dozen at once on two cores would measure the machine (cold starts
# are measured by cold_start.py).
WARM = ("IntakeFunction", "DrainFunction", "WakeFunction")  # (the wake function: a drain's hand-over)
# EventBridge invokes intake asynchronously; Lambda runs those invocations with the function's concurrency
# (intake reserves none), not two at a time as the sandbox does by default: a refresh starts a hundred
# lifecycle actions at once.
ASYNC_CONCURRENCY = 8


@contextmanager
def sandbox(
    *,
    parameters: Mapping[str, str],
    size: int,
    log_dir: Path,
    hook_target: Literal["eventbridge", "sqs"] = "eventbridge",
    min_values: bool = True,
    warm: int | None = None,
) -> Iterator[Sandbox]:
    """A sandbox whose group has ``size`` instances in service (launched through the launch hooks).

    The sweeper's schedule is off: it is not on the path of a drain, and a sweep in the middle of a
    measurement would add API calls and budget writes that belong to no lifecycle. The containers of the
    functions on a drain's path are all started (warm) before the block runs. ``min_values=False`` accepts
    numbers below a parameter's MinValue (a counting benchmark's single drain container). ``warm``: at most
    this many containers of each started ahead (None: all it may run at once); the others start when needed,
    cold. A container's start costs more than half a CPU-second on two cores, and a sandbox warms twenty:
    CI's smallest run (--tiny), whose figures nobody reads, warms a few."""
    options = SandboxOptions(
        root=ROOT,
        parameters={**BASE_PARAMETERS, **parameters},
        group=GroupSpec(zones=ZONES, size=size, hooks=default_hooks(heartbeat_timeout=300)),
        node_ready_after=NODE_READY_AFTER,
        node_remove_after=NODE_REMOVE_AFTER,
        schedules_enabled=False,
        log_dir=log_dir,
        hook_target=hook_target,
        async_concurrency=ASYNC_CONCURRENCY,
        min_values=min_values,
    )
    with Sandbox(options) as started:
        if size:
            started.asg.wait_in_service(size, timeout=60 + 3 * size)
        for function in WARM:
            started.runner.warm(function, warm)
        yield started


def quiesce(sandbox: Sandbox, *, quiet: float = 1.0, timeout: float = 120) -> None:
    """Wait until no lifecycle action is open and for ``quiet`` seconds neither a handler finished nor the API
    server answered a request: whatever came before is over, and counting can start (or stop)."""
    deadline = time.monotonic() + timeout
    last: tuple[int, int] | None = None
    since = time.monotonic()
    while True:
        now = time.monotonic()
        if any(action.active for action in sandbox.aws.actions()):
            last = None
        else:
            activity = (len(sandbox.runner.journal.invocations()), sum(sandbox.kube.counters().values()))
            if activity != last:
                last, since = activity, now
            elif now - since >= quiet:
                return
        if now > deadline:
            raise TimeoutError(f"the sandbox did not quiesce within {timeout:.0f} s")
        time.sleep(0.1)


def terminate_and_settle(box: Sandbox, instance: str) -> None:
    """Terminate without replacement, and wait until nodecycle is done: the action completed, the node out of
    the budget, then quiet (the clean-up's last write and the final record update)."""
    node = node_of(box, instance)
    box.asg.terminate(instance, decrement=True)
    wait_for(lambda: action_done(box, instance, TERMINATING), 120, f"the terminate action of {instance}")
    wait_for(lambda: node not in budget_nodes(box), 60, f"the budget release of {node}")
    quiesce(box, quiet=1.5)


def action_done(box: Sandbox, instance: str, transition: str) -> bool:
    return any(
        not action.active
        for action in box.asg.actions(transition=transition)
        if action.instance_id == instance
    )


def budget_nodes(box: Sandbox) -> set[str]:
    """The nodes holding or waiting for a budget slot, from the ConfigMap as the API server has it."""
    configmap = box.kube.get_object("configmaps", BUDGET_NAME, BUDGET_NAMESPACE)
    if configmap is None:
        return set()
    doc = json.loads(configmap["data"][BUDGET_KEY])
    return {entry["node"] for entry in (*doc.get("holders", []), *doc.get("waiters", []))}


def node_of(box: Sandbox, instance: str) -> str:
    return wait_for(lambda: box.kube.node_for_instance(instance), 30, f"the node of {instance}")
