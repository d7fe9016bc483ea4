"""Two API server replicas behind the cluster's endpoint whose clocks are some seconds apart (one of them off NTP for a
while): the lead of a reader's clock over the API server's, as the answers' Date tells it, changes with the replica
that answers. The budget's stamps are told on the API server's clock (each writer's lead beside them: budget.clock), a
reader's moved by the lead of the answer that carried them. On the sandbox API server, through the product's adapters."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from kubernetes import client

from nodecycle.adapters.kube.eks_access import CLIENT_RETRIES
from nodecycle.domain.budget import SlotReason
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import DRAIN_KEY
from tests.integration.budget.test_budget_clock_five_minutes_off import behind_and_on_time, budget_of
from tests.integration.budget.test_configmap_recreated import request

APART = 3.0  # seconds between the two replicas' clocks: past the store's tolerance (2 s)


def test_a_release_whose_answer_is_lost_is_read_back_as_landed_from_the_other_replica(
    server: KubeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the container 5 minutes behind holding the budget's one slot for node 0, node 1 waiting, its answers
    # coming from the two replicas in turn
    config = server.api_client(DRAIN_KEY).configuration
    config.retries = CLIENT_RETRIES  # (the product's: a write whose answer is lost is not sent again)
    api = client.CoreV1Api(client.ApiClient(config))
    late_clock, _ = behind_and_on_time(server, monkeypatch)
    answers = itertools.count()
    late = budget_of(
        api,
        late_clock,
        timedelta(seconds=600),
        wall_clock=lambda: late_clock.now().timestamp() + APART * (next(answers) % 2),
    )
    assert late.acquire(request(0)).granted
    assert late.acquire(request(1)).reason is SlotReason.NO_ROOM

    # When node 0's slot is given back, and the API server applies the write but its answer is lost
    server.faults.arm([Fault("lost", "kube-lost-response", target="PUT configmaps", limit=1)], seed=1)
    woken = late.release(request(0).node, request(0).record_id, request(0).token)

    # Then its read back, answered by the other replica, finds the document as it wrote it: the slot passed on to
    # node 1, whose lifecycle it wakes
    assert [f.kind for f in server.faults.firings()] == ["kube-lost-response"]
    assert woken == [request(1).record_id]
    api.api_client.close()
