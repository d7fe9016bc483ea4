"""The scenarios a seed draws: the same every time (asked for lag or not), and as slow to forget a node as a real
cluster."""

from __future__ import annotations

from dataclasses import replace

from nodecycle_sandbox.chaos.plan import (
    AWS_REFUSAL_LONGEST,
    EC2_LAG_LONGEST,
    INDEX_LAG_LONGEST,
    KINDS,
    Scenario,
    draw,
)
from nodecycle_sandbox.faults import OUTAGE_KINDS, WORLD_KINDS, Fault


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
    # still names the runs it named), the hazards and outages drawn since after them
    assert scenario.kind == "two-owners"
    assert scenario.size == 4
    assert scenario.lost_kubelet_at == 1.2
    drawn_since = (*WORLD_KINDS, *OUTAGE_KINDS)
    assert [(f.kind, f.target, f.probability) for f in scenario.faults if f.kind not in drawn_since] == [
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
    drawn_since = (*WORLD_KINDS, *OUTAGE_KINDS)
    assert all(
        [f for f in s.faults if f.kind not in drawn_since][-1].kind in refusal_kinds for s, _ in refusals
    )
    # and none without faults
    assert not any(f.kind in refusal_kinds for i in range(40) for f in draw(41, i, faults=False).faults)


# The seeds the campaign's tests and mutation checks pin (test_campaign's 3, test_mutations' 151 and 3, this
# file's 41), and a few more
PINNED_SEEDS = (1, 3, 41, 151, 262)


def test_asking_for_lag_changes_no_seeds_story_nor_fault_plan_only_adds_the_lag_after_them() -> None:
    for seed in PINNED_SEEDS:
        for index in range(30):
            for kinds in (KINDS, ("refresh",)):
                for faults in (True, False):
                    # Given a scenario drawn as ever, and the same one drawn on a lagging AWS
                    plain = draw(seed, index, kinds=kinds, faults=faults)
                    lagging = draw(seed, index, kinds=kinds, faults=faults, lag=True)

                    # Then the plain one has no lag, as before lag could be drawn
                    assert not plain.lagging
                    assert plain.ec2_lag == 0.0
                    # and the lagging one is the same story under the same faults, the lag added after them (and
                    # the outages, drawn last of all, the same but for their numbers)
                    plain, outages = _outages_apart(plain)
                    lagging, lagging_outages = _outages_apart(lagging)
                    assert [replace(f, id="") for f in lagging_outages] == [
                        replace(f, id="") for f in outages
                    ]
                    same = len(plain.faults)
                    assert lagging.faults[:same] == plain.faults
                    assert [f.kind for f in lagging.faults[same:]] in ([], ["dynamodb-index-lag"])
                    assert replace(lagging, faults=lagging.faults[:same], ec2_lag=0.0) == plain


def test_the_first_scenario_of_seed_41_is_what_it_was_with_lag_asked_for() -> None:
    # Given the pinned first scenario of seed 41, drawn on a lagging AWS
    scenario = draw(41, 0, lag=True)

    # Then its story and fault plan are still the pinned ones (the test above would pass if draw ignored
    # the lag and the pinned draw changed with it: this one holds the values)
    assert (scenario.kind, scenario.size, scenario.lost_kubelet_at) == ("two-owners", 4, 1.2)
    assert [(f.kind, f.target, f.probability) for f in scenario.faults[:5]] == [
        ("sqs-reorder", "*", 0.24),
        ("worker-kill", "SweeperFunction", 0.25),
        ("sqs-delay", "*", 0.06),
        ("kube-slow", "*", 0.06),
        ("kube-error", "*", 0.04),
    ]


def test_lag_asked_for_is_drawn_an_index_behind_ec2_behind_or_both_within_their_bounds() -> None:
    # Given the scenarios of one campaign on a lagging AWS
    scenarios = [draw(41, index, lag=True) for index in range(40)]

    # Then each lags somehow, and some lag by the index, some by EC2, some by both
    index_lags = {s.index: [f for f in s.faults if f.kind == "dynamodb-index-lag"] for s in scenarios}
    assert all(s.lagging for s in scenarios)
    assert all(len(index_lags[s.index]) <= 1 for s in scenarios)
    shapes = {(bool(index_lags[s.index]), bool(s.ec2_lag)) for s in scenarios}
    assert shapes == {(True, False), (False, True), (True, True)}
    # within their bounds, and the index lag numbered after every other fault (it is drawn last)
    assert all(0.3 <= s.ec2_lag <= EC2_LAG_LONGEST for s in scenarios if s.ec2_lag)
    for s in scenarios:
        before_outages = _outages_apart(s)[0].faults
        for fault in index_lags[s.index]:
            assert 0.3 <= fault.value <= INDEX_LAG_LONGEST
            assert 0.3 <= fault.probability <= 1.0
            assert before_outages[-1] == fault
            assert fault.id == f"f{len(before_outages)}"
    assert "EC2's reads" in next(s for s in scenarios if s.ec2_lag).describe()
    # and with no fault asked for, the lag alone
    alone = draw(41, 0, faults=False, lag=True)
    assert alone.lagging
    assert all(f.kind == "dynamodb-index-lag" for f in alone.faults)


def test_the_hazards_are_drawn_after_every_other_fault_each_from_a_stream_of_its_own() -> None:
    # Given the scenarios of pinned seeds, and the same ones drawn as before the hazards were (their draws left out)
    for seed in PINNED_SEEDS:
        for index in range(30):
            scenario = draw(seed, index, lag=True, forge=True)
            kinds = [f.kind for f in scenario.faults]
            hazards = [f for f in scenario.faults if f.kind in WORLD_KINDS]
            outages = [f for f in scenario.faults if f.kind in OUTAGE_KINDS]

            # Then the hazards come after every fault of the plan before them (the index lag, drawn with lag
            # asked for, and the outages after them), numbered in order
            ahead = len(scenario.faults) - len(hazards) - kinds.count("dynamodb-index-lag") - len(outages)
            assert scenario.faults[ahead : ahead + len(hazards)] == tuple(hazards)
            assert [f.id for f in scenario.faults] == [f"f{n}" for n in range(1, len(scenario.faults) + 1)]
            # at most one of each, none in a launch, a locked address only with stack a's Elastic IPs to release
            assert len({f.kind for f in hazards}) == len(hazards)
            assert not hazards or scenario.kind != "launch"
            assert all("a" in scenario.stacks for f in hazards if f.kind == "eip-locked")
            # and none without faults
            assert not any(f.kind in WORLD_KINDS for f in draw(seed, index, faults=False).faults)


def test_each_hazard_is_drawn_in_a_share_of_the_scenarios_that_can_meet_it() -> None:
    # Given the scenarios of one campaign
    scenarios = [draw(41, index) for index in range(200)]

    # Then some scenarios draw a hung runtime, some a locked address, some both, most neither
    hung = [s for s in scenarios if any(f.kind == "kube-hung-runtime" for f in s.faults)]
    locked = [s for s in scenarios if any(f.kind == "eip-locked" for f in s.faults)]
    assert 0.1 * len(scenarios) < len(hung) < 0.5 * len(scenarios)
    assert 0.05 * len(scenarios) < len(locked) < 0.5 * len(scenarios)
    assert set(hung) & set(locked)
    assert all(
        0.0 <= f.start <= 2.0 and f.limit == 1 for s in scenarios for f in s.faults if f.kind in WORLD_KINDS
    )


def _outages_apart(scenario: Scenario) -> tuple[Scenario, tuple[Fault, ...]]:
    """``scenario`` without its outages (drawn last of all), and the outages."""
    outages = tuple(f for f in scenario.faults if f.kind in OUTAGE_KINDS)
    return scenario.with_faults(scenario.faults[: len(scenario.faults) - len(outages)]), outages
