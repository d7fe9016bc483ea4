"""A lifecycle held by a completion claim (engine.claimed_for_completion: a completer took the record before its
CompleteLifecycleAction and has not recorded what the call did) is shown for what it is: ``nodecycle status``
says who claimed it, since when, and when another completer may take it over; the doctor tells of a claim past
that time (its completer gone), a problem once a sweep's resend should have taken it over."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.domain.engine import claimed_for_completion
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle_cli.doctor.aws_checks import completion_claims
from nodecycle_cli.doctor.findings import Status
from nodecycle_cli.status import render
from tests.functions.test_cli_status import NOW, record

MARGIN = timedelta(seconds=60)
SWEEP = timedelta(minutes=5, seconds=60)  # a sweep interval and the resume grace


def claimed(
    index: int, ago: timedelta, *, outcome: str | None = None, by: str | None = "engine"
) -> LifecycleRecord:
    """A drain's lifecycle at COMPLETE, claimed ``ago`` by its completer, which recorded nothing since (``by``
    None: a claim written by a version before claims named their completer)."""
    at_completion = record(index, f"{index:08d}-1111-4111-8111-{'1' * 12}").model_copy(
        update={"step": Step.COMPLETE, "outcome": outcome}
    )
    claim = claimed_for_completion(at_completion, NOW - ago, by=by or "engine")
    if by is None:
        unnamed = {k: v for k, v in claim.extra["completion_claim"].items() if k != "by"}
        claim = claim.model_copy(update={"extra": {**claim.extra, "completion_claim": unnamed}})
    return claim


def rows(lines: list[str], title: str) -> dict[str, str]:
    """The rows of the section ``title`` of ``nodecycle status``, by instance."""
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    section = lines[start + 2 :]
    section = section[: section.index("")] if "" in section else section
    return {line.split()[0]: line for line in section}


def test_status_shows_who_claimed_a_completion_since_when_and_its_takeover() -> None:
    # Given claims written before claims named their completer: one the engine's (20 s ago), one the sweeper's
    # settlement's (3 minutes ago, its outcome says so), and a lifecycle at COMPLETE with no claim
    engine = claimed(1, timedelta(seconds=20), by=None)
    sweeper = claimed(2, timedelta(minutes=3), outcome="settled-by-sweeper", by=None)
    free = record(3, f"{3:08d}-1111-4111-8111-{'1' * 12}").model_copy(update={"step": Step.COMPLETE})

    # When the operator looks
    lines = render([engine, sweeper, free], NOW, finished_too=False, margin=MARGIN)

    # Then the claims are listed with their completer, their age, and when they may be taken over
    claims = rows(lines, "COMPLETION CLAIMS (2)")
    assert set(claims) == {engine.instance_id, sweeper.instance_id}
    assert "20s ago" in claims[engine.instance_id]
    assert "in 40s" in claims[engine.instance_id]
    assert "engine or sweeper" in claims[engine.instance_id]
    assert "sweeper" in claims[sweeper.instance_id].split()
    assert "3m00s ago" in claims[sweeper.instance_id]
    assert "due 2m00s ago" in claims[sweeper.instance_id]


@pytest.mark.parametrize("by", ["engine", "sweeper"])
def test_a_claim_that_names_its_completer_is_shown_so(by: str) -> None:
    # (the sweeper's settlement that keeps the action's own outcome: only its claim's name tells it)
    named = claimed(1, timedelta(seconds=5), by=by)

    claims = rows(render([named], NOW, finished_too=False, margin=MARGIN), "COMPLETION CLAIMS (1)")

    assert claims[named.instance_id].split()[2] == by


def test_status_without_claims_has_no_claims_section() -> None:
    lines = render([record(1, f"{1:08d}-1111-4111-8111-{'1' * 12}")], NOW, finished_too=False, margin=MARGIN)

    assert not any(line.startswith("COMPLETION CLAIMS") for line in lines)


def test_the_doctor_finds_no_fault_in_a_claim_within_its_margin() -> None:
    found = completion_claims([claimed(1, timedelta(seconds=30))], NOW, MARGIN, SWEEP, "nodecycle")

    assert found.status is Status.OK


def test_the_doctor_warns_of_a_claim_past_its_takeover_that_the_next_sweep_takes_over() -> None:
    # Given a claim 3 minutes old: its completer gone (a margin is 1 minute), the next sweep not yet come
    found = completion_claims([claimed(1, timedelta(minutes=3))], NOW, MARGIN, SWEEP, "nodecycle")

    assert found.status is Status.WARNING
    assert "i-00000000000000001" in found.what
    assert "its takeover due 2m00s ago" in found.what
    assert found.fix.startswith("nodecycle status --stack nodecycle")


def test_the_doctor_calls_a_claim_nothing_took_over_for_a_sweep_a_problem() -> None:
    # Given one claim the next sweep will take over, and one 20 minutes old that no sweep took over
    found = completion_claims(
        [claimed(1, timedelta(minutes=3)), claimed(2, timedelta(minutes=20))], NOW, MARGIN, SWEEP, "nodecycle"
    )

    assert found.status is Status.PROBLEM
    assert found.what.startswith("2 completion claims past their takeover time")
    assert "the sweeper does not run" in found.why


def test_a_claim_overtaken_by_a_later_commit_is_no_claim_at_work() -> None:
    # Given a claim whose record moved on (a later commit that kept the key: its seq is not the claim's)
    moved = claimed(1, timedelta(minutes=20))
    moved = moved.model_copy(update={"seq": moved.seq + 1})

    lines = render([moved], NOW, finished_too=False, margin=MARGIN)

    assert not any(line.startswith("COMPLETION CLAIMS") for line in lines)
    assert completion_claims([moved], NOW, MARGIN, SWEEP, "nodecycle").status is Status.OK
