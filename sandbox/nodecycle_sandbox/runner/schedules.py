"""Schedules (`Schedule`/`ScheduleV2` events): fired every interval, or faster in the sandbox, or on demand.

A rate schedule fires within the minute of its tick, not on its second: "the minimum precision for a schedule is one
minute. Your scheduled rule runs within that minute, but not on the precise 0th second" (Amazon EventBridge User
Guide, scheduled rules; EventBridge Scheduler: "60 second precision ... between 1:00:00 and 1:00:59"). Each tick here
fires as late within its minute as a seeded draw says (the same run after run), its event's `time` the moment it
fired; under a faster sandbox interval, within the same share of it (a 5-minute schedule run every 2 s: up to 0.4 s).
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from nodecycle_sandbox.runner.functions import FunctionSpec

# How late in its minute a tick may fire (seconds)
SCHEDULE_PRECISION = 60.0


def scheduled_event(*, rule_arn: str, account: str, region: str, at: float, detail: Any) -> dict[str, Any]:
    """The event a schedule rule sends when the template gives no `Input`."""
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": account,
        "time": datetime.fromtimestamp(at, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": [rule_arn],
        "detail": detail,
    }


class Schedules:
    """Fires each enabled schedule every interval (or a faster sandbox interval), and on demand."""

    def __init__(
        self,
        *,
        functions: list[FunctionSpec],
        submit: Callable[[FunctionSpec, Any, str], None],
        stack_name: str,
        account: str,
        region: str,
        interval_override: float | None,
        enabled: Callable[[str, str], bool] = lambda function, event: True,
    ) -> None:
        self._functions = functions
        self._submit = submit
        self._stack = stack_name
        self._account = account
        self._region = region
        self._interval_override = interval_override
        self._enabled = enabled  # (function, event) -> whether its rule delivers to the function now
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for spec in self._functions:
            for trigger in spec.schedules:
                interval = self._interval_override or trigger.interval
                if not trigger.enabled or interval is None:
                    continue
                # (its share of an interval that AWS's minute is; the whole of one shorter than a minute)
                precision = min(1.0, SCHEDULE_PRECISION / (trigger.interval or interval)) * interval
                thread = threading.Thread(
                    target=self._tick,
                    args=(spec, trigger.name, interval, precision),
                    name=f"schedule-{spec.logical_id}",
                    daemon=True,
                )
                thread.start()
                self._threads.append(thread)

    def fire(self, spec: FunctionSpec, name: str | None = None) -> str | None:
        """Fire ``spec``'s schedule now; the id of the event sent (None: a target's ``Input``, which has none), by which
        its invocation is told from the others' in the journal (a sweeper's ticks queue behind its concurrency of one,
        and an older one may end first)."""
        trigger = next(t for t in spec.schedules if name is None or t.name == name)
        if trigger.input:
            event: Any = json.loads(trigger.input)  # a target's Input replaces the event
        else:
            rule = f"{self._stack}-{spec.logical_id}{trigger.name}"
            event = scheduled_event(
                rule_arn=f"arn:aws:events:{self._region}:{self._account}:rule/{rule}",
                account=self._account,
                region=self._region,
                at=time.time(),
                detail={},
            )
        self._submit(spec, event, f"schedule:{trigger.name}")
        fired = event.get("id") if isinstance(event, dict) else None
        return fired if isinstance(fired, str) else None

    def _tick(self, spec: FunctionSpec, name: str, interval: float, precision: float) -> None:
        """Fire every ``interval`` from now, each tick up to ``precision`` late (its own draw: the next tick is not
        moved by it)."""
        draws = random.Random(f"{self._stack}/{spec.logical_id}/{name}")
        start, ticks = time.monotonic(), 0
        while True:
            ticks += 1
            fires_at = start + ticks * interval + draws.uniform(0.0, precision)
            if self._stopping.wait(max(0.0, fires_at - time.monotonic())):
                return
            if self._enabled(spec.logical_id, name):  # a disabled rule does not fire; `fire` still does
                self.fire(spec, name)

    def stop(self) -> None:
        self._stopping.set()
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads = []
