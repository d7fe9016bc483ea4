"""The log lines of a waiter handed a slot in the invocation that freed it carry that waiter's keys (its
record id, instance and lifecycle token), not those of the lifecycle whose message the invocation had: an
operator who filters a lifecycle's lines by its instance finds its cordon where it happened."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import Step
from nodecycle.entrypoints import run_work_record
from tests.support.fakes import FakeMetrics
from tests.unit.foundation.test_engine import Script, World, make_record
from tests.unit.foundation.test_hand_over import HOLDER, PLAN, WAITERS, releasing, waiting


class Context:
    def get_remaining_time_in_millis(self) -> int:
        return 60_000


def lines(output: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def test_a_handed_over_waiters_lines_carry_its_own_keys_and_the_freeing_lifecycles_keep_theirs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a holder about to release its slot to a waiter
    world = World()
    world.records.create(make_record(PLAN, Step.CLEANUP, completed_at=world.clock.now()))
    world.records.create(waiting(WAITERS[0]))
    engine = world.engine(
        {
            Step.CLEANUP: releasing(world, waking=WAITERS[:1]),
            Step.ACQUIRE_SLOT: Script([Outcome.next()]),
            Step.CORDON: Script([Outcome.wait(5)]),
        }
    )
    body = world.message(HOLDER).model_dump_json()

    # When the drain function's entry point runs the holder's message, and the waiter in the same invocation
    run_work_record(engine, FakeMetrics(), {"messageId": "m-1", "body": body}, Context())

    # Then each step's line carries the keys of the lifecycle it moved
    steps = {line["message"]: line for line in lines(capsys.readouterr().out) if "->" in line["message"]}
    assert steps["step cleanup -> done"]["record_id"] == HOLDER
    assert steps["step acquire-slot -> cordon"]["record_id"] == WAITERS[0]
    assert steps["step acquire-slot -> cordon"]["instance_id"] == WAITERS[0].split("/")[0]
