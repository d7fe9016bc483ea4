"""A drain whose cordon the API server refuses (an admission webhook guarding nodes, RBAC edited) evicts nothing,
and at its drain timeout both timeout policies let the instance go with its pods: the eviction errors' alarm,
on the metric as the cordon step emits it, must page before then."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.domain.model import Step
from nodecycle.domain.ports.cluster import Claim, NodeInfo, Refused
from tests.functions.test_operations_template import RESOURCES, alarm_fires, intrinsics
from tests.functions.test_template_heartbeat_alarm import Emitted, watched_by
from tests.support.fakes import T0
from tests.unit.drain.test_drain_steps import NODE, FakeCluster, FakeSlots, cordon, node, policy, terminating


class CordonForbidden(FakeCluster):
    def claim_node(
        self, node: NodeInfo, *, owner: str, in_progress: str, cordon: bool, exclude_from_lb: bool
    ) -> Claim:
        raise Refused(
            f'admission webhook "nodes.policy.example" denied the request: node {node.name} is guarded'
        )


@pytest.mark.parametrize("timeout", [900, 300, 180])
def test_a_cordon_refused_until_the_drain_timeout_pages_before_the_timeout_policy_lets_the_instance_go(
    timeout: int,
) -> None:
    # Given a drain that holds its slot, whose cordon the API server refuses at every poll (5 s apart), its
    # metrics counted through the functions' Metrics adapter
    now = T0
    emitted = Emitted(lambda: now)
    step = cordon(
        CordonForbidden(nodes={NODE: node()}),
        slots=FakeSlots(holders={NODE}),
        metrics=emitted,
        policy=policy(drain_timeout_seconds=str(timeout)),
    )
    record = terminating(Step.CORDON, node=NODE)

    # When it polls until its drain timeout settles it
    while True:
        outcome = step(record, now)
        if not outcome.again:
            break
        record = record.model_copy(update=dict(outcome.changes))
        now += timedelta(seconds=max(outcome.delay, 1))
    settled = int((now - T0).total_seconds())
    assert outcome.changes["outcome"] == "drain-timeout-cordon-refused"
    assert settled >= timeout - 5

    # Then the eviction errors' alarm, fed what was emitted, fires at least a minute before the timeout policy
    # acts (CloudWatch takes an EMF datapoint and evaluates an alarm within a minute or so)
    alarm = intrinsics({"OwnerId": "stack-a"}).resolve(RESOURCES["EvictionErrorsAlarm"]["Properties"])
    points = watched_by(alarm, emitted)
    assert points, "the refused cordon is not the alarm's metric as emitted"
    fired = alarm_fires(alarm, points, settled + 600)
    assert fired, "a cordon refused to its drain timeout never pages"
    assert fired[0] <= settled - 60, f"paged at {fired[0]} s, the instance went at {settled} s"
