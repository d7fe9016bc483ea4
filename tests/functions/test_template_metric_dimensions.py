"""The dashboard and the alarms of template.yaml look metrics up by their whole set of dimensions (owner, service,
and a call's own): every metric the functions emit carries the service dimension, whatever the environment says
(the template sets POWERTOOLS_SERVICE_NAME, but a metric's match must not hang on it)."""

from __future__ import annotations

import json

import pytest

from nodecycle.observability import SERVICE, PowertoolsMetrics, metrics


def emitted(capsys: pytest.CaptureFixture[str]) -> list[tuple[str, frozenset[str]]]:
    found = []
    for line in capsys.readouterr().out.splitlines():
        if not line.startswith("{"):
            continue
        document = json.loads(line)
        for directive in document["_aws"]["CloudWatchMetrics"]:
            for metric in directive["Metrics"]:
                for dimensions in directive["Dimensions"]:
                    assert all(document[name] for name in dimensions)
                    found.append((metric["Name"], frozenset(dimensions)))
                    assert document.get("service") == SERVICE
    return found


@pytest.mark.parametrize("service_variable", [None, "nodecycle", "something-else"])
def test_every_metric_carries_the_owner_and_service_dimensions_the_dashboard_draws(
    service_variable: str | None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given the functions' environment with or without (or with another) POWERTOOLS_SERVICE_NAME
    if service_variable is None:
        monkeypatch.delenv("POWERTOOLS_SERVICE_NAME", raising=False)
    else:
        monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", service_variable)
    capsys.readouterr()
    # When a metric without and one with a dimension of its own are emitted
    recorder = PowertoolsMetrics("stack-a")
    recorder.count("PodsEvicted")
    recorder.count("StepRetries", step="evict")
    metrics.flush_metrics()
    # Then both carry owner and service=nodecycle, as the template's rows and alarms name them
    assert sorted(emitted(capsys)) == [
        ("PodsEvicted", frozenset({"owner", "service"})),
        ("StepRetries", frozenset({"owner", "service", "step"})),
    ]
