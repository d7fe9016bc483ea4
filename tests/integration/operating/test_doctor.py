"""``nodecycle doctor`` against a sandbox, correct and then misconfigured in each way an operator can get
wrong, one at a time: the doctor names each problem and the command that fixes it.

One sandbox for the module: each test plants its misconfiguration through the ordinary APIs (events,
autoscaling, eks, sqs, the Kubernetes API) and takes it away again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from nodecycle.adapters.aws.records import DynamoRecordStore
from nodecycle.domain.model import LifecycleRecord, Step, Transition
from nodecycle_cli.main import main
from nodecycle_sandbox import Sandbox, SandboxOptions
from nodecycle_sandbox.aws.group import GroupSpec, HookSpec, default_hooks
from nodecycle_sandbox.aws.records import LAUNCHING, TERMINATING

ROOT = Path(__file__).resolve().parents[3]
STACK = "nodecycle"
GROUP = "nodecycle-workers"


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    # Given a deployment as the README describes it: hooks of 900 s, the stack's access entries
    options = SandboxOptions(root=ROOT, group=GroupSpec(name=GROUP, size=2, hooks=default_hooks(900)))
    with Sandbox(options) as started:
        started.asg.wait_in_service(2, timeout=90)
        yield started


@dataclass
class Doctor:
    sandbox: Sandbox
    kubeconfig: Path
    capsys: pytest.CaptureFixture[str]

    def __call__(self, *argv: str) -> tuple[int, list[dict[str, str]]]:
        """Run ``nodecycle doctor ARGV --json``: its exit status and findings."""
        self.capsys.readouterr()
        status = main(["doctor", *argv, "--json"])
        return status, json.loads(self.capsys.readouterr().out)["findings"]

    def text(self, *argv: str) -> tuple[int, str]:
        self.capsys.readouterr()
        status = main(["doctor", *argv])
        return status, self.capsys.readouterr().out

    def client(self, service: str) -> Any:
        return self.sandbox.client(service)


@pytest.fixture
def doctor(
    sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Doctor:
    """An operator's shell on the sandbox: its endpoint and credentials, a kubeconfig, the repository's
    deploy/rbac.yaml at hand."""
    env = sandbox.env
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, env[name])
    kubeconfig = sandbox.kube.write_kubeconfig(tmp_path / "kubeconfig")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.chdir(ROOT)
    return Doctor(sandbox, kubeconfig, capsys)


def not_ok(findings: list[dict[str, str]]) -> list[dict[str, str]]:
    return [f for f in findings if f["status"] != "ok"]


def only(findings: list[dict[str, str]], check: str) -> dict[str, str]:
    (found,) = [f for f in not_ok(findings) if f["check"] == check or f["check"].startswith(check + ".")]
    return found


def test_a_correct_deployment_has_no_problem_and_every_check_is_made(doctor: Doctor) -> None:
    status, findings = doctor("--stack", STACK)

    # Then everything is right, and everything was seen: the sandbox serves access reviews and RBAC objects
    assert {f["status"] for f in findings} == {"ok"}, not_ok(findings)
    assert status == 0
    checks = {f["check"] for f in findings}
    assert {
        "eventbridge.rule.lifecycle actions",
        "eventbridge.rule.sweeper schedule",
        "queues.dead-letters.drain",
        "lifecycles.stuck",
        f"hooks.{GROUP}",
        "cluster.authentication-mode",
        "cluster.kubeconfig",
        "cluster.budget",
        "cluster.access-entry.drain",
        "cluster.access-entry.sweeper",
        "cluster.permissions.drain",
        "cluster.permissions.sweeper",
        "cluster.rbac-applied",
    } <= checks


def test_the_text_report_says_what_why_and_how_to_fix(doctor: Doctor) -> None:
    rule = f"{STACK}-IntakeFunctionLifecycleActions"
    events = doctor.client("events")
    events.disable_rule(Name=rule)
    try:
        status, text = doctor.text("--stack", STACK)
    finally:
        events.enable_rule(Name=rule)
    assert status == 1
    assert f"PROBLEM  EventBridge rule {rule} (lifecycle actions) is DISABLED" in text
    assert "why: lifecycle actions no longer reach intake" in text
    assert f"fix: aws events enable-rule --name {rule}" in text
    assert "1 problems, 0 warnings, 0 checks not made" in text


def test_a_disabled_sweeper_schedule_is_a_problem(doctor: Doctor) -> None:
    rule = f"{STACK}-SweeperFunctionSweep"
    events = doctor.client("events")
    events.disable_rule(Name=rule)
    try:
        status, findings = doctor("--stack", STACK)
    finally:
        events.enable_rule(Name=rule)
    found = only(findings, "eventbridge.rule")
    assert (status, found["status"]) == (1, "problem")
    assert "the sweeper no longer runs" in found["why"]


def test_messages_in_a_dead_letter_queue_are_counted_with_the_command_to_read_them(doctor: Doctor) -> None:
    sqs = doctor.client("sqs")
    url = doctor.sandbox.runner.queue("DrainDeadLetterQueue").url
    for _ in range(2):
        sqs.send_message(QueueUrl=url, MessageBody='{"record_id": "x", "seq": 0, "step": "evict"}')
    try:
        status, findings = doctor("--stack", STACK)
    finally:
        sqs.purge_queue(QueueUrl=url)
    found = only(findings, "queues.dead-letters")
    assert (status, found["check"], found["what"]) == (
        1,
        "queues.dead-letters.drain",
        "2 messages in the drain dead-letter queue",
    )
    assert found["fix"].startswith(f"aws sqs receive-message --queue-url {url}")


@pytest.fixture
def hooks(doctor: Doctor) -> Iterator[Callable[..., None]]:
    """Change the group's hooks for one test; the README's hooks are put back afterwards."""
    autoscaling = doctor.client("autoscaling")

    def change(*, delete: str | None = None, put: HookSpec | None = None) -> None:
        if delete:
            autoscaling.delete_lifecycle_hook(AutoScalingGroupName=GROUP, LifecycleHookName=delete)
        if put:
            doctor.sandbox.asg.put_hook(put)

    yield change
    for hook in autoscaling.describe_lifecycle_hooks(AutoScalingGroupName=GROUP)["LifecycleHooks"]:
        autoscaling.delete_lifecycle_hook(
            AutoScalingGroupName=GROUP, LifecycleHookName=hook["LifecycleHookName"]
        )
    for hook in default_hooks(900):
        doctor.sandbox.asg.put_hook(hook)


def test_a_group_without_a_terminate_hook_is_a_problem(doctor: Doctor, hooks: Callable[..., None]) -> None:
    hooks(delete="nodecycle-terminate")

    status, findings = doctor("--stack", STACK)

    found = only(findings, "hooks")
    assert status == 1
    assert found["what"] == f"group {GROUP} has no terminate hook that nodecycle answers"
    assert "nodes are terminated undrained" in found["why"]
    assert found["fix"] == (
        f"aws autoscaling put-lifecycle-hook --auto-scaling-group-name {GROUP} --lifecycle-hook-name "
        f"nodecycle-terminate --lifecycle-transition {TERMINATING} --heartbeat-timeout 900 --default-result CONTINUE"
    )


def test_a_hook_whose_name_is_not_in_managed_hooks_is_named(
    doctor: Doctor, hooks: Callable[..., None]
) -> None:
    hooks(delete="nodecycle-terminate", put=HookSpec("drain-me", TERMINATING, 900, "CONTINUE"))

    _, findings = doctor("--stack", STACK)

    found = only(findings, "hooks")
    assert (
        "its terminate hooks drain-me are not in ManagedHooks: nodecycle-launch, nodecycle-terminate"
        in (found["what"])
    )
    assert found["fix"].endswith("(or add drain-me to ManagedHooks)")


def test_a_heartbeat_timeout_too_short_for_the_settings_is_a_problem(
    doctor: Doctor, hooks: Callable[..., None]
) -> None:
    # Given a terminate hook of 200 s, under 60 (margin) + the later of 150 (visibility) and 60 + 2 (resume grace),
    # and under a sweep interval (300 s) + the margin
    hooks(put=HookSpec("nodecycle-terminate", TERMINATING, 200, "CONTINUE"))

    status, findings = doctor("--stack", STACK)

    found = only(findings, "hooks")
    assert (status, found["status"]) == (1, "problem")
    assert found["what"] == (
        f"hook nodecycle-terminate of group {GROUP} has a heartbeat timeout of 200 s, under the 615 s these "
        "settings need"
    )
    assert "--heartbeat-timeout 900 --default-result CONTINUE" in found["fix"]


def test_a_heartbeat_timeout_the_sweeper_cannot_keep_alive_is_a_problem(
    doctor: Doctor, hooks: Callable[..., None]
) -> None:
    # Given a terminate hook of 330 s: enough for a crashed step's retry (210 s), but while a queue stalls
    # only the sweeper heartbeats, once a run: every 5 minutes (SweepIntervalMinutes), which may come late
    hooks(put=HookSpec("nodecycle-terminate", TERMINATING, 330, "CONTINUE"))

    status, findings = doctor("--stack", STACK)

    found = only(findings, "hooks")
    assert (status, found["status"]) == (1, "problem")
    assert found["what"] == (
        f"hook nodecycle-terminate of group {GROUP} has a heartbeat timeout of 330 s, under the 615 s these "
        "settings need"
    )
    assert "SweepIntervalMinutes" in found["why"]


def test_a_launch_hook_that_continues_when_nodecycle_would_abandon_is_a_warning(
    doctor: Doctor, hooks: Callable[..., None]
) -> None:
    hooks(put=HookSpec("nodecycle-launch", LAUNCHING, 900, "CONTINUE"))

    status, findings = doctor("--stack", STACK)

    found = only(findings, "hooks")
    assert (status, found["status"]) == (1, "warning")
    assert found["what"] == f"hook nodecycle-launch of group {GROUP} defaults to CONTINUE, not ABANDON"
    assert found["fix"].endswith("--heartbeat-timeout 900 --default-result ABANDON")


def test_a_missing_access_entry_is_a_problem_with_the_command_that_creates_it(doctor: Doctor) -> None:
    eks = doctor.client("eks")
    role = f"arn:aws:iam::123456789012:role/{STACK}-SweeperFunctionRole"
    entry = eks.describe_access_entry(clusterName="sandbox", principalArn=role)["accessEntry"]
    eks.delete_access_entry(clusterName="sandbox", principalArn=role)
    try:
        status, findings = doctor("--stack", STACK)
    finally:
        eks.create_access_entry(
            clusterName="sandbox", principalArn=role, kubernetesGroups=entry["kubernetesGroups"]
        )
    found = only(findings, "cluster.access-entry")
    assert (status, found["check"]) == (1, "cluster.access-entry.sweeper")
    assert found["fix"].startswith(
        f"aws eks create-access-entry --cluster-name sandbox --principal-arn {role} --kubernetes-groups nodecycle"
    )
    # without an entry there is no identity to review: only the drain function's permissions are asked
    assert [f["check"] for f in findings if f["check"].startswith("cluster.permissions")] == [
        "cluster.permissions.drain"
    ]


def test_a_cluster_in_config_map_mode_is_a_problem(doctor: Doctor) -> None:
    # Given another cluster, created through the EKS API without an access configuration (CONFIG_MAP)
    eks = doctor.client("eks")
    eks.create_cluster(name="legacy", roleArn="arn:aws:iam::123456789012:role/eks", resourcesVpcConfig={})

    status, findings = doctor("--stack", STACK, "--cluster", "legacy")

    mode = only(findings, "cluster.authentication-mode")
    assert status == 1
    assert (
        mode["what"]
        == "cluster legacy authenticates through the aws-auth ConfigMap only (authentication mode CONFIG_MAP)"
    )
    assert mode["fix"].startswith(
        "aws eks update-cluster-config --name legacy --access-config authenticationMode=API_AND_CONFIG_MAP"
    )
    # and the kubeconfig, which points at the sandbox's cluster, is not that cluster's
    assert only(findings, "cluster.kubeconfig")["fix"] == "aws eks update-kubeconfig --name legacy"
    assert only(findings, "cluster.access-entry")["status"] == "unchecked"


def test_a_budget_configmap_that_is_not_a_budget_is_a_problem(doctor: Doctor) -> None:
    core = client.CoreV1Api(doctor.sandbox.kube.api_client())
    shipped = core.read_namespaced_config_map("nodecycle-budget", "nodecycle")
    core.patch_namespaced_config_map("nodecycle-budget", "nodecycle", {"data": {"budget.json": "{oops"}})
    try:
        status, findings = doctor("--stack", STACK)
    finally:
        core.patch_namespaced_config_map("nodecycle-budget", "nodecycle", {"data": shipped.data})
    found = only(findings, "cluster.budget")
    assert status == 1
    assert found["what"].startswith("ConfigMap nodecycle/nodecycle-budget is not a budget document")
    assert "kubectl -n nodecycle get configmap nodecycle-budget -o yaml" in found["fix"]


def test_rbac_changed_in_the_cluster_is_a_problem_and_the_lost_permission_is_named(doctor: Doctor) -> None:
    # Given someone removed the drain function's right to evict from its ClusterRole
    rbac = client.RbacAuthorizationV1Api(doctor.sandbox.kube.api_client())
    shipped: Any = rbac.read_cluster_role("nodecycle-drain")
    reduced: Any = rbac.read_cluster_role("nodecycle-drain")
    reduced.rules = [r for r in reduced.rules if "pods/eviction" not in (r.resources or [])]
    assert len(reduced.rules) < len(shipped.rules)
    rbac.replace_cluster_role("nodecycle-drain", reduced)
    try:
        status, findings = doctor("--stack", STACK)
    finally:
        shipped.metadata.resource_version = None
        rbac.replace_cluster_role("nodecycle-drain", shipped)
    # Then the doctor says the manifest is not applied as it is, and what the drain function may no longer do
    assert status == 1
    applied = only(findings, "cluster.rbac-applied")
    assert "different in the cluster: ClusterRole nodecycle-drain" in applied["what"]
    assert applied["fix"].endswith("kubectl apply -f -")
    permissions = only(findings, "cluster.permissions")
    assert permissions["check"] == "cluster.permissions.drain"
    assert "create pods/eviction" in permissions["what"]


def test_a_lifecycle_that_stopped_moving_is_named(doctor: Doctor) -> None:
    # Given an open lifecycle whose next step was due 10 minutes ago (its message lost, not repaired yet)
    runner = doctor.sandbox.runner
    store = DynamoRecordStore(
        runner.table("LifecycleTable").name, ttl=timedelta(days=1), dynamodb=doctor.client("dynamodb")
    )
    now = datetime.now(UTC)
    record = LifecycleRecord(
        id=f"i-0123456789abcdef0/terminate/{'1' * 8}-1111-4111-8111-{'1' * 12}",
        group=GROUP,
        hook="nodecycle-terminate",
        instance_id="i-0123456789abcdef0",
        token=f"{'1' * 8}-1111-4111-8111-{'1' * 12}",
        transition=Transition.TERMINATING,
        owner=STACK,
        plan=(Step.ACQUIRE_SLOT, Step.CORDON, Step.EVICT, Step.COMPLETE, Step.CLEANUP, Step.DONE),
        step=Step.EVICT,
        seq=3,
        received_at=now - timedelta(minutes=12),
        started_at=now - timedelta(minutes=12),
        updated_at=now - timedelta(minutes=11),
        due_at=now - timedelta(minutes=10),
        heartbeat_timeout=600,
        heartbeat_deadline=now + timedelta(minutes=5),
        global_deadline=now + timedelta(hours=16),
        node="ip-10-0-1-1.eu-west-1.compute.internal",
    )
    assert store.create(record)
    try:
        status, findings = doctor("--stack", STACK)
    finally:
        doctor.client("dynamodb").delete_item(
            TableName=runner.table("LifecycleTable").name, Key={"id": {"S": record.id}}
        )
    found = only(findings, "lifecycles.stuck")
    assert status == 1
    assert found["what"].startswith(
        "1 lifecycle stopped moving: i-0123456789abcdef0 terminate at evict, 10m0"
    )
    # (never resumed: a stall, not a lifecycle whose resends keep failing)
    assert found["fix"] == f"nodecycle status --stack {STACK}; then docs/runbook.md#lifecycles-stalled"


def test_before_deploying_it_checks_the_cluster_and_the_groups_given(doctor: Doctor) -> None:
    status, findings = doctor("--cluster", "sandbox", "--group", GROUP, "--group", "nodes-typo")

    assert status == 1
    found = only(findings, "hooks")
    assert found["what"] == "Auto Scaling group nodes-typo does not exist"
    assert not any(f["check"].startswith(("eventbridge", "queues", "cluster.access-entry")) for f in findings)


def test_no_stack_is_one_line_naming_it(doctor: Doctor, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--stack", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(
        "nodecycle doctor: no CloudFormation stack 'nope' in eu-west-1 (pass --region, or the name `sam deploy` "
        "was given)"
    )
    # (asked at the sandbox's endpoint, which the line names: tests/functions/test_cli_endpoint_not_aws.py)
    assert "asked at http://127.0.0.1:" in err


# -- the other commands, by stack name ------------------------------------------------------------------


def test_status_finds_the_table_and_owner_from_the_stack_and_prints_json(
    doctor: Doctor, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["status", "--stack", STACK, "--all", "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    instances = set(doctor.sandbox.asg.in_state("InService"))
    assert {(r["instance_id"], r["step"], r["outcome"]) for r in records} == {
        (instance, "done", "node-ready") for instance in instances
    }


def test_budget_show_takes_the_namespace_from_the_stack(
    doctor: Doctor, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["budget", "show", "--stack", STACK, "--json"]) == 0
    out = capsys.readouterr()
    # the shipped ConfigMap in the stack's namespace, empty: an empty budget, as JSON for a script
    assert json.loads(out.out) == {
        "format_version": 3,
        "holders": [],
        "waiters": [],
        "zones": [],
        "limits": [],
    }
    assert "warning" not in out.err  # the kubeconfig is the stack's cluster's


def test_budget_show_warns_when_the_kubeconfig_is_another_clusters(
    doctor: Doctor, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a kubeconfig whose server is not the stack's cluster (nothing listens there)
    other = tmp_path / "other"
    other.write_text(doctor.kubeconfig.read_text().replace(doctor.sandbox.kube.url, "https://127.0.0.1:1"))

    status = main(["budget", "show", "--stack", STACK, "--kubeconfig", str(other)])

    # Then it says so before trying, and the failure to connect is one line
    err = capsys.readouterr().err.splitlines()
    assert status == 2
    assert err[0] == (
        "warning: the kubeconfig's context points at https://127.0.0.1:1, but the stack's cluster sandbox is at "
        f"{doctor.sandbox.kube.url}: pass --context, or run `aws eks update-kubeconfig --name sandbox`"
    )
    assert err[1].startswith("nodecycle budget: cannot reach the Kubernetes API")
    assert len(err) == 2


# deploy/operator-policy.json: what a person running the read commands needs (the README's "Operating").
OPERATOR_POLICY = ROOT / "deploy" / "operator-policy.json"
OPERATOR_ROLE = "arn:aws:iam::123456789012:role/nodecycle-operator"
OPERATOR_KEY = (
    "AKIANODECYCLEOPERATE"  # (moto reads an identity only from a key of 20 upper-case letters/digits)
)


@pytest.fixture
def operator(doctor: Doctor, monkeypatch: pytest.MonkeyPatch) -> str:
    """The operator's shell as a role holding deploy/operator-policy.json and nothing else: the sandbox's IAM
    judges each of its calls against it, as AWS would."""
    document = json.loads(OPERATOR_POLICY.read_text())
    doctor.sandbox.aws.register_identities(
        roles=[
            {
                "arn": OPERATOR_ROLE,
                "policies": [{"source": "deploy/operator-policy.json", "document": document}],
            }
        ],
        keys=[
            {
                "access_key": OPERATOR_KEY,
                "role_arn": OPERATOR_ROLE,
                "session_name": "operator",
                "account": "123456789012",
            }
        ],
    )
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", OPERATOR_KEY)
    return OPERATOR_ROLE


def _granted(document: dict[str, Any]) -> set[str]:
    return {
        action
        for statement in document["Statement"]
        for action in ([statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"])
    }


def test_the_operator_policy_lets_every_read_command_make_every_check_and_grants_nothing_unused(
    doctor: Doctor, operator: str, capsys: pytest.CaptureFixture[str]
) -> None:
    aws = doctor.sandbox.aws
    seen = len(aws.authorizations())
    # Given the drain dead-letter queue holding a message (the doctor then asks SQS for its redrives) and the
    # sweeper's schedule without its permission to invoke the function (the doctor then asks whether the
    # function is there at all), as an operator meets them
    sqs, lambda_ = doctor.client("sqs"), doctor.client("lambda")
    dead_letters = doctor.sandbox.runner.queue("DrainDeadLetterQueue").url
    sqs.send_message(QueueUrl=dead_letters, MessageBody='{"record_id": "x", "seq": 0, "step": "evict"}')
    rule = f"{STACK}-SweeperFunctionSweep"
    (target,) = doctor.client("events").list_targets_by_rule(Rule=rule)["Targets"]
    function = target["Arn"].rsplit(":", 1)[-1]
    statements = json.loads(lambda_.get_policy(FunctionName=function)["Policy"])["Statement"]
    for statement in statements:
        lambda_.remove_permission(FunctionName=function, StatementId=statement["Sid"])
    try:
        # When the operator runs each read command
        exits = {}
        for argv in (
            ["status", "--stack", STACK, "--json"],
            ["status", "--all", "--stack", STACK, "--json"],
            ["budget", "show", "--stack", STACK, "--json"],
        ):
            capsys.readouterr()
            exits[" ".join(argv[:2])] = main(argv)
        status, findings = doctor("--stack", STACK)
    finally:
        # (taken off by receipt, not purged: SQS allows one purge of a queue a minute, and another test purges it)
        for message in sqs.receive_message(QueueUrl=dead_letters, MaxNumberOfMessages=10).get("Messages", []):
            sqs.delete_message(QueueUrl=dead_letters, ReceiptHandle=message["ReceiptHandle"])
        for statement in statements:
            lambda_.add_permission(
                FunctionName=function,
                StatementId=statement["Sid"],
                Action=statement["Action"],
                Principal=statement["Principal"]["Service"],
                SourceArn=statement["Condition"]["ArnLike"]["AWS:SourceArn"],
            )
    decided = [entry for entry in aws.authorizations()[seen:] if entry.principal == operator]

    # Then AWS refused none of its calls, every command ran, and the doctor made every check: the two planted
    # faults are its only problems
    assert [(e.action, e.resource) for e in decided if not e.allowed] == []
    assert set(exits.values()) == {0}, exits
    assert status == 1
    assert [f for f in findings if f["status"] == "unchecked"] == []
    assert {f["check"] for f in not_ok(findings)} == {
        "queues.dead-letters.drain",
        "eventbridge.rule.sweeper schedule.permission",
    }, not_ok(findings)
    # And the policy grants only what the commands call: every action in it was used
    assert _granted(json.loads(OPERATOR_POLICY.read_text())) == {e.action for e in decided}
