"""Every `reason` of `LifecycleEventsRejected` an operator can see on the dashboard (one line per reason) has
its word in the runbook's "Rejected events" entry, which the RejectedEventsAlarm points at."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ROOT / "layers" / "nodecycle"
RUNBOOK = (ROOT / "docs" / "runbook.md").read_text()


def emitted_reasons() -> set[str]:
    """The reasons the code rejects an event with: the contracts' InvalidLifecycleEvent (its reason is the
    metric's dimension, functions/intake/app.py), and intake's own counts, literal or chosen between two."""
    reasons = set()
    for source in PRODUCT.rglob("*.py"):
        text = source.read_text()
        reasons |= set(re.findall(r'InvalidLifecycleEvent\(\s*"([a-z-]+)"', text))
        reasons |= set(re.findall(r'count\("LifecycleEventsRejected", reason="([a-z-]+)"\)', text))
        if 'count("LifecycleEventsRejected", reason=reason)' in text:
            for chosen in re.findall(r'\breason = ("[a-z-]+"(?: if [^\n]+ else "[a-z-]+")?)\n', text):
                reasons |= set(re.findall(r'"([a-z-]+)"', chosen))
    return reasons


def test_every_reason_an_event_is_rejected_for_is_in_the_runbook() -> None:
    # Given the runbook's entry for the rejected events' alarm
    entry = RUNBOOK.split("### Rejected events", 1)[1].split("\n## ", 1)[0]
    explained = set(re.findall(r"`([a-z-]+)`", entry))
    # When intake rejects an event, for any of the reasons its code counts
    reasons = emitted_reasons()
    assert {"malformed-json", "unknown-hook", "unconfirmed", "stale"} <= reasons  # the scan read them
    # Then the runbook says what that reason means and what to do
    assert not reasons - explained
