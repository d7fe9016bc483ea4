from __future__ import annotations

import json

import pytest

from nodecycle.domain.budget import FORMAT_VERSION, BudgetDocument, BudgetFormatError
from tests.unit.budget.fakes import BudgetFactory, MemoryBudgetStore, slot


def test_the_stored_document_is_camel_case_json_with_a_format_version(
    make_budget: BudgetFactory, store: MemoryBudgetStore
) -> None:
    # Given a budget with one holder and one waiter
    budget = make_budget("1", None)
    budget.acquire(slot("n1"))
    budget.acquire(slot("n2"))

    # When the stored text is read as plain JSON
    assert store.text is not None
    data = json.loads(store.text)

    # Then it carries the format version and Kubernetes-style field names, and reads back identically
    assert data["formatVersion"] == FORMAT_VERSION
    assert data["holders"][0]["instanceId"] == "i-n1"
    assert data["waiters"][0]["waitingSince"].endswith("Z")
    assert data["limits"]["blue"]["maxUnavailable"] == "1"
    assert BudgetDocument.from_json(store.text) == store.read()


@pytest.mark.parametrize("version", [FORMAT_VERSION + 1, 0, "1", None])
def test_a_document_of_another_format_is_refused_rather_than_rewritten(version: object) -> None:
    with pytest.raises(BudgetFormatError, match="not supported"):
        BudgetDocument.from_json(json.dumps({"formatVersion": version, "holders": []}))


@pytest.mark.parametrize("text", ["{not json", '{"formatVersion": 1, "holders": [{"node": "n1"}]}', "[]"])
def test_a_damaged_document_is_refused(text: str) -> None:
    with pytest.raises(BudgetFormatError):
        BudgetDocument.from_json(text)


def test_a_format_2_document_is_read_and_its_released_slots_refuse_no_lifecycle(
    make_budget: BudgetFactory, store: MemoryBudgetStore
) -> None:
    # Given a document written by a stack of format 2: a released slot that names no lifecycle
    store.text = json.dumps(
        {
            "formatVersion": 2,
            "holders": [],
            "waiters": [],
            "released": [
                {"node": "n1", "owner": "blue", "releasedAt": "2999-01-01T00:00:00Z", "ttlSeconds": 300}
            ],
            "limits": {},
        }
    )

    # When this version decides on it and writes it back
    granted = make_budget("1", None).acquire(slot("n1"))

    # Then it was understood, and is written in this version's format
    assert granted.granted
    assert store.text is not None
    assert json.loads(store.text)["formatVersion"] == FORMAT_VERSION == 3
