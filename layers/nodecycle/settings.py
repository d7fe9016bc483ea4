"""One validated settings model, read from the environment once per cold start.

Every setting is an environment variable named ``NODECYCLE_<FIELD>``; the SAM template fills them from
stack parameters. A missing or invalid value raises :class:`SettingsError`, whose message names the
variable and what was expected, so a misconfigured stack fails at its first invocation with a readable log
line instead of misbehaving later.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any, Self

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

ENV_PREFIX = "NODECYCLE_"
MAX_RETRY_BACKOFF_SECONDS = (
    180  # the step engine's longest wait before retrying a step after a transient error
)


class SettingsError(ValueError):
    """The environment does not describe a valid nodecycle configuration."""


class TimeoutPolicy(StrEnum):
    """What a drain does when its drain timeout passes with pods still on the node."""

    FORCE = "force"  # delete the remaining pods (grace capped), wait for that, then complete
    CONTINUE = "continue"  # complete anyway: the instance terminates with the pods on it


class EipMode(StrEnum):
    OFF = "off"
    ALLOCATE = "allocate"  # a new address per instance, released at terminate
    POOL = "pool"  # claim a free address tagged nodecycle:pool=<name>, returned at terminate


class EipFailurePolicy(StrEnum):
    ABANDON = "abandon"  # the group replaces the instance
    CONTINUE = "continue"  # the instance goes in service without an address


class ActionResult(StrEnum):
    CONTINUE = "CONTINUE"
    ABANDON = "ABANDON"


_PERCENT = re.compile(r"^(\d{1,3})%$")


class Quantity(BaseModel):
    """A budget limit: an absolute count of nodes, or a percent of the nodes in scope."""

    model_config = ConfigDict(frozen=True)

    value: int = Field(ge=0)
    percent: bool = False

    @classmethod
    def parse(cls, text: str) -> Quantity:
        text = text.strip()
        match = _PERCENT.match(text)
        if match:
            value = int(match.group(1))
            if not 0 < value <= 100:
                raise ValueError(f"a percent must be between 1% and 100%, got {text!r}")
            return cls(value=value, percent=True)
        if text.isdigit() and int(text) > 0:
            return cls(value=int(text))
        raise ValueError(f"expected a positive integer or a percent such as '25%', got {text!r}")

    def resolve(self, total: int) -> int:
        """The limit for ``total`` nodes in scope: a percent rounds up and is at least 1."""
        if not self.percent:
            return self.value
        return max(1, -(-total * self.value // 100))

    def __str__(self) -> str:
        return f"{self.value}%" if self.percent else str(self.value)


def _split_list(value: Any) -> Any:
    if isinstance(value, str):
        return tuple(item.strip() for item in value.split(",") if item.strip())
    return value


def _quantity(value: Any) -> Any:
    return Quantity.parse(value) if isinstance(value, str) else value


def _optional_quantity(value: Any) -> Any:
    if isinstance(value, str) and value.strip().lower() in ("", "none", "off"):
        return None
    return _quantity(value)


def _blank_is_none(value: Any) -> Any:
    return None if isinstance(value, str) and not value.strip() else value


CsvList = Annotated[tuple[str, ...], BeforeValidator(_split_list)]
Limit = Annotated[Quantity, BeforeValidator(_quantity)]
OptionalLimit = Annotated[Quantity | None, BeforeValidator(_optional_quantity)]
OptionalText = Annotated[str | None, BeforeValidator(_blank_is_none)]
Seconds = Annotated[int, Field(ge=0)]


class Settings(BaseModel):
    """Everything a nodecycle function needs to know about its stack."""

    model_config = ConfigDict(frozen=True, extra="ignore", str_strip_whitespace=True)

    # Identity and scope
    owner_id: str = Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
    cluster_name: OptionalText = None  # None: a fleet without Kubernetes (EIPs only)
    managed_groups: CsvList = ()
    managed_by_tag: bool = False  # groups tagged nodecycle:owner=<owner_id>
    # Only these hooks' actions are nodecycle's: other tools' hooks on the same groups are left to them.
    # "*" takes every hook of a managed group.
    managed_hooks: CsvList = ("nodecycle-launch", "nodecycle-terminate")

    # State and work queues
    record_table: str = Field(min_length=1)
    drain_queue_url: str = Field(min_length=1)
    eip_queue_url: str = Field(min_length=1)
    record_ttl_days: int = Field(default=14, ge=1, le=365)

    # Drain
    drain_timeout_seconds: Seconds = 900
    pod_grace_cap_seconds: Seconds = 120
    timeout_policy: TimeoutPolicy = TimeoutPolicy.FORCE
    force_grace_seconds: Seconds = 10
    exclude_from_load_balancers: bool = True
    lb_deregistration_delay_seconds: Annotated[int, Field(ge=0, le=900)] = 0
    drain_poll_seconds: Annotated[int, Field(ge=1, le=300)] = 5
    heartbeat_margin_seconds: Annotated[int, Field(ge=5)] = 60

    # Disruption budget
    budget_max_unavailable: Limit = Quantity(value=1)
    budget_max_unavailable_per_zone: OptionalLimit = None
    budget_namespace: str = Field(default="kube-system", min_length=1)
    budget_node_selector: str = ""
    budget_count_unavailable: bool = False
    budget_holder_ttl_seconds: Annotated[int, Field(ge=30)] = 600
    budget_retry_seconds: Annotated[int, Field(ge=1, le=900)] = 30

    # Elastic IPs
    eip_mode: EipMode = EipMode.OFF
    eip_pool_name: OptionalText = None
    eip_pool_allocate_when_empty: bool = False
    eip_failure_policy: EipFailurePolicy = EipFailurePolicy.ABANDON

    # Launch readiness gate
    readiness_gate: bool = True
    readiness_timeout_seconds: Annotated[int, Field(ge=30)] = 600
    readiness_failure_result: ActionResult = ActionResult.ABANDON

    # Sweeper and repairs
    sweep_grace_seconds: Annotated[int, Field(ge=300)] = 600
    # A step whose message is this overdue is presumed lost and sent again (a late original then arrives
    # stale): well past any queueing delay, short enough to repair a crash quickly.
    resume_grace_seconds: Annotated[int, Field(ge=1)] = 60
    # The work queues' visibility timeout: how long a step whose invocation died waits to be retried.
    work_visibility_timeout_seconds: Annotated[int, Field(ge=1)] = 150

    @field_validator("managed_groups", "managed_hooks")
    @classmethod
    def _no_duplicates(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(value))

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if not self.managed_hooks:
            raise ValueError(
                "NODECYCLE_MANAGED_HOOKS is empty: name the hooks nodecycle answers, or '*' for all"
            )
        if not self.managed_groups and not self.managed_by_tag:
            raise ValueError(
                "no managed groups: set NODECYCLE_MANAGED_GROUPS (comma-separated names) "
                "and/or NODECYCLE_MANAGED_BY_TAG=true"
            )
        if self.budget_retry_seconds >= self.budget_holder_ttl_seconds:
            # a waiter that retries less often than its entry expires would lose its place in the queue
            raise ValueError(
                "NODECYCLE_BUDGET_RETRY_SECONDS must be shorter than NODECYCLE_BUDGET_HOLDER_TTL_SECONDS"
            )
        renewal_gap = max(3 * self.drain_poll_seconds, self.redelivery_seconds + MAX_RETRY_BACKOFF_SECONDS)
        if self.budget_holder_ttl_seconds < renewal_gap:
            # a draining node renews its slot at each step; the longest gap between two steps (a poll, or a
            # crashed step's retry after a backoff) must not let the slot expire and go to another node
            raise ValueError(
                f"NODECYCLE_BUDGET_HOLDER_TTL_SECONDS must be at least {renewal_gap} (3 drain polls, or the "
                "work queues' visibility timeout + the resume grace + the longest retry backoff)"
            )
        if self.eip_mode is EipMode.POOL and not self.eip_pool_name:
            raise ValueError("NODECYCLE_EIP_MODE=pool needs NODECYCLE_EIP_POOL_NAME")
        return self

    @property
    def redelivery_seconds(self) -> int:
        """How late a step can run when its invocation dies: redelivered after the visibility timeout, or,
        if its message was lost, sent again by a watch once the resume grace has passed."""
        return self.work_visibility_timeout_seconds + self.resume_grace_seconds

    @property
    def uses_kubernetes(self) -> bool:
        return self.cluster_name is not None

    @property
    def readiness_gate_enabled(self) -> bool:
        return self.readiness_gate and self.uses_kubernetes

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
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
