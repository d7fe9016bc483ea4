"""The metrics as the docs give them to an operator who writes an alarm or a query of their own: every metric
the code emits is named in the README, with the dimensions the runbook gives (CloudWatch matches a metric by
its whole set of dimensions, so a set missing one finds nothing)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nodecycle.observability import NAMESPACE, PowertoolsMetrics, metrics
from tests.functions.test_operations_template import emitted_metrics

ROOT = Path(__file__).resolve().parents[2]
RUNBOOK = (ROOT / "docs" / "runbook.md").read_text()


def emitted_dimensions(capsys: pytest.CaptureFixture[str]) -> set[str]:
    """The dimensions of a metric counted without extra ones, from the EMF document the adapter prints."""
    PowertoolsMetrics("owner-a").count("LifecycleEventsDuplicate")
    metrics.flush_metrics()
    document = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    (directive,) = document["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == NAMESPACE
    (dimensions,) = directive["Dimensions"]
    return set(dimensions)


def test_the_runbook_names_every_dimension_a_metric_is_emitted_with(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given the runbook's word on the metrics' namespace and dimensions
    stated = re.search(r"namespace `(\w+)`, dimensions? ((?:`\w+`(?:, | and )?)+)", " ".join(RUNBOOK.split()))
    assert stated, "the runbook names no namespace and dimensions"
    # When the metrics adapter counts a metric with no dimension of its own
    emitted = emitted_dimensions(capsys)
    # Then the runbook names that namespace and every one of its dimensions
    assert stated.group(1) == NAMESPACE
    assert set(re.findall(r"`(\w+)`", stated.group(2))) == emitted == {"owner", "service"}


def test_the_readmes_list_of_metrics_names_every_metric_the_code_emits() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("- **Metrics** (namespace", 1)[1].split("\n- **", 1)[0]
    listed = set(re.findall(r"`(\w+)", section))
    emitted = emitted_metrics()
    assert len(emitted) > 25  # the scan found the code's metrics
    assert not emitted - listed, "README's Metrics list misses them"
