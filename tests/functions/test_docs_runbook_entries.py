"""What an operator paged by an alarm, or looking at a metric the docs name, finds: each alarm's runbook entry
says what it means, how to look and what to do (not only that it exists, which test_operations_template checks),
and every metric the docs name is one the code emits (a metric renamed or never emitted, named in the runbook,
sends an operator to a graph or a query that stays empty)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.functions.test_operations_template import RUNBOOK, alarms, anchors, emitted_metrics

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "docs/runbook.md", "docs/design.md", "docs/removing.md")


def entry(anchor: str) -> str:
    """The text of the runbook's entry with this anchor: its heading to the next heading."""
    sections = re.split(r"^(#{2,3} .*)$", RUNBOOK, flags=re.M)
    for heading, body in zip(sections[1::2], sections[2::2], strict=True):
        if anchors(heading) == {anchor}:
            return body
    raise AssertionError(f"no runbook entry #{anchor}")


@pytest.mark.parametrize("name", [name for name, _ in alarms()])
def test_each_alarms_runbook_entry_says_what_it_means_how_to_look_and_what_to_do(name: str) -> None:
    description = dict(alarms())[name]["AlarmDescription"]
    (anchor,) = re.findall(r"Runbook: docs/runbook\.md#([\w-]+)$", description)
    body = entry(anchor)
    assert f"`{name}`" in body.split("**Look**", 1)[0], f"{name}: #{anchor} does not name it in its symptom"
    for part in ("**Symptom**", "**Look**", "**Do**"):
        assert part in body, f"{name}: #{anchor} has no {part}"
    do = body.split("**Do**", 1)[1]
    assert len(do.split()) >= 8, f"{name}: #{anchor} says next to nothing to do"


def metrics_named(text: str) -> set[str]:
    """The metric names a document gives: after "metric(s)", with their dimensions in braces (``X{reason}``),
    or "on the dashboard"."""
    text = " ".join(text.split())
    names: set[str] = set()
    for listed in re.finditer(r"\bmetrics?:? \(?((?:`\w+(?:\{[^}`]*\})?`(?:, | and | or |; )?)+)", text):
        names |= set(re.findall(r"`(\w+)", listed.group(1)))
    names |= set(re.findall(r"`(\w+)\{[\w=,| ]*\}`", text))
    names |= set(re.findall(r"`(\w+)` on the dashboard", text))
    names |= set(re.findall(r"the dashboard's `?([A-Z]\w+)`?", text))
    names |= set(re.findall(r"`(\w+)` with `(?:reason|step|transition|result|cause)`", text))
    # the README's list of metrics, and the runbook's of those left off the dashboard
    for listed in re.findall(r"\*\*Metrics\*\* \(namespace .*?\)(.*?)(?: - \*\*|$)", text):
        names |= set(re.findall(r"`([A-Z]\w+)", listed))  # (not its `reason=refused`)
    for listed in re.findall(r"## Metrics not on the dashboard(.*?)(?: ## |$)", text):
        names |= set(re.findall(r" - `(\w+)`:", listed))
    return names


def test_the_scan_of_metric_names_finds_them() -> None:
    readme, runbook = (metrics_named((ROOT / path).read_text()) for path in ("README.md", "docs/runbook.md"))
    assert {"EipsAllocated", "SlotsHandedOver", "WorkMessagesRejected"} <= readme  # its list of metrics
    assert {"LifecycleEventsDuplicate", "HeartbeatRetries"} <= runbook
    said = "metric `ForcedSlots`; metrics `LifecyclesOrphaned` and `LifecyclesAdopted`; `StepRetries{step=evict}`"
    assert metrics_named(said) == {"ForcedSlots", "LifecyclesOrphaned", "LifecyclesAdopted", "StepRetries"}
    assert metrics_named("(`SweepsCutShort` on the dashboard), the dashboard's StepRetries") == {
        "SweepsCutShort",
        "StepRetries",
    }


def test_every_name_in_the_docs_code_is_in_the_code() -> None:
    # A name the docs give in backquotes (a metric, an alarm, a parameter or output, an event's reason, a log
    # key) that no code, template or manifest holds is a renamed or made-up one
    code = (
        " ".join(
            path.read_text()
            for folder in ("layers", "functions", "cli", "sandbox", "deploy")
            for path in (ROOT / folder).rglob("*")
            if path.suffix in (".py", ".yaml")
        )
        + (ROOT / "template.yaml").read_text()
    )
    for path in DOCS[1:]:  # (the README is the lead's: the report lists its corrections)
        names = set(re.findall(r"`([A-Z][a-z]+(?:[A-Z][a-z]*)+)(?:\{[^}`]*\})?`", (ROOT / path).read_text()))
        unknown = {name for name in names if not re.search(rf"\b{name}\b", code)}
        assert not unknown, f"{path} names what nothing in the code is called"


@pytest.mark.parametrize("path", DOCS)
def test_every_metric_the_docs_name_is_one_the_code_emits(path: str) -> None:
    named = metrics_named((ROOT / path).read_text())
    # CloudWatch's own metrics of the functions and queues, which the runbook names too
    aws = {
        "Errors",
        "Throttles",
        "Duration",
        "ApproximateAgeOfOldestMessage",
        "ApproximateNumberOfMessagesVisible",
    }
    assert not named - emitted_metrics() - aws, f"{path} names metrics the code never emits"
