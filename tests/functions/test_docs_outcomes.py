"""The outcome an alarm's lifecycles end with (what `nodecycle status --all` shows an operator) is named in the
runbook entry that alarm points at."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ROOT / "layers" / "nodecycle"
RUNBOOK = (ROOT / "docs" / "runbook.md").read_text()
OUTCOME = r'"([a-z]+(?:-[a-z]+)+)"'


def entry(title: str) -> str:
    return RUNBOOK.split(f"### {title}\n", 1)[1].split("\n#", 1)[0]


def outcomes_written_where_counted(metric: str) -> set[str]:
    """The outcomes set in the statements that follow each count of ``metric`` (the decision it counts)."""
    found = set()
    for source in PRODUCT.rglob("*.py"):
        lines = source.read_text().splitlines()
        for index, line in enumerate(lines):
            if f'.count("{metric}")' in line:
                decision = "\n".join(lines[index : index + 24])
                found |= set(re.findall(rf"outcome(?:=|\"\s*:\s*)[^\n]*?{OUTCOME}", decision))
    return found


def test_both_outcomes_of_an_action_completed_near_its_global_timeout_are_in_its_entry() -> None:
    # Given the outcomes written where GlobalTimeoutsNear (the alarm's metric) is counted: the engine's guard
    # and the sweeper's last run
    written = outcomes_written_where_counted("GlobalTimeoutsNear")
    assert written == {"global-timeout-near", "settled-by-sweeper"}
    # Then the alarm's entry names each
    assert written <= set(re.findall(r"`([a-z-]+)`", entry("Global timeouts near")))


def test_every_drain_timeout_outcome_is_in_the_drain_timeouts_entry() -> None:
    # Given every outcome of a drain that reached its timeout
    written = {
        outcome
        for source in PRODUCT.rglob("*.py")
        for outcome in re.findall(OUTCOME, source.read_text())
        if outcome.startswith("drain-timeout-")
    }
    assert {"drain-timeout-forced", "drain-timeout-continued"} < written
    # Then the DrainTimeoutsAlarm's entry names each
    assert written <= set(re.findall(r"`([a-z-]+)`", entry("Drain timeouts")))
