"""The sweep while DynamoDB will not list the open lifecycles (the Query of the open-by-due index denied: a
policy that lost the index's ARN, a disabled key; or throttled past botocore's retries), on the real record store
(DynamoDB on moto) whose GetItem still answers: what needs no list still gets done."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse, HTTPHeaders

from nodecycle.adapters.aws.records import DynamoRecordStore
from nodecycle.domain.dispatch import Dispatcher
from nodecycle.domain.intake import IntakeOutcome
from nodecycle.domain.model import Step
from nodecycle.domain.sweep.annotations import LeftoverAnnotations
from nodecycle.domain.sweep.budget_entries import StaleBudgetEntries
from nodecycle.domain.sweep.sweeper import Sweeper, SweepFailed
from tests.functions.sweeper.test_adoption_race import on_dynamodb
from tests.support.fakes import T0, FakeClock, FakeMetrics, RecordingQueues
from tests.support.stack import Stack
from tests.unit.foundation.test_engine import PLAN, make_record
from tests.unit.sweeper.test_orphans import INTERVAL, OWNER, TOKEN, adopted
from tests.unit.sweeper.test_sweeper import AliveInstances, FakeBudget, FakeNodes, annotated, entry

pytestmark = pytest.mark.usefixtures("stack")


@contextmanager
def query_denied(client: Any) -> Iterator[None]:
    """DynamoDB refuses ``client``'s Query (the open lifecycles' listing); its GetItem and PutItem answer."""

    def deny(**_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        error = {"Code": "AccessDeniedException", "Message": "not authorized to perform dynamodb:Query"}
        answer: dict[str, Any] = {"Error": error, "ResponseMetadata": {}}
        return AWSResponse("https://dynamodb", 400, HTTPHeaders(), None), answer

    # (a before-call handler that answers is botocore's answer to the call)
    client.meta.events.register("before-call.dynamodb.Query", deny, unique_id="tests.DenyQuery")
    try:
        yield
    finally:
        client.meta.events.unregister("before-call.dynamodb.Query", unique_id="tests.DenyQuery")


def test_while_the_open_lifecycles_cannot_be_listed_every_held_action_is_kept_alive_and_none_adopted(
    stack: Stack,
) -> None:
    # Given a terminate action of this stack's hook whose event intake took in (its lifecycle on DynamoDB), and
    # then a DynamoDB that will not list the open lifecycles for half an hour (twice the hook's heartbeat
    # timeout of 15 minutes); the drains, reading the same table, stall meanwhile
    client = boto3.client("dynamodb")
    world = on_dynamodb(stack, client)
    world.terminating()
    assert world.intake.accept(world.event()) is IntakeOutcome.ACCEPTED
    sweeper = Sweeper(
        owner=OWNER,
        records=world.records,
        clock=world.clock,
        metrics=world.metrics,
        parts={"orphans": world.part.keep_alive, "adoptions": world.part.adopt},
        shares={},
    )

    # When the sweeps of that half hour run, every interval
    with query_denied(client):
        for _ in range(6):
            world.clock.advance(INTERVAL.total_seconds())
            # Then each fails (the sweeper's dead-letter alarm)...
            with pytest.raises(SweepFailed, match="orphans"):
                sweeper.sweep(time_left=lambda: 300)

    # ...but has kept the action alive: Auto Scaling has not applied the hook's default result to the node
    # undrained. And nothing was adopted: the action has its lifecycle already
    assert world.clock.now() < world.autoscaling.expires_at(TOKEN)
    assert adopted(world) is None

    # And once DynamoDB lists them again, the sweep knows the action's lifecycle: no orphan, none adopted
    world.clock.advance(INTERVAL.total_seconds())
    report = sweeper.sweep(time_left=lambda: 300)
    assert (report["LifecyclesOrphaned"], report["LifecyclesAdopted"]) == (0, 0)
    assert adopted(world) is None


def test_budget_entries_and_annotations_of_a_lifecycle_that_is_over_are_freed_though_the_list_is_refused(
    stack: Stack,
) -> None:
    # Given two drains that hold a slot and annotated their nodes, whose nodes and instances are all there: one
    # is at work, the other is over (its cleanup died before it gave both back); and a DynamoDB that will not
    # list the open lifecycles, though it reads each record
    client = boto3.client("dynamodb")
    records = DynamoRecordStore(stack.table, ttl=timedelta(days=1), dynamodb=client)
    running = make_record(
        PLAN, Step.EVICT, id="i-0aaaaaaaaaaaaaaa1/terminate/t1", instance_id="i-0aaaaaaaaaaaaaaa1"
    )
    over = make_record(
        PLAN, Step.DONE, id="i-0aaaaaaaaaaaaaaa2/terminate/t2", instance_id="i-0aaaaaaaaaaaaaaa2"
    )
    assert records.create(running)
    assert records.create(over)
    budget = FakeBudget(
        [entry("n1", running.id, running.instance_id), entry("n2", over.id, over.instance_id)]
    )
    nodes = FakeNodes(
        [
            annotated("n1", OWNER, running.instance_id, "t1"),
            annotated("n2", OWNER, over.instance_id, "t2"),
        ]
    )
    metrics = FakeMetrics()
    sweeper = Sweeper(
        owner=OWNER,
        records=records,
        clock=FakeClock(T0),
        metrics=metrics,
        parts={
            "budget": StaleBudgetEntries(
                budget=budget,
                records=records,
                node_names=nodes.node_names,
                alive_instances=AliveInstances({running.instance_id, over.instance_id}),
                waker=Dispatcher(
                    records=records, queues=RecordingQueues(), clock=FakeClock(T0), metrics=metrics
                ),
            ),
            "annotations": LeftoverAnnotations(owner=OWNER, cluster=nodes, records=records, metrics=metrics),
        },
        shares={},
    )

    # When the sweep runs
    with query_denied(client):
        report = sweeper.sweep(time_left=lambda: 300)

    # Then the parts judged each lifecycle by its record, read consistently (as they do one the list does not
    # show): the slot and the annotations of the lifecycle that is over are freed, the other's kept. (Before,
    # both parts failed for want of the list, and the slot stayed taken until its TTL, sweep after sweep.)
    assert budget.judged == {"n1": False, "n2": True}
    assert nodes.released == ["n2"]
    assert (report["SweptHolders"], report["AnnotationsCleared"]) == (1, 1)
