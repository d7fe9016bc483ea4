"""The note of each entry's writer's clock (budget.clock) beside a document near the API server's 1 MiB limit for a
ConfigMap: what fits of it is written, the holders first, so that a reader on another clock than the writer's still
reads the holders' renewals as they were (a holder read 5 minutes old expires while its drain evicts: invariant 1).
The store on a minimal CoreV1Api: a ConfigMap replaced under its resourceVersion, each answer with its Date."""

from __future__ import annotations

from datetime import datetime, timedelta
from email.utils import format_datetime
from typing import Any

from kubernetes.client import V1ConfigMap, V1ObjectMeta

from nodecycle.adapters.kube.budget import CLOCK_KEY, CONFIGMAP_MAX_BYTES, ConfigMapBudgetStore
from nodecycle.domain.budget.document import BudgetDocument
from tests.unit.budget.test_document_capacity import NOW, document

BEHIND = timedelta(minutes=5)


class OneConfigMap:
    """The budget ConfigMap on an API server whose clock is ``NOW``."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}
        self.version = 1

    def read_namespaced_config_map_with_http_info(
        self, *_: Any, **__: Any
    ) -> tuple[V1ConfigMap, int, dict[str, str]]:
        metadata = V1ObjectMeta(
            name="nodecycle-budget",
            namespace="nodecycle",
            uid="u-1",
            resource_version=str(self.version),
            creation_timestamp=NOW,
        )
        return (
            V1ConfigMap(metadata=metadata, data=dict(self.data)),
            200,
            {"Date": format_datetime(NOW, usegmt=True)},
        )

    def replace_namespaced_config_map(self, _name: str, _namespace: str, body: Any, **__: Any) -> None:
        assert body.metadata.resource_version == str(self.version)
        assert sum(len(k) + len(v.encode()) for k, v in body.data.items()) <= CONFIGMAP_MAX_BYTES
        self.data, self.version = dict(body.data), self.version + 1


def store_on(api: OneConfigMap, clock: datetime) -> ConfigMapBudgetStore:
    return ConfigMapBudgetStore(lambda: api, "nodecycle", sleep=lambda _: None, wall_clock=clock.timestamp)


def test_a_document_near_the_limit_keeps_its_holders_clocks() -> None:
    # Given a document of 100 holders and a line of waiters grown to within 3 KB of the API server's limit, stamped
    # by a container 5 minutes behind the API server (a full note of its entries' clocks would not fit)
    holders, waiters = 100, 2200
    full = document(holders, waiters, urgent_at=NOW, passed=10, in_progress=True)
    excess = len(full.to_json()) - (CONFIGMAP_MAX_BYTES - 3000)
    while excess > 0:
        waiters -= 1
        excess -= BudgetDocument.entry_bytes(full.waiters[waiters])
    full = full.model_copy(update={"waiters": full.waiters[:waiters]})
    assert CONFIGMAP_MAX_BYTES - 3600 < len(full.to_json()) <= CONFIGMAP_MAX_BYTES - 3000
    assert len(full.to_json()) + 17 * (holders + waiters) > CONFIGMAP_MAX_BYTES
    behind = full.on_clocks(lambda _: -BEHIND)
    api = OneConfigMap()

    # When it writes it
    store_on(api, NOW - BEHIND).update(lambda _: (behind, None))

    # Then a reader on time with the API server reads every holder on the API server's clock
    read = store_on(api, NOW).read()
    assert read is not None
    assert {h.renewed_at for h in read.holders} == {NOW}
    assert CLOCK_KEY in api.data
    assert BudgetDocument.from_json(api.data["budget.json"]).holders[0].renewed_at == NOW - BEHIND


def test_a_note_of_the_clocks_edited_by_hand_into_nonsense_tells_nothing() -> None:
    # Given a document of holders written by a container 5 minutes behind, its note of their clocks then edited by
    # hand (a lead that is not a number, blank lines, a line without digests)
    api = OneConfigMap()
    store_on(api, NOW - BEHIND).update(lambda _: (document(3, 0).on_clocks(lambda _: -BEHIND), None))
    api.data[CLOCK_KEY] = "soon " + api.data[CLOCK_KEY].partition(" ")[2] + "\n\n   \n-300"

    # When a reader on time reads it, Then it reads the document, each entry on its own clock (as the version before
    # the note read it), rather than refuse it or move it by what it cannot read
    read = store_on(api, NOW).read()
    assert read is not None
    assert {h.renewed_at for h in read.holders} == {NOW - BEHIND}
