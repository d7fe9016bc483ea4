"""``nodecycle rbac`` given a namespace or group prefix Kubernetes refuses renders nothing and exits as every
command that could not run does (2, one line on stderr: the README's exit statuses), not 1, which the doctor
and a script read as "ran, and found something wrong"."""

from __future__ import annotations

import pytest

from nodecycle_cli.main import main


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--namespace", "Team_Budget"], "--namespace 'Team_Budget' is not a valid namespace name"),
        (["--group-prefix", "Team"], "--group-prefix 'Team': lower-case letters"),
    ],
)
def test_a_value_kubernetes_refuses_is_a_command_that_could_not_run(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["rbac", *argv])
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert err.startswith(f"nodecycle rbac: {said}")
    assert err.count("\n") == 1
