"""The doctor's checks on the AWS side: the managed groups' hooks, the EventBridge rules, the dead-letter
queues, and lifecycles that stopped moving."""

from __future__ import annotations

import fnmatch
import itertools
import json
import shlex
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from nodecycle.domain.catalog import OWNER_TAG
from nodecycle.domain.engine import MAX_REFUSED_ATTEMPTS
from nodecycle.domain.sweep.lifecycles import MAX_RESUMES  # resumed this often in a row, a lifecycle is stuck
from nodecycle_cli.claims import claims
from nodecycle_cli.deployment import stack_outputs
from nodecycle_cli.doctor.findings import Finding
from nodecycle_cli.output import age

LAUNCHING = "autoscaling:EC2_INSTANCE_LAUNCHING"
TERMINATING = "autoscaling:EC2_INSTANCE_TERMINATING"
# The group tag key aws-node-termination-handler's queue processor acts on (its managedAsgTag default, checked when
# checkASGTagBeforeDraining is on, its default): it drains the group's nodes on every terminate lifecycle action its
# rule sends it, whichever hook, and completes that hook's action (docs/migrating.md)
NTH_MANAGED_TAG = "aws-node-termination-handler/managed"
# DescribeAutoScalingGroups' limit on AutoScalingGroupNames: a call naming more is refused, "The number of group names
# that may be passed in is limited to 50" (a ValidationError; boto/botocore#1444, kubernetes/autoscaler#1228)
NAMES_PER_CALL = 50


@dataclass(frozen=True)
class HookRules:
    """What the stack's settings ask of its groups' hooks."""

    names: tuple[str, ...]  # ManagedHooks ("*": any)
    transitions: tuple[str, ...]  # the transitions nodecycle must hold
    min_heartbeat: int  # the functions' own minimum (nodecycle.settings.Timing.min_heartbeat_timeout_seconds)
    launch_default: str  # the default result a launch hook should have: what nodecycle does on failure
    owner: str | None = None  # the stack's owner id: a group tagged for another owner is that owner's
    # The groups named in ManagedGroups (the others checked are the stack's by their tag), and whether Elastic IPs are
    # on: the EIP role associates addresses with the instances of a group managed by tag only when they carry its tag
    named: tuple[str, ...] = ()
    eip: bool = False

    def answers(self, hook: str) -> bool:
        return "*" in self.names or hook in self.names


def described_groups(autoscaling: Any, names: Iterable[str]) -> Iterator[Any]:
    """The groups among ``names`` that Auto Scaling knows, as DescribeAutoScalingGroups answers them: at most
    NAMES_PER_CALL names a call (a stack may manage more groups than that), each call's pages read (50 groups a
    page)."""
    paginator = autoscaling.get_paginator("describe_auto_scaling_groups")
    for batch in itertools.batched(list(dict.fromkeys(names)), NAMES_PER_CALL):
        for page in paginator.paginate(AutoScalingGroupNames=list(batch)):
            yield from page["AutoScalingGroups"]


def managed_groups(autoscaling: Any, names: Sequence[str], owner: str | None) -> list[str]:
    """The groups named, and those tagged nodecycle:owner=<owner> when the stack manages by tag."""
    found = list(names)
    if owner:
        pages = autoscaling.get_paginator("describe_auto_scaling_groups").paginate(
            Filters=[{"Name": "tag:nodecycle:owner", "Values": [owner]}]
        )
        for page in pages:
            found += [
                g["AutoScalingGroupName"]
                for g in page["AutoScalingGroups"]
                if g["AutoScalingGroupName"] not in found
            ]
    return found


def hooks(autoscaling: Any, groups: Sequence[str], rules: HookRules) -> list[Finding]:
    if not groups:
        return [
            Finding.problem(
                "hooks",
                "the stack manages no Auto Scaling group (ManagedGroups is empty, and no group is tagged "
                "nodecycle:owner for it)",
                "no lifecycle action is ever answered",
                "sam deploy --parameter-overrides ManagedGroups=<group names> (or tag the groups "
                "nodecycle:owner=<owner id> with ManagedByTag=true)",
            )
        ]
    described = {g["AutoScalingGroupName"]: g for g in described_groups(autoscaling, groups)}
    existing = set(described)
    findings = []
    for group in groups:
        tagged = {t["Key"]: t.get("Value") for t in described.get(group, {}).get("Tags", [])}.get(OWNER_TAG)
        if rules.owner is not None and tagged not in (None, rules.owner):
            findings.append(
                Finding.problem(
                    f"hooks.{group}",
                    f"group {group} is named in ManagedGroups but tagged nodecycle:owner={tagged}",
                    f"this stack leaves its lifecycle actions to owner {tagged} (two stacks must not drain one node)",
                    "name it in the ManagedGroups of one stack only, and tag it for that stack's owner id",
                )
            )
            continue
        if group not in existing:
            findings.append(
                Finding.problem(
                    f"hooks.{group}",
                    f"Auto Scaling group {group} does not exist",
                    "ManagedGroups names it: a typo, or a group replaced under another name",
                    "sam deploy --parameter-overrides ManagedGroups=<the right names>",
                )
            )
            continue
        if any(t["Key"] == NTH_MANAGED_TAG for t in described[group].get("Tags", [])):
            findings.append(_other_drainer(group))
        if rules.eip and rules.owner is not None and tagged == rules.owner and group not in rules.named:
            findings += _owner_tag_kept(group, described[group], rules.owner)
        try:
            found = autoscaling.describe_lifecycle_hooks(AutoScalingGroupName=group)["LifecycleHooks"]
        except ClientError as error:
            # one group at a time: one whose hooks cannot be read (throttled, refused) hides none of the others
            from nodecycle_cli.failures import aws_answer

            findings.append(
                Finding.unchecked(f"hooks.{group}", f"group {group}'s hooks: {aws_answer(error)}")
            )
            continue
        findings += _group_hooks(group, found, rules)
    return findings


def _owner_tag_kept(group: str, described: Mapping[str, Any], owner: str) -> list[Finding]:
    """A group managed by its tag whose tag does not propagate to its instances (PropagateAtLaunch false): the EIP
    role is granted AssociateAddress on the instances of the groups managed by tag by the instances' own owner tag
    (InstancesOfGroupsByTag), and Auto Scaling copies a group's tag only to the instances it launches while the tag
    propagates. Each launch of the group is refused its address (``eip-failed``), and its policy decides."""
    kept = any(
        t["Key"] == OWNER_TAG and not t.get("PropagateAtLaunch", False) for t in described.get("Tags", [])
    )
    if not kept:
        return []
    return [
        Finding.problem(
            f"hooks.{group}",
            f"group {group} is managed by its {OWNER_TAG} tag, which does not propagate to its instances",
            "the EIP role associates addresses only with instances tagged for this stack: every launch of the group "
            "is refused its address, and its EIP failure policy decides",
            f"aws autoscaling create-or-update-tags --tags ResourceId={group},ResourceType=auto-scaling-group,"
            f"Key={OWNER_TAG},Value={owner},PropagateAtLaunch=true (and tag its running instances: "
            f"aws ec2 create-tags --resources <instance ids> --tags Key={OWNER_TAG},Value={owner})",
        )
    ]


# EC2 takes at most 200 values in one filter
_FILTER_VALUES = 200
# An instance's states in which it may still be disrupted (told of a Spot warning, a maintenance, a stop) or launched
_LIVE_STATES = ["pending", "running", "stopping", "stopped"]
# Instances named in a finding's fix, at most (the rest counted)
_NAMED_INSTANCES = 20


def instance_owners(autoscaling: Any, ec2: Any, groups: Sequence[str], owner: str) -> list[Finding]:
    """The instances of the stack's groups tagged ``nodecycle:owner`` for another owner. A group's propagated tag is
    copied to an instance at its launch only (CreateOrUpdateTags: running instances do not get the new or updated
    tag), so a group handed over by retagging it, or retagged for a new owner id, keeps its running and warm-pool
    instances tagged for the owner before. An instance's own owner tag decides whose its disruptions are (intake:
    Spot warnings, rebalance recommendations, maintenances, stops and terminations told by EC2 go to the owner it
    names, or to nobody once that stack is gone), and the EIP role associates addresses only with instances tagged
    for its own owner. A group tagged for another owner is that owner's (the hooks check says so): its instances
    are not looked at."""
    check = "instances.owner"
    if not groups:
        return [Finding.ok(check, "no managed group")]
    mine = {
        g["AutoScalingGroupName"]
        for g in described_groups(autoscaling, groups)
        if {t["Key"]: t.get("Value") for t in g.get("Tags", [])}.get(OWNER_TAG) in (None, owner)
    }
    names = sorted(mine)
    others: dict[str, dict[str, list[str]]] = {}  # group -> the owner its instances name -> those instances
    for start in range(0, len(names), _FILTER_VALUES):
        found = ec2.get_paginator("describe_instances").paginate(
            Filters=[
                {"Name": "tag:aws:autoscaling:groupName", "Values": names[start : start + _FILTER_VALUES]},
                {"Name": "tag-key", "Values": [OWNER_TAG]},
                {"Name": "instance-state-name", "Values": _LIVE_STATES},
            ]
        )
        for page in found:
            for reservation in page["Reservations"]:
                for instance in reservation["Instances"]:
                    tags = {t["Key"]: t.get("Value", "") for t in instance.get("Tags", [])}
                    group, tagged = tags.get("aws:autoscaling:groupName"), tags.get(OWNER_TAG)
                    if group is not None and group in mine and tagged is not None and tagged != owner:
                        others.setdefault(group, {}).setdefault(tagged, []).append(instance["InstanceId"])
    if not others:
        return [
            Finding.ok(check, f"no instance of the stack's groups is tagged for an owner other than {owner}")
        ]
    findings = []
    for group, by_owner in sorted(others.items()):
        ids = sorted(i for tagged in by_owner.values() for i in tagged)
        told = "; ".join(
            f"{', '.join(sorted(tagged))} tagged for {name}" for name, tagged in sorted(by_owner.items())
        )
        named = " ".join(ids[:_NAMED_INSTANCES])
        more = (
            f" (and the {len(ids) - _NAMED_INSTANCES} others named above)"
            if len(ids) > _NAMED_INSTANCES
            else ""
        )
        findings.append(
            Finding.problem(
                check,
                f"instances of group {group} carry nodecycle:owner for another owner: {told}",
                "an instance's owner tag decides whose its disruptions are: its Spot warnings, rebalance "
                "recommendations, maintenances and stops go to that owner, or to nobody once its stack is gone, "
                "and this stack's EIP role may not associate an address with it (a warm pool's launch). Auto "
                "Scaling copies a group's tag at launch only: retagging the group left them as they were",
                f"aws ec2 create-tags --resources {named} --tags Key={OWNER_TAG},Value={owner}{more}",
            )
        )
    return findings


def _other_drainer(group: str) -> Finding:
    return Finding.problem(
        f"hooks.{group}",
        f"group {group} is still tagged {NTH_MANAGED_TAG}: aws-node-termination-handler drains its nodes too",
        "its queue processor drains the node of every terminate lifecycle action its rule sends it, nodecycle's "
        "hook's included, outside the disruption budget, and completes nodecycle's action with CONTINUE: nodes "
        "drained beyond the budget, two drains of one node",
        f"aws autoscaling delete-tags --tags ResourceId={group},ResourceType=auto-scaling-group,Key={NTH_MANAGED_TAG}"
        " (docs/migrating.md: one group at a time)",
    )


def _group_hooks(group: str, found: Sequence[Mapping[str, Any]], rules: HookRules) -> list[Finding]:
    findings = []
    check = f"hooks.{group}"
    for transition in rules.transitions:
        short = "launch" if transition == LAUNCHING else "terminate"
        of_transition = [h for h in found if h["LifecycleTransition"] == transition]
        ours = [h for h in of_transition if rules.answers(h["LifecycleHookName"])]
        if not ours:
            others = ", ".join(h["LifecycleHookName"] for h in of_transition)
            default = (
                "ABANDON" if transition == LAUNCHING and rules.launch_default == "ABANDON" else "CONTINUE"
            )
            findings.append(
                Finding.problem(
                    check,
                    f"group {group} has no {short} hook that nodecycle answers"
                    + (
                        f" (its {short} hooks {others} are not in ManagedHooks: {', '.join(rules.names)})"
                        if others
                        else ""
                    ),
                    "without one, Auto Scaling does not wait for nodecycle: "
                    + (
                        "nodes are terminated undrained"
                        if short == "terminate"
                        else "instances go in service without their address or before their node is Ready"
                    ),
                    f"aws autoscaling put-lifecycle-hook --auto-scaling-group-name {group} --lifecycle-hook-name "
                    f"nodecycle-{short} --lifecycle-transition {transition} --heartbeat-timeout "
                    f"{max(900, rules.min_heartbeat)} --default-result {default}"
                    + (f" (or add {others.split(', ')[0]} to ManagedHooks)" if others else ""),
                )
            )
            continue
        # Another tool's hook of the same transition is allowed (ManagedHooks leaves it alone), but Auto Scaling
        # waits for it too: a drainer answering it drains the node a second time, outside the budget; nobody
        # answering it holds each instance its heartbeat timeout. Said on nodecycle's hook's line, not as a problem
        beside = [h["LifecycleHookName"] for h in of_transition if not rules.answers(h["LifecycleHookName"])]
        for hook in ours:
            findings += _hook(group, hook, short, rules, beside)
    return findings or [Finding.ok(check, f"group {group}: no hook needed by these settings")]


def _hook(
    group: str, hook: Mapping[str, Any], short: str, rules: HookRules, beside: Sequence[str] = ()
) -> list[Finding]:
    name, check = hook["LifecycleHookName"], f"hooks.{group}"
    timeout, default = int(hook["HeartbeatTimeout"]), hook["DefaultResult"]
    put = (
        f"aws autoscaling put-lifecycle-hook --auto-scaling-group-name {group} --lifecycle-hook-name {name} "
        f"--lifecycle-transition {hook['LifecycleTransition']}"
    )
    findings = []
    if timeout < rules.min_heartbeat:
        findings.append(
            Finding.problem(
                check,
                f"hook {name} of group {group} has a heartbeat timeout of {timeout} s, under the "
                f"{rules.min_heartbeat} s these settings need",
                "a step retried after a crash (the work queue's visibility timeout, then the resume grace), or "
                "the next sweep while a queue stalls (SweepIntervalMinutes), can come after the action timed "
                "out, plus the heartbeat margin: the action ends with its default result, undrained",
                f"{put} --heartbeat-timeout {max(900, rules.min_heartbeat)} --default-result {default}",
            )
        )
    wanted = rules.launch_default if short == "launch" else "CONTINUE"
    if default != wanted:
        why = (
            "if nodecycle cannot answer, ABANDON also skips the group's other terminate hooks (both results "
            "terminate the instance)"
            if short == "terminate"
            else "if nodecycle cannot answer, CONTINUE puts the instance in service without its address or "
            "before its node is Ready, while nodecycle itself would have abandoned it"
        )
        findings.append(
            Finding.warning(
                check,
                f"hook {name} of group {group} defaults to {default}, not {wanted}",
                why,
                f"{put} --heartbeat-timeout {timeout} --default-result {wanted}",
            )
        )
    also = (
        f"; Auto Scaling waits for its other {short} hook{'s' if len(beside) > 1 else ''} {', '.join(beside)} too "
        "(docs/migrating.md: one drainer per node)"
        if beside
        else ""
    )
    return findings or [
        Finding.ok(check, f"hook {name} of group {group}: heartbeat {timeout} s, default {default}{also}")
    ]


# Why each of the stack's EventBridge rules matters, by the doctor's name for it: what stops when it is disabled.
RULE_PURPOSES = {
    "lifecycle actions": "lifecycle actions no longer reach intake: hooks time out with their default result, nodes "
    "are terminated undrained",
    "EC2 disruptions": "Spot interruption warnings, rebalance recommendations and instances stopped or terminated "
    "outside the hooks no longer reach intake: Spot nodes are reclaimed undrained, and what a stopped or "
    "terminated instance held (its budget slot, annotations, address) is freed only later, by expiry or the sweeper",
    "scheduled maintenance": "AWS Health's scheduled EC2 maintenance no longer reaches intake: nodes are not drained "
    "before their maintenance",
    "sweeper schedule": "the sweeper no longer runs: nothing repairs lost lifecycles or frees stale slots and "
    "addresses, and no action near its global timeout is completed",
}


# The RetryPolicy template.yaml gives each rule's target, by the doctor's name for the rule (None: none, EventBridge's
# default; tests/functions/test_doctor_rule_retry_policies.py keeps them in step with the template). A target put
# again by hand without it retries with EventBridge's default, 24 hours and 185 times: a lifecycle action or a Spot
# warning that could not be delivered for a while reaches intake hours late, when nothing can be done for it,
# instead of the dead-letter queue, whose alarm tells at once.
RETRY_POLICIES: dict[str, dict[str, int] | None] = {
    "lifecycle actions": {"MaximumRetryAttempts": 185, "MaximumEventAgeInSeconds": 3600},
    "EC2 disruptions": {"MaximumRetryAttempts": 10, "MaximumEventAgeInSeconds": 120},
    "scheduled maintenance": {"MaximumRetryAttempts": 185, "MaximumEventAgeInSeconds": 3600},
    "sweeper schedule": None,
}
# What a target without a RetryPolicy gets (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-rule-retry-policy.html)
DEFAULT_RETRY_POLICY = {"MaximumRetryAttempts": 185, "MaximumEventAgeInSeconds": 86400}


def rules(
    events: Any,
    names: Mapping[str, str],
    functions: Mapping[str, str] | None = None,
    dead_letters: Mapping[str, str] | None = None,
) -> list[Finding]:
    """Each EventBridge rule of the stack exists and is enabled, and, given the function it delivers to (by
    the doctor's name for the rule), targets that function; given its dead-letter queue's ARN, with it and with
    the retry policy the template gives it."""
    findings = []
    for what, name in names.items():
        check = f"eventbridge.rule.{what}"
        try:
            state = events.describe_rule(Name=name)["State"]
        except Exception as error:
            if getattr(error, "response", {}).get("Error", {}).get("Code") != "ResourceNotFoundException":
                raise
            findings.append(
                Finding.problem(
                    check,
                    f"EventBridge rule {name} ({what}) does not exist",
                    f"it was deleted outside the stack: {RULE_PURPOSES[what]}. sam deploy does not bring it back "
                    "(CloudFormation does not notice a resource deleted outside it)",
                    f"recreate it under its name as the deployed template has it (aws events put-rule --name {name} "
                    "..., then put-targets): docs/runbook.md#resources-deleted-outside-the-stack",
                )
            )
            continue
        if state == "ENABLED":
            findings.append(Finding.ok(check, f"EventBridge rule {name} ({what}) is enabled"))
        else:
            findings.append(
                Finding.problem(
                    check,
                    f"EventBridge rule {name} ({what}) is {state}",
                    RULE_PURPOSES[what],
                    f"aws events enable-rule --name {name}",
                )
            )
        function = (functions or {}).get(what)
        if function:
            findings += _target(events, what, name, function, (dead_letters or {}).get(what))
    return findings


def _target(
    events: Any, what: str, rule: str, function: str, dead_letter_arn: str | None = None
) -> list[Finding]:
    """An enabled rule whose target was removed (or pointed elsewhere) delivers nothing, and no alarm sees it."""
    pages = events.get_paginator("list_targets_by_rule").paginate(Rule=rule)
    targets = [t for page in pages for t in page["Targets"]]
    arns = [t["Arn"] for t in targets]
    # arn:aws:lambda:<region>:<account>:function:<name>[:<version or alias>]
    own = [t for t in targets if t["Arn"].split(":")[5:7] == ["function", function]]
    if own:
        # (a stack that does not name its dead-letter queues predates the targets' settings: not compared)
        return [] if dead_letter_arn is None else _target_settings(what, rule, own, dead_letter_arn)
    return [
        Finding.problem(
            f"eventbridge.rule.{what}.target",
            f"EventBridge rule {rule} ({what}) does not target function {function}"
            + (f" (its targets: {', '.join(arns)})" if arns else " (it has no target)"),
            f"{RULE_PURPOSES[what]}; the rule itself is there, so nothing else tells",
            f"aws events put-targets --rule {rule} --targets ... (the function, with the retry policy and dead-letter "
            "queue the deployed template gives it: docs/runbook.md#resources-deleted-outside-the-stack)",
        )
    ]


def _retry_policy_as_templated(what: str, target: Mapping[str, Any]) -> bool:
    wanted = RETRY_POLICIES.get(what)
    given = target.get("RetryPolicy") or None
    if wanted is None:
        return given is None or dict(given) == DEFAULT_RETRY_POLICY
    return given is not None and dict(given) == wanted


def _target_settings(
    what: str, rule: str, targets: list[dict[str, Any]], dead_letter_arn: str
) -> list[Finding]:
    """A target put again by hand (``put-targets`` replaces the whole target) may lack the dead-letter queue or the
    retry policy the template gives it: it still delivers, but an event EventBridge cannot deliver is then dropped
    after its retries, unseen, where the queue would keep it and its alarm tell; or retried for a day, to reach
    intake long after anything could be done for it. One command puts both back (the fix of either finding)."""
    for target in targets:
        if (target.get("DeadLetterConfig") or {}).get(
            "Arn"
        ) == dead_letter_arn and _retry_policy_as_templated(what, target):
            return []
    target = targets[0]
    fixed = {**target, "DeadLetterConfig": {"Arn": dead_letter_arn}}
    wanted = RETRY_POLICIES.get(what)
    if wanted is None:
        fixed.pop("RetryPolicy", None)
    else:
        fixed["RetryPolicy"] = dict(wanted)
    fix = f"aws events put-targets --rule {rule} --targets {shlex.quote(json.dumps([fixed], separators=(',', ':')))}"
    findings = []
    given = (target.get("DeadLetterConfig") or {}).get("Arn")
    if given != dead_letter_arn:
        queue = dead_letter_arn.rsplit(":", 1)[-1]
        findings.append(
            Finding.problem(
                f"eventbridge.rule.{what}.dead-letters",
                f"EventBridge rule {rule} ({what}) delivers without its dead-letter queue {queue}"
                + (f" (its target's: {given})" if given else ""),
                "an event EventBridge cannot deliver to the function (deleted, its permission removed) is dropped "
                "instead of kept in the queue, whose alarm would tell (the target was put again by hand: "
                "put-targets replaces the whole target)",
                fix,
            )
        )
    if not _retry_policy_as_templated(what, target):
        policy = target.get("RetryPolicy")
        said = (
            f"{policy.get('MaximumRetryAttempts')} retries within {policy.get('MaximumEventAgeInSeconds')} s"
            if policy
            else "none: EventBridge's default, 185 retries within 24 hours"
        )
        templated = (
            f"{wanted['MaximumRetryAttempts']} retries within {wanted['MaximumEventAgeInSeconds']} s"
            if wanted
            else "EventBridge's default"
        )
        findings.append(
            Finding.problem(
                f"eventbridge.rule.{what}.retry-policy",
                f"EventBridge rule {rule} ({what}) retries its target with another retry policy than the "
                f"template's: {said}, not {templated}",
                "an event EventBridge could not deliver for a while reaches the function when it is of no use "
                "any more (a lifecycle action past its heartbeat, a Spot warning past its two minutes), or goes to "
                "the dead-letter queue sooner than the template means (the target was put again by hand: "
                "put-targets replaces the whole target)",
                fix,
            )
        )
    return findings


# SQS's answers for a queue that does not exist (the query protocol's code, and the JSON protocol's)
NO_QUEUE = ("AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist")
# The attributes template.yaml gives each dead-letter queue (tests/functions/test_doctor_dead_letters keeps them
# in step), for the command that recreates one deleted outside the stack
DEAD_LETTER_ATTRIBUTES = {"MessageRetentionPeriod": "1209600", "SqsManagedSseEnabled": "true"}


@dataclass(frozen=True)
class DeadLetterQueue:
    """A dead-letter queue of the stack: its URL, and the EventBridge rules that may write to it (the template's
    queue policy: the rules' undelivered events), by name."""

    url: str
    region: str
    partition: str = "aws"
    written_by_rules: tuple[str, ...] = ()
    # The command that empties it once the cause is fixed, as its runbook entry says (a redrive, or a purge)
    redrive: str = ""

    @property
    def name(self) -> str:
        return self.url.rstrip("/").rsplit("/", 1)[-1]

    @property
    def arn(self) -> str:
        account = self.url.rstrip("/").split("/")[-2]
        return f"arn:{self.partition}:sqs:{self.region}:{account}:{self.name}"

    def rule_arns(self) -> dict[str, str]:
        """Each rule that writes here, by name: its ARN (a rule of the default bus, in the queue's account)."""
        account = self.arn.split(":")[4]
        return {
            r: f"arn:{self.partition}:events:{self.region}:{account}:rule/{r}" for r in self.written_by_rules
        }

    def policy(self) -> str:
        """The template's queue policy: EventBridge may send here for the stack's rules only."""
        statement = {
            "Effect": "Allow",
            "Principal": {"Service": "events.amazonaws.com"},
            "Action": "sqs:SendMessage",
            "Resource": self.arn,
            "Condition": {"ArnEquals": {"aws:SourceArn": list(self.rule_arns().values())}},
        }
        return json.dumps({"Version": "2012-10-17", "Statement": [statement]})

    def recreate(self) -> str:
        """The command that creates the queue again as the template made it, under its name: its URL and ARN are
        then what they were, which is what everything that uses it names (the queues that redrive to it, the
        functions' on-failure destinations, the rules' dead-letter configs, its alarm's QueueName)."""
        attributes = dict(DEAD_LETTER_ATTRIBUTES)
        if self.written_by_rules:
            # (the queue's policy, an AWS::SQS::QueuePolicy of the stack, went with the queue)
            attributes["Policy"] = self.policy()
        return (
            f"aws sqs create-queue --queue-name {self.name} --attributes {shlex.quote(json.dumps(attributes))} "
            f"--region {self.region}"
        )

    def restore_policy(self) -> str:
        attributes = shlex.quote(json.dumps({"Policy": self.policy()}))
        return f"aws sqs set-queue-attributes --queue-url {self.url} --attributes {attributes} --region {self.region}"

    def rules_refused(self, policy: str | None) -> list[str]:
        """The rules writing here whose undelivered events the queue's policy does not let EventBridge send."""
        try:
            statements = json.loads(policy or "{}").get("Statement") or []
        except ValueError:
            statements = []
        if isinstance(statements, dict):
            statements = [statements]
        return [
            rule
            for rule, arn in self.rule_arns().items()
            if not any(_lets_eventbridge_send(s, self.arn, arn) for s in statements if isinstance(s, dict))
        ]


def _listed(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else [v for v in value or () if isinstance(v, str)]


def _lets_eventbridge_send(statement: Mapping[str, Any], queue: str, rule: str) -> bool:
    """Whether one statement of a queue policy lets EventBridge send to ``queue`` for ``rule``. A condition on
    anything but the source ARN is taken as met: the doctor warns of a policy that surely refuses, not of one it
    cannot evaluate."""
    if statement.get("Effect") != "Allow":
        return False
    principal = statement.get("Principal")
    services = _listed(principal.get("Service")) if isinstance(principal, dict) else []
    anyone = principal == "*" or (isinstance(principal, dict) and principal.get("AWS") == "*")
    if not anyone and "events.amazonaws.com" not in services:
        return False
    if not any(a.lower() in ("sqs:sendmessage", "sqs:*", "*") for a in _listed(statement.get("Action"))):
        return False
    if not any(fnmatch.fnmatchcase(queue, r) for r in _listed(statement.get("Resource", "*"))):
        return False
    for operator, tests in (statement.get("Condition") or {}).items():
        sources = {key.lower(): value for key, value in (tests or {}).items()}.get("aws:sourcearn")
        if sources is None:
            continue
        if operator in ("ArnEquals", "StringEquals") and rule not in _listed(sources):
            return False
        if operator in ("ArnLike", "StringLike") and not any(
            fnmatch.fnmatchcase(rule, p) for p in _listed(sources)
        ):
            return False
    return True


def _latest_redrive(sqs: Any, queue: DeadLetterQueue) -> dict[str, Any] | None:
    """The queue's latest message move task (SQS keeps those of the last 14 days), None: none, or not told. Only
    an aside to the messages' count: whatever stops it (a permission the doctor lacks, an endpoint that does not
    serve the action) leaves the finding what the messages alone say."""
    try:
        tasks = sqs.list_message_move_tasks(SourceArn=queue.arn, MaxResults=1).get("Results") or []
    except Exception:
        return None
    return dict(tasks[0]) if tasks else None


def dead_letters(sqs: Any, queues: Mapping[str, DeadLetterQueue]) -> list[Finding]:
    findings = []
    for what, queue in queues.items():
        check = f"queues.dead-letters.{what}"
        url = queue.url
        names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        try:
            attributes = sqs.get_queue_attributes(
                QueueUrl=url, AttributeNames=[*names, "Policy"] if queue.written_by_rules else names
            )["Attributes"]
        except Exception as error:
            if getattr(error, "response", {}).get("Error", {}).get("Code") not in NO_QUEUE:
                raise
            # a queue deleted outside the stack is something wrong, not a check that could not be made
            findings.append(
                Finding.problem(
                    check,
                    f"the {what} dead-letter queue {url} does not exist",
                    "it was deleted outside the stack: the work that fails for good is no longer kept there for "
                    "an operator to look at and redrive, and its alarm never fires. sam deploy does not bring it "
                    "back (CloudFormation does not notice a resource deleted outside it: "
                    "docs/runbook.md#resources-deleted-outside-the-stack)",
                    f"{queue.recreate()} (under its name, as the template makes it: everything that names the "
                    "queue finds it again; SQS takes a name back 60 s after its deletion)",
                )
            )
            continue
        count = int(attributes.get("ApproximateNumberOfMessages", 0)) + int(
            attributes.get("ApproximateNumberOfMessagesNotVisible", 0)
        )
        latest = _latest_redrive(sqs, queue) if count else None
        if latest is not None and latest.get("Status") in ("RUNNING", "CANCELLING"):
            # SQS moves them in the background and refuses a second redrive of the queue while this one runs
            # (StartMessageMoveTask: "only one active message movement task is supported per queue")
            handle = latest.get("TaskHandle", "")
            findings.append(
                Finding.warning(
                    check,
                    f"{count} message{'s' if count != 1 else ''} in the {what} dead-letter queue: a redrive of them "
                    f"is running ({latest.get('ApproximateNumberOfMessagesMoved', 0)} of "
                    f"{latest.get('ApproximateNumberOfMessagesToMove', '?')} moved)",
                    "SQS moves them in the background and refuses another redrive of the queue until this one ends",
                    f"wait for it to end: aws sqs list-message-move-tasks --source-arn {queue.arn} (to stop it: "
                    f"aws sqs cancel-message-move-task --task-handle {handle})",
                )
            )
        elif count:
            failed = ""
            if latest is not None and latest.get("Status") == "FAILED":
                failed = f"; the last redrive failed: {latest.get('FailureReason', 'no reason given')}"
            findings.append(
                Finding.problem(
                    check,
                    f"{count} message{'s' if count != 1 else ''} in the {what} dead-letter queue",
                    f"work that failed for good: see docs/runbook.md#{what}-dead-letters" + failed,
                    f"aws sqs receive-message --queue-url {url} --max-number-of-messages 10 --attribute-names All "
                    "--message-attribute-names All --visibility-timeout 0"
                    + (f" (what and why); once the cause is fixed: {queue.redrive}" if queue.redrive else ""),
                )
            )
        else:
            findings.append(Finding.ok(check, f"the {what} dead-letter queue is empty"))
        refused = queue.rules_refused(attributes.get("Policy"))
        if refused:
            # Silent otherwise: EventBridge drops what it may not write, and the queue stays empty, its alarm quiet
            findings.append(
                Finding.problem(
                    f"{check}.policy",
                    f"the {what} dead-letter queue's policy does not let EventBridge write to it for rule"
                    f"{'s' if len(refused) > 1 else ''} {', '.join(refused)}",
                    "an event EventBridge cannot deliver to the function is then dropped, not kept there, and its "
                    "alarm stays quiet (AWS/Events InvocationsFailedToBeSentToDlq counts them): the template's "
                    "queue policy was removed or edited outside the stack, which sam deploy does not restore",
                    f"{queue.restore_policy()} (the template's policy)",
                )
            )
    return findings


def stuck_lifecycles(records: Iterable[Any], now: datetime, resume_grace: timedelta, stack: str) -> Finding:
    """Open lifecycles whose next step is overdue by more than the resume grace: their message is lost and
    nothing repaired it yet, or the sweeper's resends keep failing."""
    check = "lifecycles.stuck"
    overdue = sorted((r for r in records if r.overdue(now, resume_grace)), key=lambda r: r.due_at)
    if not overdue:
        return Finding.ok(check, "no lifecycle is overdue")
    described = _first(
        [
            f"{r.instance_id} {r.transition.short} at {r.step.value}, {age((now - r.due_at).total_seconds())} "
            "overdue"
            + (
                f" (resumed {r.resumes} times in a row: stuck, the sweeper re-sends it less often)"
                if r.resumes >= MAX_RESUMES
                else ""
            )
            for r in overdue[:10]
        ],
        len(overdue),
    )
    # The runbook's entry for what this is: a step overdue that the sweeper has not resumed 5 times in a row is a
    # stall (no step runs: the function throttled or failing, its queue's mapping disabled), which moves on by
    # itself once fixed; one resumed that often keeps failing the same way (stuck)
    stuck = sum(1 for r in overdue if r.resumes >= MAX_RESUMES)
    if stuck == len(overdue):
        entry = "docs/runbook.md#lifecycles-stuck"
    elif stuck:
        entry = (
            f"docs/runbook.md#lifecycles-stalled (those resumed {MAX_RESUMES} times in a row: "
            "docs/runbook.md#lifecycles-stuck)"
        )
    else:
        entry = "docs/runbook.md#lifecycles-stalled"
    return Finding.problem(
        check,
        f"{len(overdue)} lifecycle{'s' if len(overdue) != 1 else ''} stopped moving: {described}",
        "their drain or address step does not run: nodes wait cordoned, budget slots stay taken; the sweeper "
        "completes each action near its global timeout, undrained if need be",
        f"nodecycle status --stack {stack}; then {entry}",
    )


def completion_claims(
    records: list[Any], now: datetime, margin: timedelta, taken_over_within: timedelta, stack: str
) -> Finding:
    """Open lifecycles whose completer claimed the completion and never recorded what its call did, past the
    time another may take the claim over (the heartbeat margin): the completer is gone (killed by its Lambda
    timeout, its commit refused), and the step's next delivery or the sweeper's next resend should have claimed
    over it. Within ``taken_over_within`` past that (a sweep interval and the resume grace) that is still to
    come; beyond, nothing takes it over: the sweeper does not run or its resends fail, and the action waits
    for its settlement near the global timeout."""
    check = "lifecycles.completion-claims"
    late = [c for c in claims(records, margin) if c.taken_over_in(now) < timedelta(0)]
    if not late:
        return Finding.ok(check, "no completion claim is past its takeover time")
    described = _first(
        [
            f"{c.record.instance_id} {c.record.transition.short} claimed by {c.by} "
            f"{age((now - c.at).total_seconds())} ago, its takeover due {age(-c.taken_over_in(now).total_seconds())} ago"
            for c in late[:10]
        ],
        len(late),
    )
    what = (
        f"{len(late)} completion claim{'s' if len(late) != 1 else ''} past {'their' if len(late) != 1 else 'its'} "
        f"takeover time: {described}"
    )
    fix = (
        f"nodecycle status --stack {stack} (COMPLETION CLAIMS); the completer's log (the drain or eip function's, or "
        "the sweeper's: a timeout or a refused commit after its CompleteLifecycleAction); then "
        "docs/runbook.md#lifecycles-stalled"
    )
    if all(-c.taken_over_in(now) <= taken_over_within for c in late):
        return Finding.warning(
            check,
            what,
            "their completer vanished between its claim and its record (it may have completed the action): the "
            "next sweep's resend takes each over, and a completion it finds already made is taken for that one's",
            fix,
        )
    return Finding.problem(
        check,
        what,
        "nothing took them over for longer than a sweep interval: the sweeper does not run, or its resends of "
        "the completion fail; each action waits at COMPLETE until the sweeper's settlement near its global "
        "timeout, its node cordoned and its budget slot taken",
        fix,
    )


def retrying_lifecycles(records: Iterable[Any], stack: str) -> Finding:
    """Open lifecycles whose step failed at its last try and waits to be tried again: AWS or the API server
    throttles, fails or refuses their calls. Each runs on (a throttle's retries are not counted;
    ``MAX_REFUSED_ATTEMPTS`` refusals in a row fail the step's message), but this is where the runbook sends an
    operator to find throttling, and the call and its answer are in the record, not on the status table."""
    check = "lifecycles.retrying"
    retrying = sorted((r for r in records if not r.finished and r.attempts > 0), key=lambda r: -r.attempts)
    if not retrying:
        return Finding.ok(check, "no lifecycle is retrying a failed step")
    described = _first(
        [
            f"{r.instance_id} {r.transition.short} at {r.step.value}, try {r.attempts} failed: "
            f"{_short(r.last_error or 'no error recorded')}"
            for r in retrying[:5]
        ],
        len(retrying),
    )
    return Finding.warning(
        check,
        f"{len(retrying)} lifecycle{'s' if len(retrying) != 1 else ''} retrying a failed step: {described}",
        "AWS or the cluster throttles, fails or refuses their calls: each try waits longer (a drain's no more "
        f"than seconds), and a call refused {MAX_REFUSED_ATTEMPTS} times in a row fails the step's message to its "
        "dead-letter queue",
        f"nodecycle status --stack {stack} --json (each one's last_error); a refusal: docs/runbook.md#drain-dead-"
        "letters; throttling: the functions' logs and the dashboard's StepRetries",
    )


def _first(described: list[str], of: int) -> str:
    """The descriptions of the first few of ``of`` lifecycles, and how many more there are."""
    more = f" and {of - len(described)} more" if of > len(described) else ""
    return "; ".join(described) + more


def _short(text: str, limit: int = 240) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def being_deleted(deployment: Any) -> Finding:
    """A stack whose deletion is under way or failed half way (DELETE_IN_PROGRESS, DELETE_FAILED): what it left
    is on its way out, and the hooks on its groups (the operator's, not the stack's) outlive it."""
    name, status = deployment.name, deployment.status
    failed = status == "DELETE_FAILED"
    return Finding.problem(
        "cloudformation.stack",
        f"stack {name} is {status}: its deletion {'stopped half way' if failed else 'is under way'}; what it "
        "still has (table, queues, functions, rules) is not checked",
        "nothing drains for it, or soon nothing: the lifecycle hooks on its groups stay, and hold each action "
        "until its heartbeat timeout, then apply the default result (a terminating node goes undrained); its "
        "Elastic IPs, budget slots and node annotations are left (docs/removing.md)",
        (
            f"aws cloudformation describe-stack-events --stack-name {name} (what it could not delete, and why); "
            "delete the hooks first (docs/removing.md#1-stop-the-actions-first), then "
            f"sam delete --stack-name {name} again"
        )
        if failed
        else (
            "delete the hooks first (docs/removing.md#1-stop-the-actions-first); aws cloudformation wait "
            f"stack-delete-complete --stack-name {name}, then docs/removing.md#3-what-is-left-and-how-to-remove-it"
        ),
    )


def shared_owner(cloudformation: Any, deployment: Any) -> Finding:
    """Other nodecycle stacks of the region (those with a lifecycle table among their outputs) with this stack's
    owner id. Each takes the other's budget slots, node annotations, Elastic IPs and lifecycle records for its
    own: its sweeper frees the other's slots (no record of its own holds them), releases its addresses and
    clears the annotations of its drains in progress (invariant: a stack never acts on another's). One whose
    deletion runs or failed (the stack this one replaces) cannot be updated to another owner id: its deletion
    finished ends the sharing."""
    check = "cloudformation.owner"
    owner = deployment.owner
    others = sorted(
        (stack["StackName"], stack.get("StackStatus", ""))
        for page in cloudformation.get_paginator("describe_stacks").paginate()
        for stack in page["Stacks"]
        if stack["StackName"] != deployment.name
        and stack_outputs(stack).get("OwnerId") == owner
        and "LifecycleTableName" in stack_outputs(stack)
    )
    if not others:
        return Finding.ok(check, f"no other nodecycle stack in {deployment.region} has owner id {owner}")
    leaving = [name for name, status in others if status.startswith("DELETE_")]
    fixes = []
    if len(leaving) < len(others):
        fixes.append(
            "give one of them another owner id at a quiet time (nodecycle status --stack NAME lists no open "
            "lifecycle): sam deploy --stack-name NAME --parameter-overrides OwnerId=NEW_ID, each stack its own"
        )
    fixes += [
        f"finish the deletion of {name}: sam delete --stack-name {name} (aws cloudformation "
        f"describe-stack-events --stack-name {name} says what it could not delete)"
        for name in leaving
    ]
    named = ", ".join(f"{name} ({status})" if name in leaving else name for name, status in others)
    return Finding.problem(
        check,
        f"stack{'s' if len(others) != 1 else ''} {named} in {deployment.region} "
        f"{'have' if len(others) != 1 else 'has'} this stack's owner id {owner}",
        "each takes what the other writes for its own: a sweep may free the other's budget slots (no lifecycle "
        "of its own holds them), release its Elastic IPs and clear the annotations of its drains in progress",
        "; ".join(fixes),
    )


def shared_groups(cloudformation: Any, deployment: Any) -> Finding:
    """Other nodecycle stacks of the region that name in their ManagedGroups a group this stack names (parameters
    copied from one stack to the next). Both answer each of its lifecycle actions: the runtime keeps them from
    draining one node twice (the stack that claims the node drains it, the other waits for that drain and completes
    nothing under it), but each lets its own drains through under its own budget limits, and each launch goes
    through the launch steps of both. A group named by both and tagged ``nodecycle:owner`` is the tagged stack's,
    which the hooks check says of the other; a stack being deleted answers nothing any more."""
    check = "cloudformation.groups"
    mine = set(deployment.managed_groups)
    if not mine:
        return Finding.ok(check, "this stack names no group in ManagedGroups")
    shared = sorted(
        (stack["StackName"], sorted(mine & _groups_named(stack)))
        for page in cloudformation.get_paginator("describe_stacks").paginate()
        for stack in page["Stacks"]
        if stack["StackName"] != deployment.name
        and not stack.get("StackStatus", "").startswith("DELETE_")
        and "LifecycleTableName" in stack_outputs(stack)
        and mine & _groups_named(stack)
    )
    if not shared:
        return Finding.ok(check, f"no other nodecycle stack in {deployment.region} names this stack's groups")
    named = "; ".join(f"{', '.join(groups)} by {name}" for name, groups in shared)
    return Finding.problem(
        check,
        f"groups this stack manages are named in the ManagedGroups of another nodecycle stack too: {named}",
        "both stacks answer each of their lifecycle actions: each lets its drains through under its own budget "
        "limits, and each launch goes through the launch steps of both (two stacks must not manage one group)",
        "name each group in the ManagedGroups of one stack only, at a quiet time (nodecycle status lists no open "
        "lifecycle of it): sam deploy --stack-name NAME --parameter-overrides ManagedGroups=<its own groups>",
    )


# BudgetNamespace's default in the template: a stack description lists every parameter with its value, but a
# stack made from another template (or an older one) may lack it
_BUDGET_NAMESPACE = "nodecycle"


def split_budget(cloudformation: Any, deployment: Any) -> Finding:
    """Other nodecycle stacks of the region on this stack's cluster (one ClusterName) whose BudgetNamespace is
    another. Each stack reads and writes the ``nodecycle-budget`` ConfigMap of its own namespace alone: neither
    sees the other's slots, so the cluster drains as many nodes at once, in all and per zone, as both stacks'
    limits together allow (two stacks of BudgetMaxUnavailable=1: two nodes), though the stacks of a cluster are
    to share one budget (invariant 1). Nothing at run time tells: each stack's RBAC reaches its own namespace
    only. A stack being deleted drains nothing new."""
    check = "cloudformation.budget"
    cluster = deployment.parameter("ClusterName")
    if not cluster:
        return Finding.ok(check, "this stack has no cluster (ClusterName empty): no budget to share")
    namespace = deployment.parameter("BudgetNamespace", _BUDGET_NAMESPACE) or _BUDGET_NAMESPACE
    apart = sorted(
        (stack["StackName"], theirs)
        for page in cloudformation.get_paginator("describe_stacks").paginate()
        for stack in page["Stacks"]
        if stack["StackName"] != deployment.name
        and not stack.get("StackStatus", "").startswith("DELETE_")
        and "LifecycleTableName" in stack_outputs(stack)
        and _parameters(stack).get("ClusterName") == cluster
        and (theirs := _parameters(stack).get("BudgetNamespace") or _BUDGET_NAMESPACE) != namespace
    )
    if not apart:
        return Finding.ok(
            check,
            f"every nodecycle stack in {deployment.region} on cluster {cluster} shares the budget in namespace "
            f"{namespace}",
        )
    named = "; ".join(f"{name} in namespace {theirs}" for name, theirs in apart)
    return Finding.problem(
        check,
        f"nodecycle stacks on cluster {cluster} keep their budget apart from this stack's (namespace "
        f"{namespace}): {named}",
        "each stack counts only its own budget's slots: together they drain more nodes at once than either "
        "stack's BudgetMaxUnavailable and BudgetMaxUnavailablePerZone allow, in the cluster and in each zone",
        "give every stack on the cluster one BudgetNamespace, at a quiet time (nodecycle status lists no open "
        "lifecycle of the stack moved: its slots are not carried over), with the RBAC rendered for it "
        "(nodecycle rbac --namespace NAMESPACE | kubectl apply -f -): sam deploy --stack-name NAME "
        f"--parameter-overrides BudgetNamespace={namespace}",
    )


def _parameters(stack: Mapping[str, Any]) -> dict[str, str]:
    return {p["ParameterKey"]: p.get("ParameterValue", "") for p in stack.get("Parameters") or []}


def _groups_named(stack: Mapping[str, Any]) -> set[str]:
    """The groups a stack names in its ManagedGroups parameter, as DescribeStacks gives it."""
    return {g.strip() for g in _parameters(stack).get("ManagedGroups", "").split(",") if g.strip()}
