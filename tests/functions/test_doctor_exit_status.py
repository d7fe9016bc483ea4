"""``nodecycle doctor``'s exit status tells a script what its help says it tells: "nothing wrong found, some
checks not made" is a status of its own, never the one the doctor exits with when it could not look at all (no
such stack, no credentials, a wrong argument), which a script would otherwise read as a deployment with
nothing wrong."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from moto import mock_aws

from nodecycle_cli.doctor import __doc__ as doctor_help
from nodecycle_cli.doctor.findings import Finding, exit_status
from nodecycle_cli.main import main


@pytest.fixture
def account(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    monkeypatch.delenv("NODECYCLE_STACK", raising=False)
    with mock_aws():
        yield


def statuses_in_help() -> dict[int, str]:
    """The exit statuses the doctor's help names, each with what it says of it."""
    (said,) = re.findall(r"Exit status: (.*?)\.\s*(?:\n\n|\Z)", doctor_help or "", flags=re.DOTALL) or [""]
    return {int(code): meaning for code, meaning in re.findall(r"(\d) ([^,;]+)", " ".join(said.split()))}


def test_a_doctor_that_could_not_look_does_not_exit_as_one_that_found_nothing_wrong(account: None) -> None:
    # Given a doctor that made some checks and could not make one (an API not served): nothing wrong found
    unchecked = exit_status([Finding.ok("hooks", "fine"), Finding.unchecked("cluster.permissions", "no API")])

    # When the doctor cannot look at all: a stack name mistyped, or an argument it does not take
    no_stack = main(["doctor", "--stack", "nodecycle-typo"])
    with pytest.raises(SystemExit) as usage:
        main(["doctor", "--stack", "nodecycle", "--jsno"])

    # Then a script tells those apart from "nothing wrong found", by the statuses the help gives
    help_says = statuses_in_help()
    assert "could not be made" in help_says[unchecked]
    assert unchecked not in (no_stack, usage.value.code)
    assert no_stack == usage.value.code
    assert "could not run" in help_says[no_stack]
