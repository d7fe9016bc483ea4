"""The campaign draws what the harsher cluster does on its own clocks, compressed so that a scenario meets it: a hung
runtime's node posted NotReady (PLEG) within the story, and an operator's out-of-service taint on the node of a
lost kubelet; each from a stream of its own, so that every seed keeps the story and fault plan it had."""

from __future__ import annotations

from dataclasses import replace

from nodecycle_sandbox.chaos.plan import (
    OUT_OF_SERVICE_LATEST,
    PLEG_LONGEST,
    PLEG_SHORTEST,
    draw,
)
from nodecycle_sandbox.chaos.world import DRAIN_TIMEOUT


def test_a_hung_runtimes_node_turns_not_ready_within_the_scenario_and_only_where_a_runtime_hangs() -> None:
    # Given the scenarios of one campaign
    scenarios = [draw(41, index) for index in range(200)]

    # Then each scenario whose runtime hangs draws a PLEG threshold of seconds, mostly within the drain's timeout
    hung = [s for s in scenarios if any(f.kind == "kube-hung-runtime" for f in s.faults)]
    assert hung
    assert all(PLEG_SHORTEST <= s.pleg_threshold <= PLEG_LONGEST <= DRAIN_TIMEOUT for s in hung)
    assert len({s.pleg_threshold for s in hung}) > len(hung) // 2  # drawn, not one value for all
    # and the others none (the cluster's 3 min: never within a scenario)
    assert all(s.pleg_threshold == 0.0 for s in scenarios if s not in hung)
    assert "NotReady after" in hung[0].describe()


def test_an_operator_taints_a_lost_kubelets_node_out_of_service_in_a_share_of_the_scenarios_that_lose_one() -> (
    None
):
    # Given the scenarios of one campaign
    scenarios = [draw(41, index) for index in range(300)]

    # Then some of those that lose a kubelet have its node tainted out-of-service seconds later, the others not
    lost = [s for s in scenarios if s.lost_kubelet_at is not None]
    tainted = [s for s in lost if s.out_of_service_after is not None]
    assert 0 < len(tainted) < len(lost)
    assert all(0.0 <= s.out_of_service_after <= OUT_OF_SERVICE_LATEST for s in tainted)  # type: ignore[operator]
    # and none that loses no kubelet
    assert all(s.out_of_service_after is None for s in scenarios if s.lost_kubelet_at is None)
    assert "out-of-service" in tainted[0].describe()


def test_the_harsher_clusters_clocks_leave_every_seeds_story_and_fault_plan_as_it_was() -> None:
    # Given a scenario that draws both (seed 83's sixth: a hung runtime and a lost kubelet), with lag and forgeries
    scenario = draw(83, 5, lag=True, forge=True)
    assert scenario.pleg_threshold
    assert scenario.out_of_service_after is not None

    # Then its story, faults (ids included), lag and forgeries are the ones it drew before they were drawn
    assert (scenario.kind, scenario.size, scenario.lost_kubelet_at, scenario.ec2_lag) == (
        "terminate",
        3,
        1.3,
        2.8,
    )
    assert [(f.id, f.kind, f.target) for f in scenario.faults] == [
        ("f1", "clock-skew", "IntakeFunction"),
        ("f2", "sqs-drop", "*"),
        ("f3", "kube-throttle", "*"),
        ("f4", "kube-webhook-down", "POST pods/eviction"),
        ("f5", "kube-hung-runtime", "nodes"),
        ("f6", "eip-locked", "ec2.ReleaseAddress"),
    ]
    assert [(f.at, f.kind) for f in scenario.forgeries] == [(7.6, "forged-launch")]
    # and the same with or without them asked for: nothing else moves
    plain = draw(83, 5)
    assert replace(scenario, forgeries=(), ec2_lag=0.0).faults[:6] == plain.faults[:6]
    assert (plain.pleg_threshold, plain.out_of_service_after) == (
        scenario.pleg_threshold,
        scenario.out_of_service_after,
    )
