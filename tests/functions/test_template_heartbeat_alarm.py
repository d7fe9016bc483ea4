"""The alarm on refused heartbeats fires on the metric as the product emits it: the engine's and the sweeper's
refused heartbeats, counted through the functions' Metrics adapter (CloudWatch EMF), match the alarm's metric by
its name and its whole set of dimensions, and page before the action's heartbeat timeout; throttled ones do not.
The alarm on throttled heartbeats, likewise, on the engine's throttled heartbeats: it pages a throttle that outlasts
the engine's retry a margin before the heartbeat timeout, and not one that its retry got through."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Mapping
from contextlib import redirect_stdout
from datetime import datetime, timedelta
from typing import Any

import pytest

from nodecycle.domain.engine import EngineTiming, Outcome, StepEngine
from nodecycle.domain.errors import AccessRefused, TransientError
from nodecycle.domain.flow import Worker
from nodecycle.domain.model import ActionRef, Step, global_deadline
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.sweep.sweeper import SweepFailed
from nodecycle.observability import PowertoolsMetrics, metrics
from nodecycle.settings import Timing
from tests.functions.test_operations_template import RESOURCES, _default, alarm_fires, intrinsics
from tests.support.fakes import T0, FakeClock, FakeMetrics
from tests.unit.foundation.test_engine import ONE_FAULT, PLAN, ThrottledAutoscaling, World, make_record
from tests.unit.foundation.test_engine_refusals import HeartbeatsRefused
from tests.unit.sweeper.test_orphans import World as Orphans
from tests.unit.sweeper.test_sweeper import GRACE, Repair

OWNER = "stack-a"


class Emitted(FakeMetrics):
    """The functions' Metrics adapter (PowertoolsMetrics), each metric's EMF document read back as CloudWatch
    would take it in: name, dimensions (name -> value), value, and the clock's time (seconds after T0)."""

    def __init__(self, clock: FakeClock | Callable[[], datetime]) -> None:
        super().__init__()
        self._now = clock.now if isinstance(clock, FakeClock) else clock
        self._product = PowertoolsMetrics(OWNER)
        self.datapoints: list[tuple[str, dict[str, str], float, int]] = []

    def count(self, name: str, value: float = 1, **dimensions: str) -> None:
        super().count(name, value, **dimensions)
        printed = io.StringIO()
        with redirect_stdout(printed):
            self._product.count(name, value, **dimensions)
            if not dimensions:  # (it waits in the shared document; one with dimensions is printed at once)
                metrics.flush_metrics()
        at = int((self._now() - T0).total_seconds())
        for line in printed.getvalue().splitlines():
            document = json.loads(line)
            for directive in document["_aws"]["CloudWatchMetrics"]:
                for dimension_set in directive["Dimensions"]:
                    for metric in directive["Metrics"]:
                        named = {d: str(document[d]) for d in dimension_set}
                        values = document[metric["Name"]]
                        total = sum(values) if isinstance(values, list) else values
                        self.datapoints.append((metric["Name"], named, float(total), at))


def watched_by(alarm: Mapping[str, Any], emitted: Emitted) -> dict[int, float]:
    """The datapoints of the alarm's metric: CloudWatch matches it by name and every dimension, no more, no less."""
    wanted = {d["Name"]: d["Value"] for d in alarm["Dimensions"]}
    points: dict[int, float] = {}
    for name, dimensions, value, at in emitted.datapoints:
        if name == alarm["MetricName"] and dimensions == wanted:
            points[at] = points.get(at, 0.0) + value
    return points


def refused_alarm() -> Mapping[str, Any]:
    # (the stack's owner id is its name unless OwnerId says otherwise: both resolve to the metrics' owner)
    return intrinsics({"OwnerId": OWNER}).resolve(RESOURCES["HeartbeatsRefusedAlarm"]["Properties"])


class HeartbeatsThrottled(HeartbeatsRefused):
    def heartbeat(self, action: ActionRef) -> bool:
        self.asked += 1
        raise TransientError("recording a lifecycle heartbeat: Throttling: Rate exceeded")


@pytest.mark.parametrize("refused", [True, False])
def test_the_engines_refused_heartbeats_fire_the_alarm_before_the_heartbeat_timeout(refused: bool) -> None:
    # Given a drain polling every 5 s (its heartbeats due from 90 s after the last one), while Auto Scaling
    # refuses (or throttles) every heartbeat to the role, counted through the functions' Metrics adapter
    world = World(redelivery=ONE_FAULT)
    world.autoscaling = HeartbeatsRefused() if refused else HeartbeatsThrottled()
    world.metrics = emitted = Emitted(world.clock)
    record = make_record(PLAN, Step.EVICT)
    world.records.create(record)
    engine = world.engine({Step.EVICT: lambda record, now: Outcome.wait(5)})

    # When it polls until the action's heartbeat timeout
    deadline = int((record.heartbeat_deadline - T0).total_seconds())
    while world.clock.now() < record.heartbeat_deadline:
        engine.handle(world.message())
        (sent,) = world.queues.take()
        world.clock.advance(max(sent.delay, 1))

    # Then the refused heartbeats, as emitted, are the alarm's metric, and it fires within two minutes of the
    # first and before the heartbeat timeout; throttled ones (no reason) are not, and do not fire it
    alarm = refused_alarm()
    points = watched_by(alarm, emitted)
    fired = alarm_fires(alarm, points, deadline + 600)
    assert world.autoscaling.asked >= 1
    if not refused:
        assert not points
        assert not fired
        return
    first = min(points)
    assert sum(points.values()) == world.autoscaling.asked
    assert fired, "the refused heartbeats never fire the alarm"
    assert fired[0] - first <= 120
    assert fired[0] < deadline, "the alarm fires only after Auto Scaling took the hook's default result"


def test_the_sweepers_refused_heartbeat_fires_the_alarm() -> None:
    # Given a stalled lifecycle (its message lost) whose heartbeat deadline comes before the next sweep, while
    # Auto Scaling refuses the sweeper's heartbeats, counted through the functions' Metrics adapter
    repair = Repair()
    repair.metrics = emitted = Emitted(repair.clock)
    record = make_record(PLAN, Step.EVICT, node="n1")
    repair.records.create(record)
    repair.clock.current = T0 + GRACE + timedelta(seconds=30)

    def refused(action: ActionRef) -> bool:
        raise AccessRefused("recording a lifecycle heartbeat", "AccessDenied", "explicit deny")

    repair.autoscaling.heartbeat = refused  # type: ignore[method-assign]

    # When the sweeper runs (and fails)
    with pytest.raises(SweepFailed):
        repair.run()

    # Then its refused heartbeat is the alarm's metric, and fires it within two minutes, before the deadline
    alarm = refused_alarm()
    points = watched_by(alarm, emitted)
    assert sum(points.values()) == 1
    deadline = int((record.heartbeat_deadline - T0).total_seconds())
    fired = alarm_fires(alarm, points, deadline + 600)
    assert fired
    assert fired[0] - min(points) <= 120
    assert fired[0] < deadline


def test_the_sweepers_refused_heartbeat_of_an_orphaned_action_fires_the_alarm() -> None:
    # Given an action of this stack's hook that intake never recorded (its events dead-lettered), while Auto
    # Scaling refuses every heartbeat to the roles (an SCP): only the sweeper's keep-alive heartbeats it
    clock = FakeClock()
    world = Orphans(clock=clock, metrics=Emitted(clock))
    world.terminating()

    def refused(action: ActionRef) -> bool:
        raise AccessRefused("recording a lifecycle heartbeat", "AccessDenied", "explicit deny in an SCP")

    world.autoscaling.heartbeat = refused  # type: ignore[method-assign]

    # When the sweeper runs (and fails)
    with pytest.raises(SweepFailed):
        world.sweep()

    # Then its refused heartbeat is the alarm's metric, as the lifecycles' refused heartbeats are
    assert isinstance(world.metrics, Emitted)
    assert sum(watched_by(refused_alarm(), world.metrics).values()) == 1


# The throttled heartbeats' alarm, on the template's defaults: the engine's margin and its one fault's retry (the
# later of the work queues' visibility timeout and the resume grace + 2), and the hooks those keep alive: the
# shortest (a sweep interval and a margin), one of ten minutes, and Auto Scaling's default of an hour.
DEFAULTS = Timing(
    heartbeat_margin_seconds=_default("HeartbeatMarginSeconds"),
    resume_grace_seconds=_default("ResumeGraceSeconds"),
    work_visibility_timeout_seconds=_default("WorkVisibilityTimeoutSeconds"),
    sweep_interval_minutes=_default("SweepIntervalMinutes"),
)
HOOKS = [DEFAULTS.min_heartbeat_timeout_seconds, 600, 3600]


# The series every throttled heartbeat is counted in (the dashboard's "HeartbeatRetries throttled")
THROTTLED = {
    "MetricName": "HeartbeatRetries",
    "Dimensions": [{"Name": "owner", "Value": OWNER}, {"Name": "service", "Value": "nodecycle"}],
}


def throttled_alarm() -> Mapping[str, Any]:
    return intrinsics({"OwnerId": OWNER}).resolve(RESOURCES["HeartbeatsThrottledAlarm"]["Properties"])


def drain_throttled(heartbeat_timeout: int, throttled: int, *, offset: int = 0) -> tuple[Emitted, int, int]:
    """A drain polling every 5 s on the template's timing, its action's heartbeats throttled ``throttled`` times
    in a row (then accepted), run until its first heartbeat deadline; the metrics as emitted, that deadline and
    the heartbeats Auto Scaling took (seconds after T0; ``offset``: the action's start in its minute)."""
    world = World(redelivery=DEFAULTS.redelivery_seconds)
    world.autoscaling = autoscaling = ThrottledAutoscaling(throttled)
    world.clock.advance(offset)
    world.metrics = emitted = Emitted(world.clock)
    start = world.clock.now()
    record = make_record(
        PLAN,
        Step.EVICT,
        received_at=start,
        started_at=start,
        updated_at=start,
        due_at=start,
        heartbeat_timeout=heartbeat_timeout,
        heartbeat_deadline=start + timedelta(seconds=heartbeat_timeout),
        global_deadline=global_deadline(start, heartbeat_timeout),
    )
    world.records.create(record)
    engine = StepEngine(
        worker=Worker.DRAIN,
        steps={Step.EVICT: lambda record, now: Outcome.wait(5)},
        records=world.records,
        queues=world.queues,
        autoscaling=world.autoscaling,
        clock=world.clock,
        metrics=emitted,
        timing=EngineTiming(
            resume_grace=timedelta(seconds=DEFAULTS.resume_grace_seconds),
            redelivery=timedelta(seconds=DEFAULTS.redelivery_seconds),
            heartbeat_margin=timedelta(seconds=DEFAULTS.heartbeat_margin_seconds),
            settle_before=timedelta(seconds=DEFAULTS.settle_before_seconds),
        ),
        failure_result=lambda record: ActionResult.ABANDON,
    )
    deadline = record.heartbeat_deadline
    while world.clock.now() < deadline and world.record().heartbeats == 0:
        engine.handle(world.message())
        (sent,) = world.queues.take()
        world.clock.advance(max(sent.delay, 1))
    accepted = world.record().heartbeats
    return emitted, int((deadline - T0).total_seconds()), accepted + autoscaling.refused


@pytest.mark.parametrize("offset", [0, 20, 33, 45])
@pytest.mark.parametrize("heartbeat_timeout", HOOKS)
def test_a_throttle_that_outlasts_a_retry_pages_a_margin_before_the_heartbeat_timeout(
    heartbeat_timeout: int, offset: int
) -> None:
    # Given a drain whose keep-alive heartbeats Auto Scaling throttles from the first on (a rate limit the account's
    # other callers use up), counted through the functions' Metrics adapter
    # When it polls until the action's heartbeat timeout
    emitted, deadline, asked = drain_throttled(heartbeat_timeout, throttled=1_000, offset=offset)

    # Then every throttled heartbeat, as emitted, is counted (HeartbeatRetries, owner and service, no reason), the
    # late ones are the alarm's metric, and it pages once the throttle outlasted the engine's first full retry: a
    # margin before Auto Scaling takes the hook's default result (the expired actions' alarm tells only after
    # that, within its five minutes)
    assert sum(watched_by(THROTTLED, emitted).values()) == asked > 2
    alarm = throttled_alarm()
    points = watched_by(alarm, emitted)
    assert 0 < sum(points.values()) < asked
    fired = alarm_fires(alarm, points, deadline + 600)
    assert fired, "a throttle that lasts until the heartbeat timeout never pages"
    assert fired[0] <= deadline - DEFAULTS.heartbeat_margin_seconds, (
        f"paged {deadline - fired[0]} s before the heartbeat timeout, less than a margin"
    )
    assert fired[0] - min(points) <= 180, "paged more than three minutes after the first throttled heartbeat"


@pytest.mark.parametrize("offset", [0, 45, 59])
@pytest.mark.parametrize("heartbeat_timeout", HOOKS[:2])  # (an hour's runs the same way, 6 times as long)
def test_a_heartbeat_throttled_once_and_accepted_at_its_retry_does_not_page(
    heartbeat_timeout: int, offset: int
) -> None:
    # Given a drain whose first keep-alive heartbeat Auto Scaling throttles, its retry accepted (the engine's
    # backoff did its work): no action came near its heartbeat timeout
    emitted, _, asked = drain_throttled(heartbeat_timeout, throttled=1, offset=offset)

    # Then the throttled heartbeat is counted, and pages no one
    assert (sum(watched_by(THROTTLED, emitted).values()), asked) == (1, 2)
    alarm = throttled_alarm()
    points = watched_by(alarm, emitted)
    assert not alarm_fires(alarm, points, 600 + max(points, default=0))


@pytest.mark.parametrize("heartbeat_timeout", HOOKS[:2])
def test_a_heartbeat_throttled_twice_a_few_seconds_apart_then_accepted_pages_no_one(
    heartbeat_timeout: int,
) -> None:
    # Given drains starting at each second of a minute whose first keep-alive heartbeat Auto Scaling throttles
    # twice (the first try a poll before the last safe run, and its retry a few seconds later), its next retry
    # accepted: no action came near its heartbeat timeout
    paged = []
    for offset in range(60):
        emitted, _, asked = drain_throttled(heartbeat_timeout, throttled=2, offset=offset)
        assert (sum(watched_by(THROTTLED, emitted).values()), asked) == (2, 3)
        # Then however the two fall about a minute's end, the alarm pages no one
        alarm = throttled_alarm()
        points = watched_by(alarm, emitted)
        if alarm_fires(alarm, points, 600 + max(points, default=0)):
            paged.append(offset)
    assert not paged, f"paged for {len(paged)} of 60 starts (at offsets {paged})"


def test_the_sweepers_throttled_heartbeat_fires_the_throttled_alarm() -> None:
    # Given a stalled lifecycle (its message lost) whose heartbeat deadline comes before the next sweep, while
    # Auto Scaling throttles the sweeper's heartbeats, counted through the functions' Metrics adapter
    repair = Repair()
    repair.metrics = emitted = Emitted(repair.clock)
    record = make_record(PLAN, Step.EVICT, node="n1")
    repair.records.create(record)
    repair.clock.current = T0 + GRACE + timedelta(seconds=30)

    def throttled(action: ActionRef) -> bool:
        raise TransientError("recording a lifecycle heartbeat: Throttling: Rate exceeded")

    repair.autoscaling.heartbeat = throttled  # type: ignore[method-assign]

    # When the sweeper runs (and fails)
    with pytest.raises(SweepFailed):
        repair.run()

    # Then its throttled heartbeat (its last chance before the deadline) is counted as the engine's throttled
    # ones are, and is the throttled alarm's metric: it pages within two minutes, before the deadline
    assert sum(watched_by(THROTTLED, emitted).values()) == 1
    alarm = throttled_alarm()
    points = watched_by(alarm, emitted)
    assert sum(points.values()) == 1
    deadline = int((record.heartbeat_deadline - T0).total_seconds())
    fired = alarm_fires(alarm, points, deadline + 600)
    assert fired, "the sweeper's throttled heartbeat never pages"
    assert fired[0] - min(points) <= 120
    assert fired[0] < deadline


def test_the_sweepers_throttled_heartbeat_of_an_orphaned_action_fires_the_throttled_alarm() -> None:
    # Given an action of this stack's hook that intake never recorded, kept alive by the sweeper's heartbeats
    # alone, while Auto Scaling throttles them
    clock = FakeClock()
    world = Orphans(clock=clock, metrics=Emitted(clock))
    world.terminating()

    def throttled(action: ActionRef) -> bool:
        raise TransientError("recording a lifecycle heartbeat: Throttling: Rate exceeded")

    world.autoscaling.heartbeat = throttled  # type: ignore[method-assign]

    # When the sweeper runs (and fails)
    with pytest.raises(SweepFailed):
        world.sweep()

    # Then its throttled heartbeat is counted, and fires the throttled alarm
    assert isinstance(world.metrics, Emitted)
    assert sum(watched_by(THROTTLED, world.metrics).values()) == 1
    alarm = throttled_alarm()
    points = watched_by(alarm, world.metrics)
    assert sum(points.values()) == 1
    assert alarm_fires(alarm, points, max(points) + 600)
