"""The runbook's check that a resource deleted outside the stack is back: ``aws cloudformation detect-stack-drift``
only starts a detection and answers its id (``StackDriftDetectionId``), never a resource's drift; what a detection
found is ``describe-stack-resource-drifts`` (``StackResourceDriftStatus`` ``DELETED``), once
``describe-stack-drift-detection-status`` says it is complete (CloudFormation API reference)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import botocore.session

ROOT = Path(__file__).resolve().parents[2]


def test_each_drift_detection_the_runbook_gives_is_read_where_cloudformation_tells_a_resources_drift() -> (
    None
):
    # Given each paragraph of the runbook that runs a drift detection
    text = " ".join((ROOT / "docs/runbook.md").read_text().split())
    paragraphs = [p for p in re.split(r" - \*\*| \*\*", text) if "detect-stack-drift" in p]
    assert paragraphs

    # Then it reads the resources' drift where CloudFormation tells it, with the filter the DELETED status is
    for paragraph in paragraphs:
        assert "describe-stack-resource-drifts" in paragraph, paragraph[:200]
        assert "--stack-resource-drift-status-filters DELETED" in paragraph

    # and those are CloudFormation's: detect-stack-drift answers an id alone, the drifts list the DELETED status
    model = botocore.session.get_session().get_service_model("cloudformation")
    detected = model.operation_model("DetectStackDrift").output_shape
    assert detected is not None
    assert list(detected.members) == ["StackDriftDetectionId"]
    asked = model.operation_model("DescribeStackResourceDrifts").input_shape
    assert asked is not None
    filters: Any = asked.members["StackResourceDriftStatusFilters"]
    assert "DELETED" in filters.member.enum
