"""An operator follows docs/runbook.md and docs/removing.md through incidents made to happen on the sandbox: the commands it gives
(``nodecycle doctor``, ``status``, ``budget``) point at what happened and at the entry that says what to do,
and doing it ends the incident.

One sandbox for the module, deployed as the README says (hooks of 900 s), with Elastic IPs (EipMode allocate);
each test makes its incident and takes it away again.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import botocore
import jmespath  # type: ignore[import-untyped]  # (botocore's, with no stubs)
import pytest
from botocore.exceptions import ClientError
from kubernetes.client import CoreV1Api, PolicyV1Api

from nodecycle_cli.main import main
from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.aws.group import default_hooks, wait_for
from nodecycle_sandbox.faults import Fault
from tests.integration.lifecycle.harness import (
    find_record,
    held_by_a_budget,
    node_of,
    running,
    terminate_action,
    wait_quiet,
)

ROOT = Path(__file__).resolve().parents[3]
STACK = "nodecycle"
RESUME_GRACE = 3  # seconds: a step this overdue is presumed lost (ResumeGraceSeconds)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with running(
        parameters={"ResumeGraceSeconds": str(RESUME_GRACE), "EipMode": "allocate"},
        # botocore's backoff between retries a twentieth as long in the containers: a throttled step fails
        # after the same five attempts, in a fraction of a second rather than 7.5 s a call
        settings={"SANDBOX_AWS_BACKOFF_SCALE": "0.05"},
        size=2,
        hooks=default_hooks(900),
    ) as started:
        yield started


@pytest.fixture(autouse=True)
def nothing_left_in_flight(sandbox: Sandbox) -> Iterator[None]:
    """Each test takes its incident away again, to the end: its lifecycles over (a test that waits only for
    its action's completion leaves the cleanup after it running into the next test, whose budget document it
    writes over), its instance replaced and in service."""
    yield
    wait_quiet(sandbox)


@dataclass
class Operator:
    """A shell on the sandbox: its endpoint and credentials, a kubeconfig, STACK set."""

    sandbox: Sandbox
    capsys: pytest.CaptureFixture[str]

    def json(self, *argv: str) -> tuple[int, object]:
        self.capsys.readouterr()
        status = main([*argv, "--json"])
        return status, json.loads(self.capsys.readouterr().out)

    def findings(self) -> tuple[int, dict[str, dict[str, str]]]:
        """``nodecycle doctor --stack $STACK --json``: its exit status and findings by check."""
        status, out = self.json("doctor", "--stack", STACK)
        assert isinstance(out, dict)
        return status, {f["check"]: f for f in out["findings"]}


@pytest.fixture
def operator(
    sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Operator:
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, sandbox.env[name])
    monkeypatch.setenv("KUBECONFIG", str(sandbox.kube.write_kubeconfig(tmp_path / "kubeconfig")))
    monkeypatch.delenv("NODECYCLE_STACK", raising=False)
    return Operator(sandbox, capsys)


def test_a_stalled_drain_queue_is_sent_to_the_stall_entry_and_moves_on_once_its_source_is_enabled(
    sandbox: Sandbox, operator: Operator
) -> None:
    # Given the drain function's queue stalled (its event source disabled: a mapping an operator disabled, a
    # function throttled) and an instance terminating under the hook
    sandbox.runner.set_sources_enabled("DrainFunction", False)
    try:
        victim = sorted(sandbox.asg.in_state("InService"))[0]
        sandbox.asg.terminate(victim)

        # When its lifecycle is overdue past the resume grace, and the operator takes the runbook's first look
        def overdue() -> bool:
            record = find_record(sandbox, victim)
            grace = timedelta(seconds=RESUME_GRACE + 1)
            return record is not None and datetime.now(UTC) > record.due_at + grace

        wait_for(overdue, 60, "the terminate lifecycle overdue")
        status, findings = operator.findings()
        _, records = operator.json("status", "--stack", STACK)
    finally:
        # (the runbook's Do: fix what stops the function, and the queued messages run)
        sandbox.runner.set_sources_enabled("DrainFunction", True)

    # Then the doctor names the lifecycle and sends the operator to the entry for a stall (nothing resumed it
    # five times: it is not stuck), and status shows it open
    stalled = findings["lifecycles.stuck"]
    assert (status, stalled["status"]) == (1, "problem")
    assert f"{victim} terminate at" in stalled["what"]
    assert stalled["fix"] == f"nodecycle status --stack {STACK}; then docs/runbook.md#lifecycles-stalled"
    assert isinstance(records, list)
    assert victim in {r["instance_id"] for r in records}

    # And once the source is enabled again the drain goes on by itself, as the entry says: the action is
    # completed, and the doctor finds nothing overdue
    def ended() -> bool:
        action = terminate_action(sandbox, victim)
        return action is not None and not action.active

    wait_for(ended, 90, "the terminate action completed")
    wait_for(lambda: operator.findings()[1]["lifecycles.stuck"]["status"] == "ok", 60, "nothing overdue")


def removal_listing() -> tuple[str, str]:
    """The tag filter and the query of docs/removing.md's listing of the addresses to release by hand."""
    text = (ROOT / "docs/removing.md").read_text()
    # (the first listing: the addresses to release; the one after it lists the pool's, left to the operator)
    command = re.findall(r"aws ec2 describe-addresses (.*?) --output text", text, flags=re.DOTALL)[0]
    (owner_filter,) = re.findall(r"--filters Name=(tag:[^,]+),Values=\$OWNER", command)
    (query,) = re.findall(r"--query '([^']+)'", command)
    return owner_filter, query


def test_the_addresses_removing_lists_for_release_are_the_ones_nodecycle_allocated(sandbox: Sandbox) -> None:
    # Given the stack's addresses as sam delete leaves them: one nodecycle allocated whose instance is gone (here
    # disassociated, as a termination leaves it), another still on its instance; beside them a static address
    # an operator tagged with the stack's owner id by hand (nodecycle never releases one: Address.by_hand), and
    # a pool address of the owner
    ec2 = sandbox.client("ec2")
    owner = sandbox.env["NODECYCLE_OWNER_ID"]
    ours = ec2.describe_addresses(Filters=[{"Name": "tag:nodecycle:owner", "Values": [owner]}])["Addresses"]
    assert len(ours) >= 2  # (the instances' addresses, allocated by the eip function)
    leaked, kept = ours[0], ours[1]
    ec2.disassociate_address(AssociationId=leaked["AssociationId"])
    static = ec2.allocate_address(
        Domain="vpc",
        TagSpecifications=[
            {"ResourceType": "elastic-ip", "Tags": [{"Key": "nodecycle:owner", "Value": owner}]}
        ],
    )["AllocationId"]
    pooled = ec2.allocate_address(
        Domain="vpc",
        TagSpecifications=[
            {
                "ResourceType": "elastic-ip",
                "Tags": [{"Key": "nodecycle:owner", "Value": owner}, {"Key": "nodecycle:pool", "Value": "p"}],
            }
        ],
    )["AllocationId"]
    try:
        # When the operator lists what to release as docs/removing.md says
        owner_filter, query = removal_listing()
        described = ec2.describe_addresses(Filters=[{"Name": owner_filter, "Values": [owner]}])
        listed = jmespath.search(query, described)
    finally:
        for allocation in (static, pooled):
            ec2.release_address(AllocationId=allocation)
        ec2.associate_address(AllocationId=leaked["AllocationId"], InstanceId=leaked["InstanceId"])

    # Then it lists the address nodecycle allocated and left unassociated, and neither the static one (released,
    # its IP would be lost for good), nor the pool's, nor one still in use
    assert listed == [leaked["AllocationId"]]
    assert kept["AllocationId"] not in listed


def test_the_nodes_removing_lists_for_clearing_are_the_stacks_own(sandbox: Sandbox, tmp_path: Path) -> None:
    # Given two nodes in a drain: one of this stack (owner nodecycle), as sam delete leaves it, and one another
    # stack sharing the cluster is draining now (its annotations name its owner)
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl is required by this test and is not on PATH")
    core = CoreV1Api(sandbox.kube.api_client())
    ours, theirs = sorted(str(node["metadata"]["name"]) for node in sandbox.kube.objects("nodes"))[:2]
    annotations = {"nodecycle.io/owner": "{}", "nodecycle.io/in-progress": "i-0/terminate/t"}
    for node, owner in ((ours, sandbox.env["NODECYCLE_OWNER_ID"]), (theirs, "other-stack")):
        marked = {name: value.format(owner) for name, value in annotations.items()}
        core.patch_node(node, {"metadata": {"annotations": marked}})
    try:
        # When the operator lists the nodes to clear as docs/removing.md says (its shell: OWNER set, as the
        # section before sets it)
        text = (ROOT / "docs/removing.md").read_text()
        # (the listing by owner; the one after it lists the nodes marked released, whoever's)
        (listing,) = [
            line
            for line in text.splitlines()
            if line.startswith("kubectl get nodes") and "annotations.nodecycle\\.io/owner" in line
        ]
        ran = subprocess.run(
            ["bash", "-c", f"OWNER={shlex.quote(sandbox.env['NODECYCLE_OWNER_ID'])}\n{listing}"],
            env={
                "PATH": os.environ.get("PATH", ""),
                "HOME": str(tmp_path),
                "KUBECONFIG": str(sandbox.kube.write_kubeconfig(tmp_path / "kubeconfig")),
            },
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        cleared = dict.fromkeys(annotations)
        for node in (ours, theirs):
            core.patch_node(node, {"metadata": {"annotations": cleared}})
        core.api_client.close()

    # Then it lists this stack's node, and not the node another stack is draining (clearing its annotations and
    # its cordon would put pods back on a node that stack is about to terminate)
    assert ran.returncode == 0, ran.stderr
    listed = [line.split("\t")[0] for line in ran.stdout.splitlines()]
    assert listed == [ours]


def test_a_call_aws_refuses_the_drain_is_named_where_the_runbook_looks_and_ends_with_the_refusal(
    sandbox: Sandbox, operator: Operator
) -> None:
    # Given a service control policy rolled out that denies the drain function CompleteLifecycleAction for a
    # while (5 calls: fewer than the 8 refused tries after which the step's message fails)
    sandbox.arm_faults(
        [Fault("scp", "aws-denied", target="autoscaling.CompleteLifecycleAction", limit=5)], seed=1
    )
    try:
        victim = sorted(sandbox.asg.in_state("InService"))[0]
        sandbox.asg.terminate(victim)

        # When the operator looks as the Drain dead letters entry says: nodecycle status --stack $STACK --json
        def refused() -> str | None:
            _, records = operator.json("status", "--stack", STACK)
            assert isinstance(records, list)
            errors = [r["last_error"] for r in records if r["instance_id"] == victim and r["last_error"]]
            return next((e for e in errors if "refused" in e), None)

        last_error = wait_for(refused, 90, "the refused call in the lifecycle's last_error")
    finally:
        sandbox.disarm_faults()

    # Then the record names the call refused and AWS's code
    assert "CompleteLifecycleAction" in last_error
    assert "AccessDenied" in last_error

    # And once the refusal is over the step goes on: the action is completed, never left to its default result
    action = wait_for(
        lambda: (a := terminate_action(sandbox, victim)) is not None and not a.active and a,
        90,
        "the terminate action completed",
    )
    assert action.outcome == "completed", action.outcome


def test_a_throttled_step_is_found_by_the_doctor_where_the_runbook_sends_the_operator_to_find_it(
    sandbox: Sandbox, operator: Operator
) -> None:
    # Given Auto Scaling throttling the functions' CompleteLifecycleAction (a busy account: every retry of the
    # client throttled too), and an instance terminating
    sandbox.arm_faults([Fault("busy", "aws-throttle", target="autoscaling.CompleteLifecycleAction")], seed=1)
    try:
        victim = sorted(sandbox.asg.in_state("InService"))[0]
        sandbox.asg.terminate(victim)

        # When the operator looks for the throttling as the runbook says (`nodecycle doctor --stack $STACK`)
        def retrying() -> dict[str, str] | None:
            status, findings = operator.findings()
            found = findings.get("lifecycles.retrying")
            # (the replacement's launch, completed by the same call, may be found retrying first)
            named = found is not None and f"{victim} terminate at" in found["what"]
            return found if found is not None and named and status == 1 else None

        found = wait_for(retrying, 90, "the doctor's finding of the lifecycle retrying its step")
    finally:
        sandbox.disarm_faults()

    # Then the doctor names the lifecycle, its step, and what its last try got: the throttle
    assert f"{victim} terminate at complete" in found["what"]
    assert "Throttling" in found["what"]
    assert found["fix"].startswith(f"nodecycle status --stack {STACK} --json")

    # And once AWS answers again the action is completed, and the doctor finds no lifecycle retrying
    wait_for(
        lambda: (a := terminate_action(sandbox, victim)) is not None and not a.active,
        90,
        "the terminate action completed",
    )
    wait_for(lambda: operator.findings()[1]["lifecycles.retrying"]["status"] == "ok", 60, "none retrying")


def test_the_doctor_counts_the_budget_holders_that_count_as_budget_show_does(
    sandbox: Sandbox, operator: Operator
) -> None:
    # Given the budget ConfigMap holding the slot of a drain that died 20 minutes ago (renewed no more: expired,
    # counted by no one, in the document until the next write removes it)
    core = CoreV1Api(sandbox.kube.api_client())
    shipped = core.read_namespaced_config_map("nodecycle-budget", "nodecycle").data
    died = (datetime.now(UTC) - timedelta(minutes=20)).isoformat()
    holder = {
        "node": "ip-10-0-1-1.eu-west-1.compute.internal",
        "instanceId": "i-0123456789abcdef0",
        "zone": "eu-west-1a",
        "owner": STACK,
        "recordId": "i-0123456789abcdef0/terminate/t",
        "renewedAt": died,
        "ttlSeconds": 600,
        "acquiredAt": died,
    }
    document = {"formatVersion": 3, "holders": [holder], "waiters": [], "released": [], "limits": {}}
    core.patch_namespaced_config_map(
        "nodecycle-budget", "nodecycle", {"data": {"budget.json": json.dumps(document)}}
    )
    try:
        # When the operator takes the first look: the doctor, and budget show
        _, findings = operator.findings()
        _, view = operator.json("budget", "show", "--stack", STACK)
    finally:
        restored: dict[str, str | None] = {"budget.json": None, **(shipped or {})}
        core.patch_namespaced_config_map("nodecycle-budget", "nodecycle", {"data": restored})
        core.api_client.close()

    # Then both say the same: the holder is there, and it counts for no one
    assert isinstance(view, dict)
    assert [h["expires_in_seconds"] <= 0 for h in view["holders"]] == [True]
    assert findings["cluster.budget"]["what"] == (
        "ConfigMap nodecycle/nodecycle-budget is a budget document: 0 holders, 0 waiters (and 1 expired entry, "
        "counted by no one)"
    )


def test_a_stuck_drains_slot_released_by_hand_is_taken_again_as_the_release_says(
    sandbox: Sandbox, operator: Operator, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a drain stuck on a PodDisruptionBudget that allows no disruption (one replica, minAvailable 1): its
    # node holds a budget slot, renewed at every poll, and will not go
    _, victim = held_by_a_budget(sandbox)
    node = node_of(sandbox, victim)
    sandbox.asg.terminate(victim)

    def held() -> dict[str, object] | None:
        _, view = operator.json("budget", "show", "--stack", STACK)
        assert isinstance(view, dict)
        return next((h for h in view["holders"] if h["node"] == node), None)

    try:
        before = wait_for(held, 60, "the stuck drain's budget slot")

        # When the operator frees its slot by hand as the Lifecycles stuck entry says (its own stack's slot: no
        # question with --yes)
        monkeypatch.setattr("builtins.input", lambda prompt: pytest.fail(f"asked: {prompt}"))
        operator.capsys.readouterr()
        released_at = datetime.now(UTC).timestamp()
        released = main(["budget", "release", node, "--stack", STACK, "--yes"])
        said = operator.capsys.readouterr().out

        # Then it says what it freed, and that a drain still running takes a slot again at its next step: which
        # it does, under the same lifecycle
        assert released == 0, said
        assert f"Released the budget slot of {node}: owner {STACK}, instance {victim}" in said
        assert "takes a slot again at its next step when there is room" in said

        def taken_again() -> dict[str, object] | None:
            # a holder of the node acquired since the release (the one released was acquired before it)
            asked = datetime.now(UTC).timestamp()
            holder = held()
            acquired = None if holder is None else asked - float(str(holder["held_seconds"]))
            return holder if acquired is not None and acquired > released_at - 1 else None

        again = wait_for(taken_again, 60, "the slot taken again")
        assert again["record_id"] == before["record_id"]
    finally:
        # (the runbook's Drain timeouts Do: the budget fixed with its owner, and the drain finishes)
        policy = PolicyV1Api(sandbox.kube.api_client())
        for budget in policy.list_namespaced_pod_disruption_budget("shop").items:
            if budget.metadata is not None and str(budget.metadata.name).startswith("singleton"):
                policy.delete_namespaced_pod_disruption_budget(str(budget.metadata.name), "shop")
        policy.api_client.close()
    wait_for(
        lambda: (a := terminate_action(sandbox, victim)) is not None and not a.active,
        90,
        "the terminate action completed",
    )


def test_the_runbooks_sweep_at_once_runs_a_sweep(sandbox: Sandbox) -> None:
    # Given the runbook's command that runs a sweep without waiting for the schedule (Sweeper not running)
    text = " ".join((ROOT / "docs/runbook.md").read_text().split())
    (command,) = re.findall(r"`(aws lambda invoke [^`]*--invocation-type Event[^`]*)`", text)
    assert "$(out SweeperFunctionName)" in command
    outputs = {
        o["OutputKey"]: o["OutputValue"]
        for o in sandbox.client("cloudformation").describe_stacks(StackName=STACK)["Stacks"][0]["Outputs"]
    }
    sweeps = len(sandbox.runner.journal.invocations("SweeperFunction", "invoke"))

    # When the operator runs it (as the AWS CLI does: an Event Invoke, with the operator's credentials)
    answer = sandbox.client("lambda").invoke(
        FunctionName=outputs["SweeperFunctionName"], InvocationType="Event", Payload=b"{}"
    )

    # Then Lambda takes it (202) and a sweep runs, and succeeds
    assert answer["StatusCode"] == 202
    ran = sandbox.runner.journal.wait_until(
        lambda: sandbox.runner.journal.invocations("SweeperFunction", "invoke")[sweeps:], timeout=120
    )
    assert [i.ok for i in ran] == [True]


# The runbook's aws commands that change the stack or need what only an incident gives (a NAME, a UUID, an
# instance): not run here (each has a test of its own where it matters)
PLACEHOLDERS = ("...", "<", "NAME")
CHANGES = (
    "put-",
    "create-",
    "add-permission",
    "allocate-address",
    "complete-lifecycle-action",
    "start-message-move",
)


def runbook_aws_commands() -> list[str]:
    """Every whole ``aws ...`` command of docs/runbook.md (its shell blocks' lines and its inline code)."""
    text = (ROOT / "docs/runbook.md").read_text()
    found: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL):
        found += [line for line in block.replace("\\\n", " ").splitlines() if line.startswith("aws ")]
    found += [" ".join(span.split()) for span in re.findall(r"`(aws\s[^`]*)`", text)]
    return sorted({" ".join(c.split()) for c in found if len(c.split()) > 3})


def run_aws(sandbox: Sandbox, command: str, outputs: dict[str, str]) -> Any:
    """``command`` as the AWS CLI runs it, on boto3: its options are the operation's members, kebab-cased
    (``aws logs tail`` is the CLI's FilterLogEvents of the group since then)."""
    for key, value in outputs.items():
        command = command.replace(f"$(out {key})", value).replace(f'"$(out {key})"', value)
    command = re.sub(
        r"\$\(arn (\w+)\)",
        lambda m: sandbox.client("sqs").get_queue_attributes(
            QueueUrl=outputs[m.group(1)], AttributeNames=["QueueArn"]
        )["Attributes"]["QueueArn"],
        command,
    ).replace("$STACK", STACK)
    service, operation, *argv = shlex.split(command)[1:]
    client = sandbox.client(service)
    if (service, operation) == ("logs", "tail"):
        options = dict(zip(argv[1::2], argv[2::2], strict=False))
        minutes = {"m": 1, "h": 60}[options["--since"][-1]] * int(options["--since"][:-1])
        start = int((datetime.now(UTC) - timedelta(minutes=minutes)).timestamp() * 1000)
        pattern = {"filterPattern": options["--filter-pattern"]} if "--filter-pattern" in options else {}
        return client.filter_log_events(logGroupName=argv[0], startTime=start, **pattern)
    model = client.meta.service_model
    (name,) = [o for o in model.operation_names if botocore.xform_name(o, "-") == operation]
    members = model.operation_model(name).input_shape.members
    by_option = {botocore.xform_name(m, "-"): m for m in members}
    params: dict[str, Any] = {}
    query: str | None = None
    words = iter(argv)
    for word in words:
        if not word.startswith("--"):
            continue  # (an outfile: aws lambda invoke's)
        option = word[2:]
        if option == "query":  # (the AWS CLI's own filter of the answer, JMESPath: applied below)
            query = next(words)
            continue
        if option == "output":  # (the AWS CLI's own format of the answer: the answer is read as it is)
            next(words)
            continue
        if option.startswith("no-") and option[3:] in by_option:
            params[by_option[option[3:]]] = False
            continue
        member = by_option[option]
        shape = members[member]
        if shape.type_name == "boolean":
            params[member] = True
        elif shape.type_name == "integer":
            params[member] = int(next(words))
        elif shape.type_name == "list" and shape.member.type_name == "structure":
            pairs = dict(part.split("=", 1) for part in next(words).split(",", 1))
            params[member] = [{k: [v] if k == "Values" else v for k, v in pairs.items()}]
        elif shape.type_name == "list":
            params[member] = next(words).split(",")
        elif shape.type_name == "blob":
            params[member] = next(words).encode()
        else:
            params[member] = next(words)
    answer = getattr(client, botocore.xform_name(name))(**params)
    if query is not None:  # (a filter that cannot read the answer fails here; the answer is what is judged)
        jmespath.search(query, answer)
    return answer


# What the sandbox does not serve of the runbook's commands (moto's gaps), each a strict xfail to take off once served
UNSERVED = {
    "aws cloudformation detect-stack-drift": "moto answers DetectStackDrift with a 500 (not implemented)",
    "aws cloudformation describe-stack-resource-drifts": "moto does not implement DescribeStackResourceDrifts",
    "aws service-quotas get-service-quota": "moto's Service Quotas holds no EC2 quota in the sandbox's region",
}


def runnable_commands() -> list[Any]:
    """The runbook's aws commands that read the stack or run it (not those that change it), as test cases."""
    cases = []
    for command in runbook_aws_commands():
        if any(p in command for p in PLACEHOLDERS) or any(f" {change}" in command for change in CHANGES):
            continue
        gap = next((why for prefix, why in UNSERVED.items() if command.startswith(prefix)), None)
        marks = [pytest.mark.xfail(strict=True, reason=gap)] if gap else []
        cases.append(pytest.param(command, marks=marks, id=" ".join(command.split()[1:3])))
    return cases


def test_the_runbook_gives_aws_commands_that_run_functions_and_read_their_logs() -> None:
    commands = [case.values[0] for case in runnable_commands()]
    assert any(" lambda invoke " in c for c in commands)
    assert any(" logs tail " in c for c in commands)


@pytest.mark.parametrize("command", runnable_commands())
def test_each_runbook_aws_command_works_against_the_sandbox(sandbox: Sandbox, command: str) -> None:
    # Given an aws command of the runbook that reads the stack or runs it, When the operator runs it against the
    # sandbox, Then the sandbox answers it as AWS does (not refused, nothing moto does not serve)
    outputs = {
        o["OutputKey"]: o["OutputValue"]
        for o in sandbox.client("cloudformation").describe_stacks(StackName=STACK)["Stacks"][0]["Outputs"]
    }
    answer = run_aws(sandbox, command, outputs)
    assert answer["ResponseMetadata"]["HTTPStatusCode"] in (200, 202)


def test_an_operators_synchronous_invoke_of_the_sweeper_answers_with_its_sweep(sandbox: Sandbox) -> None:
    # Given the sweeper, as the AWS CLI invokes it by default (RequestResponse: `aws lambda invoke
    # --function-name $(out SweeperFunctionName) out.json`), through the AWS process to the runner
    outputs = {
        o["OutputKey"]: o["OutputValue"]
        for o in sandbox.client("cloudformation").describe_stacks(StackName=STACK)["Stacks"][0]["Outputs"]
    }

    # When the operator runs it (again while a scheduled sweep holds the sweeper's one execution: refused, 429)
    def invoked() -> Any:
        try:
            return sandbox.client("lambda").invoke(FunctionName=outputs["SweeperFunctionName"], Payload=b"{}")
        except ClientError as error:
            if error.response["Error"]["Code"] != "TooManyRequestsException":
                raise
            return None

    answer = wait_for(invoked, 60, "the sweeper's synchronous invocation")

    # Then Lambda ran a sweep and answered with what it returned (its counts), no function error
    assert (answer["StatusCode"], answer.get("FunctionError")) == (200, None)
    swept = json.loads(answer["Payload"].read())
    (ran,) = sandbox.runner.journal.invocations("SweeperFunction", "invoke:sync")
    assert (ran.ok, swept) == (True, ran.response)
