"""The work queues on SQS: one queue per worker function."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from nodecycle.adapters.aws.clients import LazyClient, transient_errors
from nodecycle.domain.flow import Worker
from nodecycle.domain.ports.lifecycle import WorkMessage

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient


class SqsWorkQueues:
    def __init__(self, urls: Mapping[Worker, str], sqs: SQSClient | None = None) -> None:
        self._urls = dict(urls)
        self._sqs: LazyClient[SQSClient] = LazyClient("sqs", sqs)

    def send(self, worker: Worker, message: WorkMessage, delay_seconds: int = 0) -> None:
        with transient_errors(f"sending work to the {worker} queue"):
            self._sqs().send_message(
                QueueUrl=self._urls[worker],
                MessageBody=message.model_dump_json(exclude_defaults=True),
                DelaySeconds=delay_seconds,
            )


class SqsIntakeQueue:
    """The intake queue, as intake itself sends to it: an event EventBridge delivered, to be taken in again."""

    def __init__(self, url: str, sqs: SQSClient | None = None) -> None:
        self._url = url
        self._sqs: LazyClient[SQSClient] = LazyClient("sqs", sqs)

    def send(self, body: str, delay_seconds: int) -> None:
        with transient_errors("handing an event to the intake queue"):
            self._sqs().send_message(QueueUrl=self._url, MessageBody=body, DelaySeconds=delay_seconds)


class SqsRedeliveries:
    """A queue whose records its function retries sooner than the queue's visibility timeout brings them back
    (``nodecycle.entrypoints.Redeliveries``): a record's visibility shortened by its receipt handle."""

    def __init__(self, url: str, visibility_timeout: int, sqs: SQSClient | None = None) -> None:
        self._url = url
        self._visibility_timeout = visibility_timeout
        self._sqs: LazyClient[SQSClient] = LazyClient("sqs", sqs)

    @property
    def visibility_timeout(self) -> int:
        return self._visibility_timeout

    def redeliver_in(self, receipt_handle: str, seconds: int) -> None:
        with transient_errors("bringing a record retried back to the queue sooner"):
            self._sqs().change_message_visibility(
                QueueUrl=self._url, ReceiptHandle=receipt_handle, VisibilityTimeout=seconds
            )
