"""A budget document put in its ConfigMap by a server-side apply under the stack's own field manager name
(``kubectl apply --server-side --field-manager=nodecycle`` of a saved manifest, a GitOps tool configured so): the
API server records it under the operation ``Apply``, which a stack's writes (a replace: ``Update``) never are. Such a
document is not the budget's, whatever its note says. The ConfigMap as the official client reads it, through the
product's store (managedFields as kube-apiserver keeps them: an entry per manager and operation)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client

from nodecycle.adapters.kube.budget import (
    DATA_KEY,
    FIELD_MANAGER,
    WRITTEN_KEY,
    ConfigMapBudgetStore,
    _written,
)
from nodecycle.domain.budget import BudgetDocument
from nodecycle.domain.budget.document import Released

UID = "3f1b0c7e-0000-4000-8000-000000000002"
NOW = datetime.now(UTC).replace(microsecond=0)
TEXT = BudgetDocument().to_json()
# a snapshot saved three hours ago: a slot released then, none of the drains that began since
SNAPSHOT = BudgetDocument(
    released=(Released(node="n", owner="green", released_at=NOW - timedelta(hours=3), ttl_seconds=300),)
).to_json()


class ReadOnly:
    def __init__(self, config_map: client.V1ConfigMap) -> None:
        self._config_map = config_map

    def read_namespaced_config_map_with_http_info(
        self, *_: Any, **__: Any
    ) -> tuple[client.V1ConfigMap, int, Any]:
        return self._config_map, 200, {}


def entry(manager: str, operation: str, *keys: str) -> client.V1ManagedFieldsEntry:
    return client.V1ManagedFieldsEntry(
        manager=manager,
        operation=operation,
        api_version="v1",
        time=NOW,
        fields_type="FieldsV1",
        fields_v1={"f:data": {f"f:{key}": {} for key in keys}},
    )


def unvouched(text: str, note: str, *managed: client.V1ManagedFieldsEntry) -> bool:
    metadata = client.V1ObjectMeta(
        name="nodecycle-budget",
        uid=UID,
        creation_timestamp=NOW - timedelta(days=2),
        managed_fields=list(managed),
    )
    config_map = client.V1ConfigMap(metadata=metadata, data={DATA_KEY: text, WRITTEN_KEY: note})
    read = ConfigMapBudgetStore(lambda: ReadOnly(config_map), "ns").read()
    assert read is not None
    return read.unvouched


def note(text: str) -> str:
    return _written(client.V1ObjectMeta(uid=UID), text)


@pytest.mark.parametrize(
    ("text", "said", "managed", "expected"),
    [
        # a stack's write (a replace: Update), for contrast
        (TEXT, note(TEXT), [entry(FIELD_MANAGER, "Update", DATA_KEY, WRITTEN_KEY)], False),
        # a snapshot of the whole object (its note a stack's, of this object) applied server-side under the name
        (SNAPSHOT, note(SNAPSHOT), [entry(FIELD_MANAGER, "Apply", DATA_KEY, WRITTEN_KEY)], True),
        # ... the document alone applied so, the note left as a stack's write set it
        (
            SNAPSHOT,
            note(TEXT),
            [entry(FIELD_MANAGER, "Update", WRITTEN_KEY), entry(FIELD_MANAGER, "Apply", DATA_KEY)],
            True,
        ),
        # ... the note alone applied so, over a document a stack wrote
        (
            TEXT,
            note(SNAPSHOT),
            [entry(FIELD_MANAGER, "Update", DATA_KEY), entry(FIELD_MANAGER, "Apply", WRITTEN_KEY)],
            True,
        ),
    ],
)
def test_a_document_applied_server_side_under_the_stacks_name_is_not_the_budgets(
    text: str, said: str, managed: list[client.V1ManagedFieldsEntry], expected: bool
) -> None:
    assert unvouched(text, said, *managed) is expected


def test_a_stacks_document_beside_a_note_no_manager_owns_is_judged_by_the_notes_digest() -> None:
    # Given budget.json set by a stack, and a note managedFields give to nobody (its entry trimmed or stripped):
    # the note of this object, of another document (a snapshot's note, put back by a tool that left no entry)
    managed = [entry(FIELD_MANAGER, "Update", DATA_KEY)]

    # Then the document is the budget's only where the note's digest is its own
    assert unvouched(TEXT, note(TEXT), *managed) is False
    assert unvouched(TEXT, note(SNAPSHOT), *managed) is True
