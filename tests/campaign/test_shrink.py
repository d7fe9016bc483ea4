"""Shrinking a violation found on a lagging AWS: EC2's lag is the scenario's, not a fault of its plan, and the
fewest faults that still break the invariant say whether the lag is needed too."""

from __future__ import annotations

from typing import Any

import pytest

from nodecycle_sandbox.chaos import campaign
from nodecycle_sandbox.chaos.campaign import Finding, _shrink
from nodecycle_sandbox.chaos.invariants import Violation
from nodecycle_sandbox.chaos.plan import Scenario
from nodecycle_sandbox.chaos.world import Observation
from nodecycle_sandbox.faults import Fault, Firing
from tests.campaign.scenarios import one_terminate

LAGGING = one_terminate(
    Fault("f1", "sqs-reorder"), Fault("f2", "dynamodb-index-lag", value=2.0), seed=9, index=4, ec2_lag=2.0
)


def _observed(scenario: Scenario) -> Observation:
    return Observation(
        scenario=scenario,
        groups={},
        started_at=0.0,
        acting_at=0.0,
        quiescent=True,
        left_over=[],
        actions=[],
        instances=[],
        history=[],
        addresses=[],
        final_addresses={},
        outcomes={},
        lost_kubelet=None,
        firings=[Firing(0.1, f.id, f.kind, "") for f in scenario.faults],
    )


class _World:
    """Runs a scenario at once, as recorded: the judge below decides whether it breaks the invariant."""

    def __init__(self) -> None:
        self.ran: list[Scenario] = []

    def run(self, scenario: Scenario) -> Observation:
        self.ran.append(scenario)
        return _observed(scenario)


@pytest.mark.parametrize(("needs_the_lag", "kept_lag"), [(True, 2.0), (False, 0.0)])
def test_a_violation_is_shrunk_to_the_faults_it_needs_and_to_no_ec2_lag_unless_it_needs_it(
    monkeypatch: pytest.MonkeyPatch, needs_the_lag: bool, kept_lag: float
) -> None:
    # Given a violation on a lagging AWS that needs the index's lag (f2), and EC2's lag or not
    def judged(observation: Observation) -> list[Violation]:
        scenario = observation.scenario
        broken = any(f.id == "f2" for f in scenario.faults) and (scenario.ec2_lag or not needs_the_lag)
        return [Violation("addresses", "stolen")] if broken else []

    monkeypatch.setattr(campaign.invariants, "check", judged)
    finding = Finding(LAGGING, judged(_observed(LAGGING)), ["f1", "f2"])
    world: Any = _World()

    # When it is shrunk
    _shrink(world, finding, _observed(LAGGING), lambda _: None)

    # Then the minimal scenario keeps the index's lag, and EC2's only when the violation needs it
    assert finding.reproduced
    assert finding.minimal is not None
    assert [f.id for f in finding.minimal.faults] == ["f2"]
    assert finding.minimal.ec2_lag == kept_lag
    assert "--lag" in finding.trace()
