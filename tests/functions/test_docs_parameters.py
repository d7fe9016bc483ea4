"""What template.yaml's parameter descriptions tell the operator who sets them (the CloudFormation console shows them;
`sam deploy --guided` only the names and defaults) is what the functions check at their cold start."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nodecycle.settings import DrainSettings, SettingsError
from nodecycle_sandbox.iam.template import StaticResources
from nodecycle_sandbox.runner.cfn_yaml import load_template
from nodecycle_sandbox.runner.intrinsics import Intrinsics, ParameterError, check_parameters

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = load_template(ROOT / "template.yaml")
PARAMETERS = TEMPLATE["Parameters"]
ENVIRONMENT = {
    "NODECYCLE_OWNER_ID": "stack-a",
    "NODECYCLE_CLUSTER_NAME": "prod",
    "NODECYCLE_RECORD_TABLE": "t",
    "NODECYCLE_DRAIN_QUEUE_URL": "q",
    "NODECYCLE_EIP_QUEUE_URL": "q",
    "NODECYCLE_WAKE_QUEUE_URL": "q",
}


def test_the_shortest_budget_holder_ttl_the_template_states_is_the_one_the_drain_function_accepts() -> None:
    # Given the shortest BudgetHolderTtlSeconds the parameter's description gives for the other defaults
    description = " ".join(PARAMETERS["BudgetHolderTtlSeconds"]["Description"].split())
    stated = re.search(r"(\d+) s with the defaults", description)
    assert stated, f"the description names no minimum: {description}"
    shortest = int(stated.group(1))
    # Then the drain function starts with it, and refuses a second less
    DrainSettings.from_env({**ENVIRONMENT, "NODECYCLE_BUDGET_HOLDER_TTL_SECONDS": str(shortest)})
    with pytest.raises(SettingsError, match="NODECYCLE_BUDGET_HOLDER_TTL_SECONDS"):
        DrainSettings.from_env({**ENVIRONMENT, "NODECYCLE_BUDGET_HOLDER_TTL_SECONDS": str(shortest - 1)})


@pytest.mark.parametrize("interval", ["2.5", "0.5", "05", "61"])
def test_a_sweep_interval_the_schedule_cannot_take_is_refused_before_anything_is_created(
    interval: str,
) -> None:
    # Given a SweepIntervalMinutes that is not a whole number of minutes from 1 to 60: EventBridge's
    # rate(N minutes) and the stalled lifecycles' alarm (its Fn::Select) take whole numbers only
    # Then CloudFormation refuses the parameter itself, naming it, rather than fail half way through the stack
    with pytest.raises(ParameterError, match="SweepIntervalMinutes"):
        check_parameters(TEMPLATE, {"SweepIntervalMinutes": interval})


@pytest.mark.parametrize("interval", ["1", "5", "60"])
def test_a_whole_sweep_interval_gives_its_schedule_and_alarm(interval: str) -> None:
    resources = StaticResources(TEMPLATE, stack_name="nodecycle", region="eu-west-1", account="123456789012")
    resources.intrinsics = Intrinsics(
        TEMPLATE,
        resources=resources,
        stack_name="nodecycle",
        region="eu-west-1",
        account="123456789012",
        parameters={"SweepIntervalMinutes": interval},
    )
    sweep = TEMPLATE["Resources"]["SweeperFunction"]["Properties"]["Events"]["Sweep"]["Properties"]
    schedule = resources.intrinsics.resolve(sweep["Schedule"])
    assert schedule == ("rate(1 minute)" if interval == "1" else f"rate({interval} minutes)")
    alarm = resources.intrinsics.resolve(TEMPLATE["Resources"]["LifecyclesStalledAlarm"]["Properties"])
    # (two intervals and 6 minutes, 12 at least: the last two runs' counts, however long each sweep lasts)
    assert int(alarm["EvaluationPeriods"]) == max(2 * int(interval) + 6, 12)


def test_every_parameter_says_what_it_does() -> None:
    # The CloudFormation console shows each parameter's description beside its field, and `sam deploy --guided`
    # only its name and default: a parameter without one is a name to guess at (ForceGraceSeconds, EipMode...)
    assert sorted(name for name, parameter in PARAMETERS.items() if not parameter.get("Description")) == []


@pytest.mark.parametrize(
    "name",
    sorted(
        name
        for name, parameter in PARAMETERS.items()
        if parameter.get("AllowedValues")
        and set(parameter["AllowedValues"]) != {"true", "false"}
        and parameter["Type"] == "String"
    ),
)
def test_a_choice_parameter_says_what_each_of_its_values_does(name: str) -> None:
    # Given a parameter that takes one of a few words (EipMode: off, allocate, pool)
    description = PARAMETERS[name].get("Description") or ""
    # Then its description names each of them
    assert [value for value in PARAMETERS[name]["AllowedValues"] if value not in description] == []


def test_a_default_a_description_states_is_the_parameters_default() -> None:
    # Given each description that states its parameter's default ("Default 10."), Then it is the one deployed
    stated = {
        name: match.group(1)
        for name, parameter in PARAMETERS.items()
        if (match := re.search(r"\bDefault (\S+?)\.?(?:\s|$)", parameter.get("Description") or ""))
    }
    assert len(stated) >= 4  # the scan found them
    assert {name: value for name, value in stated.items() if value != str(PARAMETERS[name]["Default"])} == {}


# A value each pattern refuses, and one it takes, for the parameters whose rule is not a range of whole numbers
REFUSED_AND_TAKEN = {
    "OwnerId": ("team a", "team-a.prod"),
    "BudgetMaxUnavailable": ("0", "10%"),
    "BudgetMaxUnavailablePerZone": ("101%", "2"),
    "BudgetNamespace": ("Platform", "platform-tools"),
    "KubernetesGroup": ("-nodecycle", "nodecycle.prod"),
}


@pytest.mark.parametrize(
    "name", sorted(name for name, parameter in PARAMETERS.items() if parameter.get("AllowedPattern"))
)
def test_a_value_its_pattern_refuses_is_told_in_words(name: str) -> None:
    # Given a parameter held to a pattern: CloudFormation refuses a value outside it with "failed to satisfy
    # constraint: <ConstraintDescription>", and, without one, with the pattern itself ("must match pattern
    # ^([1-9][0-9]*|[1-9][0-9]?%|100%)$"), a regular expression for the operator to read (the console shows
    # the ConstraintDescription beside the field too)
    # Then the parameter says its rule in words
    assert PARAMETERS[name].get("ConstraintDescription"), f"{name} has no ConstraintDescription"


@pytest.mark.parametrize("name", sorted(REFUSED_AND_TAKEN))
def test_the_words_are_the_patterns_rule(name: str) -> None:
    # Given a value the pattern refuses and one it takes
    refused, taken = REFUSED_AND_TAKEN[name]
    # When they are deployed, Then the first is refused in the parameter's words, not in its pattern's
    with pytest.raises(ParameterError) as error:
        check_parameters(TEMPLATE, {name: refused})
    assert str(PARAMETERS[name].get("ConstraintDescription")) in str(error.value)
    assert str(PARAMETERS[name]["AllowedPattern"]) not in str(error.value)
    check_parameters(TEMPLATE, {name: taken})
