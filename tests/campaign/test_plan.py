"""The scenarios a seed draws: the same every time, and as slow to forget a node as a real cluster."""

from __future__ import annotations

from nodecycle_sandbox.chaos.plan import AWS_REFUSAL_LONGEST, draw


def test_every_scenario_draws_a_node_that_lingers_and_pods_that_linger_after_it_for_seconds() -> None:
    # Given the scenarios of one campaign
    scenarios = [draw(41, index) for index in range(40)]

    # Then each one removes its terminated instances' nodes seconds late, and their pods seconds after that
    assert all(0.5 <= s.node_removal <= 5.0 for s in scenarios)
    assert all(0.5 <= s.pod_gc_quarantine <= 4.0 for s in scenarios)
    assert len({s.node_removal for s in scenarios}) > 10  # drawn, not one value for all
    assert "nodes removed" in scenarios[0].describe()


def test_the_lingering_is_drawn_after_the_story_and_its_faults_which_a_seed_draws_as_it_did_before() -> None:
    # Given the first scenario of seed 41
    scenario = draw(41, 0)

    # Then its story and fault plan are the ones it had before the lingering was drawn (a campaign's seed
    # still names the runs it named)
    assert scenario.kind == "two-owners"
    assert scenario.size == 4
    assert scenario.lost_kubelet_at == 1.2
    assert [(f.kind, f.target, f.probability) for f in scenario.faults] == [
        ("sqs-reorder", "*", 0.24),
        ("worker-kill", "SweeperFunction", 0.25),
        ("sqs-delay", "*", 0.06),
        ("kube-slow", "*", 0.06),
        ("kube-error", "*", 0.04),
    ]


def test_refusals_are_drawn_with_a_window_and_a_limit_after_everything_else() -> None:
    # Given the scenarios of one campaign
    scenarios = [draw(41, index) for index in range(40)]
    refusal_kinds = {"kube-webhook-down", "kube-webhook-deny", "kube-forbidden", "aws-denied"}

    # Then some draw refusals, each for a window that ends and up to a limit, numbered after the other faults
    refusals = [(s, f) for s in scenarios for f in s.faults if f.kind in refusal_kinds]
    assert {f.kind for _, f in refusals} == refusal_kinds
    assert all(f.stop is not None and f.start < f.stop and f.limit for _, f in refusals)
    # (AWS's shorter than the hooks' heartbeat timeout less its margin: longer ones end actions whatever happens)
    assert all(
        f.stop - f.start <= AWS_REFUSAL_LONGEST for _, f in refusals if f.kind == "aws-denied" and f.stop
    )
    assert any(f.stop - f.start > 20.0 for _, f in refusals if f.kind != "aws-denied" and f.stop)
    assert all(s.faults[-1].kind in refusal_kinds for s, _ in refusals)
    # and none without faults
    assert not any(f.kind in refusal_kinds for i in range(40) for f in draw(41, i, faults=False).faults)
