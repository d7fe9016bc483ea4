"""What operators rely on in template.yaml: every alarm has its runbook entry, every metric the code emits is
on the dashboard (or knowingly left off it), and the queues, batches and concurrency fit the functions."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from nodecycle.settings import DrainSettings, EipSettings, IntakeSettings, SettingsError, SweeperSettings
from nodecycle_sandbox.iam import Request, evaluate, parse_policy
from nodecycle_sandbox.iam.evaluate import context_of
from nodecycle_sandbox.iam.template import StaticResources, offline_roles
from nodecycle_sandbox.runner.cfn_yaml import load_template
from nodecycle_sandbox.runner.intrinsics import Intrinsics, ParameterError, check_parameters, whole_numbers

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = load_template(ROOT / "template.yaml")
RESOURCES: Mapping[str, Any] = TEMPLATE["Resources"]
RUNBOOK = (ROOT / "docs" / "runbook.md").read_text()
LEFT_OFF_TITLE = "## Metrics not on the dashboard"


def resources_of(kind: str) -> dict[str, Mapping[str, Any]]:
    return {name: r["Properties"] for name, r in RESOURCES.items() if r["Type"] == kind}


def anchors(markdown: str) -> set[str]:
    """GitHub's anchors of the headings: lower case, punctuation dropped, spaces to hyphens."""
    found = set()
    for line in markdown.splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", title)))
    return found


def emitted_metrics() -> set[str]:
    """Every metric name the product code emits through the Metrics port: ``.count("X"`` or ``.seconds("X"``."""
    names = set()
    for source in (ROOT / "layers" / "nodecycle").rglob("*.py"):
        names |= set(re.findall(r"\.(?:count|seconds)\(\s*\"(\w+)\"", source.read_text()))
    return names


def emitted_dimensions() -> dict[str, set[frozenset[str]]]:
    """Metric name -> each set of dimension names a call site emits it with: owner and service (the Metrics
    adapter's default dimensions) and the call's keyword arguments (``.count("StepRetries", step=...)``)."""
    found: dict[str, set[frozenset[str]]] = {}
    for source in (ROOT / "layers" / "nodecycle").rglob("*.py"):
        calls = re.finditer(r"\.(?:count|seconds)\(\s*\"(\w+)\"((?:[^()]|\([^()]*\))*)\)", source.read_text())
        for call in calls:
            keywords = set(re.findall(r"\b(\w+)\s*=(?!=)", call.group(2)))
            found.setdefault(call.group(1), set()).add(frozenset({"owner", "service", *keywords}))
    return found


def dashboard_rows() -> list[tuple[str, frozenset[str]]]:
    """The dashboard's NodeCycle metric rows (not its SEARCH expressions): metric name and dimension names,
    with the rows' shorthand ("." repeats the row above; "..." keeps its leading items) spelled out."""
    body, _ = RESOURCES["Dashboard"]["Properties"]["DashboardBody"]["Fn::Sub"]
    document = json.loads(re.sub(r"\$\{[^}]+\}", "x", body))
    rows = []
    for widget in document["widgets"]:
        previous: list[Any] = []
        for row in widget["properties"]["metrics"]:
            items = [item for item in row if not isinstance(item, dict)]
            if not items:
                continue  # an expression
            if items[0] == "...":
                items = previous[: len(previous) - len(items) + 1] + items[1:]
            items = [previous[i] if item == "." else item for i, item in enumerate(items)]
            previous = items
            if items[0] == "NodeCycle":
                rows.append((str(items[1]), frozenset(items[2::2])))
    return rows


# What each sweep reports of the lifecycles it found in a state (stuck, stalled), whatever the sweep before found:
# a gauge. Summed over a period it counts the same lifecycles once per sweep (five times over 300 s at 1-minute
# sweeps), so the dashboard draws the most one sweep found (their alarms fire on any: a sum or a maximum of 1).
SWEEP_GAUGES = ("LifecyclesStuck", "LifecyclesStalled")


def test_the_dashboard_draws_a_sweeps_gauges_as_the_most_one_sweep_found_not_their_sum() -> None:
    body, _ = RESOURCES["Dashboard"]["Properties"]["DashboardBody"]["Fn::Sub"]
    document = json.loads(re.sub(r"\$\{[^}]+\}", "x", body))
    drawn = {}
    for widget in document["widgets"]:
        default = widget["properties"].get("stat")
        for row in widget["properties"]["metrics"]:
            options = next((item for item in row if isinstance(item, dict)), {})
            names = [item for item in row if isinstance(item, str)]
            if len(names) > 1 and names[1] in SWEEP_GAUGES:
                drawn[names[1]] = options.get("stat", default)
    assert drawn == dict.fromkeys(SWEEP_GAUGES, "Maximum")


def dashboard_metrics() -> set[str]:
    """The NodeCycle metrics the dashboard draws: its metric rows, and those its SEARCH expressions name."""
    body, _ = RESOURCES["Dashboard"]["Properties"]["DashboardBody"]["Fn::Sub"]
    document = json.loads(re.sub(r"\$\{[^}]+\}", "x", body))
    names: set[str] = set()
    for widget in document["widgets"]:
        namespace, metric = None, None
        for row in widget["properties"]["metrics"]:
            for item in row:
                if isinstance(item, dict) and "expression" in item:
                    names |= set(re.findall(r'MetricName="(\w+)"', item["expression"]))
            if isinstance(row[0], dict) or row[0] == "...":
                continue
            namespace = namespace if row[0] == "." else row[0]
            metric = metric if row[1] == "." else row[1]
            if namespace == "NodeCycle":
                names.add(str(metric))
    return names


def left_off_metrics() -> set[str]:
    section = RUNBOOK.split(LEFT_OFF_TITLE, 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^- `(\w+)`", section, flags=re.M))


def alarms() -> Iterator[tuple[str, Mapping[str, Any]]]:
    yield from resources_of("AWS::CloudWatch::Alarm").items()


def test_every_alarm_points_at_its_entry_in_the_runbook() -> None:
    headings = anchors(RUNBOOK)
    for name, alarm in alarms():
        match = re.search(r"Runbook: docs/runbook\.md#([\w-]+)$", alarm["AlarmDescription"])
        assert match, f"{name}: its AlarmDescription names no runbook entry"
        assert match.group(1) in headings, f"{name}: docs/runbook.md has no entry #{match.group(1)}"
        assert name.removesuffix("Alarm") in RUNBOOK, f"{name}: its runbook entry does not name it"


def test_the_alarms_issue_twelve_asked_for_exist() -> None:
    metrics = {alarm.get("MetricName") for _, alarm in alarms()}
    assert {
        "LifecyclesStuck",
        "ReadinessTimeouts",
        "EvictionErrors",
        "ApproximateAgeOfOldestMessage",
    } <= metrics
    for function in ("Intake", "Drain", "Eip", "Sweeper"):
        for metric in ("Errors", "Throttles"):
            alarm = RESOURCES[f"{function}{metric}Alarm"]["Properties"]
            assert (alarm["MetricName"], alarm["Dimensions"][0]["Value"]) == (
                metric,
                {"Ref": f"{function}Function"},
            )
    rejected = RESOURCES["RejectedEventsAlarm"]["Properties"]["Metrics"][0]["Expression"]["Fn::Sub"][0]
    assert "SUM(LifecycleEventsRejected)" in rejected


def test_the_budget_exceeded_or_its_queue_full_alarm() -> None:
    # Both break a promise of the budget (its limits; first come first served) by design, for good reasons: an
    # operator must hear of it
    watched = {a["MetricName"]: name for name, a in alarms() if a.get("Namespace") == "NodeCycle"}
    assert watched["ForcedSlots"] == "BudgetExceededAlarm"
    assert watched["BudgetQueueFull"] == "BudgetQueueFullAlarm"


def test_every_metric_the_code_emits_is_on_the_dashboard_or_listed_as_left_off() -> None:
    emitted, drawn, left_off = emitted_metrics(), dashboard_metrics(), left_off_metrics()
    assert len(emitted) > 25  # the scan found the code's metrics
    assert not emitted - drawn - left_off, "add them to the dashboard or to the runbook's list"
    assert not drawn & left_off, "a metric both on the dashboard and listed as left off"
    assert not (drawn | left_off) - emitted, "the dashboard or the list names a metric nothing emits"


def test_the_dashboard_draws_each_metric_with_dimensions_the_code_emits_it_with() -> None:
    # CloudWatch matches a metric on its whole set of dimensions: a row that names fewer draws nothing
    emitted = emitted_dimensions()
    rows = dashboard_rows()
    assert len(rows) > 20  # the rows were read
    drawn_wrong = {name: sorted(dims) for name, dims in rows if dims not in emitted[name]}
    assert not drawn_wrong, f"dashboard rows that match no metric the code emits: {drawn_wrong}"
    watched = {
        name: frozenset(d["Name"] for d in alarm["Dimensions"])
        for name, alarm in alarms()
        if alarm.get("Namespace") == "NodeCycle" and "Dimensions" in alarm
    }
    assert len(watched) > 5
    assert not {
        name
        for name, dims in watched.items()
        if dims not in emitted[RESOURCES[name]["Properties"]["MetricName"]]
    }


def test_alarms_on_nodecycle_metrics_watch_metrics_the_code_emits() -> None:
    watched = {a["MetricName"] for _, a in alarms() if a.get("Namespace") == "NodeCycle"}
    assert watched <= emitted_metrics()


def test_the_collection_of_metric_names_fails_on_a_metric_nowhere(tmp_path: Path) -> None:
    # the scan itself: a name that is neither drawn nor listed is caught
    emitted = {*emitted_metrics(), "SomethingNew"}
    assert emitted - dashboard_metrics() - left_off_metrics() == {"SomethingNew"}


def test_a_failed_intake_event_has_one_way_to_its_dead_letter_queue() -> None:
    intake = RESOURCES["IntakeFunction"]["Properties"]
    assert "DeadLetterQueue" not in intake
    assert intake["EventInvokeConfig"]["DestinationConfig"]["OnFailure"]["Destination"] == {
        "Fn::GetAtt": ["IntakeDeadLetterQueue", "Arn"]
    }


def test_sweeper_failures_have_their_own_dead_letter_queue() -> None:
    sweeper = RESOURCES["SweeperFunction"]["Properties"]
    own = {"Fn::GetAtt": ["SweeperDeadLetterQueue", "Arn"]}
    assert sweeper["EventInvokeConfig"]["DestinationConfig"]["OnFailure"]["Destination"] == own
    assert sweeper["Events"]["Sweep"]["Properties"]["DeadLetterConfig"]["Arn"] == own
    assert RESOURCES["SweeperDeadLettersAlarm"]["Properties"]["Dimensions"][0]["Value"] == {
        "Fn::GetAtt": ["SweeperDeadLetterQueue", "QueueName"]
    }


def _default(name: str) -> int:
    return int(TEMPLATE["Parameters"][name]["Default"])


def test_queue_mappings_fit_their_functions() -> None:
    functions = resources_of("AWS::Serverless::Function")
    queues = resources_of("AWS::SQS::Queue")
    for name, function in functions.items():
        for event in (function.get("Events") or {}).values():
            if event["Type"] != "SQS":
                continue
            mapping = event["Properties"]
            queue = queues[mapping["Queue"]["Fn::GetAtt"][0]]
            visibility = queue["VisibilityTimeout"]
            visibility = _default(visibility["Ref"]) if isinstance(visibility, dict) else visibility
            # Lambda refuses a mapping whose queue's visibility timeout is shorter than the function's
            assert visibility >= 1.5 * function["Timeout"], name
            # the mapping never invokes beyond what is reserved for the function: it is never throttled
            maximum, reserved = (
                mapping["ScalingConfig"]["MaximumConcurrency"],
                function["ReservedConcurrentExecutions"],
            )
            assert maximum == reserved if isinstance(maximum, dict) else maximum <= reserved, name
    assert (
        RESOURCES["IntakeQueue"]["Properties"]["VisibilityTimeout"]
        == 6 * functions["IntakeFunction"]["Timeout"]
    )
    for worker in ("DrainFunction", "WakeFunction", "EipFunction"):
        assert functions[worker]["Events"]["Work"]["Properties"]["BatchSize"] == 1
    assert functions["SweeperFunction"]["ReservedConcurrentExecutions"] == 1
    assert functions["DrainFunction"]["ReservedConcurrentExecutions"] == {"Ref": "DrainConcurrency"}
    # the wake lane: a mapping's MaximumConcurrency is at least 2, so is its parameter
    assert functions["WakeFunction"]["ReservedConcurrentExecutions"] == {"Ref": "WakeConcurrency"}
    wake = whole_numbers(TEMPLATE["Parameters"]["WakeConcurrency"])
    assert wake is not None
    assert wake[0] >= 2


def test_the_wake_lane_runs_the_drain_functions_code_as_the_drain_function() -> None:
    # The wake function hands a freed slot over past the drain queue's backlog: it is the drain function on
    # another queue (its code, its role: its Kubernetes identity and RBAC), and its failures are drain work.
    functions = resources_of("AWS::Serverless::Function")
    drain, wake = functions["DrainFunction"], functions["WakeFunction"]
    for same in ("CodeUri", "Handler", "Role", "Timeout", "MemorySize", "VpcConfig"):
        assert wake[same] == drain[same], same
    assert wake["Events"]["Work"]["Properties"]["Queue"] == {"Fn::GetAtt": ["WakeQueue", "Arn"]}
    wake_queue, drain_queue = RESOURCES["WakeQueue"]["Properties"], RESOURCES["DrainQueue"]["Properties"]
    assert wake_queue["RedrivePolicy"] == drain_queue["RedrivePolicy"]
    assert wake_queue["VisibilityTimeout"] == drain_queue["VisibilityTimeout"]


@pytest.mark.parametrize("settings", [DrainSettings, SweeperSettings])
def test_the_templates_defaults_pass_the_settings_checks(
    settings: type[DrainSettings | SweeperSettings],
) -> None:
    # The queues' visibility timeout feeds the heartbeat timing and the holder TTL rule: the defaults must
    # agree with what the functions check at their cold start.
    environment = {
        "NODECYCLE_OWNER_ID": "stack-a",
        "NODECYCLE_RECORD_TABLE": "t",
        "NODECYCLE_DRAIN_QUEUE_URL": "q",
        "NODECYCLE_EIP_QUEUE_URL": "q",
        "NODECYCLE_WAKE_QUEUE_URL": "q",
        "NODECYCLE_MANAGED_GROUPS": "nodes",  # no default: every stack names its groups (or uses the tag)
    }
    variables = TEMPLATE["Globals"]["Function"]["Environment"]["Variables"]
    for variable, value in variables.items():
        if isinstance(value, dict) and set(value) == {"Ref"} and value["Ref"] in TEMPLATE["Parameters"]:
            environment.setdefault(variable, str(TEMPLATE["Parameters"][value["Ref"]]["Default"]))
    settings.from_env(environment)


def test_what_the_doctor_checks_each_function_may_do_is_what_deploy_rbac_grants() -> None:
    """The doctor's list of each function's calls and the RBAC manifest must not drift apart: every call the
    doctor reviews is granted by some rule of deploy/rbac.yaml (in the template's default BudgetNamespace)."""
    import yaml

    from nodecycle_cli.doctor.permissions import NEEDS

    namespace = TEMPLATE["Parameters"]["BudgetNamespace"]["Default"]
    with (ROOT / "deploy" / "rbac.yaml").open() as stream:
        objects = [o for o in yaml.safe_load_all(stream) if o and o["kind"] in ("Role", "ClusterRole")]

    def granted(verb: str, group: str, resource: str, name: str, scope: str | None) -> bool:
        for role in objects:
            if role["kind"] == "Role" and role["metadata"]["namespace"] != scope:
                continue
            for rule in role["rules"]:
                names = rule.get("resourceNames") or []
                if (
                    group in rule["apiGroups"]
                    and resource in rule["resources"]
                    and verb in rule["verbs"]
                    and (not names or name in names)
                ):
                    return True
        return False

    for function, needs in NEEDS.items():
        for need in needs:
            resource = f"{need.resource}/{need.subresource}" if need.subresource else need.resource
            assert granted(need.verb, need.group, resource, need.name, need.scope(namespace)), (
                f"{function}: {need.describe(namespace)}"
            )


def test_the_doctors_defaults_for_a_preflight_are_the_templates() -> None:
    from nodecycle_cli.doctor import DEFAULTS

    assert {name: str(TEMPLATE["Parameters"][name]["Default"]) for name in DEFAULTS} == DEFAULTS


# -- what a parameter value the template accepts does on AWS ------------------------------------------------

REGION, ACCOUNT = "eu-west-1", "123456789012"


def intrinsics(parameters: Mapping[str, str], *, stack: str = "nodecycle") -> Intrinsics:
    """The template resolved as CloudFormation would for ``parameters`` (refused as CloudFormation refuses
    a value its parameter's constraints do not allow)."""
    check_parameters(TEMPLATE, parameters)
    resources = StaticResources(TEMPLATE, stack_name=stack, region=REGION, account=ACCOUNT)
    resources.intrinsics = Intrinsics(
        TEMPLATE, resources=resources, stack_name=stack, region=REGION, account=ACCOUNT, parameters=parameters
    )
    return resources.intrinsics


def function_environment(parameters: Mapping[str, str], *, stack: str = "nodecycle") -> dict[str, str]:
    variables = intrinsics(parameters, stack=stack).resolve(
        TEMPLATE["Globals"]["Function"]["Environment"]["Variables"]
    )
    return {name: str(value) for name, value in variables.items()}


@pytest.mark.parametrize("groups", ["ng-a, ng-b", "ng-a ,ng-b", " ng-a", "ng-a,"])
def test_a_group_list_with_blanks_around_its_commas_is_refused_by_cloudformation(groups: str) -> None:
    # The functions trim each name, while IAM compares the ARNs the template builds from the raw list
    # literally: the stack would manage a group whose actions its roles may not complete.
    with pytest.raises(ParameterError, match="ManagedGroups"):
        intrinsics({"ManagedGroups": groups, "ClusterName": "c"})


@pytest.mark.parametrize("groups", ["ng-a,ng-b", "ng a,ng-b", "n"])
def test_every_group_a_stack_manages_is_one_its_roles_may_complete_actions_of(groups: str) -> None:
    parameters = {"ManagedGroups": groups, "ClusterName": "c"}
    environment = function_environment(parameters)
    managed = IntakeSettings.from_env(environment).managed_groups
    roles = offline_roles(TEMPLATE, parameters, region=REGION, account=ACCOUNT)
    for role in ("DrainFunctionRole", "SweeperFunctionRole"):
        statements = [
            s for p in roles[role]["policies"] for s in parse_policy(p["document"], source=p["source"])
        ]
        for group in managed:
            arn = (
                f"arn:aws:autoscaling:{REGION}:{ACCOUNT}:autoScalingGroup:uuid-1:autoScalingGroupName/{group}"
            )
            request = Request(
                "autoscaling:CompleteLifecycleAction", arn, context_of({"aws:RequestedRegion": REGION})
            )
            assert evaluate(statements, request).allowed, f"{role} may not complete the actions of {group!r}"


def _groups(count: int, length: int) -> str:
    """``count`` distinct group names, ``length`` characters in all with their commas."""
    each = (length - (count - 1)) // count
    names = [f"{i:03d}".ljust(each, "x") for i in range(count)]
    names[-1] += "x" * (length - len(",".join(names)))
    return ",".join(names)


@pytest.mark.parametrize("mode", ["off", "allocate", "pool"])
def test_the_longest_group_list_the_template_accepts_makes_roles_iam_accepts(mode: str) -> None:
    # Each managed group is in the roles' policies: past IAM's 10,240 characters of inline policies a role is
    # refused, and the stack rolls back. The template bounds the list so that every role fits, with the longest
    # stack name, cluster name and pool name, in a long region name
    widest = {"ClusterName": "c" * 100, "EipMode": mode, "EipPoolName": "p" * 255 if mode == "pool" else ""}
    longest = _groups(40, 1500)
    check_parameters(TEMPLATE, {**widest, "ManagedGroups": longest})
    roles = offline_roles(  # raises PolicyLimitExceeded past the quota
        TEMPLATE, {**widest, "ManagedGroups": longest}, stack_name="s" * 128, region="ap-southeast-2"
    )
    assert len(roles) >= 4
    for refused in (_groups(41, 1000), _groups(40, 1501)):
        with pytest.raises(ParameterError, match="ManagedGroups"):
            check_parameters(TEMPLATE, {**widest, "ManagedGroups": refused})


def test_a_stack_name_cloudformation_accepts_is_an_owner_id_the_functions_accept() -> None:
    # OwnerId empty (the default): the owner is the stack name, up to 128 letters, digits and hyphens
    stack = "platform-eks-prod-eu-west-1-general-purpose-nodes-lifecycle-" + "x" * 68
    assert len(stack) == 128
    environment = function_environment({"ManagedGroups": "ng-a", "ClusterName": "c"}, stack=stack)
    assert environment["NODECYCLE_OWNER_ID"] == stack
    for settings in (IntakeSettings, DrainSettings, EipSettings, SweeperSettings):
        assert settings.from_env(environment).owner_id == stack
    intrinsics({"OwnerId": stack})  # and the same as an explicit OwnerId
    with pytest.raises(ParameterError, match="OwnerId"):
        intrinsics({"OwnerId": stack + "x"})
    with pytest.raises(SettingsError, match="NODECYCLE_OWNER_ID"):
        IntakeSettings.from_env({**environment, "NODECYCLE_OWNER_ID": stack + "x"})


def alarm_fires(alarm: Mapping[str, Any], datapoints: Mapping[int, float], until: int) -> list[int]:
    """When CloudWatch would evaluate ``alarm`` as breaching, per minute up to ``until`` (seconds), for the
    datapoints (second -> value): each period's statistic (Maximum or Sum); a period without data breaches or
    not as TreatMissingData says; ALARM when DatapointsToAlarm of the last EvaluationPeriods breach."""
    period, evaluated = int(alarm["Period"]), int(alarm["EvaluationPeriods"])
    needed = int(alarm.get("DatapointsToAlarm", evaluated))
    threshold = float(alarm["Threshold"])
    compare = {
        "GreaterThanThreshold": lambda value: value > threshold,
        "LessThanThreshold": lambda value: value < threshold,
    }[alarm["ComparisonOperator"]]
    missing_breaches = {"notBreaching": False, "breaching": True}[alarm["TreatMissingData"]]
    summed = {"Maximum": False, "Sum": True}[alarm["Statistic"]]
    periods: dict[int, float] = {}
    for at, value in datapoints.items():
        key = at // period
        if key not in periods:
            periods[key] = value
        else:
            periods[key] = periods[key] + value if summed else max(periods[key], value)
    firing = []
    for now in range(0, until, 60):
        last = now // period  # the periods that have ended
        breaching = sum(
            1
            for p in range(last - evaluated, last)
            if (compare(periods[p]) if p in periods else missing_breaches)
        )
        if breaching >= needed:
            firing.append(now)
    return firing


def stalled_window(interval: int) -> int:
    """The stalled lifecycles' alarm's window in minutes: two intervals and 6 minutes, 12 at least."""
    return max(2 * interval + 6, 12)


@pytest.mark.parametrize("interval", [1, 5, 10, 30, 60])
def test_the_stalled_lifecycles_alarm_fires_on_two_stalled_sweeps_in_a_row_whatever_the_interval(
    interval: int,
) -> None:
    # Only the sweeper emits LifecyclesStalled, once a run (0 when nothing is stalled), 37 s into its minute
    alarm = intrinsics({"SweepIntervalMinutes": str(interval)}).resolve(
        RESOURCES["LifecyclesStalledAlarm"]["Properties"]
    )
    step, horizon = interval * 60, 6 * 3600

    def sweeps(stalled: set[int]) -> dict[int, float]:
        return {37 + k * step: 1.0 if k in stalled else 0.0 for k in range(horizon // step)}

    fired = alarm_fires(alarm, sweeps({3, 4}), horizon)  # the 4th and 5th runs found a stalled lifecycle
    assert fired, f"two stalled sweeps in a row never fire the alarm with {interval}-minute sweeps"
    assert fired[0] - (37 + 4 * step) <= 120, "the alarm fires within two minutes of the second stalled sweep"
    # and clears once the first of them has left its window
    assert fired[-1] - (37 + 3 * step) <= stalled_window(interval) * 60, "it holds on once none is stalled"
    assert not alarm_fires(alarm, sweeps({3}), horizon), "a queue slow for one sweep catches up: no alarm"
    assert not alarm_fires(alarm, sweeps(set()), horizon)


@pytest.mark.parametrize("interval", [1, 2, 3, 5, 10, 30, 60])
def test_the_stalled_lifecycles_alarm_does_not_fire_on_stalled_sweeps_further_apart_than_its_window(
    interval: int,
) -> None:
    # A queue that is only slow (a large refresh's backlog) makes one sweep find a lifecycle overdue; the sweeper
    # re-sends it and the next sweep finds none; some sweeps later another lifecycle is late behind the backlog.
    # Each stall caught up within one sweep: no page once they are further apart than the alarm's window (which
    # must hold the last two counts of a lasting stall however long each sweep lasts:
    # tests/functions/test_template_stalled_alarm.py). Closer, stalled, clean, stalled pages.
    alarm = intrinsics({"SweepIntervalMinutes": str(interval)}).resolve(
        RESOURCES["LifecyclesStalledAlarm"]["Properties"]
    )
    step, horizon = interval * 60, 6 * 3600
    apart = stalled_window(interval) // interval + 2  # runs from one stalled sweep to the next

    def sweeps(stalled: set[int], late: Mapping[int, int] | None = None) -> dict[int, float]:
        # run k's datapoint 37 s into its minute, or `late[k]` whole minutes later (EventBridge starts a target
        # within a minute of its time; the count comes when the sweep's lifecycles part ends)
        shift = late or {}
        return {
            37 + k * step + 60 * shift.get(k, 0): 1.0 if k in stalled else 0.0 for k in range(horizon // step)
        }

    for far_apart in ({3, 3 + apart}, {3, 3 + apart, 3 + 2 * apart}):
        assert not alarm_fires(alarm, sweeps(far_apart), horizon), (
            f"stalled sweeps {sorted(far_apart)} with clean ones between fire the alarm ({interval}-minute sweeps)"
        )
    # Two stalled in a row still fire it when the second one's count comes up to N - 1 minutes later than the
    # first's (a late start, a longer sweep), and a stall that lasts fires it whatever the lateness
    for lateness in range(interval):
        fired = alarm_fires(alarm, sweeps({3, 4}, {4: lateness}), horizon)
        assert fired, f"two stalled sweeps in a row, the second {lateness} min late, fire nothing"
    lasting = set(range(3, 9))
    assert alarm_fires(alarm, sweeps(lasting), horizon)
    # (at 1-minute sweeps a run a minute late shares its minute, one datapoint, with the next)
    if interval > 1:
        assert alarm_fires(alarm, sweeps(lasting, {k: k % 2 for k in lasting}), horizon)


@pytest.mark.parametrize("interval", [1, 2, 3, 5, 10, 30, 60])
def test_the_sweeper_not_running_alarm_fires_once_no_sweep_started_for_its_window(interval: int) -> None:
    # Lambda publishes Invocations only for the minutes with one: the scheduled runs, 12 s into their minute (and
    # sent once each ended: tests/functions/test_template_sweeper_not_running_alarm.py)
    alarm = intrinsics({"SweepIntervalMinutes": str(interval)}).resolve(
        RESOURCES["SweeperNotRunningAlarm"]["Properties"]
    )
    assert (alarm["Namespace"], alarm["MetricName"]) == ("AWS/Lambda", "Invocations")
    assert RESOURCES["SweeperNotRunningAlarm"]["Properties"]["Dimensions"][0]["Value"] == {
        "Ref": "SweeperFunction"
    }
    step, window = interval * 60, max(2 * interval + 3, 10)  # (two intervals and 3 minutes, 10 at least)
    assert int(alarm["EvaluationPeriods"]) == int(alarm["DatapointsToAlarm"]) == window
    horizon, first_full = 12 * step + 3600, window * 60  # before that, a new stack's window holds no run

    def fired(missed: set[int], *, late: int = 0) -> list[int]:
        # run k starts 12 s into its minute, or `late` seconds later (EventBridge starts a scheduled rule's
        # target within a minute of its time)
        runs = {
            12 + k * step + (late if k % 2 else 0): 1.0 for k in range(horizon // step) if k not in missed
        }
        return [at for at in alarm_fires(alarm, runs, horizon) if at >= first_full]

    for late in (0, 50):  # every run on time, or late within its minute; then one of them missed
        assert not fired(set(), late=late)
        assert not fired({5}, late=late)
    # a silence of the window: two runs missed in a row from 4-minute sweeps on, more below
    missed = set(range(5, 5 + -(-(window + 1) // interval) - 1))
    assert len(missed) == 2 or interval < 4
    alarms = fired(missed)
    assert alarms, f"{len(missed)} runs missed in a row never fire the alarm with {interval}-minute sweeps"
    assert alarms[0] - (12 + 4 * step) <= window * 60 + 120, "it fires its window after the last run"
    assert alarms[-1] < 12 + (max(missed) + 1) * step + 120, "and clears once the sweeper runs again"
    stopped = fired(set(range(5, horizon)))
    assert stopped, "a schedule that stopped fires it"
    assert stopped[-1] == horizon - 60, "and keeps it firing"


def test_a_heartbeat_aws_refuses_is_alarmed_before_the_actions_heartbeat_timeout() -> None:
    # A refusal that stays (a service control policy or a permissions boundary rolled out, a policy edited) refuses
    # the engine's heartbeats and the sweeper's alike: nothing keeps the action alive, and Auto Scaling takes its
    # default result at the heartbeat timeout (a terminating node undrained: invariant 11 wants an alarm first).
    # The step's own refusals reach the dead-letter queue after 8 tries (some 160 s), 4 more receives a visibility
    # timeout apart (600 s at the default 150 s) and the dead-letter alarm's 300 s period: after a 600 s hook's
    # heartbeat timeout. Every refused heartbeat is counted (engine and sweep/lifecycles: HeartbeatRetries with
    # reason refused, owner and service only), so one alarm on that series pages within its first minute.
    watched = [
        alarm
        for _, alarm in alarms()
        if alarm.get("MetricName") == "HeartbeatRetries"
        and {"Name": "reason", "Value": "refused"} in (alarm.get("Dimensions") or [])
    ]
    assert watched, "no alarm on refused heartbeats"
    (alarm,) = watched
    assert (alarm["Period"], alarm["EvaluationPeriods"], alarm["Threshold"]) == (60, 1, 0)
