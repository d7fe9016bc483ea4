"""A write of the budget ConfigMap the API server refuses for a reason of its own (not the two the store knows
before it writes: an immutable ConfigMap, or others' keys taking its 1 MiB): an admission policy that denies
updates of ConfigMaps in the namespace (a policy's 422 Invalid, a webhook's 403 Forbidden or, on older kube-apiservers, 400), a proxy in front of the API
server that takes no body that large (413). The same write is refused again until a person changes the policy:
the ConfigMap's answer, a Refused naming what the server said, as a refused read is (a drain's poll evicts nothing
and tells why on its node; an ask is retried up to its refused tries, then its message fails: the alarm); not a
transient error retried until the message is dead-lettered, logged as a document too large."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nodecycle.adapters.kube.budget import BudgetCrowdedOut, BudgetImmutable
from nodecycle.domain.errors import TransientError
from nodecycle.domain.ports.cluster import Refused
from nodecycle_sandbox.kube import KubeServer
from nodecycle_sandbox.kube.admission import Denial
from tests.integration.budget.conftest import NAMESPACE, act_as_drain, add_nodes, core_api
from tests.integration.budget.test_configmap_recreated import budget_of, polled, request
from tests.unit.budget.fakes import FakeClock

POLICY = "configmap-policy.platform.example.com"
SAID = "ConfigMaps in namespace nodecycle are changed through the GitOps repository only"


@pytest.fixture
def server() -> Iterator[KubeServer]:
    with KubeServer(tls=True) as started:
        act_as_drain(started)
        yield started


@pytest.mark.parametrize(
    ("code", "reason"), [(422, "Invalid"), (400, "BadRequest"), (413, "RequestEntityTooLarge")]
)
def test_a_budget_write_the_api_server_refuses_for_its_own_reason_is_refused_naming_what_it_said(
    server: KubeServer, code: int, reason: str
) -> None:
    # Given a budget of 1 held by node 0's drain
    add_nodes(server, 3)
    api = core_api(server)
    clock = FakeClock()
    assert budget_of(api, clock, "blue", "1", "1").acquire(request(0)).granted

    # When an admission policy denies every update of the budget ConfigMap, and node 1 asks, and node 0's drain
    # renews its slot when it is due
    server.admission.deny(
        Denial(
            POLICY,
            "UPDATE",
            "configmaps",
            NAMESPACE,
            "nodecycle-budget",
            code=code,
            reason=reason,
            message=SAID,
        )
    )
    clock.advance(200)
    refusals = []
    for ask, slot in (
        (budget_of(api, clock, "blue", "1", "1").acquire, request(1)),
        (budget_of(api, clock, "blue", "1", "1").renew, polled(0)),
    ):
        try:
            ask(slot)
        except (Refused, TransientError) as error:
            refusals.append(error)
    api.api_client.close()

    # Then each write was sent and refused, and each is a Refused naming the ConfigMap and what the server said;
    # neither of the known causes, nor a transient error to be retried into the dead-letter queue
    assert len(server.admission.denied()) == 2
    assert len(refusals) == 2
    for refusal in refusals:
        assert isinstance(refusal, Refused), f"{type(refusal).__name__}: {refusal}"
        assert not isinstance(refusal, TransientError | BudgetImmutable | BudgetCrowdedOut)
        assert f"{NAMESPACE}/nodecycle-budget" in str(refusal)
        assert f'admission webhook "{POLICY}" denied the request: {SAID}' in str(refusal)
        assert f"HTTP {code}" in str(refusal)
