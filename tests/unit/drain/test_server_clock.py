"""How far a function's clock runs ahead of the API server's, as an answer's Date tells it (see
adapters/kube/server_clock.py), and the pods' deletion deadlines moved onto the function's clock by it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from nodecycle.adapters.kube import server_clock
from nodecycle.adapters.kube.cluster_api import _on_reader_clock
from nodecycle.domain.ports.cluster import PodInfo

SERVER = datetime(2026, 12, 6, 3, 0, 0, tzinfo=UTC)
DATE = "Sun, 06 Dec 2026 03:00:00 GMT"


def answer(date: str | None) -> SimpleNamespace:
    return SimpleNamespace(headers={} if date is None else {"Date": date})


@pytest.mark.parametrize(
    ("date", "received", "lead"),
    [
        pytest.param(DATE, SERVER + timedelta(seconds=60.4), timedelta(seconds=60.4), id="a minute ahead"),
        pytest.param(DATE, SERVER - timedelta(seconds=30), timedelta(seconds=-30), id="behind"),
        pytest.param(
            DATE, SERVER + timedelta(seconds=1.9), timedelta(0), id="within the Date's second: none"
        ),
        pytest.param(None, SERVER + timedelta(seconds=60), timedelta(0), id="no Date: none"),
        pytest.param("yesterday", SERVER + timedelta(seconds=60), timedelta(0), id="unreadable: none"),
        pytest.param(
            "Sun, 06 Dec 2026 03:00:00", SERVER + timedelta(seconds=60), timedelta(0), id="no zone: none"
        ),
    ],
)
def test_the_lead_an_answer_tells(date: str | None, received: datetime, lead: timedelta) -> None:
    assert server_clock.lead(answer(date), received.timestamp()) == lead


@pytest.mark.parametrize(
    ("headers", "date"),
    [
        pytest.param({"Date": DATE}, SERVER, id="told"),
        pytest.param(None, None, id="no headers"),
        pytest.param({"Date": "yesterday"}, None, id="unreadable"),
        pytest.param({"Date": "Sun, 06 Dec 2026 03:00:00"}, None, id="no zone"),
    ],
)
def test_the_api_servers_time_an_answer_tells(headers: dict[str, str] | None, date: datetime | None) -> None:
    # (the one reading of the Date: the budget's store takes it from here too)
    assert server_clock.server_date(headers) == date


def test_a_pods_deletion_deadline_is_moved_onto_the_readers_clock_and_nothing_else() -> None:
    pod = PodInfo(
        namespace="shop",
        name="web-1",
        uid="u1",
        controller_kind="ReplicaSet",
        mirror=False,
        grace_period=30,
        deletion_at=SERVER,
        deletion_grace=30,
    )
    moved = _on_reader_clock(pod, timedelta(seconds=60))
    assert moved == pod.model_copy(update={"deletion_at": SERVER + timedelta(seconds=60)})
    assert moved.deletion_requested_at == SERVER + timedelta(seconds=30)
    running = pod.model_copy(update={"deletion_at": None, "deletion_grace": None})
    assert _on_reader_clock(running, timedelta(seconds=60)) == running
