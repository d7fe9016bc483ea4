"""Each parameter of template.yaml refuses, before anything is created, a value the deployed stack could not work
with: one that would widen the roles' policies past what the stack manages (an IAM wildcard where a name is
spliced into an ARN), one the functions refuse at every cold start (the stack deploys, every invocation fails),
one whose date arithmetic overflows, and the combinations of parameters (the template's Rules) that leave the
functions nothing to do."""

from __future__ import annotations

import copy
import random
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from nodecycle.cluster_settings import Budget
from nodecycle.settings import DrainSettings, IntakeSettings, Settings, SettingsError, SweeperSettings
from nodecycle.wiring.common import drain_policy
from nodecycle_sandbox.iam import Request, evaluate, parse_policy
from nodecycle_sandbox.iam.evaluate import context_of
from nodecycle_sandbox.iam.template import StaticResources, offline_roles
from nodecycle_sandbox.runner.cfn_yaml import load_template
from nodecycle_sandbox.runner.intrinsics import (
    Intrinsics,
    ParameterError,
    check_parameters,
    check_rules,
    whole_numbers,
)
from nodecycle_sandbox.sandbox import Sandbox, SandboxOptions
from nodecycle_sandbox.schedule_expressions import interval_seconds

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = load_template(ROOT / "template.yaml")
PARAMETERS: Mapping[str, Any] = TEMPLATE["Parameters"]
REGION, ACCOUNT = "eu-west-1", "123456789012"
# The environment variable each parameter sets, by parameter (Globals: NODECYCLE_X: !Ref Parameter)
VARIABLES = {
    value["Ref"]: name
    for name, value in TEMPLATE["Globals"]["Function"]["Environment"]["Variables"].items()
    if name.startswith("NODECYCLE_")
    and isinstance(value, dict)
    and set(value) == {"Ref"}
    and value["Ref"] in PARAMETERS
}
REQUIRED = {
    "NODECYCLE_OWNER_ID": "stack-a",
    "NODECYCLE_CLUSTER_NAME": "prod",
    "NODECYCLE_MANAGED_GROUPS": "nodes",
    "NODECYCLE_RECORD_TABLE": "t",
    "NODECYCLE_DRAIN_QUEUE_URL": "q",
    "NODECYCLE_EIP_QUEUE_URL": "q",
    "NODECYCLE_WAKE_QUEUE_URL": "q",
}


def statements(role: str, parameters: Mapping[str, str], template: Mapping[str, Any] = TEMPLATE) -> list[Any]:
    roles = offline_roles(template, parameters, region=REGION, account=ACCOUNT)
    return [s for p in roles[role]["policies"] for s in parse_policy(p["document"], source=p["source"])]


# -- names spliced into the roles' ARNs ------------------------------------------------------------------------


def test_an_iam_wildcard_in_a_group_name_would_grant_every_group() -> None:
    # Why the template must refuse it (here without the parameter's pattern): the roles' by-name statements
    # splice each name into an ARN, where IAM reads * and ? as wildcards, while the functions compare names
    # literally
    unchecked = copy.deepcopy(dict(TEMPLATE))
    del unchecked["Parameters"]["ManagedGroups"]["AllowedPattern"]
    granted = statements("DrainFunctionRole", {"ManagedGroups": "ng-*", "ClusterName": "c"}, unchecked)
    other = f"arn:aws:autoscaling:{REGION}:{ACCOUNT}:autoScalingGroup:uuid-1:autoScalingGroupName/ng-payments"
    request = Request(
        "autoscaling:CompleteLifecycleAction", other, context_of({"aws:RequestedRegion": REGION})
    )
    assert evaluate(granted, request).allowed


@pytest.mark.parametrize("groups", ["*", "ng-*", "ng-a,ng-?", "nodes,*"])
def test_a_group_name_with_an_iam_wildcard_is_refused_by_the_template(groups: str) -> None:
    # Given a group list naming a group with * or ?, When the stack is deployed with it,
    # Then the template refuses the parameter: the drain, eip and sweeper roles would complete the lifecycle
    # actions of every group the pattern matches, not only the stack's (groups named so: ManagedByTag)
    with pytest.raises(ParameterError, match="ManagedGroups"):
        check_parameters(TEMPLATE, {"ManagedGroups": groups})
    check_parameters(TEMPLATE, {"ManagedGroups": "ng-a,ng b,ng.c_d"})  # what EC2 Auto Scaling names are


@pytest.mark.parametrize("cluster", ["*", "prod*", "prod/x", "prod:x", "-prod", "p" * 101])
def test_a_cluster_name_eks_would_not_take_is_refused_by_the_template(cluster: str) -> None:
    # Given a cluster name EKS refuses (its names: a letter or digit, then letters, digits, - and _, up to 100),
    # When the stack is deployed with it, Then the template refuses it: spliced into the drain and sweeper roles'
    # eks:DescribeCluster ARN, "*" would let them describe every cluster, and no access entry could be made
    with pytest.raises(ParameterError, match="ClusterName"):
        check_parameters(TEMPLATE, {"ClusterName": cluster, "ManagedGroups": "nodes"})


def test_an_iam_wildcard_in_the_cluster_name_would_grant_every_cluster() -> None:
    granted = statements("SweeperFunctionRole", {"ManagedGroups": "nodes", "ClusterName": "prod-eks"})
    other = f"arn:aws:eks:{REGION}:{ACCOUNT}:cluster/payments"
    assert not evaluate(granted, Request("eks:DescribeCluster", other)).allowed
    for cluster in ("", "prod", "Prod_2-eks", "p" * 100):
        check_parameters(TEMPLATE, {"ClusterName": cluster})


@pytest.mark.parametrize(
    ("parameter", "value"),
    [
        ("SubnetIds", "subnet-0abc,*"),
        ("SubnetIds", "subnet-*"),
        ("SecurityGroupIds", "*"),
        ("SubnetIds", "x"),
    ],
)
def test_a_subnet_or_security_group_that_is_not_an_id_is_refused_by_the_template(
    parameter: str, value: str
) -> None:
    # Given a subnet or security group that is not an id, When the stack is deployed with it, Then the template
    # refuses it: spliced into the roles' ec2:CreateNetworkInterface ARNs, "*" would let Lambda's interfaces be
    # made in any subnet or security group (CloudFormation matches a list's pattern against each of its values)
    with pytest.raises(ParameterError, match=parameter):
        check_parameters(TEMPLATE, {parameter: value, "ManagedGroups": "nodes"})
    check_parameters(
        TEMPLATE, {"SubnetIds": "subnet-0123456789abcdef0,subnet-1a2b3c4d", "SecurityGroupIds": "sg-0a1b2c3d"}
    )
    check_parameters(TEMPLATE, {"SubnetIds": "", "SecurityGroupIds": ""})  # the defaults: no VPC
    # CloudFormation trims each value of a list: blanks around the commas are no wildcard
    check_parameters(TEMPLATE, {"SubnetIds": "subnet-0abc, subnet-1def", "SecurityGroupIds": " sg-0a1b"})


@pytest.mark.parametrize(
    "parameters",
    [
        {"SubnetIds": "subnet-0abc"},  # no security group: Lambda refuses the function, the stack rolls back
        {"SecurityGroupIds": "sg-0a1b"},  # no subnet: no VPC at all (UseVpc), a private endpoint out of reach
        {"SubnetIds": "subnet-0abc,", "SecurityGroupIds": "sg-0a1b"},  # an empty subnet id
        {"SubnetIds": "subnet-0abc", "SecurityGroupIds": "sg-0a1b, "},  # an empty security group id
    ],
)
def test_subnets_and_security_groups_are_given_together_or_not_at_all(parameters: dict[str, str]) -> None:
    # Given subnets without security groups (or the reverse), When the stack is deployed, Then the template
    # refuses it before anything is created: Lambda refuses a VpcConfig whose lists do not both have ids
    # ("SubnetIds and SecurityIds must coexist or be both empty list."), after the queues, table and roles are
    # made; security groups without subnets would deploy green with the functions outside the VPC
    parameters = {"ManagedGroups": "nodes", **parameters}
    check_parameters(TEMPLATE, parameters)  # each list is valid on its own
    with pytest.raises(ParameterError, match="VpcTogether"):
        check_rules(TEMPLATE, parameters)
    check_rules(TEMPLATE, {"ManagedGroups": "nodes"})  # the defaults: no VPC
    check_rules(
        TEMPLATE,
        {"ManagedGroups": "nodes", "SubnetIds": "subnet-0abc, subnet-1def", "SecurityGroupIds": "sg-0a1b"},
    )


def test_every_sweep_interval_the_template_takes_is_a_schedule_eventbridge_takes() -> None:
    # EventBridge refuses rate(1 minutes) and rate(5 minute): the sweeper's schedule spells the unit as the
    # number wants (SweepEveryMinute), for each interval SweepIntervalMinutes allows
    interval = whole_numbers(PARAMETERS["SweepIntervalMinutes"])
    assert interval is not None
    schedule = TEMPLATE["Resources"]["SweeperFunction"]["Properties"]["Events"]["Sweep"]["Properties"][
        "Schedule"
    ]
    for minutes in interval:
        resources = StaticResources(TEMPLATE, stack_name="s", region=REGION, account=ACCOUNT)
        intrinsics = Intrinsics(
            TEMPLATE,
            resources=resources,
            stack_name="s",
            region=REGION,
            account=ACCOUNT,
            parameters={"ManagedGroups": "nodes", "SweepIntervalMinutes": str(minutes)},
        )
        assert interval_seconds(str(intrinsics.resolve(schedule))) == minutes * 60


# -- what the functions refuse at every cold start --------------------------------------------------------------


@pytest.mark.parametrize(
    "parameters",
    [
        {},  # the defaults: no groups by name, none by tag
        {"ManagedGroups": "", "ManagedByTag": "false", "ClusterName": "prod"},
        {"ManagedGroups": "nodes", "EipMode": "pool"},  # a pool without a name
        {"ManagedGroups": "nodes", "EipMode": "pool", "EipPoolName": ""},
    ],
)
def test_parameters_that_leave_the_functions_nothing_to_manage_are_refused_by_the_template(
    parameters: dict[str, str],
) -> None:
    # Given parameters each of which the template takes, but together describe no stack the functions accept,
    check_parameters(TEMPLATE, parameters)
    environment = {**REQUIRED, "NODECYCLE_MANAGED_GROUPS": ""}
    environment |= {VARIABLES[name]: value for name, value in parameters.items() if name in VARIABLES}
    with pytest.raises(SettingsError):
        Settings.from_env(environment)
    # When the stack is deployed with them, Then the template's rules refuse them before anything is created
    with pytest.raises(ParameterError, match=r"rule \w+"):
        check_rules(TEMPLATE, parameters)


@pytest.mark.parametrize(
    "parameters",
    [
        {"ManagedGroups": "nodes"},
        {"ManagedByTag": "true"},
        {"ManagedByTag": "true", "EipMode": "pool", "EipPoolName": "edge"},
        {"ManagedGroups": "nodes", "EipMode": "allocate"},
    ],
)
def test_the_rules_take_every_stack_the_functions_accept(parameters: dict[str, str]) -> None:
    check_rules(TEMPLATE, parameters)
    environment = {**REQUIRED, "NODECYCLE_MANAGED_GROUPS": ""}
    environment |= {VARIABLES[name]: value for name, value in parameters.items() if name in VARIABLES}
    Settings.from_env(environment)


@pytest.mark.parametrize("hooks", [",", " ", " , ", ",,"])
def test_a_hook_list_that_names_no_hook_is_refused_by_the_template(hooks: str) -> None:
    # Given a ManagedHooks that names no hook, the functions refuse it at every cold start (NODECYCLE_MANAGED_HOOKS
    # is empty)
    with pytest.raises(SettingsError, match="NODECYCLE_MANAGED_HOOKS"):
        IntakeSettings.from_env({**REQUIRED, "NODECYCLE_MANAGED_HOOKS": hooks})
    # Then the template refuses it first
    with pytest.raises(ParameterError, match="ManagedHooks"):
        check_parameters(TEMPLATE, {"ManagedHooks": hooks})
    check_parameters(TEMPLATE, {"ManagedHooks": "*"})
    check_parameters(TEMPLATE, {"ManagedHooks": "drain-me"})


# -- the budget's node selector ------------------------------------------------------------------------------

# Every form of requirement the API server takes (labels.Parse): existence and its negation, equality, set-based
# (members may be empty), whole-number comparisons (up to 2^63 - 1, leading zeros included), prefixed keys, blanks
SELECTORS = [
    "",
    "  ",
    "spot",
    "!spot",
    "! spot",
    "tier=web",
    "tier==web",
    "tier!=web",
    "tier=",
    "tier in (web,db)",
    "tier in (web, ,db)",
    "tier notin ()",
    "tier notin(web)",
    "node.kubernetes.io/instance-type in (m5.large,m6i.large),!spot",
    "eks.amazonaws.com/nodegroup=ng-1,topology.kubernetes.io/zone!=eu-west-1a",
    "rank>5",
    "rank < 10",
    "rank>9223372036854775807",
    "rank>" + "0" * 62 + "1",
    " tier = web , spot ",
    "tier\tin\t(web)",
    "x.y-z_w=V.1-2_3",
    "a" * 63 + "=" + "b" * 63,
    "x" * 253 + "/a",
]
# What it refuses: a dangling comma, a bad operator or set, a bound that is not a whole number below 2^63, names
# and values past 63 characters or with characters a label cannot have, a prefix past 253 or not lower case
NOT_SELECTORS = [
    "tier,",
    ",tier",
    "tier,,spot",
    "tier=web=db",
    "tier in web",
    "tier in (web",
    "tier in (web db)",
    "tier web",
    "=web",
    "!tier=web",
    "rank>",
    "rank>-1",
    "rank>1.5",
    "rank>9223372036854775808",
    "rank>" + "0" * 63 + "1",
    "*",
    "tier=*",
    "tier;spot",
    "tier&&spot",
    "Node.io/tier=web",
    "a/b/c",
    "-tier=web",
    "tier=-web",
    "a" * 64,
    "tier=" + "b" * 64,
    "x" * 254 + "/a",
    "tier\u00a0=web",
]


def settings_take(selector: str) -> bool:
    try:
        Budget.model_validate({"budget_node_selector": selector})
    except ValidationError:
        return False
    return True


def template_takes(selector: str) -> bool:
    try:
        check_parameters(TEMPLATE, {"BudgetNodeSelector": selector})
    except ParameterError:
        return False
    return True


@pytest.mark.parametrize("selector", SELECTORS)
def test_every_kind_of_label_selector_is_taken_by_the_template(selector: str) -> None:
    assert settings_take(selector)  # (the API server's syntax, as the functions check it)
    assert template_takes(selector)


@pytest.mark.parametrize("selector", NOT_SELECTORS)
def test_a_malformed_label_selector_is_refused_by_the_template(selector: str) -> None:
    # Given a selector the functions refuse (the drain's first record and every sweep fail with a SettingsError),
    assert not settings_take(selector)
    # Then the template refuses it first
    assert not template_takes(selector)


def test_the_template_refuses_exactly_the_selectors_the_functions_refuse() -> None:
    # Given strings made of the pieces of selectors (names, prefixes, operators, sets, bounds, blanks, commas)
    # and of what no selector has
    pieces = ["a", "Z", "0", "9", "-", ".", "_", "/", "x.io/", "=", "!", "<", ">", ",", " ", "\t", "(", ")"]
    pieces += [" in ", " notin ", "in", "*", "\u00e9", "\n"]
    dice = random.Random(43)
    strings = ["".join(dice.choices(pieces, k=dice.randint(0, 12))) for _ in range(20_000)]
    # Then the template's pattern and the settings agree on each
    differ = [s for s in strings if settings_take(s) != template_takes(s)]
    assert sum(map(template_takes, strings)) > 2_000  # (many are selectors)
    assert not differ


# -- numbers ----------------------------------------------------------------------------------------------------

# The parameters that take whole numbers, and the range each states (its pattern's)
NUMBERS = sorted(
    name for name, spec in PARAMETERS.items() if whole_numbers(spec) is not None and name in VARIABLES
)
RANGES: dict[str, range] = {
    name: taken for name, spec in PARAMETERS.items() if (taken := whole_numbers(spec)) is not None
}
# A number CloudFormation takes for a Number parameter without a MaxValue (it holds numbers as doubles)
HUGE = 10**15


def test_the_numbers_were_found() -> None:
    assert {"DrainTimeoutSeconds", "BudgetHolderTtlSeconds", "WorkVisibilityTimeoutSeconds"} <= set(NUMBERS)


@pytest.mark.parametrize("parameter", NUMBERS)
def test_no_number_the_template_takes_is_past_what_a_date_can_be_moved_by(parameter: str) -> None:
    # Given the highest value the template takes for a number of seconds, minutes or days,
    highest = RANGES[parameter][-1]
    check_parameters(TEMPLATE, {parameter: str(highest)})
    unit = {"Seconds": "seconds", "Minutes": "minutes", "Days": "days"}[
        next(u for u in ("Seconds", "Minutes", "Days") if parameter.endswith(u))
    ]
    # Then a date of the functions' can be moved by it both ways, as their deadlines and look-backs are
    now = datetime(2026, 12, 5, tzinfo=UTC)
    moved = timedelta(**{unit: highest})
    assert now + moved > now > now - moved, parameter


def test_a_drain_timeout_past_any_date_is_refused_at_cold_start_naming_it() -> None:
    # Given a drain timeout no deadline can be computed from, When the drain function starts with it,
    # Then its settings refuse it by name (the function logs why), rather than every drain failing with an
    # OverflowError until its message is dead-lettered
    environment = {**REQUIRED, "NODECYCLE_DRAIN_TIMEOUT_SECONDS": str(HUGE)}
    with pytest.raises(SettingsError, match="NODECYCLE_DRAIN_TIMEOUT_SECONDS"):
        drain_policy(DrainSettings.from_env(environment))


@pytest.mark.parametrize("parameter", NUMBERS)
def test_the_settings_refuse_a_number_past_the_templates_highest(parameter: str) -> None:
    # The functions hold an environment set by other means (a tool, a console edit) to the template's bounds
    above = RANGES[parameter][-1] + 1
    with pytest.raises(SettingsError, match=VARIABLES[parameter]):
        Settings.from_env({**REQUIRED, VARIABLES[parameter]: str(above)})


def setting(variable: str) -> Any:
    return Settings.model_fields[variable.removeprefix("NODECYCLE_").lower()]


# The parameters whose settings the functions read as whole numbers
WHOLE = sorted(name for name, variable in VARIABLES.items() if setting(variable).annotation is int)


def test_the_whole_numbers_were_found() -> None:
    assert {"DrainTimeoutSeconds", "SweepGraceSeconds", "RecordTtlDays", "MaintenanceLeadMinutes"} <= set(
        WHOLE
    )


@pytest.mark.parametrize("shape", ["{}.5", "{}e0"])
@pytest.mark.parametrize("parameter", WHOLE)
def test_a_number_the_functions_refuse_at_every_cold_start_is_refused_by_the_template(
    parameter: str, shape: str
) -> None:
    # Given a value the functions' settings refuse (a fraction, an exponent): CloudFormation takes either for a
    # Number parameter, and the stack deploys green with every invocation failing
    value = shape.format(PARAMETERS[parameter]["Default"])
    with pytest.raises(SettingsError, match=VARIABLES[parameter]):
        Settings.from_env({**REQUIRED, VARIABLES[parameter]: value})
    # Then the template refuses it before anything is created
    with pytest.raises(ParameterError, match=parameter):
        check_parameters(TEMPLATE, {parameter: value})


@pytest.mark.parametrize("parameter", sorted(RANGES))
def test_a_whole_number_parameter_takes_exactly_the_range_it_states(parameter: str) -> None:
    # Given the range a whole-number parameter states (CloudFormation shows it when it refuses a value, the
    # sandbox reads it), and the numbers around its ends, its powers of ten and a sample of the others
    taken = RANGES[parameter]
    low, high = taken[0], taken[-1]
    dice = random.Random(parameter)
    numbers = {low - 1, low, low + 1, high - 1, high, high + 1}
    numbers |= {10**k + d for k in range(10) for d in (-1, 0, 1)}
    around = range(max(0, low - 1_000), high + 1_000)
    numbers |= set(dice.sample(around, min(2_000, len(around))))

    def takes(value: str) -> bool:
        try:
            check_parameters(TEMPLATE, {parameter: value})
        except ParameterError:
            return False
        return True

    # Then its pattern takes exactly the whole numbers of that range, written as the functions read them
    assert not [n for n in sorted(numbers) if n >= 0 and takes(str(n)) != (n in taken)]
    assert not [
        v for v in (f"{low}.0", f"{low}.5", f"0{low}", f" {low}", f"+{low}", f"{low}e0", "") if takes(v)
    ]


@pytest.mark.parametrize("min_values", [True, False])
def test_the_sandbox_refuses_a_fraction_before_it_starts_anything(min_values: bool) -> None:
    # As CloudFormation now does, the sandbox refuses the stack before anything is created, even one told to take
    # numbers below their minimum (the campaign's)
    options = SandboxOptions(
        root=ROOT, group=None, parameters={"DrainTimeoutSeconds": "600.5"}, min_values=min_values
    )
    with pytest.raises(
        ParameterError, match=r"DrainTimeoutSeconds='600\.5' is not valid: it must be whole seconds"
    ):
        Sandbox(options).start()


def test_the_shortest_holder_ttl_the_template_takes_is_one_the_drain_function_can_start_with() -> None:
    # Given the shortest BudgetHolderTtlSeconds the template takes, and the shortest timing of the steps that
    # renew a holder (the queues' visibility timeout, the resume grace, the drain poll),
    shortest = {
        name: str(RANGES[name][0])
        for name in (
            "BudgetHolderTtlSeconds",
            "WorkVisibilityTimeoutSeconds",
            "ResumeGraceSeconds",
            "DrainPollSeconds",
            "BudgetRetrySeconds",
        )
    }
    check_parameters(TEMPLATE, shortest)
    # Then the drain function and the sweeper start with them: a shorter TTL fails every cold start whatever the
    # other parameters (a holder would expire between two of its renewals)
    environment = {**REQUIRED, **{VARIABLES[name]: value for name, value in shortest.items()}}
    DrainSettings.from_env(environment)
    SweeperSettings.from_env(environment)
    below = {
        **environment,
        "NODECYCLE_BUDGET_HOLDER_TTL_SECONDS": str(int(shortest["BudgetHolderTtlSeconds"]) - 1),
    }
    with pytest.raises(SettingsError, match="NODECYCLE_BUDGET_HOLDER_TTL_SECONDS"):
        DrainSettings.from_env(below)


# -- the console ---------------------------------------------------------------------------------------------


def test_every_parameter_is_in_a_group_of_the_console() -> None:
    # sam deploy --guided and the console show the parameters by group; one in none is shown last, alone
    groups = TEMPLATE["Metadata"]["AWS::CloudFormation::Interface"]["ParameterGroups"]
    grouped = [name for group in groups for name in group["Parameters"]]
    assert sorted(grouped) == sorted(PARAMETERS)


def test_the_settings_defaults_are_the_templates() -> None:
    # Tools that start or inspect a stack without its environment (the sandbox, the CLI) read the settings'
    # defaults: they must describe the stack the template deploys
    required = {k.removeprefix("NODECYCLE_").lower(): v for k, v in REQUIRED.items()}
    defaults = Settings.model_validate(required).env()
    differ = {
        parameter: (str(PARAMETERS[parameter].get("Default", "")), defaults[variable])
        for parameter, variable in VARIABLES.items()
        if variable not in REQUIRED
        and defaults[variable].lower() != str(PARAMETERS[parameter].get("Default", "")).lower()
    }
    assert not differ, f"template default vs settings default: {differ}"
