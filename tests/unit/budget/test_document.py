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

    # Then it carries the format version (3: no holder is seeded, so stacks of format 3 read it) and
    # Kubernetes-style field names, and reads back identically
    assert data["formatVersion"] == 3
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

    # Then it was understood, and is written in this version's format (3 without a seeded holder)
    assert granted.granted
    assert store.text is not None
    assert json.loads(store.text)["formatVersion"] == 3


def test_a_document_with_a_seeded_holder_is_format_4_which_a_stack_of_format_3_refuses(
    make_budget: BudgetFactory, store: MemoryBudgetStore
) -> None:
    # Given a holder seeded from its node into a document created again, not yet asked for by its lifecycle
    budget = make_budget("1", None)
    budget.acquire(slot("n1"))
    doc = store.read()
    assert doc is not None
    seeded = doc.model_copy(
        update={"holders": tuple(h.model_copy(update={"seeded": True}) for h in doc.holders)}
    )

    # When it is stored, Then it is of format 4 (a stack of format 3 would renew that slot without judging it,
    # and refuses the document instead), and reads back identically
    data = json.loads(seeded.to_json())
    assert data["formatVersion"] == FORMAT_VERSION == 4
    assert data["holders"][0]["seeded"] is True
    assert BudgetDocument.from_json(seeded.to_json()).holders == seeded.holders
    # and once its lifecycle asked (its slot kept: it fits), the holder is no longer seeded and the document is
    # of format 3 again
    store.text = seeded.to_json()
    assert budget.renew(slot("n1")).granted
    assert store.text is not None
    again = json.loads(store.text)
    assert again["formatVersion"] == 3
    assert "seeded" not in again["holders"][0]
