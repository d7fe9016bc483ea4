"""The template's dead-letter paths, run by the runner: an intake event that keeps failing reaches the intake
dead-letter queue once, and a failed sweep reaches the sweeper's own queue, not the drain work's."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodecycle_sandbox.aws.server import MotoServer
from nodecycle_sandbox.runner import Runner
from tests.support.events import happening_now, load_event

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def runner() -> Iterator[Runner]:
    # No managed groups (set on the functions by hand: the template's rule refuses a stack without) and too short
    # a sweep grace: every intake and sweeper invocation fails its settings.
    server = MotoServer()
    url = server.start()
    started = Runner(
        template=ROOT / "template.yaml",
        endpoint_url=url,
        region="eu-west-1",
        mode="inline",
        parameters={"ManagedGroups": "nodes"},
        environment={"NODECYCLE_SWEEP_GRACE_SECONDS": "1", "NODECYCLE_MANAGED_GROUPS": ""},
        async_retry_delays=(0.05, 0.05),
        schedules_enabled=False,
        sqs_sources_enabled=False,
    ).start()
    yield started
    started.stop()
    urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/reset", method="POST")).close()
    server.stop()


def messages(runner: Runner, queue: str) -> list[Any]:
    found = runner.sqs.receive_message(
        QueueUrl=runner.queue(queue).url, MaxNumberOfMessages=10, VisibilityTimeout=0, WaitTimeSeconds=1
    )
    return found.get("Messages", [])


def test_an_intake_event_that_keeps_failing_reaches_its_dead_letter_queue_once(runner: Runner) -> None:
    # Given intake failing at every attempt
    event = happening_now(load_event("eventbridge-terminate.json"))

    # When EventBridge delivers a lifecycle action to it
    runner.publish(event)

    # Then after its three attempts, the intake dead-letter queue holds one record of it, with the reason
    (dead,) = runner.journal.wait_until(lambda: messages(runner, "IntakeDeadLetterQueue"), timeout=20)
    assert [i.attempt for i in runner.journal.invocations("IntakeFunction")] == [1, 2, 3]
    record = json.loads(dead["Body"])
    assert record["requestPayload"] == event
    assert "invalid nodecycle settings" in record["responsePayload"]["errorMessage"]
    # nothing arrived after it
    assert [m["MessageId"] for m in messages(runner, "IntakeDeadLetterQueue")] == [dead["MessageId"]]


def test_a_failed_sweep_goes_to_the_sweeper_dead_letter_queue(runner: Runner) -> None:
    runner.fire_schedule("SweeperFunction")

    (dead,) = runner.journal.wait_until(lambda: messages(runner, "SweeperDeadLetterQueue"), timeout=20)
    assert json.loads(dead["Body"])["requestContext"]["condition"] == "RetriesExhausted"
    assert messages(runner, "DrainDeadLetterQueue") == []


@pytest.mark.parametrize(
    "sample",
    [
        "eventbridge-terminate.json",
        "eventbridge-spot-interruption.json",
        "eventbridge-health-scheduled-retirement.json",
    ],
)
@pytest.mark.parametrize("elsewhere", [{"account": "210987654321"}, {"region": "us-east-1"}])
def test_an_event_of_another_account_or_region_does_not_reach_intake(
    runner: Runner, sample: str, elsewhere: dict[str, str]
) -> None:
    # Given the template's rules (a bus can receive other accounts' and regions' events, forwarded to it)
    before = len(runner.journal.invocations("IntakeFunction"))

    # When an event of another account or region is published, then the same event of this stack's own
    runner.publish(happening_now(load_event(sample)) | elsewhere)
    runner.publish(happening_now(load_event(sample)))

    # Then only this stack's own reaches intake (its first attempts: the others fail their settings here, and
    # an earlier test's retries may still come)
    def first_attempts() -> list[tuple[str, str]]:
        found = runner.journal.invocations("IntakeFunction")[before:]
        return [(i.event["account"], i.event["region"]) for i in found if i.attempt == 1]

    runner.journal.wait_until(lambda: ("123456789012", "eu-west-1") in first_attempts(), timeout=20)
    assert first_attempts() == [("123456789012", "eu-west-1")]
