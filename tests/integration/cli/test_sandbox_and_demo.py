"""``nodecycle sandbox`` and ``nodecycle demo`` as a person runs them: a bad parameter or bad settings stop
them at once with one line, a failing function during the launches is shown at once, and the demo runs in
each Elastic IP mode it offers and draws its timeline."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nodecycle_cli.failures import CommandError
from nodecycle_cli.main import main
from nodecycle_cli.sandbox import wait_for_launches
from nodecycle_sandbox import Sandbox, SandboxOptions
from nodecycle_sandbox.aws.group import GroupSpec

ROOT = Path(__file__).resolve().parents[3]


def paths(tmp_path: Path) -> list[str]:
    return [
        "--kubeconfig",
        str(tmp_path / "kubeconfig"),
        "--env-file",
        str(tmp_path / "sandbox.env"),
        "--log-dir",
        str(tmp_path / "logs"),
    ]


def test_a_parameter_the_template_refuses_stops_the_sandbox_at_once_naming_its_constraint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["sandbox", "--parameter", "SweepGraceSeconds=60", *paths(tmp_path)])

    assert status == 2
    assert capsys.readouterr().err.splitlines() == [
        "nodecycle sandbox: parameter SweepGraceSeconds='60' is not valid: it must be whole seconds from 300 to "
        "31536000 (365 days) (AllowedPattern)"
    ]


def test_settings_every_function_would_refuse_stop_the_sandbox_with_the_settings_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a holder TTL the template allows (>= 270) but shorter than a crashed step's retry
    status = main(["sandbox", "--parameter", "BudgetHolderTtlSeconds=300", *paths(tmp_path)])

    err = capsys.readouterr().err.splitlines()
    assert status == 2
    assert len(err) == 1
    assert err[0].startswith(
        "nodecycle sandbox: the functions would refuse these settings: invalid nodecycle settings: "
        "NODECYCLE_BUDGET_HOLDER_TTL_SECONDS must be at least 330"
    )


def test_a_function_that_cannot_start_while_the_group_launches_is_shown_at_once(tmp_path: Path) -> None:
    # Given functions whose budget node selector their settings refuse (set on them by hand: the template's
    # pattern refuses it)
    options = SandboxOptions(
        root=ROOT,
        group=None,
        parameters={"ManagedGroups": "workers"},
        settings={"NODECYCLE_BUDGET_NODE_SELECTOR": "tier in (a"},
        log_dir=tmp_path,
    )
    with Sandbox(options) as sandbox:
        # When the group launches
        sandbox.create_group(GroupSpec(name="workers", size=1))

        # Then the wait ends with the settings error of the first function that reads the cluster's settings (the
        # sweeper at its first tick, or the drain at the launch's readiness gate), not at the timeout
        with pytest.raises(CommandError) as failed:
            wait_for_launches(sandbox, 1, timeout=600, log_dir=tmp_path)
    settings_error = (
        r"(SweeperFunction|DrainFunction) failed while the group launched: SettingsError: invalid nodecycle "
        r"settings: NODECYCLE_BUDGET_NODE_SELECTOR: not a label selector the API server would accept: "
        r"'tier in \(a' \(its log: (.*)\.log\)"
    )
    matched = re.fullmatch(settings_error, str(failed.value))
    assert matched is not None, str(failed.value)
    assert matched[2] == str(tmp_path / matched[1])


@pytest.mark.slow
# (allocate, the default, is the Spot demo's mode below, its Elastic IPs checked there: one demo fewer in every
# run of the suite, each a sandbox of 4 instances replaced. "off" only leaves the Elastic IP check out.)
@pytest.mark.parametrize("mode", ["pool"])
def test_the_demo_runs_in_each_address_mode_and_draws_its_timeline(
    mode: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a small refresh: 4 nodes over 3 zones (two in one zone), 2 at a time, 1 per zone
    argv = ["demo", "--nodes", "4", "--max-unavailable", "2", "--max-unavailable-per-zone", "1"]

    status = main([*argv, "--eip-mode", mode, "--timeline-dir", str(tmp_path), *paths(tmp_path)])

    captured = capsys.readouterr()
    out = captured.out
    assert status == 0, [line for line in captured.err.splitlines() if line.startswith("nodecycle")]
    assert "all checks passed" in out
    if mode == "pool":
        assert "address pool sandbox-pool: 8 Elastic IPs tagged nodecycle:pool=sandbox-pool" in out
        assert re.search(
            r"PASS  Elastic IPs: 4 instances in service with one address each, 0 unassociated, 4 free", out
        )
    # The timeline: its paths printed, a PNG, and a page that says the budget held, zone by zone
    png, page = tmp_path / "timeline.png", tmp_path / "timeline.html"
    assert f"timeline of the refresh: {png}" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = page.read_text()
    assert "<svg" in html
    assert "the budget held at every moment" in html
    summary = re.search(
        r"At most (\d) nodes held a budget slot at once \(limit 2\); per zone, at most (.*?) \(limit 1\)",
        html,
    )
    assert summary is not None
    assert 1 <= int(summary.group(1)) <= 2
    assert re.findall(r"eu-west-1[abc]: (\d)", summary.group(2)) == ["1", "1", "1"]


@pytest.mark.slow
def test_the_spot_demo_shows_an_interruption_in_the_middle_of_the_refresh_and_its_checks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a small Spot group under the demo's budget (1 per zone), its Elastic IPs allocated (the default
    # mode), and a warning compressed to 40 s
    argv = ["demo", "--spot", "--spot-warning", "40", "--nodes", "6"]

    # When the demo runs
    status = main([*argv, "--timeline-dir", str(tmp_path), *paths(tmp_path)])

    # Then EC2's warning is shown during the refresh, and the interruption's checks pass with the others
    out = capsys.readouterr().out
    assert status == 0, out
    assert re.search(r"EC2: Spot Instance Interruption Warning for i-\w+ \(.+\): it ends in 40 s", out)
    assert re.search(r"PASS  Spot interruption: .+ emptied \d+\.\d s after the warning \(of 40 s\)", out)
    assert re.search(r"PASS  its terminate hook: completed .+ the node found drained", out)
    # and every instance in service after the refresh and the interruption has its one address, none left over
    assert "PASS  Elastic IPs: 6 instances in service with one address each, 0 unassociated" in out
    assert "all checks passed" in out
