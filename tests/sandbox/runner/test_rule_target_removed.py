"""A rule delivers to the functions it targets: a target an operator removed (``aws events remove-targets``), or
pointed elsewhere, leaves the rule enabled and delivering nothing to the function, as on AWS. (The sandbox asked
only whether the rule was enabled: a stack whose rule lost its target still ran the function, so the doctor's
"does not target function" problem had nothing to show in the sandbox.)"""

from __future__ import annotations

import time

from .conftest import MakeRunner
from .test_stack_deployment import EVENT, INTAKE, TEMPLATE, client

SCHEDULED = """
Resources:
  Sweeper:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/sweeper/
      Handler: app.handler
      Events:
        Sweep:
          Type: Schedule
          Properties:
            Schedule: rate(1 minute)
"""

SWEEPER = """
def handler(event, context):
    return "swept"
"""


def test_a_rule_whose_target_was_removed_delivers_nothing_until_it_is_put_back(
    make_runner: MakeRunner,
) -> None:
    # Given the intake rule, its target removed by an operator (the rule still enabled)
    runner = make_runner(TEMPLATE, {"intake": INTAKE})
    events = client(runner, "events")
    (target,) = events.list_targets_by_rule(Rule="t-IntakeLifecycle")["Targets"]
    events.remove_targets(Rule="t-IntakeLifecycle", Ids=[target["Id"]])
    assert events.describe_rule(Name="t-IntakeLifecycle")["State"] == "ENABLED"

    # When an event is published, then the target is put back and another one is
    runner.publish(EVENT)
    events.put_targets(Rule="t-IntakeLifecycle", Targets=[target])
    runner.publish({**EVENT, "detail-type": "EC2 Instance-terminate Lifecycle Action"})

    # Then only the second reached the function
    (invocation,) = runner.journal.wait_until(lambda: runner.journal.invocations("Intake"), timeout=5)
    assert invocation.response == "EC2 Instance-terminate Lifecycle Action"


def test_a_rule_pointed_at_another_function_does_not_deliver_to_its_own(make_runner: MakeRunner) -> None:
    runner = make_runner(TEMPLATE, {"intake": INTAKE})
    events = client(runner, "events")
    (target,) = events.list_targets_by_rule(Rule="t-IntakeLifecycle")["Targets"]
    elsewhere = target["Arn"].replace(":function:", ":function:other-")
    events.put_targets(Rule="t-IntakeLifecycle", Targets=[{**target, "Arn": elsewhere}])

    runner.publish(EVENT)
    events.put_targets(Rule="t-IntakeLifecycle", Targets=[target])
    runner.publish({**EVENT, "detail-type": "EC2 Instance-terminate Lifecycle Action"})

    (invocation,) = runner.journal.wait_until(lambda: runner.journal.invocations("Intake"), timeout=5)
    assert invocation.response == "EC2 Instance-terminate Lifecycle Action"


def test_a_schedule_whose_target_was_removed_does_not_fire(make_runner: MakeRunner) -> None:
    # Given a schedule firing every 0.2 s whose target an operator removed
    runner = make_runner(SCHEDULED, {"sweeper": SWEEPER}, schedule_interval=0.2)
    events = client(runner, "events")
    (target,) = events.list_targets_by_rule(Rule="t-SweeperSweep")["Targets"]
    events.remove_targets(Rule="t-SweeperSweep", Ids=[target["Id"]])
    time.sleep(0.2)  # (a tick already under way when it was removed)
    before = len(runner.journal.invocations("Sweeper"))

    # When a second passes (five ticks)
    time.sleep(1.0)

    # Then the sweeper did not run; with the target back, it runs again
    assert len(runner.journal.invocations("Sweeper")) == before
    events.put_targets(Rule="t-SweeperSweep", Targets=[target])
    assert runner.journal.wait_until(lambda: len(runner.journal.invocations("Sweeper")) > before, timeout=5)
