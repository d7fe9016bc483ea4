"""Forged and replayed messages in the campaign (``--forge``), and the judge of design invariant 8 they are there
for: drawn apart from everything else a seed draws, and judged on the API server's history, which must show no
node disrupted before its instance's terminate action began."""

from __future__ import annotations

from dataclasses import replace

from nodecycle_sandbox.aws.records import ActionRecord, InstanceHistory
from nodecycle_sandbox.chaos.invariants import check
from nodecycle_sandbox.chaos.mutations import MUTATIONS
from nodecycle_sandbox.chaos.plan import FORGERIES, KINDS, draw
from nodecycle_sandbox.kube import HistoryEntry
from tests.campaign.test_invariants import NODE, T0, _node, _observation, _pod, _terminate


def test_asking_for_forgeries_changes_no_seeds_story_faults_nor_lag_only_adds_the_messages() -> None:
    drawn: set[str] = set()
    for seed in (1, 5, 57):
        for index in range(12):
            for lag in (False, True):
                # Given a scenario drawn as ever, and the same one drawn with forged messages
                plain = draw(seed, index, lag=lag)
                forging = draw(seed, index, lag=lag, forge=True)
                # Then the plain one sends none, and the other is the same story, faults and lag with one to three
                assert plain.forgeries == ()
                assert 1 <= len(forging.forgeries) <= 3
                assert replace(forging, forgeries=()) == plain
                # drawn again the same, in the story's order of time
                assert draw(seed, index, lag=lag, forge=True).forgeries == forging.forgeries
                assert [f.at for f in forging.forgeries] == sorted(f.at for f in forging.forgeries)
                drawn.update(f.kind for f in forging.forgeries)
    # And every kind of forgery is drawn somewhere among them
    assert drawn == set(FORGERIES)


def _cordoned(at: float, *, source: str = "api") -> HistoryEntry:
    return replace(_node(at, cordoned=True), source=source)


def _evicted(at: float) -> HistoryEntry:
    return replace(_pod(at, "web-1"), verb="create", resource="pods/eviction", source="api")


def _confirmed(history: list[HistoryEntry], actions: list[ActionRecord]) -> list[str]:
    instances = [InstanceHistory("i-1", "g", "eu-west-1a", NODE, T0, T0)]
    observation = _observation(history, actions=actions, instances=instances)
    return [v.detail for v in check(observation) if v.invariant == "confirmed"]


def test_a_node_disrupted_before_its_instances_terminate_action_began_or_without_one_is_a_violation() -> None:
    # Given a node cordoned by an API caller at 2 s, or a pod of it evicted at 2 s
    for disrupted in ([_cordoned(T0 + 2)], [_pod(T0, "web-1"), _evicted(T0 + 2)]):
        # Then with no terminate action for its instance, or one that began at 4 s, it is a violation
        (never,) = _confirmed(disrupted, [])
        assert "never terminated" in never
        (early,) = _confirmed(disrupted, [_terminate(T0 + 9, started=T0 + 4)])
        assert "2.0s before its terminate action began" in early
        # and once the action began at 1 s, it is not
        assert _confirmed(disrupted, [_terminate(T0 + 6)]) == []


def test_what_the_cluster_itself_does_to_a_node_is_not_a_disruption_nodecycle_made() -> None:
    # Given the node marked unschedulable by the sandbox's own controllers, and uncordoned by an API caller
    history = [_cordoned(T0 + 2, source="sandbox"), _node(T0 + 3)]
    # Then nothing is judged against nodecycle
    assert _confirmed(history, []) == []


def test_the_mutation_that_takes_every_action_for_active_is_run_with_forged_messages() -> None:
    # (a confirmation that says yes to everything shows only when something forged asks it: the campaign must
    # then send forgeries, and every kind of scenario can carry them)
    mutation = next(m for m in MUTATIONS if m.name == "confirm-skipped")
    assert mutation.forge
    assert mutation.kinds == KINDS


def test_a_node_disrupted_again_after_its_terminate_action_ended_is_a_violation() -> None:
    # Given a terminate action that began at 1 s and was completed at 6 s: its drain cordoned the node at 2 s and
    # evicted its pod at 3 s
    drained = [_pod(T0, "web-1"), _cordoned(T0 + 2), _evicted(T0 + 3)]
    assert _confirmed(drained, [_terminate(T0 + 6)]) == []
    # When a replayed message drains the node again at 8 s, its action over (no action is active for it): the
    # node, uncordoned at 7 s, cordoned again, or a pod bound to it since evicted
    again = [*drained, _node(T0 + 7), _cordoned(T0 + 8)]
    evicted_again = [*drained, _pod(T0 + 7, "web-2"), replace(_evicted(T0 + 8), name="web-2")]
    # Then each is a violation of invariants 6 and 8
    for history, how in ((again, "cordoned"), (evicted_again, "pod s/web-2 evicted")):
        (late,) = _confirmed(history, [_terminate(T0 + 6)])
        assert f"{how} at 8.0s, 2.0s after its terminate action ended" in late
    # But the cleanup's writes of a node left cordoned (its annotations removed) are no new disruption
    cleaned = [*drained, _cordoned(T0 + 8)]
    assert _confirmed(cleaned, [_terminate(T0 + 6)]) == []
