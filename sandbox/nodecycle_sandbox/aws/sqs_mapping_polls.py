"""An event source mapping's long polls, as the sandbox's SQS serves them: gated by the mapping's state in Lambda.

Lambda's pollers long-poll their queue with the longest wait SQS allows (20 s): an idle mapping costs a few
receives a minute. The runner's pollers do the same (``runner/sqs_source.py``), and each long poll says whose
it is (``mapping_polls.py``'s headers: the mapping's UUID, the token of its set of pollers). Such a long poll:

- receives nothing while its mapping is disabled or deleted in Lambda. An operator's
  ``update-event-source-mapping --no-enabled`` is taken at its next look (a quarter of a second at most,
  ``sqs_timing.py``) by the polls under way, and a poll started while the mapping is disabled waits out its time
  empty; enabled again, the polls under way receive from their next look on. Lambda takes seconds for either: the
  sandbox is never slower to stop a mapping's deliveries, and the runner need not ask Lambda for the mapping's
  state before each poll (a second request per poll, or a state a second old: a 20 s poll would receive for up
  to 20 s after a disable);
- ends at once, empty, when its runner ends its set's polls (a ReceiveMessage carrying ``END_POLLS_HEADER``:
  the runner stops a function's sources, or stops while the AWS side stays), rather than holding the stop for
  up to 20 s. A poll ended so receives nothing more, whatever it is waiting on.

A poll of a mapping that a reset of moto (the runner tests' server, between tests) took away receives nothing
too: the next test's queue of the same name is not its to take from. Other receives (an operator's, a
function's) are SQS's as before.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import wraps
from typing import Any

from moto.awslambda.models import LambdaBackend, lambda_backends
from moto.sqs.models import SQSBackend
from moto.sqs.responses import SQSResponse

from nodecycle_sandbox.aws.sqs_timing import BACKEND_LOCK
from nodecycle_sandbox.mapping_polls import END_POLLS_HEADER, MAPPING_HEADER, POLLER_HEADER

_MARKER = "_nodecycle_sandbox_mapping_polls"
# How often a poll of a disabled mapping looks whether it is enabled again (an enable is taken within it)
_DISABLED_LOOK_SECONDS = 0.25

# The poll a request thread serves (its poller's token and mapping UUID): the response method reads the headers,
# the backend's receive (which sees only the queue and the counts) serves it.
_serving = threading.local()
_ended: set[str] = set()  # the tokens of ended sets of pollers (a few per runner: never pruned)


def install() -> None:
    """Idempotent. After ``sqs_timing.install``: each look of a gated poll is its locked receive."""
    if getattr(SQSBackend, _MARKER, False):
        return
    response: Any = SQSResponse
    response.receive_message = _reading_the_poller(SQSResponse.receive_message)
    backend: Any = SQSBackend
    backend.receive_message = _gated(SQSBackend.receive_message)
    # A mapping's state changes between two looks of its polls, never during one (each look takes the lock): a
    # message sent once a disable has answered is never received by the mapping's polls.
    mappings: Any = LambdaBackend
    for name in ("update_event_source_mapping", "delete_event_source_mapping"):
        setattr(mappings, name, _locked(getattr(LambdaBackend, name)))
    setattr(SQSBackend, _MARKER, True)


def _reading_the_poller(receive: Callable[[SQSResponse], Any]) -> Callable[[SQSResponse], Any]:
    @wraps(receive)
    def receive_message(self: SQSResponse) -> Any:
        poller = self.headers.get(POLLER_HEADER)
        if poller and self.headers.get(END_POLLS_HEADER):
            with BACKEND_LOCK:  # (as a disable: between two looks of the polls it ends)
                _ended.add(poller)
        _serving.poll = (poller, self.headers.get(MAPPING_HEADER)) if poller else None
        try:
            return receive(self)
        finally:
            _serving.poll = None

    return receive_message


def _mapping_enabled(sqs: SQSBackend, uuid: str | None) -> bool:
    """Whether the mapping ``uuid`` is enabled in the Lambda of the queue's account and region now (None: a poller
    that names no mapping, not gated)."""
    if uuid is None:
        return True
    mapping = lambda_backends[sqs.account_id][sqs.region_name].get_event_source_mapping(uuid)
    return mapping is not None and bool(mapping.enabled)


def _locked(change: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(change)
    def locked(*args: Any, **kwargs: Any) -> Any:
        with BACKEND_LOCK:
            return change(*args, **kwargs)

    return locked


def _gated(receive: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(receive)
    def receive_message(
        self: SQSBackend, queue_name: str, count: int, wait_seconds_timeout: int, *args: Any, **kwargs: Any
    ) -> Any:
        poll = getattr(_serving, "poll", None)
        if poll is None:
            return receive(self, queue_name, count, wait_seconds_timeout, *args, **kwargs)
        poller, mapping = poll
        deadline = time.monotonic() + wait_seconds_timeout
        queue: Any = self.get_queue(queue_name)
        while True:
            with BACKEND_LOCK:  # one look (the locked receive takes it again: it is reentrant)
                if poller in _ended:
                    return []
                enabled = _mapping_enabled(self, mapping)
                received = receive(self, queue_name, count, 0, *args, **kwargs) if enabled else []
            left = deadline - time.monotonic()
            if received or left <= 0:
                return received
            if enabled:
                queue.wait_for_messages(left)  # (until a message shows, a quarter of a second at most)
            else:
                with queue._messages_lock:
                    queue._messages_lock.wait(min(left, _DISABLED_LOOK_SECONDS))

    return receive_message
