"""What a deployment leaves in the account besides queues and tables, for operators' tools to find.

CloudFormation would create the template's log groups (before the functions that log into them: the runner
registers the functions after this deployment), its EventBridge rules (the ones SAM makes for ``EventBridgeRule``
and ``Schedule`` events), its EKS access entries, and a stack whose outputs and parameters name it all. The
runner creates them in the sandbox's AWS through the ordinary APIs, so that ``nodecycle doctor --stack``,
``status --stack`` and the AWS CLI find them there as in an account, and so that what an operator changes
there matters: a rule disabled with ``aws events disable-rule``, or whose target was removed, stops its
deliveries (the runner asks before each one), an access entry creation refused by a ``CONFIG_MAP`` cluster, or a log
group of the template's name already there ("already exists"), fails the deployment, as it rolls a stack back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nodecycle_sandbox.runner.functions import FunctionSpec, RuleTrigger, ScheduleTrigger
from nodecycle_sandbox.runner.intrinsics import Intrinsics
from nodecycle_sandbox.runner.resources import SandboxResources

_RULE_EVENTS = ("EventBridgeRule", "CloudWatchEvent", "Schedule")


@dataclass(frozen=True)
class DeployedRule:
    name: str
    function: str  # logical id
    event: str  # the event's name in the function's Events


class StackDeployment:
    """Creates the rules, access entries and the stack record; answers whether a rule is enabled."""

    def __init__(
        self,
        template: Mapping[str, Any],
        *,
        stack_name: str,
        intrinsics: Intrinsics,
        resources: SandboxResources,
        clients: Mapping[str, Any],
    ) -> None:
        self._template = template
        self._stack = stack_name
        self._intrinsics = intrinsics
        self._resources = resources
        self._events = clients["events"]
        self._eks = clients["eks"]
        self._cloudformation = clients["cloudformation"]
        self._logs = clients["logs"]
        self.rules: dict[tuple[str, str], DeployedRule] = {}
        self._arns: dict[str, str] = {}  # function logical id -> its ARN

    def deploy(self, functions: list[FunctionSpec]) -> None:
        """What comes before the functions (their log groups, their rules). Then ``grant_access``."""
        self._create_log_groups()
        self._create_rules(functions)
        self._create_stack_record()

    def grant_access(self) -> None:
        """The access entries, once their roles exist: an entry names its role (!GetAtt ...Role.Arn), so
        CloudFormation makes the role first; EKS binds the entry to the role it finds then (its role id)."""
        self._create_access_entries()

    def enabled(self, function: str, event: str) -> bool:
        """Whether the rule of ``function``'s ``event`` is enabled now (an operator may have disabled it)."""
        rule = self.rules.get((function, event))
        if rule is None:
            return True
        return str(self._events.describe_rule(Name=rule.name)["State"]) == "ENABLED"

    def delivers(self, function: str, event: str) -> bool:
        """Whether the rule of ``function``'s ``event`` delivers to the function now: enabled, and the function
        still one of its targets (an operator may have removed the target, or pointed it elsewhere: the rule
        then stays enabled and the function gets nothing, as on AWS)."""
        rule = self.rules.get((function, event))
        if rule is None:
            return True
        if not self.enabled(function, event):
            return False
        pages = self._events.get_paginator("list_targets_by_rule").paginate(Rule=rule.name)
        # (a target's ARN may name a version or alias: arn:aws:lambda:region:account:function:name[:qualifier])
        arns = {":".join(t["Arn"].split(":")[:7]) for page in pages for t in page["Targets"]}
        return self._arns[function] in arns

    def target(self, function: str, event: str) -> dict[str, Any] | None:
        """The target of the rule of ``function``'s ``event`` that names the function, as EventBridge has it now
        (its dead-letter queue and retry policy may have been changed by hand); None if there is none."""
        rule = self.rules.get((function, event))
        if rule is None:
            return None
        pages = self._events.get_paginator("list_targets_by_rule").paginate(Rule=rule.name)
        targets = [t for page in pages for t in page["Targets"]]
        return next((t for t in targets if ":".join(t["Arn"].split(":")[:7]) == self._arns[function]), None)

    # -- what is created ----------------------------------------------------------------------------

    def _create_rules(self, functions: list[FunctionSpec]) -> None:
        for spec in functions:
            self._arns[spec.logical_id] = spec.arn
            triggers: list[RuleTrigger | ScheduleTrigger] = [*spec.rules, *spec.schedules]
            for trigger in triggers:
                name = self._resources.ref(f"{spec.logical_id}{trigger.name}")
                request: dict[str, Any] = {"Name": name, "State": "ENABLED"}
                if isinstance(trigger, RuleTrigger):
                    request["EventPattern"] = json.dumps(trigger.pattern)
                else:
                    request["ScheduleExpression"] = trigger.expression
                    request["State"] = "ENABLED" if trigger.enabled else "DISABLED"
                self._events.put_rule(**request)
                self._events.put_targets(Rule=name, Targets=[self._target(spec, trigger.name)])
                self.rules[(spec.logical_id, trigger.name)] = DeployedRule(
                    name, spec.logical_id, trigger.name
                )

    def _target(self, spec: FunctionSpec, event: str) -> dict[str, Any]:
        """The one target SAM makes of a rule or schedule event (samtranslator's push.py ``_construct_target``),
        read from the template: its id (``Target.Id``, else the rule's logical id and ``LambdaTarget``), the
        function, and the event's ``Input``, ``InputPath``, ``RetryPolicy`` and ``DeadLetterConfig`` as given.
        (Without the last two the sandbox's targets would be kinder than the stack's: EventBridge's defaults
        retry for 24 hours and drop what they cannot deliver.)"""
        declared = self._template["Resources"][spec.logical_id]["Properties"]["Events"][event]
        properties: Mapping[str, Any] = self._intrinsics.resolve(declared.get("Properties") or {})
        target: dict[str, Any] = {
            "Id": str((properties.get("Target") or {}).get("Id") or f"{spec.logical_id}{event}LambdaTarget"),
            "Arn": spec.arn,
        }
        for key in ("Input", "InputPath"):
            if key in properties:
                target[key] = str(properties[key])
        if "RetryPolicy" in properties:
            target["RetryPolicy"] = {key: int(value) for key, value in properties["RetryPolicy"].items()}
        if "DeadLetterConfig" in properties:
            dead_letter = properties["DeadLetterConfig"]
            if "Arn" not in dead_letter:
                # (SAM's `Type: SQS` makes a queue of its own, which the sandbox does not)
                raise ValueError(
                    f"{spec.logical_id}.{event}: the sandbox needs DeadLetterConfig: {{Arn: ...}}"
                )
            target["DeadLetterConfig"] = {"Arn": str(dead_letter["Arn"])}
        return target

    def _create_log_groups(self) -> None:
        """Each log group with its retention. CreateLogGroup refuses a name taken (ResourceAlreadyExistsException),
        as CloudFormation's creation of the group does."""
        for logical_id, resource in self._template["Resources"].items():
            if resource["Type"] != "AWS::Logs::LogGroup" or not self._resources.exists(logical_id):
                continue
            name = self._resources.log_group_name(logical_id)
            self._logs.create_log_group(logGroupName=name)
            properties = self._intrinsics.resolve(resource.get("Properties") or {})
            if "RetentionInDays" in properties:
                self._logs.put_retention_policy(
                    logGroupName=name, retentionInDays=int(properties["RetentionInDays"])
                )

    def _create_access_entries(self) -> None:
        for logical_id, resource in self._template["Resources"].items():
            if resource["Type"] != "AWS::EKS::AccessEntry" or not self._resources.exists(logical_id):
                continue
            properties = self._intrinsics.resolve(resource.get("Properties") or {})
            request = {
                "clusterName": properties["ClusterName"],
                "principalArn": properties["PrincipalArn"],
                "kubernetesGroups": list(properties.get("KubernetesGroups") or []),
                "type": properties.get("Type", "STANDARD"),
            }
            if properties.get("Username"):
                request["username"] = properties["Username"]
            self._eks.create_access_entry(**request)

    def _create_stack_record(self) -> None:
        declared: Mapping[str, Any] = self._template.get("Parameters") or {}
        parameters = {
            name: {
                "Type": "String",
                **({"Description": spec["Description"]} if "Description" in spec else {}),
            }
            for name, spec in declared.items()
        }
        values = []
        for name in declared:
            value = self._intrinsics.parameter(name)
            values.append(
                {
                    "ParameterKey": name,
                    "ParameterValue": ",".join(value) if isinstance(value, list) else str(value),
                }
            )
        outputs = {}
        for name, output in (self._template.get("Outputs") or {}).items():
            if "Condition" in output and not self._intrinsics.condition(output["Condition"]):
                continue
            value = self._intrinsics.resolve(output["Value"])
            outputs[name] = {"Value": ",".join(value) if isinstance(value, list) else str(value)}
            if "Description" in output:
                outputs[name]["Description"] = output["Description"]
        body = {
            "AWSTemplateFormatVersion": "2010-09-09",
            "Description": f"The sandbox's deployment of {self._stack}: its parameters and outputs.",
            "Parameters": parameters,
            # A stack needs a resource: a parameter naming the deployment, harmless in the sandbox.
            "Resources": {
                "Deployment": {
                    "Type": "AWS::SSM::Parameter",
                    "Properties": {
                        "Name": f"/nodecycle-sandbox/{self._stack}",
                        "Type": "String",
                        "Value": "sandbox",
                    },
                }
            },
            "Outputs": outputs,
        }
        self._cloudformation.create_stack(
            StackName=self._stack, TemplateBody=json.dumps(body), Parameters=values
        )
