"""A lifecycle started again on the same record under a new token (a disruption's record: a Spot instance
interrupted again, the next maintenance of the instance) while the entry of the lifecycle before it is still
in the budget (its cleanup's release lost): that entry is of a lifecycle that is over, though its record is
open. The sweeper removes it, rather than keep its slot until its TTL."""

from __future__ import annotations

from nodecycle.domain.budget import SlotRequest
from nodecycle.domain.model import Step, Transition
from tests.support.fakes import T0
from tests.unit.foundation.test_engine import PLAN, make_record
from tests.unit.sweeper.test_budget_sweep_faults import OWNER, World

RECORD = "i-n1/spot"  # one record per instance and cause: its token is not part of it


def spot_lifecycle(world: World, token: str) -> None:
    """The record of n1's Spot interruption, open under ``token``."""
    world.records.items.pop(RECORD, None)
    world.records.create(
        make_record(
            PLAN,
            Step.ACQUIRE_SLOT,
            id=RECORD,
            instance_id="i-n1",
            transition=Transition.SPOT_INTERRUPTION,
            node="n1",
            token=token,
            slot_waiting_since=T0,
        )
    )
    world.open_ids.add(RECORD)
    world.nodes.add("n1")


def test_the_entry_of_the_lifecycle_before_a_restart_on_its_record_is_swept() -> None:
    # Given a budget of 1 that n1's first interruption (token t1) holds, its release lost, and n2 waiting
    world = World()
    spot_lifecycle(world, "t1")
    first = SlotRequest(node="n1", instance_id="i-n1", zone="a", owner=OWNER, record_id=RECORD, token="t1")
    assert world.budget.acquire(first).granted
    world.clock.advance(1)
    world.lifecycle("n2")
    world.queues.take()

    # When the record starts over under t2 (interrupted again), not asking for its slot yet, and the sweep runs
    spot_lifecycle(world, "t2")
    counts = world.part()(world.open_records(), world.clock.now(), world.time(300, 45))

    # Then t1's holder is swept, and its slot passed on to n2
    doc = world.store.read()
    assert doc is not None
    assert [h.node for h in doc.holders] == ["n2"]
    assert counts["SweptHolders"] == 1


def test_the_entry_of_the_lifecycle_that_goes_on_is_kept() -> None:
    # Given n1's interruption holding its slot under the token its record is open under
    world = World()
    spot_lifecycle(world, "t2")
    request = SlotRequest(node="n1", instance_id="i-n1", zone="a", owner=OWNER, record_id=RECORD, token="t2")
    assert world.budget.acquire(request).granted

    # When the sweep runs, Then it is kept
    counts = world.part()(world.open_records(), world.clock.now(), world.time(300, 45))
    doc = world.store.read()
    assert doc is not None
    assert [h.node for h in doc.holders] == ["n1"]
    assert counts["SweptHolders"] == 0
