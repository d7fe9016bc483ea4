"""Settings: read once from the environment; a bad value names the variable and what was expected."""

from __future__ import annotations

import pytest

from nodecycle.domain.policy import EipMode, Quantity, TimeoutPolicy
from nodecycle.settings import (
    DrainSettings,
    EipSettings,
    IntakeSettings,
    Settings,
    SettingsError,
    SweeperSettings,
)
from nodecycle.wiring.common import common, drain_policy
from nodecycle.wiring.engines import engine_timing

REQUIRED = {
    "NODECYCLE_OWNER_ID": "stack-a",
    "NODECYCLE_MANAGED_GROUPS": "nodes-a, nodes-b",
    "NODECYCLE_RECORD_TABLE": "table",
    "NODECYCLE_DRAIN_QUEUE_URL": "https://sqs/drain",
    "NODECYCLE_EIP_QUEUE_URL": "https://sqs/eip",
    "NODECYCLE_WAKE_QUEUE_URL": "https://sqs/wake",
}


def test_defaults_describe_a_conservative_stack() -> None:
    settings = Settings.from_env(REQUIRED)
    assert settings.managed_groups == ("nodes-a", "nodes-b")
    assert settings.budget_max_unavailable == Quantity(value=1)
    assert settings.budget_max_unavailable_per_zone is None
    assert settings.timeout_policy is TimeoutPolicy.FORCE
    assert settings.eip_mode is EipMode.OFF
    assert settings.cluster_name is None
    assert not settings.readiness_gate_enabled  # no cluster, no gate


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        (
            "NODECYCLE_DRAIN_TIMEOUT_SECONDS",
            "ten",
            "NODECYCLE_DRAIN_TIMEOUT_SECONDS: Input should be a valid integer",
        ),
        (
            "NODECYCLE_DRAIN_TIMEOUT_SECONDS",
            "-5",
            "NODECYCLE_DRAIN_TIMEOUT_SECONDS: Input should be greater than",
        ),
        (
            "NODECYCLE_TIMEOUT_POLICY",
            "panic",
            "NODECYCLE_TIMEOUT_POLICY: Input should be 'force' or 'continue'",
        ),
        (
            "NODECYCLE_BUDGET_MAX_UNAVAILABLE",
            "150%",
            "NODECYCLE_BUDGET_MAX_UNAVAILABLE: a percent must be between",
        ),
        (
            "NODECYCLE_BUDGET_MAX_UNAVAILABLE",
            "0",
            "NODECYCLE_BUDGET_MAX_UNAVAILABLE: expected a positive integer",
        ),
        ("NODECYCLE_OWNER_ID", "has spaces", "NODECYCLE_OWNER_ID: String should match pattern"),
        ("NODECYCLE_EIP_MODE", "pool", "NODECYCLE_EIP_MODE=pool needs NODECYCLE_EIP_POOL_NAME"),
        # EC2 reads * and ? in a filter value as wildcards: "ci-*" would claim the addresses of pool "ci-prod"
        ("NODECYCLE_EIP_POOL_NAME", "ci-*", "NODECYCLE_EIP_POOL_NAME: String should match pattern"),
        ("NODECYCLE_EIP_POOL_NAME", "ci-pro?", "NODECYCLE_EIP_POOL_NAME: String should match pattern"),
        ("NODECYCLE_MANAGED_GROUPS", "", "no managed groups"),
        # the API server answers 400 to every node list with a selector it cannot parse: each drain would
        # fail at its slot, again and again, with an error that names a query rather than the setting
        ("NODECYCLE_BUDGET_NODE_SELECTOR", "role in (workers", "NODECYCLE_BUDGET_NODE_SELECTOR: not a label"),
        ("NODECYCLE_BUDGET_NODE_SELECTOR", "=workers", "NODECYCLE_BUDGET_NODE_SELECTOR: not a label"),
        ("NODECYCLE_BUDGET_NODE_SELECTOR", "role==a==b", "NODECYCLE_BUDGET_NODE_SELECTOR: not a label"),
        ("NODECYCLE_BUDGET_NODE_SELECTOR", "zone-index>-1", "NODECYCLE_BUDGET_NODE_SELECTOR: not a label"),
        ("NODECYCLE_BUDGET_NODE_SELECTOR", "zone-index<+5", "NODECYCLE_BUDGET_NODE_SELECTOR: not a label"),
        ("NODECYCLE_BUDGET_NODE_SELECTOR", "role=a b", "NODECYCLE_BUDGET_NODE_SELECTOR: not a label"),
    ],
)
def test_an_invalid_value_names_the_setting_and_what_was_expected(name: str, value: str, says: str) -> None:
    with pytest.raises(SettingsError, match=says.replace("(", r"\(")):
        Settings.from_env({**REQUIRED, name: value})


@pytest.mark.parametrize(
    "selector",
    [
        "",
        "role=workers",
        "role==workers,tier!=batch",
        "node.kubernetes.io/lifecycle in (spot, on-demand), !example.com/excluded",
        "eks.amazonaws.com/nodegroup notin (system),gpu",
        "karpenter.sh/capacity-type = spot , zone-index>1",
        "empty=",
        # labels.Parse's own example of valid syntax: a set may have empty members, or be empty ({""})
        "x in (foo,,baz),y,z notin ()",
        "role in ()",
        "role notin (,system)",
        "role in (a,)",
    ],
)
def test_a_label_selector_the_api_server_parses_is_accepted(selector: str) -> None:
    settings = Settings.from_env({**REQUIRED, "NODECYCLE_BUDGET_NODE_SELECTOR": selector})
    assert settings.budget_node_selector == selector.strip()


@pytest.mark.parametrize(
    ("interval", "needed"), [("5", 615), ("1", 300 + 60 + 60 + 255), ("30", 1800 + 60 + 255)]
)
def test_the_shortest_hook_kept_alive_covers_a_crashed_steps_retry_and_a_sweep_interval(
    interval: str, needed: int
) -> None:
    # 60 s margin; a crashed step is retried within max(150 s visibility, 60 s resume grace + 2); while a queue
    # stalls only the sweeper heartbeats, once an interval (which may come a minute late), up to 255 s into its run
    # (its 300 s timeout less its reserve); under an interval shorter than its timeout, after a sweep that ran to it
    settings = Settings.from_env({**REQUIRED, "NODECYCLE_SWEEP_INTERVAL_MINUTES": interval})
    assert settings.min_heartbeat_timeout_seconds == needed


def test_a_margin_under_a_minute_still_leaves_the_schedule_its_minute() -> None:
    # EventBridge fires a rate schedule within its minute, not on its second: two sweeps on schedule may come an
    # interval and 59 s apart, whatever the heartbeat margin (5 s, the least the template takes)
    settings = Settings.from_env({**REQUIRED, "NODECYCLE_HEARTBEAT_MARGIN_SECONDS": "5"})
    assert settings.sweep_lateness_seconds == 60
    assert settings.min_heartbeat_timeout_seconds == 300 + 60 + 255
    assert settings.settle_before_seconds == 300 + 60 + 5


def test_a_missing_setting_is_named() -> None:
    env = {key: value for key, value in REQUIRED.items() if key != "NODECYCLE_RECORD_TABLE"}
    with pytest.raises(SettingsError, match="NODECYCLE_RECORD_TABLE: is required but not set"):
        Settings.from_env(env)


@pytest.mark.parametrize(
    ("text", "total", "limit"),
    [("3", 100, 3), ("25%", 10, 3), ("25%", 1, 1), ("10%", 300, 30), ("1%", 5, 1), ("100%", 7, 7)],
)
def test_a_percent_limit_rounds_up_and_is_at_least_one(text: str, total: int, limit: int) -> None:
    assert Quantity.parse(text).resolve(total) == limit


def test_settings_round_trip_through_their_environment() -> None:
    settings = Settings.from_env({**REQUIRED, "NODECYCLE_BUDGET_MAX_UNAVAILABLE_PER_ZONE": "34%"})
    assert Settings.from_env(settings.env()) == settings


@pytest.mark.parametrize(
    ("function", "refuses"),
    [(IntakeSettings, False), (DrainSettings, True), (EipSettings, False), (SweeperSettings, False)],
)
def test_each_function_validates_only_the_settings_it_uses(
    function: type[IntakeSettings | DrainSettings | EipSettings | SweeperSettings], refuses: bool
) -> None:
    # Given a holder TTL too short for the drains' renewals: a rule only the drain function applies
    env = {**REQUIRED, "NODECYCLE_BUDGET_HOLDER_TTL_SECONDS": "40", "NODECYCLE_BUDGET_RETRY_SECONDS": "10"}
    # When each function reads its settings, Then only the drain function refuses them, naming the setting
    if refuses:
        with pytest.raises(SettingsError, match="NODECYCLE_BUDGET_HOLDER_TTL_SECONDS must be at least"):
            function.from_env(env)
    else:
        function.from_env(env)


def test_a_setting_a_function_does_not_read_is_not_its_concern() -> None:
    # An EIP pool without a name stops the functions that assign addresses, not the drain function
    env = {**REQUIRED, "NODECYCLE_EIP_MODE": "pool"}
    with pytest.raises(SettingsError, match="NODECYCLE_EIP_MODE=pool needs NODECYCLE_EIP_POOL_NAME"):
        EipSettings.from_env(env)
    with pytest.raises(SettingsError, match="NODECYCLE_EIP_POOL_NAME"):
        IntakeSettings.from_env(env)
    assert DrainSettings.from_env(env).owner_id == "stack-a"


@pytest.mark.parametrize(
    ("visibility", "grace", "one_fault"),
    [("150", "60", 150), ("60", "120", 122)],
)
def test_the_engine_times_heartbeats_for_one_fault_at_a_time_not_for_two(
    visibility: str, grace: str, one_fault: int
) -> None:
    # Given the work queues' visibility timeout and the resume grace
    env = {
        **REQUIRED,
        "NODECYCLE_WORK_VISIBILITY_TIMEOUT_SECONDS": visibility,
        "NODECYCLE_RESUME_GRACE_SECONDS": grace,
    }
    # When the wiring times the engine
    timing = engine_timing(common(DrainSettings.from_env(env)))
    # Then a next run is retried after a dead invocation (visibility) or after a lost message (grace, and a
    # second of rounding), whichever is later: not after both
    assert timing.redelivery.total_seconds() == one_fault


@pytest.mark.parametrize(
    ("interval", "visibility", "settle_before"),
    [("5", "150", 420), ("1", "150", 210), ("0.5", "600", 660)],
    ids=["the-sweep-decides", "one-fault-decides", "a-long-visibility-timeout"],
)
def test_the_engine_completes_where_the_sweepers_last_run_would_and_leaves_room_for_one_fault(
    interval: str, visibility: str, settle_before: int
) -> None:
    # Given the sweep's interval and the work queues' visibility timeout (heartbeat margin 60 s)
    env = {
        **REQUIRED,
        "NODECYCLE_SWEEP_INTERVAL_MINUTES": interval,
        "NODECYCLE_WORK_VISIBILITY_TIMEOUT_SECONDS": visibility,
        "NODECYCLE_BUDGET_HOLDER_TTL_SECONDS": "900",  # outlives a renewal's retry after the longest timeout
    }
    # When the wiring times the engine and the drain
    settings = DrainSettings.from_env(env)
    timing = engine_timing(common(settings))
    # Then the guard completes an action no later than where the sweeper's last run before the global
    # timeout settles it (an interval and two margins), nor later than a margin and one fault allow: the
    # sweeper never settles a lifecycle the engine would still be running, and a crash at the guard's run is
    # redelivered in time; drains plan to end there
    assert timing.settle_before.total_seconds() == settle_before
    assert drain_policy(settings).settle_margin == timing.settle_before
