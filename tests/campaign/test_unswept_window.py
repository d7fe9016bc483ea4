"""The global-timeout judge and a sweeper that could not run for an action's whole heartbeat window.

Seed 80 (``--forge --lag``), scenarios 0 and 5: a terminate's event failed at intake (s80-0: a throttled write,
handed to the intake queue for 60 s, past the hooks' 30 s heartbeat timeout; s80-5: its record stored, its first
step's message refused by an SCP on sqs:SendMessage) while the stack's SweeperFunction role was without its policy
from 4.3 s to 30.1 s (5.3 s to 33.2 s): nobody could adopt or resume the action, and Auto Scaling ended it by its
heartbeat timeout. The stacks' promise stands on a sweeper that runs in each heartbeat window; one refused
every call for the whole window cannot, in AWS as here."""

from __future__ import annotations

from dataclasses import replace

from nodecycle_sandbox.chaos.plan import draw
from nodecycle_sandbox.faults import Fault, Firing
from nodecycle_sandbox.kube import HistoryEntry

from .test_invariants import T0, _judged, _node, _observation, _terminate

DETACHED = "SweeperFunction chaos-a policy SweeperFunctionRole/sweeper detached"


def _lapsed(detached: tuple[float, float] | None, *, history: list[HistoryEntry] | None = None) -> set[str]:
    """The judges' verdict on a terminate begun at 1 s that Auto Scaling ended by its 30 s heartbeat timeout,
    with the sweeper's role detached from ``detached[0]`` to ``detached[1]`` seconds (None: never)."""
    action = replace(_terminate(T0 + 31, started=T0 + 1), outcome="heartbeat-timeout", result="CONTINUE")
    faults: tuple[Fault, ...] = ()
    firings: list[Firing] = []
    if detached is not None:
        start, stop = detached
        faults = (Fault("f1", "iam-detached", "SweeperFunction", 1.0, start=start, stop=stop, limit=1),)
        firings = [Firing(start, "f1", "iam-detached", DETACHED)]
    return _judged(
        _observation(
            history or [],
            scenario=draw(1, 0, faults=False).with_faults(faults),
            actions=[action],
            firings=firings,
            outcomes={"tok": "heartbeat-timeout"},
        )
    )


def test_an_action_that_lapsed_while_its_sweeper_could_not_run_for_its_whole_window_is_excused() -> None:
    # Given a terminate that lapsed while the sweeper's role was detached from 4.3 s to 30.1 s of its 1-31 s window
    # (its drain never began: its event came too late, or its first step's message never reached its queue)

    # Then the global-timeout judge excuses it
    assert "global-timeout" not in _lapsed((4.3, 30.1))


def test_an_action_that_lapsed_with_a_sweeper_that_could_run_or_that_nodecycle_ran_is_still_a_violation() -> (
    None
):
    # Given the same lapsed terminate with no outage, or with the sweeper refused only half its window
    # Then it is a violation: a sweep interval (12 s) of a working sweeper could have adopted it
    assert "global-timeout" in _lapsed(None)
    assert "global-timeout" in _lapsed((4.3, 17.0))
    # and so is one whose drain began (its own steps heartbeat it, whatever the sweeper does): its node claimed
    claimed = [_node(T0 + 2, owner="chaos-a")]
    assert "global-timeout" in _lapsed((4.3, 30.1), history=claimed)


def _lapsed_later(detached: tuple[float, float]) -> set[str]:
    """The verdict on a terminate begun at 1 s, heartbeat at 31 s, that Auto Scaling ended by its heartbeat timeout
    at 61 s (its last window 31-61 s), with the sweeper's role detached from ``detached[0]`` to ``detached[1]``."""
    action = replace(_terminate(T0 + 61, started=T0 + 1), outcome="heartbeat-timeout", result="CONTINUE")
    start, stop = detached
    faults = (Fault("f1", "iam-detached", "SweeperFunction", 1.0, start=start, stop=stop, limit=1),)
    return _judged(
        _observation(
            [],
            scenario=draw(1, 0, faults=False).with_faults(faults),
            actions=[action],
            firings=[Firing(start, "f1", "iam-detached", DETACHED)],
            outcomes={"tok": "heartbeat-timeout"},
        )
    )


def test_an_action_is_excused_by_an_outage_of_the_window_it_lapsed_in_not_by_an_earlier_one() -> None:
    # Given a terminate kept alive past its first window (a heartbeat at 31 s) that lapsed at the end of its second
    # When the sweeper could not run for its first window only: the window it lapsed in had a working sweeper
    assert "global-timeout" in _lapsed_later((4.3, 30.1))
    # When it could not run for the window it lapsed in: excused, as in its first
    assert "global-timeout" not in _lapsed_later((31.5, 60.5))
