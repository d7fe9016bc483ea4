"""The work queues: RecordingQueues (the unit tests') and SqsWorkQueues on moto with the sandbox's SQS answer alike.

What the domain relies on: a message reaches the worker's queue as it was sent (its JSON body read back);
``DelaySeconds`` is a whole number from 0 to 900; a body is at most the queue's MaximumMessageSize, 1 MiB by
default (the template sets none). What SQS refuses raises, and is no TransientError (no retry changes it)."""

from __future__ import annotations

import json
import uuid

import pytest
from moto.core import DEFAULT_ACCOUNT_ID
from moto.sqs.models import sqs_backends

from nodecycle.adapters.aws.queues import SqsWorkQueues
from nodecycle.domain.errors import TransientError
from nodecycle.domain.flow import Worker
from nodecycle.domain.model import Step
from nodecycle.domain.ports.lifecycle import WorkMessage, WorkQueues
from nodecycle_sandbox.aws import install
from tests.contracts.conftest import REGION, aws
from tests.support.fakes import SQS_MAX_MESSAGE, RecordingQueues

MESSAGE = WorkMessage(record_id="i-0123456789abcdef0/terminate/token", seq=3, step=Step.EVICT, watch=2)


class Queues:
    """One side's queues, and what each worker's queue holds."""

    def __init__(self, side: str) -> None:
        self.side = side
        if side == "fake":
            self.fake = RecordingQueues()
            self.queues: WorkQueues = self.fake
            return
        self.sqs = aws("sqs")
        self.urls = {
            worker: self.sqs.create_queue(QueueName=f"{worker}-{uuid.uuid4().hex[:8]}")["QueueUrl"]
            for worker in Worker
        }
        self.queues = SqsWorkQueues(self.urls, sqs=self.sqs)

    def held(self, worker: Worker) -> list[WorkMessage]:
        """The messages on ``worker``'s queue, as its consumer parses them."""
        return [message for message, _ in self.delayed(worker)]

    def delayed(self, worker: Worker) -> list[tuple[WorkMessage, int]]:
        """The messages on ``worker``'s queue with their delay (whole seconds), delayed ones included."""
        if self.side == "fake":
            return [(sent.message, sent.delay) for sent in self.fake.sent if sent.worker is worker]
        # (from moto's queue itself: a receive does not answer a message still delayed)
        queue = sqs_backends[DEFAULT_ACCOUNT_ID][REGION].queues[self.urls[worker].rsplit("/", 1)[1]]
        return [
            (
                WorkMessage.model_validate_json(m.body),
                max(0, round((m.delayed_until - (m.sent_timestamp or 0)) / 1000)),
            )
            for m in queue._messages
        ]


@pytest.fixture(params=["fake", "sqs"])
def queues(request: pytest.FixtureRequest) -> Queues:
    if request.param == "sqs":
        install()  # the sandbox's SQS: moto where it answers as SQS, the sandbox's answers where it does not
        request.getfixturevalue("moto")
    return Queues(request.param)


def test_a_message_reaches_its_workers_queue_as_sent(queues: Queues) -> None:
    queues.queues.send(Worker.DRAIN, MESSAGE)
    queues.queues.send(Worker.WAKE, MESSAGE.model_copy(update={"wake": True, "token": "token"}))

    assert queues.held(Worker.DRAIN) == [MESSAGE]
    assert queues.held(Worker.WAKE) == [MESSAGE.model_copy(update={"wake": True, "token": "token"})]
    assert queues.held(Worker.EIP) == []


@pytest.mark.parametrize("delay", [0, 1, 900])
def test_a_delay_from_0_to_900_seconds_is_taken(queues: Queues, delay: int) -> None:
    queues.queues.send(Worker.EIP, MESSAGE, delay_seconds=delay)
    assert queues.delayed(Worker.EIP) == [(MESSAGE, delay)]


@pytest.mark.parametrize("delay", [901, 3600, 1.5, -1])
def test_a_delay_out_of_0_to_900_seconds_or_not_whole_is_refused(queues: Queues, delay: int) -> None:
    # (a negative delay: SQS refuses it, InvalidParameterValue, where moto sent the message at once; the sandbox's
    # SQS answers as SQS, nodecycle_sandbox/aws/sqs_attributes.py)
    with pytest.raises(Exception) as refused:
        queues.queues.send(Worker.EIP, MESSAGE, delay_seconds=delay)
    assert not isinstance(refused.value, TransientError)
    assert "DelaySeconds" in str(refused.value)
    assert queues.held(Worker.EIP) == []


def body_of(size: int) -> WorkMessage:
    """A message whose body is ``size`` bytes (its record id made to measure)."""
    empty = len(MESSAGE.model_copy(update={"record_id": ""}).model_dump_json(exclude_defaults=True))
    message = MESSAGE.model_copy(update={"record_id": "r" * (size - empty)})
    assert len(message.model_dump_json(exclude_defaults=True).encode()) == size
    return message


def test_a_body_of_the_queues_maximum_size_is_taken_and_one_byte_more_is_refused(queues: Queues) -> None:
    queues.queues.send(Worker.DRAIN, body_of(SQS_MAX_MESSAGE))
    with pytest.raises(Exception) as refused:
        queues.queues.send(Worker.DRAIN, body_of(SQS_MAX_MESSAGE + 1))
    assert not isinstance(refused.value, TransientError)
    (held,) = queues.held(Worker.DRAIN)
    assert len(held.record_id) == len(body_of(SQS_MAX_MESSAGE).record_id)


def test_the_body_is_the_messages_json_without_its_defaults(queues: Queues) -> None:
    # (the consumer parses the body: what it reads is what was sent, nothing the fake keeps besides)
    queues.queues.send(Worker.DRAIN, WorkMessage(record_id="r", seq=0, step=Step.CORDON))
    (message,) = queues.held(Worker.DRAIN)
    assert json.loads(message.model_dump_json(exclude_defaults=True)) == {
        "record_id": "r",
        "seq": 0,
        "step": "cordon",
    }
    assert message == WorkMessage(record_id="r", seq=0, step=Step.CORDON)
