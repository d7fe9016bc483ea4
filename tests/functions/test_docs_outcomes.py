"""The outcome an alarm's lifecycles end with (what `nodecycle status --all` shows an operator) is named in the
runbook entry that alarm points at."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ROOT / "layers" / "nodecycle"
RUNBOOK = (ROOT / "docs" / "runbook.md").read_text()
OUTCOME = r'"([a-z]+(?:-[a-z]+)+)"'


def entry(title: str) -> str:
    return RUNBOOK.split(f"### {title}\n", 1)[1].split("\n#", 1)[0]


def outcomes_written_where_counted(metric: str) -> set[str]:
    """The outcomes set (or, where the count follows the write that lands, compared) in each function that
    counts ``metric``: the decision it counts."""
    found = set()
    for source in PRODUCT.rglob("*.py"):
        text = source.read_text()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                decision = ast.get_source_segment(text, node) or ""
                if f'.count("{metric}")' in decision and not any(
                    f'.count("{metric}")' in (ast.get_source_segment(text, inner) or "")
                    for inner in ast.walk(node)
                    if inner is not node and isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef)
                ):
                    found |= set(re.findall(rf"outcome(?:=|\s*==\s*|\"\s*:\s*)[^\n]*?{OUTCOME}", decision))
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
