"""A record of a work queue (drain, wake, eip) retried on purpose (a TransientError: DynamoDB throttled its record's
read) came back only after the queue's visibility timeout, 150 s by default, while its lifecycle action's heartbeat
timeout ran: a lone throttle held a drain, a budget wake-up or an address back two and a half minutes. Each work
function now gives ``work_queue_handler`` the queue its mapping polls (NODECYCLE_WORK_QUEUE_URL, which template.yaml
sets per function: the drain and wake functions run the same code on different queues), and the record comes back
10 s on, as the intake queue's does (``entrypoints.partial_batch``). On moto with the sandbox's SQS as strict as SQS
(``aws/sqs_attributes.py``), the queue's clock moved on rather than waited for."""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from nodecycle import entrypoints
from nodecycle.domain.model import Step
from nodecycle.domain.ports.lifecycle import WorkMessage
from nodecycle.settings import EipSettings
from nodecycle_sandbox.aws import sqs_attributes
from nodecycle_sandbox.runner.cfn_yaml import load_template
from tests.functions.intake.test_retries_alone_in_a_batch import THROTTLED, Answering, dynamodb
from tests.functions.intake.test_retries_come_back_sooner import QueueClock, next_delivery, visibility_changes
from tests.support.functions import LambdaContext, load_function
from tests.support.stack import TEMPLATE, Stack

__all__ = ["dynamodb", "visibility_changes"]  # (the fixtures, imported to be used here)

# Each work function, its code, and the queue its mapping polls (template.yaml's Events.Work)
FUNCTIONS = {"DrainFunction": "drain", "WakeFunction": "drain", "EipFunction": "eip"}
QUEUES = {"DrainFunction": "DrainQueue", "WakeFunction": "WakeQueue", "EipFunction": "EipQueue"}


def url_of(stack: Stack, queue: str) -> str:
    return {
        "DrainQueue": stack.drain_queue,
        "WakeQueue": stack.wake_queue,
        "EipQueue": stack.eip_queue,
    }[queue]


def template_visibility() -> int:
    """The work queues' visibility timeout as the template deploys them by default (WorkVisibilityTimeoutSeconds)."""
    template = load_template(TEMPLATE)
    return int(template["Parameters"]["WorkVisibilityTimeoutSeconds"]["Default"])


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> QueueClock:
    return QueueClock(monkeypatch)


@pytest.fixture(params=sorted(FUNCTIONS))
def function(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def queue(stack: Stack, function: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The function's work queue with the template's visibility timeout, SQS as strict as SQS about visibility
    changes, and the function told which queue it polls (template.yaml's environment of that function)."""
    sqs_attributes.install()
    url = url_of(stack, QUEUES[function])
    boto3.client("sqs").set_queue_attributes(
        QueueUrl=url, Attributes={"VisibilityTimeout": str(template_visibility())}
    )
    monkeypatch.setenv("NODECYCLE_WORK_QUEUE_URL", url)
    return url


def test_the_template_tells_each_work_function_the_queue_its_mapping_polls() -> None:
    resources = load_template(TEMPLATE)["Resources"]
    for function, queue in QUEUES.items():
        properties = resources[function]["Properties"]
        assert properties["Events"]["Work"]["Properties"]["Queue"] == {"Fn::GetAtt": [queue, "Arn"]}
        assert properties["Environment"]["Variables"]["NODECYCLE_WORK_QUEUE_URL"] == {"Ref": queue}


def test_the_template_and_the_settings_agree_on_the_work_queues_visibility_timeout() -> None:
    # The functions read the work queues' visibility timeout from the same parameter the queues are made with
    template = load_template(TEMPLATE)
    parameter = {"Ref": "WorkVisibilityTimeoutSeconds"}
    for queue in QUEUES.values():
        assert template["Resources"][queue]["Properties"]["VisibilityTimeout"] == parameter
    variables = template["Globals"]["Function"]["Environment"]["Variables"]
    assert variables["NODECYCLE_WORK_VISIBILITY_TIMEOUT_SECONDS"] == parameter
    default = EipSettings.model_fields["work_visibility_timeout_seconds"].default
    assert default == template_visibility()


def test_a_lone_throttled_work_record_comes_back_in_seconds_not_after_the_queues_visibility_timeout(
    dynamodb: Answering,
    function: str,
    queue: str,
    clock: QueueClock,
    visibility_changes: list[dict[str, Any]],
) -> None:
    # Given a work message on the function's queue, delivered, and DynamoDB throttling its record's read
    handler = load_function(FUNCTIONS[function]).handler
    body = WorkMessage(record_id="i-0aaaaaaaaaaaaaaa1/terminate/token", seq=0, step=Step.COMPLETE)
    boto3.client("sqs").send_message(QueueUrl=queue, MessageBody=body.model_dump_json())
    _, first = next_delivery(queue, clock, 0)
    (record,) = first["Records"]
    dynamodb.answer = THROTTLED

    # When the function takes it, Then it is retried (its failure reported, the invocation not failed)
    assert handler(first, LambdaContext()) == {"batchItemFailures": [{"itemIdentifier": record["messageId"]}]}
    dynamodb.answer = None

    # And the queue delivers it again 10 s on, not at its visibility timeout (before: 150 s)
    waited, again = next_delivery(queue, clock, template_visibility())
    assert waited <= entrypoints.FIRST_RETRY_SECONDS
    assert again["Records"][0]["messageId"] == record["messageId"]

    # And the change was the function's own queue's, by the record's receipt handle
    assert [(c["QueueUrl"], c["ReceiptHandle"], c["VisibilityTimeout"]) for c in visibility_changes] == [
        (queue, record["receiptHandle"], entrypoints.FIRST_RETRY_SECONDS)
    ]


def test_a_work_record_that_succeeds_costs_no_visibility_change(
    function: str, queue: str, clock: QueueClock, visibility_changes: list[dict[str, Any]]
) -> None:
    # Given a work message naming no lifecycle record (dropped, not retried)
    handler = load_function(FUNCTIONS[function]).handler
    body = WorkMessage(record_id="i-0aaaaaaaaaaaaaaa1/terminate/token", seq=0, step=Step.COMPLETE)
    boto3.client("sqs").send_message(QueueUrl=queue, MessageBody=body.model_dump_json())
    _, first = next_delivery(queue, clock, 0)

    # When the function takes it, Then it succeeds and asks SQS nothing more
    assert handler(first, LambdaContext()) == {"batchItemFailures": []}
    assert visibility_changes == []
