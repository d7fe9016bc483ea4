"""docs/migrating.md, the guide a platform team follows to move its groups onto nodecycle, says what the code and
the template do: the parameters it names exist, its hook commands are what the doctor and the functions accept
with the template's defaults, the tag it removes is the one the doctor looks for, the events it says the stack's
rules take are the rules' own, and the figures of its sizing table are the budget's arithmetic."""

from __future__ import annotations

import re
import shlex
from datetime import UTC, datetime, timedelta
from pathlib import Path

from nodecycle.domain.model import global_deadline
from nodecycle.domain.policy import Quantity
from nodecycle.settings import Timing
from nodecycle_cli.doctor import aws_checks
from nodecycle_sandbox.runner.cfn_yaml import load_template
from nodecycle_sandbox.runner.intrinsics import check_parameters

ROOT = Path(__file__).resolve().parents[2]
GUIDE = (ROOT / "docs" / "migrating.md").read_text()
TEMPLATE = load_template(ROOT / "template.yaml")
PARAMETERS = TEMPLATE["Parameters"]
# Names the guide quotes that are AWS's, not nodecycle's: an instance refresh's, AssociateAddress's argument
FOREIGN = {"MinHealthyPercentage", "AllowReassociation"}


def commands(program: str) -> list[list[str]]:
    """The guide's shell commands that start with ``program`` (continuation lines joined), as words."""
    joined = GUIDE.replace("\\\n", " ")
    return [shlex.split(line.strip()) for line in joined.splitlines() if line.strip().startswith(program)]


def option(words: list[str], name: str) -> str:
    return words[words.index(name) + 1]


def test_every_setting_the_guide_names_is_one_of_the_template_or_the_code() -> None:
    # CamelCase words in backticks (`BudgetMaxUnavailable`, `EipMode=pool`) and in --parameter-overrides
    quoted = {m.group(1) for m in re.finditer(r"`([A-Z][a-z]+(?:[A-Z][a-z0-9]*)+)(?:=[^`]*)?`", GUIDE)}
    overridden = {
        word.split("=", 1)[0]
        for words in commands("sam deploy")
        for word in words
        if "=" in word and word[0].isupper()
    }
    sources = "\n".join(p.read_text() for p in (ROOT / "layers" / "nodecycle").rglob("*.py"))
    published = set(TEMPLATE["Metadata"]["AWS::ServerlessRepo::Application"])  # (SemanticVersion)
    known = set(PARAMETERS) | set(TEMPLATE["Outputs"]) | set(TEMPLATE["Resources"]) | published | FOREIGN
    unknown = {name for name in quoted | overridden if name not in known and f'"{name}"' not in sources}
    assert quoted
    assert overridden
    assert unknown == set()


def test_the_tag_the_guide_removes_is_the_one_the_doctor_finds_with_its_own_command() -> None:
    (removal,) = [" ".join(words) for words in commands("aws autoscaling delete-tags")]
    assert aws_checks.NTH_MANAGED_TAG in removal
    # the doctor's fix for a group named G is the guide's command
    fix = aws_checks._other_drainer("G").fix
    assert fix.startswith(removal)


def test_the_hooks_the_guide_puts_are_answered_and_kept_alive_with_the_template_defaults() -> None:
    hooks = {
        option(words, "--lifecycle-hook-name"): words
        for words in commands("aws autoscaling put-lifecycle-hook")
    }
    managed = PARAMETERS["ManagedHooks"]["Default"].split(",")
    assert sorted(hooks) == sorted(managed)
    # the shortest heartbeat timeout the functions keep alive with the template's defaults, as the doctor asks it
    shortest = Timing(
        heartbeat_margin_seconds=int(PARAMETERS["HeartbeatMarginSeconds"]["Default"]),
        work_visibility_timeout_seconds=int(PARAMETERS["WorkVisibilityTimeoutSeconds"]["Default"]),
        resume_grace_seconds=int(PARAMETERS["ResumeGraceSeconds"]["Default"]),
        sweep_interval_minutes=float(PARAMETERS["SweepIntervalMinutes"]["Default"]),
    ).min_heartbeat_timeout_seconds
    assert f"{shortest} s at least with the template's defaults" in " ".join(GUIDE.split())
    for name, words in hooks.items():
        assert int(option(words, "--heartbeat-timeout")) >= shortest, name
    # the launch hook's default result is the one the doctor asks for with the template's defaults and a cluster
    # (the readiness gate on, ReadinessFailureResult ABANDON), and the terminate hook's CONTINUE
    assert PARAMETERS["ReadinessGate"]["Default"] == "true"
    launch_default = PARAMETERS["ReadinessFailureResult"]["Default"]
    assert option(hooks["nodecycle-launch"], "--default-result") == launch_default
    assert option(hooks["nodecycle-launch"], "--lifecycle-transition") == aws_checks.LAUNCHING
    assert option(hooks["nodecycle-terminate"], "--default-result") == "CONTINUE"
    assert option(hooks["nodecycle-terminate"], "--lifecycle-transition") == aws_checks.TERMINATING


def test_the_events_the_guide_says_the_rules_take_are_the_rules_own() -> None:
    intake = TEMPLATE["Resources"]["IntakeFunction"]["Properties"]["Events"]
    patterns = [e["Properties"]["Pattern"] for e in intake.values() if e["Type"] == "EventBridgeRule"]
    detail_types = {t for pattern in patterns for t in pattern["detail-type"]}
    sources = {s for pattern in patterns for s in pattern["source"]}
    text = " ".join(GUIDE.split())
    assert {t for t in detail_types if f"`{t}`" not in text} == set()
    assert {s for s in sources if f"`{s}`" not in text} == set()
    # and none of them names another bus than the default one the guide says
    assert all(
        "EventBusName" not in e["Properties"] for e in intake.values() if e["Type"] == "EventBridgeRule"
    )


def test_the_sizing_table_is_the_budgets_arithmetic() -> None:
    text = " ".join(GUIDE.split())
    # the template's default budget: one node at a time, no zone limit
    assert PARAMETERS["BudgetMaxUnavailable"]["Default"] == "1"
    assert PARAMETERS["BudgetMaxUnavailablePerZone"]["Default"] == ""
    assert "(`BudgetMaxUnavailable=1`, no zone limit) | 1 |" in text
    # 300 nodes in 3 zones of 100: the slots each row states, as the budget resolves its percents
    total = Quantity.parse("10%").resolve(300)
    for per_zone in ("5%", "10%"):
        slots = min(total, 3 * Quantity.parse(per_zone).resolve(100))
        row = f"`BudgetMaxUnavailable=10%`, `BudgetMaxUnavailablePerZone={per_zone}` | {total} in all, "
        row += (
            f"{Quantity.parse(per_zone).resolve(100)} per zone: {slots} | about {300 // slots * 4} minutes |"
        )
        assert row in text
    # the global timeout the default row is set against: that of the hooks the guide has the team create (a hook
    # under the functions' minimum heartbeat timeout is one the doctor and intake warn about, not an example), against
    # 300 drains one at a time: within it at 4 minutes a drain, past it at 5
    (heartbeat,) = {
        int(option(words, "--heartbeat-timeout")) for words in commands("aws autoscaling put-lifecycle")
    }
    minimum = Timing(
        heartbeat_margin_seconds=PARAMETERS["HeartbeatMarginSeconds"]["Default"],
        work_visibility_timeout_seconds=PARAMETERS["WorkVisibilityTimeoutSeconds"]["Default"],
        resume_grace_seconds=PARAMETERS["ResumeGraceSeconds"]["Default"],
        sweep_interval_minutes=PARAMETERS["SweepIntervalMinutes"]["Default"],
    ).min_heartbeat_timeout_seconds
    assert heartbeat >= minimum
    started = datetime(2026, 1, 1, tzinfo=UTC)
    hours = (global_deadline(started, heartbeat) - started) / timedelta(hours=1)
    assert f"the {hours:g} h global timeout of step 4's {heartbeat} s hooks" in text
    assert timedelta(minutes=300 * 4) < timedelta(hours=hours) <= timedelta(minutes=300 * 5)
    assert "drains of 5 minutes reach it" in text


def test_the_guides_deploy_commands_give_sam_the_values_they_show_and_the_template_takes_them() -> None:
    from samcli.cli.types import CfnParameterOverridesType  # type: ignore[import-untyped]  # (SAM ships no types)

    deploys = [
        words[words.index("--parameter-overrides") + 1 :] for words in commands("sam deploy --parameter")
    ]
    assert deploys
    for words in deploys:
        given = [word for word in words if "=" in word]
        # SAM reads the words as `sam deploy` does (it cuts an unquoted value at its first blank)
        read = CfnParameterOverridesType().convert(tuple(given), None, None)
        shown = {word.split("=", 1)[0]: word.split("=", 1)[1].strip('"') for word in given}
        assert read == shown
        # and the template takes each (its patterns: a truncated selector could pass them, not the check above)
        check_parameters(TEMPLATE, {name: value for name, value in read.items() if "..." not in value})
