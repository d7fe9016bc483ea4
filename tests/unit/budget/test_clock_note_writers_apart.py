"""The note of each entry's writer's clock (budget.clock) under writers that do not agree on a clock: what one
writer's line says must never be applied to stamps another writer put there. Taken at the wrong lead, a holder reads
minutes older than it is, expires while its drain evicts, and its slot is granted again (invariant 1). The store on a
minimal CoreV1Api (an API server whose clock is ``NOW``), a writer of the version before as the API it sees."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from typing import Any

import pytest

from nodecycle.adapters.kube import budget as kube_budget
from nodecycle.adapters.kube.budget import CLOCK_KEY, DATA_KEY
from nodecycle.domain.budget.document import BudgetDocument, Holder
from tests.unit.budget.test_clock_note_near_the_limit import OneConfigMap, store_on
from tests.unit.budget.test_document_capacity import NOW, document

BEHIND = timedelta(minutes=5)


class VersionBefore:
    """``api`` as a container of the version before reads and writes it: it knows nothing of CLOCK_KEY, and keeps
    the key as it read it (as any key of the data it does not know)."""

    def __init__(self, api: OneConfigMap) -> None:
        self._api = api

    def read_namespaced_config_map_with_http_info(self, *args: Any, **kwargs: Any) -> Any:
        answer = self._api.read_namespaced_config_map_with_http_info(*args, **kwargs)
        (answer[0].data or {}).pop(CLOCK_KEY, None)
        return answer

    def replace_namespaced_config_map(self, name: str, namespace: str, body: Any, **kwargs: Any) -> None:
        kept = self._api.data.get(CLOCK_KEY)
        data = {key: value for key, value in body.data.items() if key != CLOCK_KEY}
        body.data = data if kept is None else {**data, CLOCK_KEY: kept}
        self._api.replace_namespaced_config_map(name, namespace, body, **kwargs)


def holder_read(api: OneConfigMap, clock: datetime) -> Holder:
    read = store_on(api, clock).read()
    assert read is not None
    return read.holders[0]


def renewed(doc: BudgetDocument | None, at: datetime) -> tuple[BudgetDocument, None]:
    assert doc is not None
    first = doc.holders[0].model_copy(update={"renewed_at": at})
    return doc.model_copy(update={"holders": (first, *doc.holders[1:])}), None


def test_an_old_container_renewing_a_named_holder_leaves_its_renewal_unnamed() -> None:
    # Given a holder stamped by a container 5 minutes behind the API server, named in the note with its lead
    api = OneConfigMap()
    store_on(api, NOW - BEHIND).update(lambda _: (document(1, 0).on_clocks(lambda _: -BEHIND), None))
    note = api.data[CLOCK_KEY]
    assert note.startswith("-300 ")

    # When a container of the version before, on time, renews it (its own clock's stamp; the note kept as it was)
    store_on(VersionBefore(api), NOW).update(lambda doc: renewed(doc, NOW))  # type: ignore[arg-type]

    # Then a reader on time reads the renewal as the old container stamped it, not moved 5 minutes ahead by the
    # note's line for the stamps it replaced (and one 5 minutes behind reads it on its own clock as the version
    # before did)
    assert api.data[CLOCK_KEY] == note
    assert holder_read(api, NOW).renewed_at == NOW
    assert holder_read(api, NOW - BEHIND).renewed_at == NOW


def test_an_old_container_that_keeps_a_named_holders_stamps_keeps_its_lead() -> None:
    # Given a holder stamped by a container 5 minutes behind, named in the note
    api = OneConfigMap()
    store_on(api, NOW - BEHIND).update(lambda _: (document(1, 0).on_clocks(lambda _: -BEHIND), None))

    # When a container of the version before rewrites it without restamping it (another field of it changed)
    def retokened(doc: BudgetDocument | None) -> tuple[BudgetDocument, None]:
        assert doc is not None
        return doc.model_copy(update={"holders": (doc.holders[0].model_copy(update={"token": "t-2"}),)}), None

    store_on(VersionBefore(api), NOW).update(retokened)  # type: ignore[arg-type]

    # Then its stamps are still read on the clock that stamped them
    assert holder_read(api, NOW).renewed_at == NOW
    assert holder_read(api, NOW).token == "t-2"


def test_a_second_container_on_another_clock_renewing_a_holder_names_its_own_lead() -> None:
    # Given a holder stamped by a container on time
    api = OneConfigMap()
    store_on(api, NOW).update(lambda _: (document(1, 0), None))

    # When a second container of the same function, 5 minutes behind, renews it a minute later by its clock
    store_on(api, NOW - BEHIND).update(lambda doc: renewed(doc, NOW - BEHIND + timedelta(minutes=1)))

    # Then every reader reads the renewal a minute after NOW on the API server's clock (its own clock's view of it),
    # and its acquisition as the first container stamped it
    for lead in (timedelta(0), -BEHIND, 2 * BEHIND):
        read = holder_read(api, NOW + lead)
        assert read.renewed_at == NOW + timedelta(minutes=1) + lead
        assert read.acquired_at == NOW + lead


def test_a_write_keeps_the_entries_it_left_as_another_writer_stored_them() -> None:
    # Given two holders stamped by a container 5 minutes behind
    api = OneConfigMap()
    store_on(api, NOW - BEHIND).update(lambda _: (document(2, 0).on_clocks(lambda _: -BEHIND), None))
    first = BudgetDocument.from_json(api.data[DATA_KEY]).holders[0]

    # When a container 5 minutes ahead renews the second one only, a minute later by its clock
    def second_renewed(doc: BudgetDocument | None) -> tuple[BudgetDocument, None]:
        assert doc is not None
        later = doc.holders[1].model_copy(update={"renewed_at": NOW + BEHIND + timedelta(minutes=1)})
        return doc.model_copy(update={"holders": (doc.holders[0], later)}), None

    store_on(api, NOW + BEHIND).update(second_renewed)

    # Then the first is stored as it was, under its writer's lead; each is read on the API server's clock
    assert BudgetDocument.from_json(api.data[DATA_KEY]).holders[0] == first
    assert {line.split()[0] for line in api.data[CLOCK_KEY].splitlines()} == {"-300", "300"}
    read = store_on(api, NOW).read()
    assert read is not None
    assert [h.renewed_at for h in read.holders] == [NOW, NOW + timedelta(minutes=1)]


def test_a_reader_off_by_more_than_the_ttl_reads_and_keeps_another_writers_holder() -> None:
    # Given a holder of a 5-minute TTL stamped by a container on time
    api = OneConfigMap()
    store_on(api, NOW).update(lambda _: (document(1, 0), None))
    ttl = timedelta(seconds=document(1, 0).holders[0].ttl_seconds)

    # When a container whose clock runs two TTLs behind reads it and writes another entry beside it
    late = NOW - 2 * ttl
    read = holder_read(api, late)
    store_on(api, late).update(
        lambda doc: (doc.model_copy(update={"released": ()}) if doc else doc, None)  # (its own write)
    )

    def plus_one(doc: BudgetDocument | None) -> tuple[BudgetDocument, None]:
        assert doc is not None
        other = document(2, 0).holders[1].model_copy(update={"renewed_at": late, "acquired_at": late})
        return doc.model_copy(update={"holders": (*doc.holders, other)}), None

    store_on(api, late).update(plus_one)

    # Then it read the holder as renewed now by its clock (not expired), and a reader on time still reads both
    # holders as renewed now
    assert read.renewed_at == late
    assert not read.expired(late)
    on_time = store_on(api, NOW).read()
    assert on_time is not None
    assert [h.renewed_at for h in on_time.holders] == [NOW, NOW]
    assert not any(h.expired(NOW) for h in on_time.holders)


def test_a_note_edited_by_hand_to_a_lead_no_clock_runs_tells_nothing() -> None:
    # Given holders stamped by a container on time, the lead of their line then edited by hand to thousands of years
    # either way, and past what a number of seconds can be
    for lead in ("99999999999", "-99999999999", "1" + "0" * 20):
        api = OneConfigMap()
        store_on(api, NOW).update(lambda _: (document(3, 0), None))
        api.data[CLOCK_KEY] = f"{lead} {api.data[CLOCK_KEY].partition(' ')[2]}"

        # When a reader on time reads it and writes beside it, Then it reads each holder on its own clock (as the
        # version before the note read it), renewed now: not a read that fails (OverflowError: every ask, poll and
        # release of every drain failed until the note was mended), nor a holder moved thousands of years ahead,
        # expired as renewed further ahead than any clock runs, its slot granted again while its drain evicts
        store_on(api, NOW).update(lambda doc: (doc.model_copy(update={"released": ()}) if doc else doc, None))
        read = store_on(api, NOW).read()
        assert read is not None
        assert {h.renewed_at for h in read.holders} == {NOW}, lead
        assert not any(h.expired(NOW) for h in read.holders)


class CountedDigests:
    """The store's hashlib, counting the entries' digests (blake2b) it takes."""

    def __init__(self) -> None:
        self.taken = 0

    def blake2b(self, *args: Any, **kwargs: Any) -> Any:
        self.taken += 1
        return hashlib.blake2b(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(hashlib, name)


def test_a_poll_on_the_writers_clock_digests_only_what_it_stamps(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a line of 1,000 waiters and 100 holders written by a container on time, every entry named in the note
    api = OneConfigMap()
    store_on(api, NOW).update(lambda _: (document(100, 1000), None))
    entries = 100 + 1000 + len(document(0, 0).limits)
    digests = CountedDigests()
    monkeypatch.setattr(kube_budget, "hashlib", digests)

    # When a container on the same clock reads it (a snapshot, a write's answer read back), Then it digests no entry:
    # none moves (3-5 ms a read, 2,000 digests, on every read)
    assert store_on(api, NOW).read() is not None
    assert digests.taken == 0

    # When it renews one holder, Then it digests the entries as read, and at the write only what it stamped: the
    # entries it left are written under the digests they were read with (not each digested again, 3 ms a write)
    store_on(api, NOW).update(lambda doc: renewed(doc, NOW + timedelta(seconds=1)))
    assert digests.taken <= entries + 2
    read = store_on(api, NOW).read()
    assert read is not None
    assert read.holders[0].renewed_at == NOW + timedelta(seconds=1)
    assert len(api.data[CLOCK_KEY].split()) == 1 + entries
