"""The stack's settings, read from the environment once per cold start and validated.

Every setting is an environment variable named ``NODECYCLE_<FIELD>``; the SAM template fills them from
stack parameters. Settings come in sections (scope, state, timing, drain, budget, EIPs, readiness, sweep),
and each function validates only the sections it uses (:data:`IntakeSettings`, :data:`DrainSettings`,
:data:`EipSettings`, :data:`SweeperSettings`): the eip function does not fail on a budget rule it never
applies. The drain, budget and sweep sections, and the settings that include them, are defined in
:mod:`nodecycle.cluster_settings`, and named here too. A missing or invalid value raises
:class:`SettingsError`, whose message names the variable and what was expected, so a misconfigured stack
fails at its first invocation with a readable log line.

The words of the settings (``TimeoutPolicy``, ``EipMode``, ``Quantity``...) are the domain's
(:mod:`nodecycle.domain.policy`); the composition roots turn a section into the narrow policy a step needs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Self

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from nodecycle.domain.policy import (
    ActionResult,
    EipFailurePolicy,
    EipMode,
    Quantity,
    RebalancePolicy,
)
from nodecycle.domain.reserves import SWEEP_RESERVE

if TYPE_CHECKING:
    from nodecycle.cluster_settings import Budget as Budget
    from nodecycle.cluster_settings import Drain as Drain
    from nodecycle.cluster_settings import DrainSettings as DrainSettings
    from nodecycle.cluster_settings import Settings as Settings
    from nodecycle.cluster_settings import Sweep as Sweep
    from nodecycle.cluster_settings import SweeperSettings as SweeperSettings

ENV_PREFIX = "NODECYCLE_"
# The sections only the functions that act on the cluster read (drain, budget, sweep), and the settings that
# include them, are nodecycle.cluster_settings', named here as well (``from nodecycle.settings import
# DrainSettings``) but imported at their first use: each pydantic class costs its creation even when its
# validator is built later (defer_build), and the intake and eip functions' cold starts would create these
# six for nothing, with the budget's label selector pattern compiled (``python -m benchmarks --only cold``).
_CLUSTER_SETTINGS = frozenset({"Drain", "Budget", "Sweep", "DrainSettings", "SweeperSettings", "Settings"})


def __getattr__(name: str) -> Any:
    if name in _CLUSTER_SETTINGS:
        from nodecycle import cluster_settings

        return getattr(cluster_settings, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class SettingsError(ValueError):
    """The environment does not describe a valid nodecycle configuration."""


def _split_list(value: Any) -> Any:
    if isinstance(value, str):
        return tuple(item.strip() for item in value.split(",") if item.strip())
    return value


def _blank_is_none(value: Any) -> Any:
    return None if isinstance(value, str) and not value.strip() else value


CsvList = Annotated[tuple[str, ...], BeforeValidator(_split_list)]
OptionalText = Annotated[str | None, BeforeValidator(_blank_is_none)]


class _Section(BaseModel):
    # defer_build: a section's validators are built when it is first used, not at import, so each function
    # builds its own settings class only (a cold start's share of the import).
    model_config = ConfigDict(frozen=True, extra="ignore", str_strip_whitespace=True, defer_build=True)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Self:
        values = {
            key[len(ENV_PREFIX) :].lower(): value
            for key, value in environ.items()
            if key.startswith(ENV_PREFIX)
        }
        try:
            return cls.model_validate(values)
        except ValidationError as error:
            raise SettingsError(_describe(error)) from None

    def env(self) -> dict[str, str]:
        """The environment that describes these settings (used by tools that start functions)."""
        out: dict[str, str] = {}
        for name, value in self.model_dump().items():
            if value is None:
                text = ""
            elif isinstance(value, bool):
                text = "true" if value else "false"
            elif isinstance(value, tuple):
                text = ",".join(value)
            elif isinstance(value, dict):  # a Quantity
                text = str(Quantity.model_validate(value))
            else:
                text = str(value)
            out[ENV_PREFIX + name.upper()] = text
        return out


class Identity(_Section):
    # as long as a stack name (the template's default): nothing it is written into allows less (Events'
    # reportingInstance: 128; annotation values, tags, ConfigMap data and metric dimensions: more)
    owner_id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
    cluster_name: OptionalText = None  # None: a fleet without Kubernetes (EIPs only)

    @property
    def uses_kubernetes(self) -> bool:
        return self.cluster_name is not None


class Groups(_Section):
    """Which groups are this stack's: by name, and by their tag. The EIP function reads them to tell what its role is
    granted on instances (``Ec2Addresses``'s grants), where intake and the sweeper read the whole Scope."""

    managed_groups: CsvList = ()
    managed_by_tag: bool = False  # groups tagged nodecycle:owner=<owner_id>


class Scope(Groups):
    """Which groups and hooks are this stack's (intake, and the sweeper that adopts orphaned actions)."""

    # Only these hooks' actions are nodecycle's: other tools' hooks on the same groups are left to them.
    # "*" takes every hook of a managed group.
    managed_hooks: CsvList = ("nodecycle-launch", "nodecycle-terminate")

    @field_validator("managed_groups", "managed_hooks")
    @classmethod
    def _no_duplicates(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(value))

    @model_validator(mode="after")
    def _something_managed(self) -> Self:
        if not self.managed_hooks:
            raise ValueError(
                "NODECYCLE_MANAGED_HOOKS is empty: name the hooks nodecycle answers, or '*' for all"
            )
        if not self.managed_groups and not self.managed_by_tag:
            raise ValueError(
                "no managed groups: set NODECYCLE_MANAGED_GROUPS (comma-separated names) "
                "and/or NODECYCLE_MANAGED_BY_TAG=true"
            )
        return self


class State(_Section):
    """Where lifecycle records and work messages live."""

    record_table: str = Field(min_length=1)
    drain_queue_url: str = Field(min_length=1)
    eip_queue_url: str = Field(min_length=1)
    wake_queue_url: str = Field(min_length=1)  # budget wake-ups (the drain function's priority lane)
    # The work queue this function's mapping polls, set per function by template.yaml (the drain and wake functions
    # run the same code on different queues): a record of it retried on purpose comes back sooner than the queue's
    # visibility timeout (nodecycle/entrypoints.py). Unset (intake, the sweeper): at the timeout
    work_queue_url: OptionalText = None
    record_ttl_days: int = Field(default=14, ge=1, le=365)


# The longest a lifecycle action lives, whatever its hook's heartbeat timeout (100 of them, at most 48 hours). No
# duration of a lifecycle's is longer (the template's bounds too): one far past it (10^15 s) is a deadline past
# the year 9999, which fails every run that computes it (OverflowError).
LONGEST_GLOBAL_TIMEOUT_SECONDS = 48 * 3600
LifecycleSeconds = Annotated[int, Field(ge=0, le=LONGEST_GLOBAL_TIMEOUT_SECONDS)]

# How late past its tick the sweeper's schedule may fire: EventBridge runs a rate schedule "within that minute, but
# not on the precise 0th second" (Amazon EventBridge User Guide, "Setting a schedule pattern for scheduled rules";
# EventBridge Scheduler too: "60 second precision ... between 1:00:00 and 1:00:59").
SCHEDULE_PRECISION_SECONDS = 60
# The sweeper function's timeout (template.yaml, SweeperFunction): how long one sweep may run
SWEEPER_TIMEOUT_SECONDS = 300


class Timing(_Section):
    """What the step engine needs to keep actions alive and repair lost messages."""

    heartbeat_margin_seconds: Annotated[int, Field(ge=5, le=LONGEST_GLOBAL_TIMEOUT_SECONDS)] = 60
    # A step whose message is this overdue is presumed lost and sent again (a late original then arrives
    # stale): well past any queueing delay, short enough to repair a crash quickly.
    resume_grace_seconds: Annotated[int, Field(ge=1, le=LONGEST_GLOBAL_TIMEOUT_SECONDS)] = 60
    # The work queues' visibility timeout: how long a step whose invocation died waits to be retried.
    work_visibility_timeout_seconds: Annotated[int, Field(ge=1, le=43_200)] = 150  # SQS's limit (12 h)

    # How often the sweeper runs (its schedule): it keeps alive every action whose heartbeat deadline comes
    # before its next run, and settles the open ones at its last run before their global timeout.
    sweep_interval_minutes: Annotated[float, Field(gt=0, le=60)] = 5

    @property
    def sweep_interval_seconds(self) -> int:
        return math.ceil(self.sweep_interval_minutes * 60)

    @property
    def settle_before_seconds(self) -> int:
        """How long before an action's global timeout it is completed whatever it waits for. By the engine:
        a margin for the completion, plus one fault's retry (an invocation that dies at that run is
        redelivered in time). By the sweeper, when the queues stall: at its last run before the global
        timeout, up to an interval, how late a sweep on schedule may reach it (``sweep_lateness_seconds``) and a
        margin for the completion before it: a sweep settles such actions first of its parts, so no part before them
        (the orphans' keep-alive, minutes with a backlog) pushes them later (``domain/sweep/order``). The same point
        for both, the earlier of the
        two: the sweeper never completes a lifecycle that the engine's guard would not have completed yet,
        but for a stalled one after a late sweep, up to that sweep's lateness (at most an interval) earlier:
        the next sweep, as late, would come after its global timeout (``domain/sweep/lifecycles``)."""
        sweep = self.sweep_interval_seconds + self.sweep_lateness_seconds + self.heartbeat_margin_seconds
        return max(self.heartbeat_margin_seconds + self.redelivery_seconds, sweep)

    @property
    def min_heartbeat_timeout_seconds(self) -> int:
        """The shortest heartbeat timeout of a hook whose actions these settings keep alive. The engine's next
        run may come one fault late (a redelivery) and needs a margin to heartbeat. While the queues stall only
        the sweeper heartbeats, once a run: two of its heartbeats of an action may be as far apart as two sweeps'
        starts (``sweep_period_seconds``) and the second sweep's reach (``sweep_reach_seconds``). Reckoned as an
        interval and a margin (360 s with the defaults), a sweep whose heartbeats were throttled (botocore's retries
        back each off for seconds) reached the actions after the first a margin later than the sweep before had: they
        lapsed, undrained (tests/unit/sweeper/test_sweep_reach_at_the_shortest_hook.py)."""
        sweep = self.sweep_period_seconds + self.sweep_reach_seconds
        return max(self.heartbeat_margin_seconds + self.redelivery_seconds, sweep)

    @property
    def sweep_period_seconds(self) -> int:
        """The longest from one sweep's start to the next's, both on schedule: an interval, and how late the second
        may come (``sweep_lateness_seconds``). Under an interval shorter than the sweeper's timeout, from the end of a
        sweep that ran to its timeout: the ticks that fire while it runs are throttled (its reserved concurrency is
        1), and the next sweep comes up to an interval after it ended (see ``LifecycleRepair._overrun``)."""
        interval = self.sweep_interval_seconds
        overrun = SWEEPER_TIMEOUT_SECONDS if interval < SWEEPER_TIMEOUT_SECONDS else 0
        return overrun + interval + self.sweep_lateness_seconds

    @property
    def sweep_reach_seconds(self) -> int:
        """How far into its run a sweep may heartbeat an action: it heartbeats the most urgent first, but one among
        many, each call throttled and retried, comes as late as the sweep starts work, its timeout less the reserve
        it keeps (``domain/reserves``)."""
        return SWEEPER_TIMEOUT_SECONDS - int(SWEEP_RESERVE.total_seconds())

    @property
    def sweep_lateness_seconds(self) -> int:
        """How late past its tick a sweep on schedule may reach an action: a margin (a cold start, the records read
        before this one), and never less than its schedule's precision, a minute (SCHEDULE_PRECISION_SECONDS). Reckoned
        by the margin alone, a HeartbeatMarginSeconds under a minute (the template takes 5 s) let the sweep that fired
        late in its minute come after a stalled action's heartbeat deadline, or after its global timeout when the sweep
        before, early in its own minute, had not settled it yet: the action ended undrained. A sweep interval under a
        minute (none of EventBridge's: the template takes whole minutes; a run that compresses time sets one through the
        environment) is taken to fire within its interval, before its next tick."""
        precision = min(SCHEDULE_PRECISION_SECONDS, self.sweep_interval_seconds)
        return max(self.heartbeat_margin_seconds, precision)

    @property
    def redelivery_seconds(self) -> int:
        """How late a step can run after one fault: if its invocation died, redelivered after the visibility
        timeout; if its message was lost, sent again by a watch once the resume grace has passed (+ a second
        of rounding each way). One fault at a time: the retry of a retry heartbeats on its own."""
        return max(self.work_visibility_timeout_seconds, self.resume_grace_seconds + 2)


class Eip(_Section):
    eip_mode: EipMode = EipMode.OFF
    # A tag value EC2 matches as a filter: ``*``, ``?`` and ``\`` would make it match other pools' addresses.
    eip_pool_name: Annotated[
        Annotated[str, Field(max_length=255, pattern=r"^[A-Za-z0-9 _.:/=+@-]+$")] | None,
        BeforeValidator(_blank_is_none),
    ] = None
    eip_pool_allocate_when_empty: bool = False
    eip_failure_policy: EipFailurePolicy = EipFailurePolicy.ABANDON
    # How long a launch waits for an address to be given back when the pool is empty or the quota used up
    eip_wait_seconds: Annotated[int, Field(ge=0, le=3600)] = 600

    @model_validator(mode="after")
    def _pool_named(self) -> Self:
        if self.eip_mode is EipMode.POOL and not self.eip_pool_name:
            raise ValueError("NODECYCLE_EIP_MODE=pool needs NODECYCLE_EIP_POOL_NAME")
        return self


class Readiness(_Section):
    """The launch readiness gate."""

    readiness_gate: bool = True
    readiness_timeout_seconds: Annotated[int, Field(ge=30, le=LONGEST_GLOBAL_TIMEOUT_SECONDS)] = 600
    readiness_failure_result: ActionResult = ActionResult.ABANDON

    @model_validator(mode="after")
    def _gate_ends_before_its_action(self) -> Self:
        """A gate that times out no earlier than the engine settles the longest-lived action (a margin before
        its global timeout) never times out itself: a launch whose node never joins would be held up to two
        days, and settled as a global timeout near rather than a readiness timeout. (Every function that reads
        this section reads the engine's timing too.)"""
        settle = self.settle_before_seconds if isinstance(self, Timing) else 0
        longest = LONGEST_GLOBAL_TIMEOUT_SECONDS - settle
        if self.readiness_timeout_seconds > longest:
            raise ValueError(
                f"NODECYCLE_READINESS_TIMEOUT_SECONDS: {self.readiness_timeout_seconds} s is past "
                f"{longest} s, where the engine settles a launch action of the longest global timeout (48 h, "
                f"less the {settle} s it completes actions before it): the gate would never time out"
            )
        return self


class Disruptions(_Section):
    """Disruptions no hook waits for (intake plans them)."""

    rebalance_policy: RebalancePolicy = RebalancePolicy.IGNORE
    # Scheduled maintenance is drained this long before it starts (unless the group replaces it first)
    maintenance_lead_minutes: Annotated[int, Field(ge=0, le=7 * 24 * 60)] = 60


# -- what each function validates ---------------------------------------------------------------------


class FunctionSettings(Identity, State, Timing):
    """What every function reads: who it is, where the records and queues are, the engine's timing."""


class IntakeSettings(FunctionSettings, Scope, Eip, Readiness, Disruptions):
    """Intake chooses each action's plan: it needs to know whether EIPs and the readiness gate are on."""

    # The intake queue, where a lifecycle action's event from EventBridge retried on purpose goes (unset: the
    # invocation fails instead, and Lambda retries it): functions/intake/app.py
    intake_queue_url: Annotated[str | None, BeforeValidator(_blank_is_none)] = None

    @property
    def readiness_gate_enabled(self) -> bool:
        return self.readiness_gate and self.uses_kubernetes


class EipSettings(FunctionSettings, Groups, Eip, Readiness):
    """Readiness too: a launch whose address step ends past the engine's guard point is settled there, at the
    readiness gate it moved on to, with that gate's failure result (``wiring.eip``)."""


def _describe(error: ValidationError) -> str:
    problems = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"] if not isinstance(part, int))
        name = ENV_PREFIX + where.split(".")[0].upper() if where else "settings"
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "missing":
            message = "is required but not set"
        elif item["type"] != "value_error" and not isinstance(item.get("input"), dict | None):
            message = f"{message} (got {item['input']!r})"
        problems.append(f"{name}: {message}" if where else message)
    return "invalid nodecycle settings: " + "; ".join(problems)
