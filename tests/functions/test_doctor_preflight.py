"""``nodecycle doctor --cluster NAME`` before deploying, without ``--group``: the run takes it (a preflight of the
cluster alone), so its hooks check says it was not made and what to pass, not an AssertionError with no words
(or, under ``python -O``, an AttributeError on the stack it does not have)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from moto import mock_aws

from nodecycle_cli.main import main

REGION = "eu-west-1"


@pytest.fixture
def account(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("NODECYCLE_STACK", raising=False)
    with mock_aws():
        yield


def test_a_preflight_of_the_cluster_alone_says_the_groups_were_not_given(
    account: None, capsys: pytest.CaptureFixture[str]
) -> None:
    # When the operator checks a cluster before deploying, naming no group
    main(["doctor", "--cluster", "prod", "--region", REGION, "--json"])

    # Then the hooks check is one not made, which says what to pass
    (hooks,) = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["check"] == "hooks"]
    assert hooks["status"] == "unchecked"
    assert "Error" not in hooks["what"], hooks
    assert "--group" in hooks["what"] + hooks["fix"]
