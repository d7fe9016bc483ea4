"""A group of the same account that this stack does not manage, whose terminate hook (named as this stack's
hooks are) notifies this stack's intake queue by mistake: its actions reach intake by the queue and by
EventBridge, and are never heartbeated nor completed by this stack, its node never touched; nor does the sweep
look at them."""

from __future__ import annotations

import pytest

from nodecycle_sandbox.aws.control import SANDBOX_ACCOUNT
from nodecycle_sandbox.aws.group import GroupSpec, HookSpec
from nodecycle_sandbox.aws.records import TERMINATING
from tests.integration.lifecycle.harness import FAST, node_of, running, terminate_action, wait_for
from tests.integration.lifecycle.test_forged_notifications import taken

pytestmark = pytest.mark.slow


def test_an_unmanaged_groups_action_sent_to_this_stacks_queue_is_neither_heartbeated_nor_completed() -> None:
    # Given stack "nodecycle" (group nodecycle-workers), and group "other-team" in the same account, which it does
    # not manage, whose terminate hook "nodecycle-terminate" notifies the stack's intake queue (no launch hook)
    with running(parameters=FAST, size=1, workloads=None) as sandbox:
        queue = sandbox.runner.queue("IntakeQueue").arn
        role = f"arn:aws:iam::{SANDBOX_ACCOUNT}:role/nodecycle-HookNotificationRole"
        hook = HookSpec("nodecycle-terminate", TERMINATING, 300, "CONTINUE", target_arn=queue, role_arn=role)
        other = sandbox.add_group(GroupSpec(name="other-team", size=1, hooks=(hook,)))
        (victim,) = other.wait_in_service(1, timeout=60)
        node = wait_for(lambda: sandbox.kube.node_for_instance(victim), 30, "the other team's node")
        writes_before = len(sandbox.kube.history())
        journal = sandbox.runner.journal

        # When its instance terminates: its action notifies the stack's intake queue (and EventBridge)
        other.terminate(victim)
        action = wait_for(lambda: terminate_action(sandbox, victim), 30, "the other team's terminate action")
        journal.wait_until(
            lambda: taken(journal.invocations("IntakeFunction"), action.token, TERMINATING), 60
        )
        # ...and the stack's sweeper runs after it
        sweeps = len(journal.invocations("SweeperFunction"))
        sandbox.runner.fire_schedule("SweeperFunction")
        journal.wait_until(
            lambda: any(i.finished_at for i in journal.invocations("SweeperFunction")[sweeps:]), 60
        )

        # Then the action still waits, neither heartbeated nor completed by any function of the stack
        held = terminate_action(sandbox, victim)
        assert held is not None
        assert held.active
        assert held.completed_by is None
        ours = {sandbox.runner.access_key(f) for f in sandbox.runner.environments}
        assert [c for c in held.heartbeat_callers if c in ours] == []
        assert victim in other.in_state("Terminating:Wait")
        # And its node was not written by the stack (no cordon, no annotation)
        assert node == node_of(sandbox, victim)
        writes = sandbox.kube.history()[writes_before:]
        assert [w for w in writes if w.kind == "Node" and w.name == node and w.source == "api"] == []
