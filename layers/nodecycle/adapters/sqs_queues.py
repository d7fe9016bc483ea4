"""The work queues on SQS: one queue per worker function."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodecycle.adapters.aws import client, transient_errors
from nodecycle.domain.flow import Worker
from nodecycle.domain.ports import WorkMessage


class SqsWorkQueues:
    def __init__(self, urls: Mapping[Worker, str], sqs: Any = None) -> None:
        self._urls = dict(urls)
        self._client = sqs

    @property
    def _sqs(self) -> Any:
        if self._client is None:
            self._client = client("sqs")
        return self._client

    def send(self, worker: Worker, message: WorkMessage, delay_seconds: int = 0) -> None:
        with transient_errors(f"sending work to the {worker} queue"):
            self._sqs.send_message(
                QueueUrl=self._urls[worker],
                MessageBody=message.model_dump_json(exclude_defaults=True),
                DelaySeconds=delay_seconds,
            )
