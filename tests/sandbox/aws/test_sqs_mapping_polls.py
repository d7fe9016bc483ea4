"""An event source mapping's long polls, as the sandbox's SQS serves them (``aws/sqs_mapping_polls.py``).

Lambda's pollers long-poll for 20 s, and a mapping disabled in Lambda receives nothing more. The runner's pollers
long-poll as long, so the disable cannot wait for their next poll: a poll names its mapping, and the sandbox's SQS
gives it nothing from the moment the mapping is disabled (a poll under way included), never later than Lambda
would. A runner that stops its pollers with the AWS side staying ends their polls under way rather than waiting
20 s for each. Each test is a second or less (the longest wait is a disabled poll's 1 s)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodecycle_sandbox.aws.install import install
from nodecycle_sandbox.mapping_polls import END_POLLS_HEADER, MAPPING_HEADER, POLLER_HEADER
from tests.sandbox.aws.conftest import REGION, worker_function


@pytest.fixture
def aws() -> Iterator[dict[str, Any]]:
    """A function mapped to the queue ``work`` (enabled), and the queue's URL."""
    install()
    with mock_aws():
        awslambda = worker_function(timeout=30)
        sqs = boto3.client("sqs", region_name=REGION)
        url = sqs.create_queue(QueueName="work", Attributes={"VisibilityTimeout": "30"})["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        mapping = awslambda.create_event_source_mapping(FunctionName="worker", EventSourceArn=arn)["UUID"]
        yield {"lambda": awslambda, "sqs": sqs, "url": url, "mapping": mapping}


def poller(headers: dict[str, str]) -> Any:
    """An SQS client whose receives carry ``headers``, as the runner's pollers' do."""
    client = boto3.client("sqs", region_name=REGION)

    def add(request: Any, **_: Any) -> None:
        for name, value in headers.items():
            request.headers[name] = value

    client.meta.events.register("before-sign.sqs.ReceiveMessage", add)
    return client


def in_background(call: Callable[[], list[Any]]) -> Callable[[], list[Any]]:
    """Start ``call`` (a long poll) on a thread; the returned function waits for its answer."""
    answers: list[list[Any]] = []
    thread = threading.Thread(target=lambda: answers.append(call()), daemon=True)
    thread.start()

    def answer() -> list[Any]:
        thread.join(timeout=25)
        assert answers, "the long poll never answered"
        return answers[0]

    return answer


def counts(aws: dict[str, Any]) -> tuple[str, str]:
    """The queue's visible and in-flight messages."""
    attributes = aws["sqs"].get_queue_attributes(
        QueueUrl=aws["url"],
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return attributes["ApproximateNumberOfMessages"], attributes["ApproximateNumberOfMessagesNotVisible"]


def poll(client: Any, url: str, wait: int) -> list[Any]:
    return list(client.receive_message(QueueUrl=url, WaitTimeSeconds=wait).get("Messages", []))


def test_a_poll_of_a_disabled_mapping_receives_nothing_and_one_under_way_takes_the_enable(
    aws: dict[str, Any],
) -> None:
    # Given the mapping disabled by an operator (aws lambda update-event-source-mapping --no-enabled), and a message
    aws["lambda"].update_event_source_mapping(UUID=aws["mapping"], Enabled=False)
    aws["sqs"].send_message(QueueUrl=aws["url"], MessageBody="work")
    polls = poller({POLLER_HEADER: "p1", MAPPING_HEADER: aws["mapping"]})

    # When the mapping's poller long-polls the queue
    # Then it receives nothing, while an operator's receive would (only the mapping's polls are stopped)
    assert poll(polls, aws["url"], 1) == []
    assert counts(aws) == ("1", "0")
    operators = aws["sqs"].receive_message(QueueUrl=aws["url"], VisibilityTimeout=0)["Messages"]
    assert [m["Body"] for m in operators] == ["work"]

    # And a poll under way when the mapping is enabled again receives the message
    answer = in_background(lambda: poll(polls, aws["url"], 20))
    aws["lambda"].update_event_source_mapping(UUID=aws["mapping"], Enabled=True)
    assert [m["Body"] for m in answer()] == ["work"]


def test_a_poll_under_way_when_its_mapping_is_disabled_receives_nothing_sent_after(
    aws: dict[str, Any],
) -> None:
    # Given the mapping's poller in a 20 s long poll of the empty queue
    polls = poller({POLLER_HEADER: "p1", MAPPING_HEADER: aws["mapping"]})
    answer = in_background(lambda: poll(polls, aws["url"], 20))

    # When the mapping is disabled, and a message is sent once the disable has answered
    aws["lambda"].update_event_source_mapping(UUID=aws["mapping"], Enabled=False)
    aws["sqs"].send_message(QueueUrl=aws["url"], MessageBody="work")

    # Then the poll under way does not receive it (before: the poll received it, up to 20 s after the disable);
    # its runner ends the poll, which answers nothing, and the message waits in the queue, never received
    poller({POLLER_HEADER: "p1", END_POLLS_HEADER: "1"}).receive_message(
        QueueUrl=aws["url"], WaitTimeSeconds=0
    )
    assert answer() == []
    assert counts(aws) == ("1", "0")


def test_a_runner_ends_its_pollers_long_polls_and_they_receive_nothing_more(aws: dict[str, Any]) -> None:
    # Given two pollers of the mapping in 20 s long polls of the empty queue, and another set's poller
    ours = poller({POLLER_HEADER: "ours", MAPPING_HEADER: aws["mapping"]})
    answers = [in_background(lambda: poll(ours, aws["url"], 20)) for _ in range(2)]
    theirs = in_background(
        lambda: poll(poller({POLLER_HEADER: "theirs", MAPPING_HEADER: aws["mapping"]}), aws["url"], 20)
    )

    # When the runner ends our set's polls (its sources stopped with the AWS side staying), and a message is sent
    ended = poller({POLLER_HEADER: "ours", END_POLLS_HEADER: "1"})
    assert poll(ended, aws["url"], 0) == []  # (the request that ends them receives nothing itself)
    aws["sqs"].send_message(QueueUrl=aws["url"], MessageBody="work")

    # Then our polls answer nothing, and a poll of ours started after gets nothing either; the other set's poll,
    # not ended, receives the message
    assert [answer() for answer in answers] == [[], []]
    assert poll(ours, aws["url"], 0) == []
    assert [m["Body"] for m in theirs()] == ["work"]
