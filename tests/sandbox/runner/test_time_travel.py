"""An invocation made later than now (``time-travel``), beside a container whose clock is off (``clock-skew``).

The fault campaign checks what the sweeper frees once its grace has passed by running one sweep with the clock
moved past the grace. Lambda's runtime reckons an invocation's remaining time on the container's wall clock
(its deadline less the time now), so a clock moved ahead by more than the function's timeout reads no time
left, and a sweep that judges by its remaining time starts nothing: such a check proves nothing. An invocation
made that much later has its deadline that much later too: all of its time."""

from __future__ import annotations

import functools
import time

from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.runner import Runner

from .conftest import MakeRunner
from .test_faults import TEMPLATE

HANDLER = """
import time

def handler(event, context):
    return {"time": time.time(), "left": context.get_remaining_time_in_millis() / 1000}
"""


def _handled(runner: Runner, body: str) -> bool:
    return any(i.ok and i.event["Records"][0]["body"] == body for i in runner.journal.invocations())


def _answer(runner: Runner, body: str, fault: Fault) -> dict[str, float]:
    runner.faults.arm([fault], seed=1)
    runner.sqs.send_message(QueueUrl=runner.queue("Work").url, MessageBody=body)
    runner.journal.wait_until(functools.partial(_handled, runner, body), timeout=15)
    runner.faults.disarm()
    (found,) = [i.response for i in runner.journal.invocations() if i.event["Records"][0]["body"] == body]
    assert isinstance(found, dict)
    return found


def test_an_invocation_made_later_has_all_its_time_where_a_clock_set_ahead_has_none(
    make_runner: MakeRunner,
) -> None:
    # Given a function of 10 s, whose invocations are moved an hour ahead, one as a clock set ahead, one as an
    # invocation made an hour later
    runner = make_runner(TEMPLATE, {"worker": HANDLER}, mode="process")

    # When each is invoked
    skewed = _answer(runner, "skewed", Fault("s", "clock-skew", target="Worker", limit=1, value=3600))
    later = _answer(runner, "later", Fault("t", "time-travel", target="Worker", limit=1, value=3600))

    # Then both see the time an hour ahead; the skewed one reads no time left (as Lambda's runtime would), the
    # one made later reads its timeout's
    now = time.time()
    assert 3500 < skewed["time"] - now < 3700
    assert 3500 < later["time"] - now < 3700
    assert skewed["left"] == 0
    assert 5 < later["left"] <= 10
