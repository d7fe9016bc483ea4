"""The readiness gate's last look before its timeout comes at the timeout, not a poll interval past it.

A launch waits ``ReadinessTimeoutSeconds`` for its node, then ``ReadinessFailureResult`` applies (the template's
description). The gate looked again a poll interval (``DrainPollSeconds``, up to 300 s) after wherever its last
look before the timeout fell: under a 90 s timeout polling every 60 s, a node that never joined held its launch
until the look at 120 s, a third more than the timeout, and at the shortest timeout (30 s) with the longest poll
(300 s) ten times as long; a refused read (RBAC not applied) likewise. The drain's polls come back at its timeout
(``_until_deadline``, tests/unit/drain/test_poll_within_the_drain_timeout.py); the gate's did not.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodecycle.domain.errors import TransientError
from nodecycle.domain.policy import ReadinessPolicy
from nodecycle.domain.ports.cluster import NodeInfo
from tests.support.readiness_gates import Dns, RefusingCluster, gate_on, poll_gate
from tests.unit.drain.test_drain_steps import FakeCluster, readiness

TIMEOUT, POLL = 90, 60


def slow_polls() -> ReadinessPolicy:
    # (the budget holder's TTL must cover 3 polls)
    return readiness(
        readiness_timeout_seconds=str(TIMEOUT), drain_poll_seconds=str(POLL), budget_holder_ttl_seconds="1200"
    )


def test_a_node_that_never_joins_is_given_up_at_the_readiness_timeout_not_a_poll_past_it() -> None:
    # Given a launch whose node never joins, the gate polling every 60 s under a 90 s readiness timeout
    cluster = FakeCluster()
    gate = gate_on(cluster, Dns(), slow_polls())

    # When the gate polls until it ends
    ended = poll_gate(gate, cluster, until=1000, joins={})

    # Then it ends at its timeout, not at the first poll after it (120 s)
    assert ended == TIMEOUT


def test_a_refused_read_of_the_node_is_given_up_at_the_readiness_timeout_not_a_poll_past_it() -> None:
    # Given the same gate, the API server refusing it the node (nodecycle's RBAC not applied)
    cluster = RefusingCluster()
    gate = gate_on(cluster, Dns(), slow_polls())

    # When the gate polls until it ends
    ended = poll_gate(gate, cluster, until=1000, joins={})

    # Then it ends at its timeout too
    assert ended == TIMEOUT


@dataclass
class FirstLookUnanswered(FakeCluster):
    """An API server that fails the gate's first look (a 503 as its control plane scales) and answers after."""

    looked: int = 0

    def find_node(
        self, instance_id: str, private_dns_name: str | None, *, scan: bool = True
    ) -> NodeInfo | None:
        self.looked += 1
        if self.looked == 1:
            raise TransientError("GET nodes: HTTP 503")
        return super().find_node(instance_id, private_dns_name, scan=scan)


def test_a_first_look_unanswered_under_a_poll_longer_than_the_timeout_is_given_up_at_the_timeout() -> None:
    # Given a gate polling every 300 s (DrainPollSeconds' most) under a 60 s readiness timeout, whose first look
    # the API server fails, and a node that never joins
    cluster = FirstLookUnanswered()
    policy = readiness(
        readiness_timeout_seconds="60", drain_poll_seconds="300", budget_holder_ttl_seconds="1200"
    )
    gate = gate_on(cluster, Dns(), policy)

    # When the gate polls until it ends
    ended = poll_gate(gate, cluster, until=1000, joins={})

    # Then it looked again by its timeout, and ended there, not a whole poll (300 s) after its first look
    assert cluster.looked == 2
    assert ended == 60
