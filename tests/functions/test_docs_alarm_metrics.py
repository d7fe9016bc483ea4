"""Every series an alarm or the dashboard of template.yaml watches, as CloudWatch looks it up, against what emits
it: a NodeCycle metric by its name and its whole set of dimensions, names and values (the owner a deployed stack's
functions count under, ``service``, a call's own), an AWS/SQS or AWS/Lambda metric by the one dimension AWS
publishes it with, naming a queue or function of the stack. A series that differs in one dimension is another
series: its alarm never fires, its graph stays empty. The metric rows' dimension names are checked in
test_operations_template; this file adds their values, the dashboard's SEARCH schemas, the alarm written as a
Metrics Insights query, the AWS metrics, and what each alarm makes of a period without data."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nodecycle.domain.model import Step, Transition
from nodecycle.domain.policy import ActionResult
from nodecycle.observability import NAMESPACE, SERVICE
from tests.functions.test_operations_template import RESOURCES, function_environment, intrinsics

ROOT = Path(__file__).resolve().parents[2]
STACK = "nc-prod"
# The owner is the stack's name unless OwnerId names another (a stack that takes over another's lifecycles)
OWNERS = [pytest.param({}, id="owner-is-the-stack"), pytest.param({"OwnerId": "fleet-a"}, id="owner-id")]

# What a call site's computed dimension value can be, by how the call spells it; any other computed value is free
# (a reason taken from an error): it matches any value a series names.
_COMPUTED = (
    (re.compile(r"\btransition\.short$|\bcause\.short$"), frozenset(t.short for t in Transition)),
    (re.compile(r"\bresult\.value$"), frozenset(r.value for r in ActionResult)),
    (re.compile(r"\bstep\.value$|^Step\.\w+\.value$"), frozenset(s.value for s in Step)),
)
_CALL = re.compile(r"\.(?:count|seconds)\(\s*\"(\w+)\"((?:[^()]|\([^()]*\))*)\)")
_KEYWORD = re.compile(r"\b(\w+)\s*=(?!=)\s*((?:[^,()]|\([^()]*\))+)")


@dataclass(frozen=True)
class Emission:
    """One call site of the Metrics port: the metric and its extra dimensions, each with the values it can take
    (None: computed, any)."""

    metric: str
    dimensions: Mapping[str, frozenset[str] | None]

    @property
    def names(self) -> frozenset[str]:
        return frozenset({"owner", "service", *self.dimensions})

    def matches(self, metric: str, dimensions: Mapping[str, str | None]) -> bool:
        """Whether a series of ``metric`` with these dimensions (a value None: any) is one this call emits."""
        if metric != self.metric or frozenset(dimensions) != self.names:
            return False
        return all(
            wanted is None or values is None or wanted in values
            for name, values in self.dimensions.items()
            for wanted in [dimensions[name]]
        )


def _values(expression: str) -> frozenset[str] | None:
    expression = expression.strip()
    literal = re.fullmatch(r"\"([^\"]*)\"", expression)
    if literal:
        return frozenset({literal.group(1)})
    for pattern, values in _COMPUTED:
        if pattern.search(expression):
            return values
    return None


def emissions() -> list[Emission]:
    """Every call site of the Metrics port in the product: the layer and the functions' handlers."""
    found = []
    for folder in ("layers/nodecycle", "functions"):
        for source in (ROOT / folder).rglob("*.py"):
            for call in _CALL.finditer(source.read_text()):
                keywords = {name: _values(value) for name, value in _KEYWORD.findall(call.group(2))}
                found.append(Emission(call.group(1), keywords))
    return found


EMISSIONS = emissions()


def emitted(metric: str, dimensions: Mapping[str, str | None]) -> bool:
    return any(e.matches(metric, dimensions) for e in EMISSIONS)


def resolved_alarms(parameters: Mapping[str, str]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    resolver = intrinsics(parameters, stack=STACK)
    for name, resource in RESOURCES.items():
        if resource["Type"] == "AWS::CloudWatch::Alarm":
            yield name, resolver.resolve(resource["Properties"])


def owner_of_the_functions(parameters: Mapping[str, str]) -> str:
    return function_environment(parameters, stack=STACK)["NODECYCLE_OWNER_ID"]


def physical(kind: str) -> dict[str, str]:
    """The physical names the stack gives its resources of ``kind`` (as resolved offline) -> their logical ids."""
    return {f"{STACK}-{name}": name for name, r in RESOURCES.items() if r["Type"] == kind}


# What AWS publishes, with the one dimension the alarms name (SQS per queue, Lambda per function)
AWS_METRICS = {
    "AWS/SQS": (
        "QueueName",
        "AWS::SQS::Queue",
        {"ApproximateNumberOfMessagesVisible", "ApproximateAgeOfOldestMessage"},
    ),
    "AWS/Lambda": ("FunctionName", "AWS::Serverless::Function", {"Errors", "Throttles", "Invocations"}),
}


# -- the scan itself ----------------------------------------------------------------------------------------------


def test_the_scan_reads_each_call_sites_dimensions_and_their_values() -> None:
    assert len(EMISSIONS) > 60
    assert Emission("HeartbeatRetries", {"reason": frozenset({"refused"})}) in EMISSIONS
    assert Emission("HeartbeatRetries", {}) in EMISSIONS
    assert emitted(
        "LifecycleActionsCompleted",
        {"owner": None, "service": None, "result": "ABANDON", "transition": "launch"},
    )
    # a value no call emits, a dimension too few or too many: another series
    assert not emitted("HeartbeatRetries", {"owner": None, "service": None, "reason": "throttled"})
    assert not emitted("LifecycleActionsCompleted", {"owner": None, "service": None, "result": "CONTINUE"})
    assert not emitted("PodsEvicted", {"owner": None, "service": None, "step": None})
    # the intake handler's own count (functions/) is read too
    assert any(e.metric == "LifecycleEventsRejected" and e.dimensions == {"reason": None} for e in EMISSIONS)


# -- the alarms ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("parameters", OWNERS)
def test_every_alarm_on_a_nodecycle_metric_watches_a_series_the_functions_emit(
    parameters: dict[str, str],
) -> None:
    owner = owner_of_the_functions(parameters)
    watched = 0
    for name, alarm in resolved_alarms(parameters):
        if alarm.get("Namespace") != NAMESPACE:
            continue
        dimensions = {d["Name"]: d["Value"] for d in alarm["Dimensions"]}
        assert (dimensions.get("owner"), dimensions.get("service")) == (owner, SERVICE), name
        assert emitted(alarm["MetricName"], dimensions), (
            f"{name}: nothing emits {alarm['MetricName']} {dimensions}"
        )
        watched += 1
    assert watched > 10


@pytest.mark.parametrize("parameters", OWNERS)
def test_an_alarm_written_as_a_metrics_insights_query_sums_a_schema_the_functions_emit(
    parameters: dict[str, str],
) -> None:
    # SCHEMA(namespace, d1, d2...) takes only the metrics with exactly those dimensions
    owner = owner_of_the_functions(parameters)
    queries = [
        (name, query["Expression"])
        for name, alarm in resolved_alarms(parameters)
        for query in alarm.get("Metrics", [])
        if "Expression" in query
    ]
    assert queries
    for name, expression in queries:
        parsed = re.fullmatch(
            r"SELECT (?:SUM|MAX|AVG|COUNT)\((\w+)\) FROM SCHEMA\((\w+), ([\w, ]+)\) WHERE owner = '([^']+)'",
            expression,
        )
        assert parsed, f"{name}: a query this test does not read: {expression}"
        metric, namespace, schema, where = parsed.groups()
        dimensions: dict[str, str | None] = dict.fromkeys(d.strip() for d in schema.split(","))
        assert (namespace, where) == (NAMESPACE, owner), name
        assert emitted(metric, dimensions), (
            f"{name}: nothing emits {metric} with exactly {sorted(dimensions)}"
        )


@pytest.mark.parametrize("namespace", sorted(AWS_METRICS))
def test_every_alarm_on_an_aws_metric_names_it_by_the_one_dimension_aws_publishes_of_a_resource_of_the_stack(
    namespace: str,
) -> None:
    dimension, kind, published = AWS_METRICS[namespace]
    ours = physical(kind)
    alarms = [(n, a) for n, a in resolved_alarms({}) if a.get("Namespace") == namespace]
    assert alarms
    for name, alarm in alarms:
        assert alarm["MetricName"] in published, name
        ((key, value),) = [(d["Name"], d["Value"]) for d in alarm["Dimensions"]]
        assert key == dimension, name
        assert value in ours, f"{name}: {key}={value} names no {kind} of the stack"


def test_what_an_alarm_makes_of_a_period_without_data_is_what_missing_data_means_for_its_metric() -> None:
    # A count of what went wrong is emitted only when something did (AWS's too: Errors, a dead-letter queue's
    # messages): no data is nothing wrong. An alarm that fires on too little (a heartbeat: the sweeper's runs)
    # fires on none at all, or a schedule removed would page nobody.
    for name, alarm in resolved_alarms({}):
        low = alarm["ComparisonOperator"].startswith("LessThan")
        expected = "breaching" if low else "notBreaching"
        assert alarm["TreatMissingData"] == expected, (
            f"{name}: {alarm['ComparisonOperator']} treats missing data as {alarm['TreatMissingData']}"
        )


# -- the dashboard ------------------------------------------------------------------------------------------------


def dashboard(parameters: Mapping[str, str]) -> dict[str, Any]:
    body = intrinsics(parameters, stack=STACK).resolve(RESOURCES["Dashboard"]["Properties"]["DashboardBody"])
    return json.loads(body)


def metric_rows(document: Mapping[str, Any]) -> Iterator[tuple[str, str, dict[str, str]]]:
    """(namespace, metric, dimensions) of each metric row, its shorthand spelled out ("." the item above it,
    "..." the row above but its last items)."""
    for widget in document["widgets"]:
        previous: list[Any] = []
        for row in widget["properties"]["metrics"]:
            items = [item for item in row if not isinstance(item, dict)]
            if not items:
                continue
            if items[0] == "...":
                items = previous[: len(previous) - len(items) + 1] + items[1:]
            items = [previous[i] if item == "." else item for i, item in enumerate(items)]
            previous = items
            yield str(items[0]), str(items[1]), dict(zip(items[2::2], items[3::2], strict=True))


def searches(document: Mapping[str, Any]) -> Iterator[str]:
    for widget in document["widgets"]:
        for row in widget["properties"]["metrics"]:
            for item in row:
                if isinstance(item, dict) and "expression" in item:
                    yield item["expression"]


@pytest.mark.parametrize("parameters", OWNERS)
def test_every_dashboard_row_draws_a_series_something_emits(parameters: dict[str, str]) -> None:
    owner = owner_of_the_functions(parameters)
    rows = list(metric_rows(dashboard(parameters)))
    assert len(rows) > 40
    for namespace, metric, dimensions in rows:
        if namespace == NAMESPACE:
            assert (dimensions.get("owner"), dimensions.get("service")) == (owner, SERVICE), metric
            assert emitted(metric, dimensions), f"nothing emits {metric} {dimensions}"
        else:
            dimension, kind, published = AWS_METRICS[namespace]
            assert metric in published, (namespace, metric)
            assert list(dimensions) == [dimension], (namespace, metric, dimensions)
            assert dimensions[dimension] in physical(kind), (namespace, metric, dimensions)


@pytest.mark.parametrize("parameters", OWNERS)
def test_every_search_of_the_dashboard_names_a_schema_the_functions_emit_its_metric_with(
    parameters: dict[str, str],
) -> None:
    # SEARCH('{namespace,d1,d2...} ...') finds only the metrics with exactly those dimensions
    owner = owner_of_the_functions(parameters)
    expressions = list(searches(dashboard(parameters)))
    assert len(expressions) >= 4
    for expression in expressions:
        parsed = re.fullmatch(
            r"SEARCH\('\{(\w+),([\w,]+)\} MetricName=\"(\w+)\" owner=\"([^\"]+)\"', '\w+', \d+\)", expression
        )
        assert parsed, f"a search this test does not read: {expression}"
        namespace, schema, metric, where = parsed.groups()
        dimensions: dict[str, str | None] = dict.fromkeys(schema.split(","))
        assert (namespace, where) == (NAMESPACE, owner), expression
        assert emitted(metric, dimensions), f"nothing emits {metric} with exactly {sorted(dimensions)}"
