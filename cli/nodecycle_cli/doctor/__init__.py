"""``nodecycle doctor``: check a deployment against its account and cluster, and say what is wrong.

    nodecycle doctor --stack NAME [--region R] [--kubeconfig F] [--context C] [--json]
    nodecycle doctor --cluster NAME --group GROUP...       (before deploying: the cluster and the groups)

With ``--stack`` the stack's outputs and parameters give the table, owner id, cluster, queues, rules, groups
and settings (the sandbox registers its stack too: ``nodecycle doctor --stack nodecycle``). AWS is reached
with the usual credential chain, the cluster with the kubeconfig. Checked:

- the stack itself: not half deleted (DELETE_FAILED, DELETE_IN_PROGRESS: then that alone, and the hooks that
  outlive it), and no other nodecycle stack of the region with its owner id, naming a group it names, or on its
  cluster with another BudgetNamespace (a budget apart: each stack counts only its own namespace's slots);

- the cluster's authentication mode (access entries need API or API_AND_CONFIG_MAP);
- each function role's access entry (or, in API_AND_CONFIG_MAP, its aws-auth mapping), and what the identity it
  gives may do in the cluster (a SubjectAccessReview of every call the function makes);
- the RBAC applied as ``nodecycle rbac`` renders it for the stack's BudgetNamespace and KubernetesGroup
  (deploy/rbac.yaml with the template's defaults), or as the manifest --rbac names;
- the budget ConfigMap readable as a budget document;
- no aws-node-termination-handler in IMDS mode (its DaemonSet) draining the nodes of the stack's groups: it drains
  on Spot interruptions and scheduled events with no budget, as nodecycle does on those and on terminations (two
  drainers on one node: docs/migrating.md);
- no node claimed (nodecycle.io/owner) by an owner no nodecycle stack of the region has, nor one that wrote in the
  stack's budget within the day (a removed stack's leftover: a stack whose budget that owner writes nothing in
  leaves the node alone for up to nine days, each of its drains there given up undrained at its timeout, with a
  NodeClaimedElsewhere event on the node); and no node kept cordoned (nodecycle.io/released-for) for a lifecycle
  the stack has no open record of while its instance is InService in one of its groups (a table deleted with the
  stack: no watch lifts that cordon; a rebalance recommendation's or a Spot interruption's cordon, kept until the
  instance goes, is not one);
- each managed group's hooks: present, named in ManagedHooks, a heartbeat timeout long enough for the
  settings (HeartbeatMarginSeconds plus the later of WorkVisibilityTimeoutSeconds and ResumeGraceSeconds + 2,
  and at least how far apart two sweeps may heartbeat an action: SweepIntervalMinutes plus the later of
  HeartbeatMarginSeconds and a minute, the schedule's precision, plus 255 s, how far into its run a sweep may
  reach it, plus 300 s under 5 minutes: 615 s with the template's defaults), the
  default result; none still tagged aws-node-termination-handler/managed (that handler would drain its nodes
  too, outside the budget, and complete nodecycle's actions: docs/migrating.md); and no instance of them tagged
  nodecycle:owner for another owner (a group's tag reaches an instance at its launch only: a group retagged keeps
  its instances tagged for the owner before, which takes their disruptions);
- the EventBridge rules enabled, each targeting its function (with the template's retry policy and dead-letter
  queue), which lets the rule invoke it (its resource policy); the dead-letter
  queues there and empty, and the intake and sweeper ones
  writable by the stack's rules (their queue policies); no lifecycle stuck, nor retrying a step that
  failed (throttled, refused: the call and AWS's or the cluster's answer, from its record), nor held by a
  completion claim past its takeover time (its completer gone and nothing taking it over);
- each function there, not throttled to nothing (a reserved concurrency of 0 set by hand), and its queue
  mappings enabled (a mapping disabled by hand): ``sam deploy`` undoes neither; and its log group there (its
  role may not create it: deleted by hand, its logs are dropped).

Each finding says what is wrong, why it matters and the command that fixes it. Exit status: 0 all good,
1 a problem or a warning, 3 nothing wrong found but some checks could not be made; 2 the doctor could not run
(no such stack, no credentials, an argument it does not take: one line on stderr says why).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodecycle.settings import Timing
from nodecycle_cli.cluster import add_kubeconfig_arguments, api_client, mismatch
from nodecycle_cli.deployment import (
    Deployment,
    TableMissing,
    add_stack_arguments,
    find,
    lifecycle_table,
    session,
    stack_named_by,
)
from nodecycle_cli.doctor import (
    aws_checks,
    claims,
    cluster_checks,
    drainers,
    function_checks,
    released,
    settings_checks,
)
from nodecycle_cli.doctor.findings import Finding, Status, as_json, exit_status, render
from nodecycle_cli.doctor.permissions import Identity
from nodecycle_cli.failures import CommandError, explain

if TYPE_CHECKING:
    import boto3

DEFAULTS = {  # the template's defaults, for a preflight before the stack exists
    "HeartbeatMarginSeconds": "60",
    "WorkVisibilityTimeoutSeconds": "150",
    "ResumeGraceSeconds": "60",
    "SweepIntervalMinutes": "5",
    "EipMode": "off",
    "EipFailurePolicy": "abandon",
    "ReadinessGate": "true",
    "ReadinessFailureResult": "ABANDON",
    "BudgetNamespace": "nodecycle",
    "KubernetesGroup": "nodecycle",
    "ManagedHooks": "nodecycle-launch,nodecycle-terminate",
    "ManagedByTag": "false",
    "CreateAccessEntries": "true",
}


# Every EventBridge rule of the stack, each named by an output of the template: the doctor's name for it (as
# aws_checks.RULE_PURPOSES has it) and that output.
RULE_OUTPUTS = (
    ("lifecycle actions", "LifecycleRuleName"),
    ("EC2 disruptions", "DisruptionRuleName"),
    ("scheduled maintenance", "MaintenanceRuleName"),
    ("sweeper schedule", "SweepRuleName"),
)

# The function each rule delivers to, by the outputs that name them
RULE_TARGETS = {
    "LifecycleRuleName": "IntakeFunctionName",
    "DisruptionRuleName": "IntakeFunctionName",
    "MaintenanceRuleName": "IntakeFunctionName",
    "SweepRuleName": "SweeperFunctionName",
}

# The rules whose undelivered events go to a dead-letter queue (the template's queue policies let them write
# there), by the output that names each rule
DEAD_LETTER_WRITERS = {
    "intake": ("LifecycleRuleName", "DisruptionRuleName", "MaintenanceRuleName"),
    "sweeper": ("SweepRuleName",),
}


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "doctor",
        help="check a deployment: cluster access, hooks, rules, queues",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_stack_arguments(parser)
    add_kubeconfig_arguments(parser)
    parser.add_argument("--cluster", help="the EKS cluster to check (default: the stack's ClusterName)")
    parser.add_argument(
        "--group", action="append", default=[], help="an Auto Scaling group to check (default: the stack's)"
    )
    parser.add_argument(
        "--rbac",
        type=Path,
        help="the RBAC manifest to compare with the cluster (default: what nodecycle rbac renders for the "
        "stack's BudgetNamespace and KubernetesGroup)",
    )
    parser.add_argument("--json", action="store_true", help="the findings as JSON")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    aws = session(args)
    with stack_named_by(args):
        deployment = find(aws, args.stack) if args.stack else None
    if deployment is None and not (args.cluster or args.group):
        raise CommandError(
            "what to check? pass --stack NAME (or, before deploying, --cluster NAME and --group GROUP)"
        )
    doctor = Doctor(args, aws, deployment)
    findings = doctor.examine()
    if args.json:
        print(json.dumps({"target": doctor.title(), "findings": as_json(findings)}, indent=2))
    else:
        print(render(doctor.title(), findings))
    return exit_status(findings)


def _redrive(what: str, queue: aws_checks.DeadLetterQueue, deployment: Deployment) -> str:
    """What empties a dead-letter queue once its cause is fixed, as docs/runbook.md's entry for it says."""
    if what == "sweeper":
        return f"aws sqs purge-queue --queue-url {queue.url} (the next sweep is their retry)"
    move = f"aws sqs start-message-move-task --source-arn {queue.arn}"
    if what == "intake":
        # (what Lambda and EventBridge wrote there came from no queue: the intake queue is named)
        destination = deployment.outputs.get("IntakeQueueArn")
        return f"{move} --destination-arn {destination}" if destination else ""
    return f"{move} (each message back to the queue it came from)"


class Doctor:
    def __init__(self, args: argparse.Namespace, aws: boto3.Session, deployment: Deployment | None) -> None:
        self._args = args
        self._aws = aws
        self._deployment = deployment
        self._clients: dict[str, Any] = {}
        self._mode_of: str | None = None  # the cluster's authentication mode, once read
        self.cluster = args.cluster or (deployment.cluster if deployment else None)

    def title(self) -> str:
        where = self._aws.region_name or "(no region)"
        if self._deployment is not None:
            target = f"stack {self._deployment.name} (owner {self._deployment.outputs.get('OwnerId', '?')})"
        else:
            target = "no stack (a preflight of the cluster and groups)"
        return f"nodecycle doctor: {target} in {where}, cluster {self.cluster or '(none)'}"

    def parameter(self, name: str) -> str:
        if self._deployment is not None and name in self._deployment.parameters:
            return self._deployment.parameters[name]
        return DEFAULTS[name]

    def client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = self._aws.client(service)  # type: ignore[call-overload]
        return self._clients[service]

    # -- the checks ---------------------------------------------------------------------------------

    def examine(self) -> list[Finding]:
        findings: list[Finding] = []
        deployment = self._deployment
        if deployment is not None and deployment.status.startswith("DELETE_"):
            # What it left is on its way out: a table or a function found missing is no finding to restore it
            # from a backup. The hooks are the operator's and stay: they hold each action till its timeout.
            return [aws_checks.being_deleted(deployment), *self._guard("hooks", self._hooks)]
        if deployment is not None:
            findings += self._guard(
                "cloudformation.owner",
                lambda: [
                    aws_checks.shared_owner(self.client("cloudformation"), deployment),
                    aws_checks.shared_groups(self.client("cloudformation"), deployment),
                    aws_checks.split_budget(self.client("cloudformation"), deployment),
                ],
            )
            findings += self._guard(
                "settings.maintenance-lead", lambda: [settings_checks.maintenance_lead(deployment)]
            )
            for what, output in RULE_OUTPUTS:
                # one rule at a time: one that may not be read hides nothing of the other's state
                findings += self._guard(
                    f"eventbridge.rule.{what}", partial(self._rule, deployment, what, output)
                )
            for what in ("intake", "drain", "eip", "sweeper"):
                # one queue at a time: one that cannot be read (deleted, refused) hides none of the others
                findings += self._guard(
                    f"queues.dead-letters.{what}", partial(self._dead_letters, deployment, what)
                )
            for what, output in function_checks.FUNCTION_OUTPUTS.items():
                # (a stack from before the functions' names were outputs: not checked)
                if deployment.outputs.get(output):
                    findings += self._guard(
                        f"lambda.function.{what}",
                        partial(
                            function_checks.function,
                            self.client("lambda"),
                            what,
                            deployment.outputs[output],
                            deployment.parameters,
                        ),
                    )
            for what, output in function_checks.LOG_GROUP_OUTPUTS.items():
                if deployment.outputs.get(output):  # (a stack from before the groups were the stack's)
                    findings += self._guard(
                        f"logs.group.{what}",
                        partial(
                            function_checks.log_group,
                            self.client("logs"),
                            what,
                            deployment.outputs[output],
                            deployment.parameters,
                        ),
                    )
            findings += self._guard("lifecycles", lambda: self._lifecycles(deployment))
        findings += self._guard("hooks", self._hooks)
        if deployment is not None:
            findings += self._guard("instances.owner", lambda: self._instance_owners(deployment))
        if self.cluster:
            findings += self._cluster(self.cluster)
        return findings

    def _guard(self, check: str, run: Callable[[], list[Finding]]) -> list[Finding]:
        """A check that cannot be made is a finding too, not the end of the examination."""
        try:
            return run()
        except CommandError as error:
            return [Finding.unchecked(check, str(error))]
        except Exception as error:
            reason = explain(error)
            if getattr(self._args, "verbose", False):
                raise
            return [Finding.unchecked(check, reason or f"{type(error).__name__}: {error}")]

    def _rule(self, deployment: Deployment, what: str, output: str) -> list[Finding]:
        # (a stack from before the functions' names were outputs: the targets are not checked)
        function = deployment.outputs.get(RULE_TARGETS[output])
        # (the rule's dead-letter queue, when the stack names it: its target must send there)
        queue = next((q for q, rules in DEAD_LETTER_WRITERS.items() if output in rules), None)
        url = deployment.outputs.get(f"{queue.capitalize()}DeadLetterQueueUrl") if queue else None
        dead_letters = None
        if url:
            region = self.client("sqs").meta.region_name
            dead_letters = aws_checks.DeadLetterQueue(
                url=url, region=region, partition=self._aws.get_partition_for_region(region)
            ).arn
        events = self.client("events")
        rule = deployment.output(output)
        findings = aws_checks.rules(
            events,
            {what: rule},
            {what: function} if function else None,
            {what: dead_letters} if dead_letters else None,
        )
        if function:
            try:
                arn = events.describe_rule(Name=rule)["Arn"]
            except Exception as error:
                if getattr(error, "response", {}).get("Error", {}).get("Code") != "ResourceNotFoundException":
                    raise
                return findings  # no rule: its finding says so
            # (a rule there, enabled or not: its function must let it invoke it)
            findings += self._guard(
                f"eventbridge.rule.{what}.permission",
                partial(function_checks.rule_permission, self.client("lambda"), what, function, rule, arn),
            )
        return findings

    def _dead_letters(self, deployment: Deployment, what: str) -> list[Finding]:
        sqs = self.client("sqs")
        region = sqs.meta.region_name
        rules = [deployment.outputs.get(output) for output in DEAD_LETTER_WRITERS.get(what, ())]
        queue = aws_checks.DeadLetterQueue(
            url=deployment.output(f"{what.capitalize()}DeadLetterQueueUrl"),
            region=region,
            partition=self._aws.get_partition_for_region(region),
            written_by_rules=tuple(rule for rule in rules if rule),
        )
        return aws_checks.dead_letters(sqs, {what: replace(queue, redrive=_redrive(what, queue, deployment))})

    def _lifecycles(self, deployment: Deployment) -> list[Finding]:
        """The open lifecycles, read once: those that stopped moving, and those retrying a failed step."""
        from nodecycle.adapters.aws.records import DynamoRecordStore

        dynamodb = self.client("dynamodb")
        store = DynamoRecordStore(deployment.table, ttl=timedelta(days=1), dynamodb=dynamodb)
        grace = timedelta(seconds=int(self.parameter("ResumeGraceSeconds")))
        try:
            with lifecycle_table(deployment.table, dynamodb.meta.region_name):
                records = list(store.open_records(deployment.owner))
        except TableMissing as missing:
            # something wrong, as a dead-letter queue deleted is: not a check that could not be made
            return [
                Finding.problem(
                    "lifecycles",
                    str(missing),
                    "every intake, step and sweep reads or writes it: no lifecycle action is answered, hooks "
                    "end with their default result",
                    # (an update of the stack does not recreate a resource deleted outside it; a restore brings
                    # neither the TTL nor point-in-time recovery back: without its TTL, template.yaml's, no finished
                    # lifecycle's record ever leaves the table)
                    f"restore it under its name from the backup DynamoDB took when it was deleted: aws dynamodb "
                    f"list-backups --table-name {deployment.table} --backup-type SYSTEM (its BackupArn), then aws "
                    f"dynamodb restore-table-from-backup --target-table-name {deployment.table} --backup-arn ARN; once it "
                    f"is ACTIVE, what a restore leaves out: aws dynamodb update-time-to-live --table-name "
                    f"{deployment.table} --time-to-live-specification Enabled=true,AttributeName=expires_at and aws "
                    f"dynamodb update-continuous-backups --table-name {deployment.table} --point-in-time-recovery-"
                    "specification PointInTimeRecoveryEnabled=true (or, with no backup: "
                    "docs/runbook.md#resources-deleted-outside-the-stack)",
                )
            ]
        now = datetime.now(UTC)
        margin = timedelta(seconds=int(self.parameter("HeartbeatMarginSeconds")))
        # (a claim past its takeover is taken over by the next sweep's resend: a sweep interval and the grace)
        sweep = timedelta(minutes=int(self.parameter("SweepIntervalMinutes"))) + grace
        return [
            aws_checks.stuck_lifecycles(records, now, grace, deployment.name),
            aws_checks.completion_claims(records, now, margin, sweep, deployment.name),
            aws_checks.retrying_lifecycles(records, deployment.name),
        ]

    def _groups(self) -> list[str] | None:
        """The groups checked: --group's, else the stack's; None for a preflight of the cluster alone."""
        if self._args.group:
            return list(self._args.group)
        if self._deployment is None:
            return None
        by_tag = self.parameter("ManagedByTag") == "true"
        return aws_checks.managed_groups(
            self.client("autoscaling"),
            self._deployment.managed_groups,
            self._deployment.owner if by_tag else None,
        )

    def _hooks(self) -> list[Finding]:
        autoscaling = self.client("autoscaling")
        groups = self._groups()
        if groups is None:
            # a preflight of the cluster alone (run takes --cluster without --group): no group to look at
            return [
                Finding.unchecked(
                    "hooks",
                    "the groups' lifecycle hooks: no group given",
                    "pass --group GROUP for each Auto Scaling group the stack will manage",
                )
            ]
        eip = self.parameter("EipMode") != "off"
        gate = self.parameter("ReadinessGate") == "true" and bool(self.cluster)
        transitions = []
        if eip or gate:
            transitions.append(aws_checks.LAUNCHING)
        if eip or self.cluster:
            transitions.append(aws_checks.TERMINATING)
        abandons = (eip and self.parameter("EipFailurePolicy") == "abandon") or (
            gate and self.parameter("ReadinessFailureResult") == "ABANDON"
        )
        rules = aws_checks.HookRules(
            names=tuple(h.strip() for h in self.parameter("ManagedHooks").split(",") if h.strip()),
            transitions=tuple(transitions),
            # the functions' own rule, from the same settings
            min_heartbeat=Timing(
                heartbeat_margin_seconds=int(self.parameter("HeartbeatMarginSeconds")),
                work_visibility_timeout_seconds=int(self.parameter("WorkVisibilityTimeoutSeconds")),
                resume_grace_seconds=int(self.parameter("ResumeGraceSeconds")),
                sweep_interval_minutes=float(self.parameter("SweepIntervalMinutes")),
            ).min_heartbeat_timeout_seconds,
            launch_default="ABANDON" if abandons else "CONTINUE",
            owner=self._deployment.owner if self._deployment is not None else None,
            named=tuple(self._deployment.managed_groups) if self._deployment is not None else tuple(groups),
            eip=eip,
        )
        return aws_checks.hooks(autoscaling, groups, rules)

    def _instance_owners(self, deployment: Deployment) -> list[Finding]:
        groups = self._groups() or []
        return aws_checks.instance_owners(
            self.client("autoscaling"), self.client("ec2"), groups, deployment.owner
        )

    def _cluster(self, cluster: str) -> list[Finding]:
        eks = self.client("eks")
        found = self._guard("cluster.authentication-mode", lambda: [self._mode(eks, cluster)])
        findings = list(found)
        if self._mode_of is None:
            return findings  # no cluster of that name, or it could not be read: nothing more to look at
        try:
            kube = api_client(self._args)
        except Exception as error:
            reason = explain(error) or f"{type(error).__name__}: {error}"
            return [*findings, Finding.unchecked("cluster.kubeconfig", f"the cluster's objects: {reason}")]
        context = self._guard("cluster.kubeconfig", lambda: self._kubeconfig(kube, cluster))
        findings += context
        # A context that is another cluster's: what its API server says of the budget, the RBAC and the
        # permissions is about that cluster, not this one (the access entries are EKS's, read from AWS)
        elsewhere = any(f.status is Status.PROBLEM for f in context)
        namespace = self.parameter("BudgetNamespace")
        prefix = self.parameter("KubernetesGroup")
        budget_exists: list[bool | None] = [None]

        def budget() -> list[Finding]:
            finding, budget_exists[0] = cluster_checks.budget_configmap(kube, namespace, prefix)
            return [finding]

        def in_cluster(check: str, run: Callable[[], list[Finding]]) -> list[Finding]:
            if elsewhere:
                return [
                    Finding.unchecked(
                        check,
                        f"the kubeconfig's context is not cluster {cluster} (see cluster.kubeconfig)",
                        f"aws eks update-kubeconfig --name {cluster}, then run the doctor again",
                    )
                ]
            return self._guard(check, run)

        findings += in_cluster("cluster.budget", budget)
        identities: list[Identity] = []
        if self._deployment is not None:

            def aws_auth() -> cluster_checks.AwsAuth | None:
                """What kube-system/aws-auth maps, where EKS reads it (API_AND_CONFIG_MAP)."""
                if self._mode_of != "API_AND_CONFIG_MAP":
                    return None
                if elsewhere:
                    return cluster_checks.AwsAuth(
                        unreadable=f"the kubeconfig's context is not cluster {cluster}"
                    )
                return cluster_checks.read_aws_auth(kube)

            findings += self._guard(
                "cluster.access-entry", lambda: self._access(eks, cluster, identities, aws_auth)
            )
        if identities:
            findings += in_cluster(
                "cluster.permissions",
                lambda: cluster_checks.permissions(kube, identities, namespace, budget_exists[0], prefix),
            )
        findings += in_cluster("cluster.rbac-applied", lambda: self._rbac(kube, namespace))
        findings += in_cluster(
            drainers.CHECK, lambda: drainers.termination_handlers(kube, self._group_instances())
        )
        if self._deployment is not None:
            deployment = self._deployment
            findings += in_cluster(
                claims.CHECK,
                lambda: claims.leftover_claims(self.client("cloudformation"), kube, deployment),
            )
            findings += in_cluster(
                released.CHECK,
                lambda: released.kept_cordons(
                    kube, self.client("autoscaling"), self._groups() or [], self._open_lifecycles(deployment)
                ),
            )
        return findings

    def _open_lifecycles(self, deployment: Deployment) -> set[str]:
        """The ids of the stack's open lifecycle records (read again: a check of its own, refused on its own)."""
        from nodecycle.adapters.aws.records import DynamoRecordStore

        dynamodb = self.client("dynamodb")
        store = DynamoRecordStore(deployment.table, ttl=timedelta(days=1), dynamodb=dynamodb)
        with lifecycle_table(deployment.table, dynamodb.meta.region_name):
            return {record.id for record in store.open_records(deployment.owner)}

    def _group_instances(self) -> set[str] | None:
        """The instance ids of the groups checked (None: no group given, every node counts)."""
        groups = self._groups()
        if not groups:
            return None
        return {
            i["InstanceId"]
            for g in aws_checks.described_groups(self.client("autoscaling"), groups)
            for i in g.get("Instances", [])
        }

    def _mode(self, eks: Any, cluster: str) -> Finding:
        finding, self._mode_of = cluster_checks.authentication_mode(eks, cluster)
        if self._mode_of == "CONFIG_MAP" and self.parameter("CreateAccessEntries") == "false":
            return Finding.warning(
                finding.check,
                f"cluster {cluster} authenticates through the aws-auth ConfigMap only (CONFIG_MAP), and the "
                "stack creates no access entries (CreateAccessEntries=false)",
                "the functions' roles must then be mapped in kube-system/aws-auth by hand, which the doctor "
                "cannot check; access entries are what EKS recommends",
                finding.fix,
            )
        return finding

    def _kubeconfig(self, kube: Any, cluster: str) -> list[Finding]:
        wrong = mismatch(kube, self._aws, cluster)
        if wrong:
            return [
                Finding.problem(
                    "cluster.kubeconfig",
                    wrong.why,
                    "the cluster checks below would look at another cluster",
                    f"aws eks update-kubeconfig --name {cluster}",
                )
            ]
        return [Finding.ok("cluster.kubeconfig", f"the kubeconfig's context is cluster {cluster}")]

    def _access(
        self,
        eks: Any,
        cluster: str,
        identities: list[Identity],
        aws_auth: Callable[[], cluster_checks.AwsAuth | None],
    ) -> list[Finding]:
        assert self._deployment is not None
        if self._mode_of not in cluster_checks.ACCESS_ENTRY_MODES:
            return [
                Finding.unchecked(
                    "cluster.access-entry",
                    "the functions' access entries: the cluster takes none (CONFIG_MAP)",
                )
            ]
        roles = {
            "drain": self._deployment.output("DrainFunctionRoleArn"),
            "sweeper": self._deployment.output("SweeperFunctionRoleArn"),
        }
        findings, found = cluster_checks.access_entries(
            eks,
            cluster,
            roles,
            self.parameter("KubernetesGroup"),
            stack_makes_them=self.parameter("CreateAccessEntries") == "true",
            aws_auth=aws_auth,
            role_created=self._role_created,
        )
        identities += found
        return findings

    def _role_created(self, role: str) -> datetime | None:
        """When IAM says ``role`` was created; None when it cannot say (no such role, the call refused)."""
        try:
            created = self.client("iam").get_role(RoleName=role.rsplit("/", 1)[-1])["Role"]["CreateDate"]
        except Exception as error:
            if cluster_checks.error_code(error) in ("NoSuchEntity", "AccessDenied", "AccessDeniedException"):
                return None
            raise
        return created if isinstance(created, datetime) else None

    def _rbac(self, kube: Any, namespace: str) -> list[Finding]:
        """The RBAC the stack needs (``nodecycle rbac`` for its namespace and group prefix) is what the
        cluster has; or, with --rbac, the manifest given."""
        if self._args.rbac:
            manifest = cluster_checks.load_manifest(self._args.rbac)
            return cluster_checks.rbac_applied(kube, manifest, str(self._args.rbac), namespace)
        from nodecycle_cli import rbac

        prefix = self.parameter("KubernetesGroup")
        rendered = rbac.render(namespace=namespace, group_prefix=prefix)
        source = rbac.command(namespace, prefix)
        return cluster_checks.rbac_applied(kube, rbac.documents(rendered), source, namespace)
