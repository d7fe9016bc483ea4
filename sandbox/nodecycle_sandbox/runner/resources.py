"""Create the template's queues and table in the sandbox's AWS, and answer `Ref`/`GetAtt` for them.

Resources are created on first use, so a queue's redrive policy can name its dead-letter queue before that
queue exists in the template's order, as CloudFormation's dependency graph allows.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sqs import SQSClient

    from nodecycle_sandbox.runner.intrinsics import Intrinsics

_QUEUE_ATTRIBUTES = (
    "DelaySeconds",
    "MaximumMessageSize",
    "MessageRetentionPeriod",
    "ReceiveMessageWaitTimeSeconds",
    "VisibilityTimeout",
    "FifoQueue",
    "ContentBasedDeduplication",
    "DeduplicationScope",
    "FifoThroughputLimit",
)
_TABLE_PROPERTIES = (
    "KeySchema",
    "AttributeDefinitions",
    "BillingMode",
    "GlobalSecondaryIndexes",
    "LocalSecondaryIndexes",
    "ProvisionedThroughput",
)


@dataclass(frozen=True)
class QueueInfo:
    logical_id: str
    name: str
    url: str
    arn: str
    visibility_timeout: int
    max_receive_count: int | None
    dead_letter_arn: str | None


@dataclass(frozen=True)
class TableInfo:
    logical_id: str
    name: str
    arn: str


class SandboxResources:
    """The `ResourceResolver` of a sandbox deployment."""

    def __init__(
        self,
        template: Mapping[str, Any],
        *,
        stack_name: str,
        region: str,
        account: str,
        sqs: SQSClient,
        dynamodb: DynamoDBClient,
    ) -> None:
        self._resources: Mapping[str, Any] = template["Resources"]
        self._implicit = implicit_resources(self._resources)
        self._stack = stack_name
        self._region = region
        self._account = account
        self._sqs = sqs
        self._dynamodb = dynamodb
        self.intrinsics: Intrinsics | None = None
        self.queues: dict[str, QueueInfo] = {}
        self.tables: dict[str, TableInfo] = {}
        self._creating: set[str] = set()

    # -- ResourceResolver -----------------------------------------------------------------------

    def ref(self, logical_id: str) -> str:
        self._check_made(logical_id)
        kind = self._type(logical_id)
        if kind == "AWS::SQS::Queue":
            return self.queue(logical_id).url
        if kind == "AWS::DynamoDB::Table":
            return self.table(logical_id).name
        if kind == "AWS::Serverless::Function":
            return self.function_name(logical_id)
        if kind == "AWS::IAM::Role":
            return self.role_arn(logical_id).rsplit("/", 1)[-1]  # a role's Ref is its name
        if kind == "AWS::Events::Rule":
            return self._physical_name(logical_id)  # its Ref is its name
        if kind == "AWS::Logs::LogGroup":
            return self.log_group_name(logical_id)  # its Ref is its name
        # CloudFormation's Ref of most other resources is a name or an ARN the sandbox never uses.
        return self._physical_name(logical_id)

    def get_att(self, logical_id: str, attribute: str) -> str:
        self._check_made(logical_id)
        kind = self._type(logical_id)
        if kind == "AWS::SQS::Queue":
            queue = self.queue(logical_id)
            values = {"Arn": queue.arn, "QueueName": queue.name, "QueueUrl": queue.url}
        elif kind == "AWS::DynamoDB::Table":
            table = self.table(logical_id)
            values = {"Arn": table.arn, "StreamArn": f"{table.arn}/stream/sandbox"}
        elif kind == "AWS::Serverless::Function":
            name = self.function_name(logical_id)
            values = {"Arn": f"arn:aws:lambda:{self._region}:{self._account}:function:{name}"}
        elif kind == "AWS::IAM::Role":
            values = {"Arn": self.role_arn(logical_id), "RoleId": f"AROA{logical_id.upper()[:17]}"}
        elif kind == "AWS::Events::Rule":
            values = {
                "Arn": f"arn:aws:events:{self._region}:{self._account}:rule/{self._physical_name(logical_id)}"
            }
        elif kind == "AWS::Logs::LogGroup":
            name = self.log_group_name(logical_id)
            values = {"Arn": f"arn:aws:logs:{self._region}:{self._account}:log-group:{name}:*"}
        else:
            service = kind.split("::")[1].lower()
            values = {
                "Arn": f"arn:aws:{service}:{self._region}:{self._account}:{self._physical_name(logical_id)}"
            }
        if attribute not in values:
            raise ValueError(f"the sandbox has no attribute {attribute} for {logical_id} ({kind})")
        return values[attribute]

    # -- resources ------------------------------------------------------------------------------

    def function_name(self, logical_id: str) -> str:
        name = self._properties(logical_id).get("FunctionName")
        return str(self._resolve(name)) if name else self._physical_name(logical_id)

    def log_group_name(self, logical_id: str) -> str:
        name = self._properties(logical_id).get("LogGroupName")
        return str(self._resolve(name)) if name else self._physical_name(logical_id)

    def role_arn(self, logical_id: str) -> str:
        name = self._properties(logical_id).get("RoleName")
        return f"arn:aws:iam::{self._account}:role/{self._resolve(name) if name else self._physical_name(logical_id)}"

    def queue(self, logical_id: str) -> QueueInfo:
        if logical_id not in self.queues:
            with self._guard(logical_id):
                self.queues[logical_id] = self._create_queue(logical_id)
        return self.queues[logical_id]

    def table(self, logical_id: str) -> TableInfo:
        if logical_id not in self.tables:
            with self._guard(logical_id):
                self.tables[logical_id] = self._create_table(logical_id)
        return self.tables[logical_id]

    def create_all(self) -> None:
        """Create every queue and table the template declares (and whose condition holds), and the queues'
        policies."""
        for logical_id, resource in self._resources.items():
            if not self.exists(logical_id):
                continue
            if resource["Type"] == "AWS::SQS::Queue":
                self.queue(logical_id)
            elif resource["Type"] == "AWS::DynamoDB::Table":
                self.table(logical_id)
            elif resource["Type"] == "AWS::SQS::QueuePolicy":
                self._apply_queue_policy(logical_id)

    def exists(self, logical_id: str) -> bool:
        condition = self._resources[logical_id].get("Condition")
        return condition is None or self._intrinsics().condition(condition)

    def _create_queue(self, logical_id: str) -> QueueInfo:
        properties = self._resolve(self._properties(logical_id))
        name = properties.get("QueueName") or self._physical_name(logical_id)
        if properties.get("FifoQueue") and not name.endswith(".fifo"):
            name += ".fifo"
        attributes: dict[Any, str] = {
            key: _cfn_string(properties[key]) for key in _QUEUE_ATTRIBUTES if key in properties
        }
        redrive = properties.get("RedrivePolicy")
        if redrive:
            attributes["RedrivePolicy"] = json.dumps(redrive) if isinstance(redrive, dict) else redrive
            redrive = json.loads(attributes["RedrivePolicy"])
        url = self._sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        return QueueInfo(
            logical_id=logical_id,
            name=name,
            url=url,
            arn=f"arn:aws:sqs:{self._region}:{self._account}:{name}",
            visibility_timeout=int(properties.get("VisibilityTimeout", 30)),
            max_receive_count=int(redrive["maxReceiveCount"]) if redrive else None,
            dead_letter_arn=redrive["deadLetterTargetArn"] if redrive else None,
        )

    def _apply_queue_policy(self, logical_id: str) -> None:
        """As CloudFormation does: the policy document becomes each of its queues' Policy attribute (what the doctor
        reads to tell whether EventBridge may write to a dead-letter queue)."""
        properties = self._resolve(self._properties(logical_id))
        document = json.dumps(properties["PolicyDocument"])
        for url in properties["Queues"]:
            self._sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": document})

    def _create_table(self, logical_id: str) -> TableInfo:
        properties = self._resolve(self._properties(logical_id))
        name = properties.get("TableName") or self._physical_name(logical_id)
        request: dict[str, Any] = {key: properties[key] for key in _TABLE_PROPERTIES if key in properties}
        stream = properties.get("StreamSpecification")
        if stream:
            request["StreamSpecification"] = {"StreamEnabled": True, **stream}
        self._dynamodb.create_table(TableName=name, **request)
        ttl = properties.get("TimeToLiveSpecification")
        if ttl and _cfn_bool(ttl.get("Enabled", False)):
            self._dynamodb.update_time_to_live(
                TableName=name,
                TimeToLiveSpecification={"Enabled": True, "AttributeName": ttl["AttributeName"]},
            )
        return TableInfo(
            logical_id=logical_id,
            name=name,
            arn=f"arn:aws:dynamodb:{self._region}:{self._account}:table/{name}",
        )

    # -- helpers --------------------------------------------------------------------------------

    def _check_made(self, logical_id: str) -> None:
        """A Ref or GetAtt of a resource its condition leaves out fails the stack, where the sandbox would make the
        resource at its first use: CloudFormation's "Template format error: Unresolved resource dependencies [X] in
        the Resources block of the template" (aws/serverless-application-model#832). A reference in the branch of
        an Fn::If not taken is never resolved, as there."""
        if logical_id in self._resources and not self.exists(logical_id):
            raise ValueError(
                f"Template format error: Unresolved resource dependencies [{logical_id}] in the Resources block of "
                f"the template (its condition {self._resources[logical_id]['Condition']} is false)"
            )

    def _type(self, logical_id: str) -> str:
        if logical_id in self._implicit:
            return self._implicit[logical_id]
        if logical_id not in self._resources:
            raise ValueError(f"the template has no resource or parameter {logical_id!r}")
        kind: str = self._resources[logical_id]["Type"]
        return kind

    def _properties(self, logical_id: str) -> dict[str, Any]:
        """A resource's properties; none for one SAM generates (see ``implicit_resources``)."""
        if logical_id in self._implicit:
            return {}
        properties: dict[str, Any] = self._resources[logical_id].get("Properties") or {}
        return properties

    def _physical_name(self, logical_id: str) -> str:
        return f"{self._stack}-{logical_id}"

    def _intrinsics(self) -> Intrinsics:
        if self.intrinsics is None:
            raise RuntimeError("SandboxResources.intrinsics must be set before resolving")
        return self.intrinsics

    def _resolve(self, value: Any) -> Any:
        return self._intrinsics().resolve(value)

    def _guard(self, logical_id: str) -> _CycleGuard:
        return _CycleGuard(self._creating, logical_id)


class _CycleGuard:
    def __init__(self, creating: set[str], logical_id: str) -> None:
        self._creating = creating
        self._logical_id = logical_id

    def __enter__(self) -> None:
        if self._logical_id in self._creating:
            raise ValueError(f"circular reference through {self._logical_id}")
        self._creating.add(self._logical_id)

    def __exit__(self, *exc: object) -> None:
        self._creating.discard(self._logical_id)


def implicit_resources(resources: Mapping[str, Any]) -> dict[str, str]:
    """The resources SAM generates that a template may name (logical id -> type): a function's execution
    role (``<Function>Role``, unless it names its own) and the rule of each of its EventBridge and schedule
    events (``<Function><Event>``)."""
    found = {}
    for logical_id, resource in resources.items():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        properties = resource.get("Properties") or {}
        if "Role" not in properties:
            found[f"{logical_id}Role"] = "AWS::IAM::Role"
        for event, spec in (properties.get("Events") or {}).items():
            if spec.get("Type") in ("EventBridgeRule", "CloudWatchEvent", "Schedule"):
                found[f"{logical_id}{event}"] = "AWS::Events::Rule"
    return found


def _cfn_string(value: Any) -> str:
    """CloudFormation passes every scalar property on as a string; booleans become lower case."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _cfn_bool(value: Any) -> bool:
    return value is True or str(value).lower() == "true"
