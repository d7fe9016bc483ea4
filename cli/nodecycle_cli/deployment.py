"""Where a deployed stack keeps its things: found by stack name from its outputs and parameters.

``--stack NAME`` reads the CloudFormation stack (``DescribeStacks``) with the usual credential chain; its
outputs name the lifecycle table, the owner id, the queues and the function roles, and its parameters hold
the settings (cluster, managed groups and hooks, timing). The sandbox registers its deployment as a stack
too, so the same commands work against it.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nodecycle_cli.failures import CommandError, endpoint_note

if TYPE_CHECKING:
    import boto3


class _StackOnTheLine(argparse.Action):
    """``--stack`` given on the command line: ``stack_source`` says so (see ``add_stack_arguments``)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        namespace.stack = values
        namespace.stack_source = "--stack"


# Where a stack named by ``args.stack`` came from: the command line, or the environment (a default the command
# line's other choices, such as ``status --table --owner``, may override; and which a refusal must name, since
# the operator never typed it).
STACK_VARIABLE = "$NODECYCLE_STACK"


def add_stack_arguments(parser: argparse.ArgumentParser) -> None:
    from_environment = os.environ.get("NODECYCLE_STACK") or None
    parser.add_argument(
        "--stack",
        action=_StackOnTheLine,
        default=from_environment,
        help="the nodecycle stack's name: its outputs give the table, owner id, cluster, queues "
        "(default: $NODECYCLE_STACK)",
    )
    parser.set_defaults(stack_source=STACK_VARIABLE if from_environment else None)
    parser.add_argument("--region", help="AWS region of the stack (default: the usual chain: AWS_REGION...)")


def session(args: argparse.Namespace) -> boto3.Session:
    """A boto3 session of the usual chain; the region from ``--region``, else ``AWS_REGION`` (which the AWS
    CLI reads and botocore does not), else ``AWS_DEFAULT_REGION`` and the profile."""
    import boto3

    return boto3.Session(region_name=getattr(args, "region", None) or os.environ.get("AWS_REGION") or None)


@dataclass(frozen=True)
class Deployment:
    """One nodecycle stack: its name, outputs and parameters (every parameter, defaults included)."""

    name: str
    region: str
    outputs: Mapping[str, str] = field(default_factory=dict)
    parameters: Mapping[str, str] = field(default_factory=dict)
    status: str = ""  # StackStatus

    def output(self, key: str) -> str:
        value = self.outputs.get(key)
        if not value:
            raise CommandError(f"stack {self.name} has no output {key}: {self._why_no_output()}")
        return value

    def _why_no_output(self) -> str:
        """A stack has outputs once a deployment of it completed: before, it is not an older template."""
        if self.status == "REVIEW_IN_PROGRESS":
            return (
                "it is REVIEW_IN_PROGRESS, never deployed (its change set was not executed: "
                "sam deploy, and confirm it)"
            )
        if self.status == "CREATE_IN_PROGRESS":
            return "it is CREATE_IN_PROGRESS: run the command again once it is CREATE_COMPLETE"
        if self.status.startswith(("CREATE_", "ROLLBACK_")) and self.status != "CREATE_COMPLETE":
            return (
                f"it is {self.status}, its creation did not complete (aws cloudformation "
                f"describe-stack-events --stack-name {self.name} says why; delete it and deploy again)"
            )
        if self.status.startswith("DELETE_"):
            return f"it is {self.status}"
        return "it was deployed from an older template (sam build && sam deploy updates it)"

    def parameter(self, key: str, default: str = "") -> str:
        return self.parameters.get(key, default)

    def number(self, key: str, default: int) -> int:
        value = self.parameters.get(key)
        return int(value) if value not in (None, "") else default

    @property
    def owner(self) -> str:
        return self.output("OwnerId")

    @property
    def table(self) -> str:
        return self.output("LifecycleTableName")

    @property
    def cluster(self) -> str | None:
        return self.parameters.get("ClusterName") or None

    @property
    def managed_groups(self) -> tuple[str, ...]:
        return tuple(g.strip() for g in self.parameter("ManagedGroups").split(",") if g.strip())

    @property
    def managed_hooks(self) -> tuple[str, ...]:
        hooks = self.parameter("ManagedHooks", "nodecycle-launch,nodecycle-terminate")
        return tuple(h.strip() for h in hooks.split(",") if h.strip())


def find(session: boto3.Session, name: str) -> Deployment:
    """The stack called ``name``; a stack that does not exist is one clear line."""
    from botocore.exceptions import ClientError

    cloudformation = session.client("cloudformation")
    try:
        stacks = cloudformation.describe_stacks(StackName=name)["Stacks"]
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "ValidationError":
            raise StackNotFound(
                name, cloudformation.meta.region_name, cloudformation.meta.endpoint_url
            ) from None
        raise
    return from_description(stacks[0], cloudformation.meta.region_name)


class StackNotFound(CommandError):
    """CloudFormation has no stack of the name (a ValidationError), said in one line."""

    def __init__(self, name: str, region: str, endpoint: str | None, why: str | None = None) -> None:
        self.name, self.region, self.endpoint = name, region, endpoint
        why = why or "pass --region, or the name `sam deploy` was given"
        super().__init__(f"no CloudFormation stack {name!r} in {region} ({why}){endpoint_note(endpoint)}")


@contextmanager
def stack_named_by(args: argparse.Namespace) -> Iterator[None]:
    """Around the look-up of ``args.stack``: a stack not found whose name came from $NODECYCLE_STACK says so (the
    operator never typed it: a stack since deleted, as docs/removing.md has them free a slot after sam delete, or
    a profile's typo), and how to run without it."""
    try:
        yield
    except StackNotFound as missing:
        if getattr(args, "stack_source", None) != STACK_VARIABLE:
            raise
        raise StackNotFound(
            missing.name,
            missing.region,
            missing.endpoint,
            f"{STACK_VARIABLE} names it: pass --stack NAME, or unset NODECYCLE_STACK to run without a stack "
            "(budget with --namespace)",
        ) from None


def stack_outputs(stack: Mapping[str, Any]) -> dict[str, str]:
    """A stack's outputs (DescribeStacks' ``Outputs``) by key."""
    return {o["OutputKey"]: o.get("OutputValue", "") for o in stack.get("Outputs") or []}


def from_description(stack: Mapping[str, Any], region: str) -> Deployment:
    return Deployment(
        name=stack["StackName"],
        region=region,
        status=stack.get("StackStatus", ""),
        outputs=stack_outputs(stack),
        parameters={
            p["ParameterKey"]: p.get("ResolvedValue", p.get("ParameterValue", ""))
            for p in stack.get("Parameters") or []
        },
    )


class TableMissing(CommandError):
    """The lifecycle table does not exist (deleted outside the stack, or a --table/--region that is not it)."""


@contextmanager
def lifecycle_table(table: str, region: str | None) -> Iterator[None]:
    """DynamoDB's answer for a table that does not exist (ResourceNotFoundException) is said as that, naming the
    table: an operator reading "AWS refused Query" looks for a permission to grant, and a doctor that takes it
    for a check it could not make reports nothing wrong where every function fails."""
    from botocore.exceptions import ClientError

    try:
        yield
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
            raise
        raise TableMissing(
            f"the lifecycle table {table} does not exist in {region or 'the region'} "
            "(deleted outside the stack; or, with --table, a name or --region that is not the stack's)"
        ) from None
