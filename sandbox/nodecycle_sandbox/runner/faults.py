"""Faults of Lambda's side of the sandbox: the SQS event source's deliveries and the containers themselves.

In the runner (:class:`RunnerFaults`, asked by ``sqs_source.py`` and ``invokers.py``):

- ``sqs-duplicate``: a batch is delivered a second time (SQS delivers at least once): after it was handled,
  or, with ``value`` 1, at the same time by another poller, as when a receive's visibility timeout ran out
  or two of SQS's hosts both answered it (two invocations of one message running at once). The second
  delivery is a receive of its own, made when the first is received: a new receipt handle and one more
  receive counted, so the first delivery's delete (by the older handle) deletes nothing, and a failure of
  the second brings the message back after its visibility timeout;
- ``sqs-delay``: a received message comes ``value`` seconds late;
- ``sqs-reorder``: a batch's records come in another order, or a lone message is held back a second so
  that the next one overtakes it;

  A message that comes late is sent again with that delay and the received copy deleted, not made invisible:
  a late delivery must not count as a receive, or the queue's ``maxReceiveCount`` would dead-letter a message
  that was only slow (moto counts receives as SQS does). The late copy has a new message id; nodecycle keys
  nothing on message ids, and SQS's own redeliveries are what ``sqs-duplicate`` is for.
- ``sqs-drop``: a received message is deleted unseen (lost: only a watch or the sweeper can repair it);
- ``event-duplicate``: an asynchronous invocation (an EventBridge rule's event, a schedule's) runs twice, as
  Lambda's asynchronous invocation and EventBridge's delivery are at least once: after the first, or, with
  ``value`` 1, at the same time;
- ``event-delay``: an asynchronous invocation runs ``value`` seconds late, as a delivery EventBridge retried
  after a failure (minutes, on AWS): the events that come after it overtake it;
- ``worker-kill``: the invocation's container dies right after its ``value``-th API call (AWS or
  Kubernetes: every HTTP request the handler makes counts), before it can answer;
- ``clock-skew``: the invocation runs with its container's wall clock ``value`` seconds off (``datetime.now``,
  ``time.time``; the monotonic clock is untouched), a stand-in for a Lambda container whose clock moved. Its
  remaining time is reckoned on that clock, as Lambda's runtime does (the deadline less the time now): a clock
  set ahead by more than the timeout reads none left.
- ``time-travel``: the invocation is made ``value`` seconds later than now: its wall clock as ``clock-skew``
  moves it, and its deadline with it (all of its time left). Never drawn by the campaign's plans: what its
  checks use to run one sweep once a grace has passed.

In the worker process (:class:`WorkerFaults`): the directives of each invocation are applied around it.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple

from nodecycle_sandbox.faults import Injector
from nodecycle_sandbox.sqs_receive_again import (
    RECEIPT_HANDLE_HEADER,
    RECEIVE_AGAIN_HEADER,
    RECEIVE_COUNT_HEADER,
)

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import MessageTypeDef

_log = logging.getLogger(__name__)
INSTANCE_ID = re.compile(r"\bi-[0-9a-f]{8,17}\b")
KILLED_EXIT_STATUS = 137  # what a container killed by SIGKILL reports
# A container whose environment sets this (a number) sleeps that fraction of botocore's backoff between retries
BACKOFF_SCALE_VARIABLE = "SANDBOX_AWS_BACKOFF_SCALE"


class EventFate(NamedTuple):
    delay: float = 0.0  # seconds before its (first) run starts
    again: bool = False  # it runs twice
    alongside: bool = False  # the second run at the same time as the first, not after it


class RunnerFaults(Injector):
    def __init__(self) -> None:
        super().__init__("runner")

    def on_receive(
        self,
        queue: str,
        client: SQSClient,
        queue_url: str,
        messages: list[MessageTypeDef],
        log: logging.Logger | None = None,
    ) -> list[MessageTypeDef]:
        """The messages of a received batch to deliver now; the others are dropped or sent again late.
        ``log``: where each message's fate is written (the runner's delivery log)."""
        if not self.armed:
            return messages
        log = log or _log
        kept: list[MessageTypeDef] = []
        for message in messages:
            # The firing names the instances the message is about (its record id holds the instance id), so
            # that a judge can tell which lifecycle a late or lost delivery held up.
            about = _about(message)
            fault = self.draw(
                ("sqs-drop", "sqs-delay"), queue, f"{queue} {message['MessageId']} {about}".strip()
            )
            if fault is None:
                kept.append(message)
            elif fault.kind == "sqs-drop":
                client.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
                log.info("%s dropped %s", queue, message["MessageId"])
            else:
                self._send_late(queue, client, queue_url, message, max(1, round(fault.value)), log)
        # (a lone message is held back a second instead: its firing names what it is about, as a late one's does)
        lone = f" {_about(kept[0])}" if len(kept) == 1 else ""
        batch = f"{queue} batch of {len(kept)}{lone}".strip()
        if not kept or self.draw(("sqs-reorder",), queue, batch) is None:
            return kept
        if len(kept) > 1:
            self.shuffle(kept)
            log.info("%s reordered %s", queue, " ".join(m["MessageId"] for m in kept))
            return kept
        self._send_late(queue, client, queue_url, kept[0], 1, log)
        return []

    def duplicates(
        self, queue: str, client: SQSClient, queue_url: str, messages: list[MessageTypeDef]
    ) -> tuple[list[MessageTypeDef], bool]:
        """The messages of a received batch to deliver once more, and whether at the same time as the first
        delivery (rather than after it). Each is received again now, as SQS's duplicate is a receive of its own:
        a new receipt handle (the first delivery's then deletes nothing) and one more receive counted."""
        if not self.armed or not messages:
            return [], False
        fault = self.draw(("sqs-duplicate",), queue, f"{queue} batch of {len(messages)}")
        if fault is None:
            return [], False
        again = [
            twin for twin in (_received_again(client, queue_url, m) for m in messages) if twin is not None
        ]
        return again, bool(again) and fault.value == 1

    def on_event(self, function: str, detail: str) -> EventFate:
        """What becomes of an asynchronous invocation of ``function``: how late its run starts, and whether it
        runs once more (after the first, or at the same time)."""
        if not self.armed:
            return EventFate()
        late = self.draw(("event-delay",), function, f"{function} {detail}".strip())
        again = self.draw(("event-duplicate",), function, f"{function} {detail}".strip())
        return EventFate(
            delay=max(1.0, late.value) if late is not None else 0.0,
            again=again is not None,
            alongside=again is not None and again.value == 1,
        )

    def directives(self, function: str) -> dict[str, float]:
        """What the next invocation of ``function`` runs with: ``kill_after`` calls, ``clock_skew`` seconds,
        ``time_travel`` seconds (its deadline's move; its clock's is in ``clock_skew``)."""
        if not self.armed:
            return {}
        found: dict[str, float] = {}
        kill = self.draw(("worker-kill",), function)
        if kill is not None:
            found["kill_after"] = max(1, round(kill.value))
        skew = self.draw(("clock-skew",), function)
        if skew is not None:
            found["clock_skew"] = skew.value
        later = self.draw(("time-travel",), function)
        if later is not None:
            found["clock_skew"] = found.get("clock_skew", 0.0) + later.value
            found["time_travel"] = later.value  # (the invoker moves the deadline too)
        return found

    @staticmethod
    def _send_late(
        queue: str,
        client: SQSClient,
        queue_url: str,
        message: MessageTypeDef,
        seconds: int,
        log: logging.Logger,
    ) -> None:
        # Sent before the received copy is deleted: a failure between the two duplicates, never loses.
        attributes = {
            name: {k: v for k, v in value.items() if k in ("DataType", "StringValue", "BinaryValue")}
            for name, value in (message.get("MessageAttributes") or {}).items()
        }
        again = client.send_message(
            QueueUrl=queue_url,
            MessageBody=message["Body"],
            DelaySeconds=min(seconds, 900),
            **({"MessageAttributes": attributes} if attributes else {}),  # type: ignore[arg-type]
        )
        client.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
        log.info("%s late %s by %ds as %s", queue, message["MessageId"], seconds, again["MessageId"])


def record_of(message: MessageTypeDef) -> str:
    """What ``message`` is for, for the deliveries log: the lifecycle record its body names (a work message's
    ``record``), or else the instances it is about (a hook notification's, an event's); "" when it names none."""
    try:
        body = json.loads(message.get("Body", ""))
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("record"), str):
        return str(body["record"])
    return _about(message)


def _about(message: MessageTypeDef) -> str:
    """The instances ``message`` is about (a lifecycle record id holds its instance id), for a firing's detail."""
    return " ".join(dict.fromkeys(INSTANCE_ID.findall(message.get("Body", ""))))


def _received_again(client: SQSClient, queue_url: str, message: MessageTypeDef) -> MessageTypeDef | None:
    """``message`` as a second receive of it gets it (see ``aws/sqs_receipts.py``), or None if it is gone."""

    def ask_again(request: Any, **_: Any) -> None:
        request.headers[RECEIVE_AGAIN_HEADER] = "1"

    # (the fault client's only ChangeMessageVisibility, but registered for this call alone all the same)
    event = "before-sign.sqs.ChangeMessageVisibility"
    client.meta.events.register(event, ask_again)
    try:
        answer = client.change_message_visibility(
            QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
        )
    except client.exceptions.ReceiptHandleIsInvalid:
        return None
    finally:
        client.meta.events.unregister(event, ask_again)
    headers = answer["ResponseMetadata"]["HTTPHeaders"]
    attributes = {
        **(message.get("Attributes") or {}),
        "ApproximateReceiveCount": headers[RECEIVE_COUNT_HEADER],
    }
    return {**message, "ReceiptHandle": headers[RECEIPT_HANDLE_HEADER], "Attributes": attributes}


class WorkerFaults:
    """The container's side: counts the handler's HTTP requests (every AWS and Kubernetes call goes through
    urllib3's connection pools) and dies after the chosen one; moves the wall clock for an invocation."""

    def __init__(self) -> None:
        self._calls = 0
        self._kill_after = 0

    def install(self) -> None:
        from urllib3.connectionpool import HTTPConnectionPool

        original = HTTPConnectionPool.urlopen
        hooks = self

        def urlopen(pool: Any, *args: Any, **kwargs: Any) -> Any:
            response = original(pool, *args, **kwargs)
            hooks._after_call()
            return response

        HTTPConnectionPool.urlopen = urlopen  # type: ignore[method-assign,assignment]
        self._compress_backoff(float(os.environ.get(BACKOFF_SCALE_VARIABLE) or 1.0))

    @staticmethod
    def _compress_backoff(scale: float) -> None:
        """botocore's sleeps between retries (standard mode: up to 1 + 2 + 4 + 8 s for a call throttled five
        times), times ``scale``, for a sandbox whose time is compressed: the attempts, their answers and what the
        handler makes of them stay the same; only the waits between them shrink."""
        if scale == 1.0:
            return
        from botocore.retries.standard import ExponentialBackoff

        original = ExponentialBackoff.delay_amount

        def delay_amount(backoff: Any, context: Any) -> float:
            return float(original(backoff, context)) * scale

        ExponentialBackoff.delay_amount = delay_amount  # type: ignore[method-assign,assignment]

    def _after_call(self) -> None:
        self._calls += 1
        if self._kill_after and self._calls >= self._kill_after:
            os._exit(KILLED_EXIT_STATUS)  # no cleanup, no reply: a container that died

    @contextmanager
    def applied(self, directives: dict[str, float]) -> Iterator[None]:
        self._calls = 0
        self._kill_after = int(directives.get("kill_after", 0))
        skew = float(directives.get("clock_skew", 0.0))
        traveller = None
        if skew:
            import time

            import time_machine  # only in a container whose clock is moved: no cost to the others

            traveller = time_machine.travel(time.time() + skew, tick=True)
            traveller.start()
        try:
            yield
        finally:
            self._kill_after = 0
            if traveller is not None:
                traveller.stop()
