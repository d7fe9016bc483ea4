"""Whom the budget takes a document in its ConfigMap to be set by: the API server's managedFields where it keeps
them (the manager that set ``budget.json`` and the note ``budget.written`` last), the note and the document's stamps
where it keeps none. The ConfigMap as the official client reads it, through the product's store."""

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

UID = "3f1b0c7e-0000-4000-8000-000000000001"
NOW = datetime.now(UTC).replace(microsecond=0)
TEXT = BudgetDocument().to_json()
# another document, stamped three hours ago (before the ConfigMap was created)
OLDER = BudgetDocument(
    released=(Released(node="n", owner="green", released_at=NOW - timedelta(hours=3), ttl_seconds=300),)
).to_json()


class ReadOnly:
    def __init__(self, config_map: client.V1ConfigMap) -> None:
        self._config_map = config_map

    def read_namespaced_config_map_with_http_info(
        self, *_: Any, **__: Any
    ) -> tuple[client.V1ConfigMap, int, Any]:
        return self._config_map, 200, {}


def entry(manager: str, *keys: str) -> client.V1ManagedFieldsEntry:
    return client.V1ManagedFieldsEntry(
        manager=manager,
        operation="Update",
        api_version="v1",
        time=NOW,
        fields_type="FieldsV1",
        fields_v1={"f:data": {f"f:{key}": {} for key in keys}},
    )


def unvouched(text: str, note: str | None, *managed: client.V1ManagedFieldsEntry) -> bool:
    metadata = client.V1ObjectMeta(
        name="nodecycle-budget",
        uid=UID,
        creation_timestamp=NOW - timedelta(hours=2),
        managed_fields=list(managed),
    )
    data = {DATA_KEY: text, **({} if note is None else {WRITTEN_KEY: note})}
    read = ConfigMapBudgetStore(
        lambda: ReadOnly(client.V1ConfigMap(metadata=metadata, data=data)), "ns"
    ).read()
    assert read is not None
    return read.unvouched


MINE = f"{UID} {_written(client.V1ObjectMeta(uid=UID), TEXT).split()[1]}"


@pytest.mark.parametrize(
    ("text", "note", "managed", "expected"),
    [
        # a stack's write, with its note
        (TEXT, MINE, [entry(FIELD_MANAGER, DATA_KEY, WRITTEN_KEY)], False),
        # a snapshot applied again, or a restore, by another manager: whatever its note says
        (TEXT, MINE, [entry("kubectl-client-side-apply", DATA_KEY, WRITTEN_KEY)], True),
        (TEXT, MINE, [entry(FIELD_MANAGER, WRITTEN_KEY), entry("argocd-controller", DATA_KEY)], True),
        (TEXT, None, [entry("velero-server", DATA_KEY)], True),
        # an older stack's write over this version's note (its digest another's): a stack's
        (OLDER, MINE, [entry(FIELD_MANAGER, DATA_KEY, WRITTEN_KEY)], False),
        # ... over a note another set (a snapshot applied again, then written over by the older stack)
        (OLDER, MINE, [entry(FIELD_MANAGER, DATA_KEY), entry("kubectl-edit", WRITTEN_KEY)], True),
        # a note of another object's, which a stack never sets here
        (TEXT, f"another-uid {MINE.split()[1]}", [entry(FIELD_MANAGER, DATA_KEY, WRITTEN_KEY)], True),
        # a stack before the note
        (OLDER, None, [entry(FIELD_MANAGER, DATA_KEY)], False),
        # no managedFields (a server that keeps none, or stripped): the note's uid and digest
        (TEXT, MINE, [], False),
        (OLDER, MINE, [], True),
        # ... and without the note, the stamps: none within MAX_CLOCK_AHEAD of the object's creation
        (OLDER, None, [], True),
    ],
)
def test_whom_a_document_is_taken_to_be_set_by(
    text: str, note: str | None, managed: list[client.V1ManagedFieldsEntry], expected: bool
) -> None:
    assert unvouched(text, note, *managed) is expected
