"""The Sandbox façade end to end: AWS in its own process, a cluster, the runner and worker processes."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from nodecycle_sandbox import Sandbox, SandboxOptions
from nodecycle_sandbox.aws import LAUNCHING, TERMINATING
from nodecycle_sandbox.aws.group import GroupSpec, HookSpec, wait_for

TEMPLATE = """
Parameters:
  ClusterName: {Type: String}
  ManagedGroups: {Type: String}
Globals:
  Function:
    Timeout: 10
    Environment:
      Variables:
        CLUSTER: !Ref ClusterName
Resources:
  IntakeQueue:
    Type: AWS::SQS::Queue
  IntakeRole: # the sandbox evaluates every call of the function against it
    Type: AWS::IAM::Role
    Properties:
      AssumeRolePolicyDocument:
        Statement: [{Effect: Allow, Principal: {Service: lambda.amazonaws.com}, Action: sts:AssumeRole}]
      Policies:
        - PolicyName: intake
          PolicyDocument:
            Statement:
              - {Effect: Allow, Action: [eks:DescribeCluster, autoscaling:CompleteLifecycleAction], Resource: "*"}
  Intake:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/intake/
      Role: !GetAtt IntakeRole.Arn
      Handler: app.handler
      Events:
        Actions:
          Type: EventBridgeRule
          Properties:
            Pattern: {source: [aws.autoscaling]}
"""

# Completes every action at once: enough to prove the wiring, not a drain.
INTAKE = """
import boto3

def handler(event, context):
    detail = event["detail"]
    cluster = boto3.client("eks").describe_cluster(name=__import__("os").environ["CLUSTER"])["cluster"]
    boto3.client("autoscaling").complete_lifecycle_action(
        AutoScalingGroupName=detail["AutoScalingGroupName"],
        LifecycleHookName=detail["LifecycleHookName"],
        LifecycleActionToken=detail["LifecycleActionToken"],
        LifecycleActionResult="CONTINUE",
    )
    return cluster["endpoint"]
"""


class FakeCluster:
    url = "https://127.0.0.1:6443"
    ca_pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"

    def __init__(self) -> None:
        self.nodes: dict[str, dict[str, Any]] = {}
        self.running = False

    def start(self) -> None:
        self.running = True

    def stop(self) -> None:
        self.running = False

    def add_node(self, name: str, **node: Any) -> None:
        self.nodes[name] = node

    def remove_node(self, name: str) -> None:
        del self.nodes[name]

    def instance_terminated(self, name: str) -> None:
        self.nodes[name]["terminated"] = True

    def instance_stopped(self, name: str) -> None:
        self.nodes[name]["stopped"] = True

    def instance_started(self, name: str) -> None:
        self.nodes[name]["stopped"] = False

    def instance_resumed(self, name: str) -> None:
        self.nodes[name]["stopped"] = False

    def instance_rebooting(self, name: str) -> None:
        self.nodes[name]["stopped"] = True


def test_a_sandbox_launches_and_terminates_instances_through_real_handlers(tmp_path: Path) -> None:
    # Given a sandbox whose intake completes every lifecycle action
    (tmp_path / "template.yaml").write_text(textwrap.dedent(TEMPLATE))
    (tmp_path / "functions" / "intake").mkdir(parents=True)
    (tmp_path / "functions" / "intake" / "app.py").write_text(textwrap.dedent(INTAKE))
    hooks = (HookSpec("launch", LAUNCHING, 60), HookSpec("terminate", TERMINATING, 60, "CONTINUE"))
    cluster = FakeCluster()
    options = SandboxOptions(root=tmp_path, group=GroupSpec(name="workers", size=2, hooks=hooks))

    with Sandbox(options, kube=cluster) as sandbox:
        # When the group launches two instances
        launched = sandbox.asg.wait_in_service(2, timeout=30)

        # Then both went through the hook, completed by the intake worker, and joined the cluster
        assert len(cluster.nodes) == 2
        launches = sandbox.asg.actions(transition=LAUNCHING)
        assert {a.outcome for a in launches} == {"completed"}
        assert {sandbox.runner.function_of_access_key(a.completed_by or "") for a in launches} == {"Intake"}
        assert sandbox.runner.journal.invocations("Intake")[0].response == cluster.url

        # When one is terminated
        sandbox.asg.terminate(launched[0], decrement=True)

        # Then it leaves the group and the cluster
        wait_for(lambda: launched[0] not in sandbox.asg.instances(), timeout=15)
        wait_for(lambda: len(cluster.nodes) == 1, timeout=5)
        assert sandbox.env["AWS_ENDPOINT_URL"] == sandbox.endpoint_url
        assert sandbox.env["CLUSTER"] == "sandbox"
    assert not cluster.running
