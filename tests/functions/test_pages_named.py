"""Which metrics are written out as they are counted (observability.PAGES): the alarms of template.yaml that fire
at a first count on the owner and service series, each either a page or left in the invocation's one document for
a reason said here; and only those (one EMF line per ordinary count would multiply the functions' log volume)."""

from __future__ import annotations

import pytest

from nodecycle.observability import PAGES, PowertoolsMetrics, metrics
from tests.functions.test_operations_template import alarms
from tests.support.emf import metric

# Alarmed metrics the worker functions leave buffered, and why a killed invocation loses nothing of them
NOT_PAGES = {
    # counted at every poll while the refusal lasts: the next poll (the message redelivered) counts it again
    "EvictionErrors": "per poll",
    # the sweeper's alone, counted afresh by each sweep (and the sweeper writes out all of its metrics at once)
    "LifecyclesStuck": "per sweep",
    "LifecyclesStalled": "per sweep",
    "SweepsLate": "per sweep",
}


def paging_on_owner_and_service() -> set[str]:
    return {
        alarm["MetricName"]
        for _, alarm in alarms()
        if alarm.get("Namespace") == "NodeCycle"
        and {d["Name"] for d in alarm.get("Dimensions", [])} == {"owner", "service"}
        and alarm.get("Threshold") == 0
        and alarm.get("ComparisonOperator") == "GreaterThanThreshold"
    }


def test_every_alarm_at_a_first_count_is_a_page_or_says_why_not() -> None:
    alarmed = paging_on_owner_and_service()
    assert not PAGES - alarmed, f"pages no alarm watches: {sorted(PAGES - alarmed)}"
    assert alarmed - PAGES == set(NOT_PAGES), "an alarmed metric neither a page nor said why not"


@pytest.mark.parametrize("page", sorted(PAGES))
def test_a_page_is_out_as_it_is_counted_an_ordinary_count_at_the_end(
    page: str, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    recorder = PowertoolsMetrics("stack-a")

    recorder.count("LifecycleActionsReceived")
    recorder.count(page)

    # the page at once, the ordinary counter only when the invocation's document is flushed
    counted = capsys.readouterr().out
    assert (metric(counted, page), metric(counted, "LifecycleActionsReceived")) == (1, 0)
    metrics.flush_metrics()
    flushed = capsys.readouterr().out
    assert (metric(flushed, page), metric(flushed, "LifecycleActionsReceived")) == (0, 1)
