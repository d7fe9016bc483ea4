"""ReadinessTimeoutSeconds is bounded by what Auto Scaling lets a launch action live (48 hours at most, whatever
the hook's heartbeat timeout): the engine completes every action a margin before its global timeout, so a gate
timeout past that point never applies (the launch of a node that never joins is held up to two days, and settled
as a global timeout near, not as a readiness timeout), and one far past it (10^12 s) is a gate deadline past the
year 9999, which fails every run of the gate (OverflowError) until the queue dead-letters it. The template and
the settings refuse such a value, naming the parameter."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodecycle.settings import DrainSettings, IntakeSettings, Settings, SettingsError, SweeperSettings
from nodecycle_sandbox.runner.cfn_yaml import load_template
from nodecycle_sandbox.runner.intrinsics import ParameterError, check_parameters

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = load_template(ROOT / "template.yaml")
LONGEST_GLOBAL_TIMEOUT = 48 * 3600  # seconds: Auto Scaling's, whatever the hook's heartbeat timeout

REQUIRED = {
    "NODECYCLE_OWNER_ID": "stack-a",
    "NODECYCLE_CLUSTER_NAME": "cluster",
    "NODECYCLE_MANAGED_GROUPS": "nodes",
    "NODECYCLE_RECORD_TABLE": "table",
    "NODECYCLE_DRAIN_QUEUE_URL": "https://sqs/drain",
    "NODECYCLE_EIP_QUEUE_URL": "https://sqs/eip",
    "NODECYCLE_WAKE_QUEUE_URL": "https://sqs/wake",
}


@pytest.mark.parametrize("value", [LONGEST_GLOBAL_TIMEOUT + 1, 10**12])
def test_the_template_refuses_a_readiness_timeout_past_the_longest_global_timeout(value: int) -> None:
    # Given a readiness timeout longer than any launch action lives, When the stack is deployed with it,
    # Then the template refuses the parameter by its name (before anything is created)
    with pytest.raises(ParameterError, match="ReadinessTimeoutSeconds"):
        check_parameters(TEMPLATE, {"ReadinessTimeoutSeconds": str(value)})
    # and takes its highest value
    check_parameters(TEMPLATE, {"ReadinessTimeoutSeconds": str(LONGEST_GLOBAL_TIMEOUT)})


@pytest.mark.parametrize("function", [IntakeSettings, DrainSettings, SweeperSettings, Settings])
@pytest.mark.parametrize("value", [LONGEST_GLOBAL_TIMEOUT, 10**12])
def test_the_settings_refuse_a_readiness_timeout_the_engines_completion_would_always_come_before(
    function: type[IntakeSettings], value: int
) -> None:
    # Given a readiness timeout that ends no earlier than the engine settles an action of the longest global
    # timeout (48 h less its settle margin), When a function that reads it starts,
    # Then it stops with an error naming the setting and its bound
    with pytest.raises(SettingsError, match="NODECYCLE_READINESS_TIMEOUT_SECONDS: "):
        function.from_env({**REQUIRED, "NODECYCLE_READINESS_TIMEOUT_SECONDS": str(value)})


def test_a_readiness_timeout_that_ends_before_the_engine_settles_the_longest_action_is_taken() -> None:
    settings = Settings.from_env(REQUIRED)
    longest = LONGEST_GLOBAL_TIMEOUT - settings.settle_before_seconds
    taken = Settings.from_env({**REQUIRED, "NODECYCLE_READINESS_TIMEOUT_SECONDS": str(longest)})
    assert taken.readiness_timeout_seconds == longest
    with pytest.raises(SettingsError, match="NODECYCLE_READINESS_TIMEOUT_SECONDS"):
        Settings.from_env({**REQUIRED, "NODECYCLE_READINESS_TIMEOUT_SECONDS": str(longest + 1)})
