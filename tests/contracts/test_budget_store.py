"""The budget's document store: MemoryBudgetStore (the unit tests') and ConfigMapBudgetStore on the sandbox's
API server (HTTPS, deploy/rbac.yaml applied, the drain function's client) answer alike.

What the budget relies on: the ConfigMap as shipped is an empty budget; an update that loses a race (another
writer came first: 409; the ConfigMap deleted meanwhile: 404) runs the whole read-mutate-write again on what
is stored now, and one that keeps losing raises BudgetContention (transient), having written nothing; a
mutation that returns the document it was given writes nothing; a ConfigMap that is not there reads as None
and is never created (BudgetNotInstalled); a document past the API server's 1 MiB is refused (a transient
error the step retries), nothing written."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, Protocol

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from nodecycle.adapters.kube.budget import BudgetContention, BudgetNotInstalled, ConfigMapBudgetStore
from nodecycle.adapters.kube.eks_access import CLIENT_RETRIES
from nodecycle.domain.budget import BudgetDocument
from nodecycle.domain.budget.document import Released
from nodecycle.domain.errors import TransientError
from nodecycle.domain.ports.budget import BudgetStore
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import DRAIN_KEY, NAMESPACE, RBAC, act_as_drain, admin_api
from tests.unit.budget.fakes import MemoryBudgetStore

MAX_ATTEMPTS = 3
NAME = "nodecycle-budget"


class Side(Protocol):
    def writer(self) -> BudgetStore:
        """A writer of the one document (each call: another function's, racing the others)."""
        ...

    def uninstall(self) -> None:
        """The ConfigMap deleted (by a person, a GitOps tool)."""
        ...

    def reinstall(self) -> None:
        """The ConfigMap created again as shipped (empty), after :meth:`uninstall`."""
        ...

    def lose_next_answer(self) -> None:
        """The next write is done, and its answer lost (the connection closed before the response)."""
        ...

    def version(self) -> str: ...


class FakeSide:
    def __init__(self) -> None:
        self.store = MemoryBudgetStore(max_attempts=MAX_ATTEMPTS)

    def writer(self) -> BudgetStore:
        return self.store

    def uninstall(self) -> None:
        self.store.uninstall()

    def reinstall(self) -> None:
        self.store.reinstall()

    def lose_next_answer(self) -> None:
        self.store.lose_answer()

    def version(self) -> str:
        return str(self.store.version)


class ApiServerSide:
    def __init__(self, server: KubeServer) -> None:
        self.server = server
        self.admin = admin_api(server)
        # (with the product's retries: urllib3's default would send a write whose answer was lost again)
        config = server.api_client(DRAIN_KEY).configuration
        config.retries = CLIENT_RETRIES
        self.core = client.CoreV1Api(client.ApiClient(config))

    def writer(self) -> BudgetStore:
        return ConfigMapBudgetStore(
            lambda: self.core, NAMESPACE, max_attempts=MAX_ATTEMPTS, sleep=lambda seconds: None
        )

    def uninstall(self) -> None:
        self.admin.delete_namespaced_config_map(NAME, NAMESPACE)

    def reinstall(self) -> None:
        self.server.apply(RBAC)

    def lose_next_answer(self) -> None:
        self.server.faults.arm(
            [Fault("lost", "kube-lost-response", target="PUT configmaps", limit=1)], seed=1
        )

    def version(self) -> str:
        try:
            metadata = self.admin.read_namespaced_config_map(NAME, NAMESPACE).metadata
            return str(metadata.resource_version if metadata is not None else None)
        except ApiException as error:
            if error.status == 404:
                return "none"
            raise


@pytest.fixture(scope="module")
def server() -> Iterator[KubeServer]:
    with KubeServer(tls=True) as started:
        act_as_drain(started)
        yield started


@pytest.fixture(params=["fake", "api-server"])
def side(request: pytest.FixtureRequest) -> Iterator[Side]:
    if request.param == "fake":
        yield FakeSide()
        return
    server: KubeServer = request.getfixturevalue("server")
    api = ApiServerSide(server)
    yield api
    # the next test finds the ConfigMap as deploy/rbac.yaml ships it
    try:
        api.uninstall()
    except ApiException as error:
        if error.status != 404:
            raise
    server.apply(RBAC)
    api.core.api_client.close()
    api.admin.api_client.close()


def with_entry(doc: BudgetDocument | None, node: str) -> BudgetDocument:
    """A change easy to see: one more entry in ``released``."""
    base = doc or BudgetDocument()
    entry = Released(node=node, owner="test", released_at=datetime(2025, 1, 1, tzinfo=UTC), ttl_seconds=60)
    return base.model_copy(update={"released": (*base.released, entry)})


def nodes(store: BudgetStore) -> list[str]:
    doc = store.read()
    return [] if doc is None else [r.node for r in doc.released]


def adding(node: str, result: Any = None) -> Callable[[BudgetDocument | None], tuple[BudgetDocument, Any]]:
    return lambda doc: (with_entry(doc, node), result)


def as_shipped(doc: BudgetDocument | None) -> BudgetDocument | None:
    """``doc`` without the creation time a store may tell with it (the ConfigMap's: see BudgetDocument.created_at)."""
    return None if doc is None else doc.model_copy(update={"created_at": None})


def test_the_shipped_budget_is_empty_and_an_update_writes_it(side: Side) -> None:
    store = side.writer()
    assert as_shipped(store.read()) == BudgetDocument(
        unwritten=True
    )  # never written: seeded at its first write

    assert store.update(adding("n1", "granted")) == "granted"

    assert nodes(side.writer()) == ["n1"]


def test_a_mutation_that_returns_its_document_writes_nothing(side: Side) -> None:
    store = side.writer()
    store.update(adding("n1"))
    before = side.version()

    assert store.update(lambda doc: (doc, "unchanged")) == "unchanged"

    assert side.version() == before


def test_an_update_that_lost_a_race_runs_again_on_the_stored_document(side: Side) -> None:
    store, rival = side.writer(), side.writer()
    seen: list[list[str]] = []

    def mutate(doc: BudgetDocument | None) -> tuple[BudgetDocument, None]:
        seen.append([r.node for r in (doc or BudgetDocument()).released])
        if len(seen) == 1:
            rival.update(adding("rival"))  # between this update's read and its write
        return with_entry(doc, "mine"), None

    store.update(mutate)

    assert seen == [[], ["rival"]]
    assert nodes(store) == ["rival", "mine"]


def test_conflicts_that_do_not_let_up_are_budget_contention_and_write_nothing(side: Side) -> None:
    store, rival = side.writer(), side.writer()
    attempts = 0

    def always_overtaken(doc: BudgetDocument | None) -> tuple[BudgetDocument, None]:
        nonlocal attempts
        attempts += 1
        rival.update(adding(f"rival-{attempts}"))
        return with_entry(doc, "never"), None

    with pytest.raises(BudgetContention):
        store.update(always_overtaken)

    assert issubclass(BudgetContention, TransientError)
    assert attempts == MAX_ATTEMPTS
    assert nodes(store) == [f"rival-{n}" for n in range(1, MAX_ATTEMPTS + 1)]


def test_a_budget_not_installed_reads_as_none_and_is_never_created(side: Side) -> None:
    side.uninstall()
    store = side.writer()
    assert store.read() is None

    assert store.update(lambda doc: (doc, "nothing to write")) == "nothing to write"
    with pytest.raises(BudgetNotInstalled):
        store.update(adding("n1"))
    assert side.writer().read() is None


def test_a_budget_created_again_after_a_deletion_reads_as_never_written_as_shipped(side: Side) -> None:
    # Given a budget written to (its document stored)
    store = side.writer()
    store.update(adding("n1"))
    written = store.read()
    assert written is not None
    assert not written.unwritten

    # When it is deleted and created again as shipped (kubectl delete; kubectl apply -f deploy/rbac.yaml)
    side.uninstall()
    assert store.read() is None
    side.reinstall()

    # Then it reads as an empty budget never written, which the budget's first write seeds from the nodes
    assert as_shipped(side.writer().read()) == BudgetDocument(unwritten=True)
    # and the flag is never stored: once written, it reads as written
    store.update(lambda doc: (doc, None))  # nothing to write: left as it is
    assert as_shipped(side.writer().read()) == BudgetDocument(unwritten=True)
    store.update(adding("n2"))
    again = side.writer().read()
    assert again is not None
    assert not again.unwritten
    assert [r.node for r in again.released] == ["n2"]


def test_a_budget_deleted_between_read_and_write_is_read_again_and_found_missing(side: Side) -> None:
    store = side.writer()
    seen: list[BudgetDocument | None] = []

    def mutate(doc: BudgetDocument | None) -> tuple[BudgetDocument, None]:
        seen.append(doc)
        if len(seen) == 1:
            side.uninstall()
        return with_entry(doc, "n1"), None

    with pytest.raises(BudgetNotInstalled):
        store.update(mutate)
    assert [as_shipped(doc) for doc in seen] == [BudgetDocument(unwritten=True), None]


def test_a_document_past_the_api_servers_1_mib_is_refused_and_nothing_written(side: Side) -> None:
    # Given a document just past 1 MiB (a bound the budget's rules keep it under: MAX_DOCUMENT_BYTES)
    store = side.writer()
    store.update(adding("n1"))
    one = with_entry(None, "x" * 240)
    size = len(one.to_json()) - len(BudgetDocument().to_json())  # an entry's bytes
    big = BudgetDocument(released=one.released * (1024 * 1024 // size + 1))
    assert len(big.to_json().encode()) > 1024 * 1024
    before = side.version()

    # When it is written, Then it is refused as transient (the step retries later), and nothing changed
    with pytest.raises(TransientError) as refused:
        store.update(lambda doc: (big, None))
    assert not isinstance(refused.value, BudgetContention)
    assert (nodes(store), side.version()) == (["n1"], before)


def test_a_budget_deleted_and_created_again_between_read_and_write_is_decided_again_on_the_new_one(
    side: Side,
) -> None:
    # Given a budget with an entry, deleted and shipped again (empty) by a GitOps tool while a writer decides
    store = side.writer()
    store.update(adding("n0"))
    seen: list[BudgetDocument | None] = []

    def mutate(doc: BudgetDocument | None) -> tuple[BudgetDocument, None]:
        seen.append(doc)
        if len(seen) == 1:
            side.uninstall()
            side.reinstall()
        return with_entry(doc, "n1"), None

    # When the writer writes what it decided on the old one
    store.update(mutate)

    # Then that write lost (the object it read is gone: its version is not the new one's), and the decision
    # was made again on the new, empty document: nothing of the old one is written back
    assert [None if doc is None else [r.node for r in doc.released] for doc in seen] == [["n0"], []]
    assert nodes(store) == ["n1"]


def test_a_write_whose_answer_is_lost_landed_and_is_a_transient_error_not_written_twice(side: Side) -> None:
    # Given a write whose answer the connection loses (the API server wrote it, then the connection closed)
    store = side.writer()
    calls: list[BudgetDocument | None] = []

    def mutate(doc: BudgetDocument | None) -> tuple[BudgetDocument, None]:
        calls.append(doc)
        return with_entry(doc, "n1"), None

    side.lose_next_answer()

    # When it is written, Then the writer is told of a transient error (not of a conflict, which it would have
    # retried on its own write), having decided once; the step that retries finds its write done
    with pytest.raises(TransientError) as lost:
        store.update(mutate)
    assert not isinstance(lost.value, BudgetContention)
    assert len(calls) == 1
    assert nodes(store) == ["n1"]
