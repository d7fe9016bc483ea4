"""An instance terminated right after its launch, on the sandbox under EC2 that lags (Sandbox.lagging_ec2,
aws/ec2_consistency.py): for a window after its RunInstances, the functions' DescribeInstances do not list it, so
the drain has no private DNS name to find its node by. It finds the node all the same (by its provider id), drains
it and completes the action once. (The EIP flows under the lag: tests/functions/eip and tests/functions/sweeper,
*_under_ec2_lag.py.)"""

from __future__ import annotations

from nodecycle.domain.nodes import NODE_NAME, PRIVATE_DNS
from nodecycle_sandbox.aws.group import wait_for
from tests.integration.lifecycle.harness import running, wait_finished, wait_terminated

LAG = 45.0  # seconds: longer than from RunInstances to the drain's first step, on a loaded machine too (8 s was not)


def test_an_instance_terminated_right_after_its_launch_is_found_and_drained_while_ec2_does_not_list_it() -> (
    None
):
    with running(size=0, workloads=None) as sandbox:
        # Given EC2 whose reads by the functions lag its writes by LAG seconds
        with sandbox.lagging_ec2(LAG) as met:
            # When the group launches an instance, and it is terminated as soon as its node has registered
            sandbox.asg.set_desired(1)
            instance = wait_for(lambda: next(iter(sandbox.asg.instances()), None), 30, "the launch")
            node = wait_for(lambda: sandbox.kube.node_for_instance(instance), 30, "its node")
            sandbox.asg.terminate(instance, decrement=True)
            action = wait_terminated(sandbox, instance, timeout=60)
        record = wait_finished(sandbox, instance, timeout=30)

        # Then the drain looked the instance up while EC2 did not list it (no DNS name), found its node by its
        # provider id, drained it, and completed the action CONTINUE
        assert any(call.startswith("describe_instances") for call in met), met
        assert record.extra.get(NODE_NAME) == node, record.extra
        assert not record.extra.get(PRIVATE_DNS)
        assert (record.node, record.outcome) == (node, "drained")
        assert action.result == "CONTINUE"
