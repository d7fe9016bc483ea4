"""The domain's own words for what a stack may choose, and the narrow policies each step is handed.

The settings module reads these choices from the environment and the composition roots (``wiring``) build
the policies below from them; the domain never reads settings itself, so a step sees only what it uses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class ActionResult(StrEnum):
    CONTINUE = "CONTINUE"
    ABANDON = "ABANDON"


class TimeoutPolicy(StrEnum):
    """What a drain does when its drain timeout passes with pods still on the node."""

    FORCE = "force"  # delete the remaining pods (grace capped), wait for that, then complete
    CONTINUE = "continue"  # complete anyway: the instance terminates with the pods on it


class EipMode(StrEnum):
    OFF = "off"
    ALLOCATE = "allocate"  # a new address per instance, released at terminate
    POOL = "pool"  # claim a free address tagged nodecycle:pool=<name>, returned at terminate


class RebalancePolicy(StrEnum):
    """What a rebalance recommendation (a Spot instance at elevated risk of interruption) does to its node."""

    IGNORE = "ignore"
    CORDON = "cordon"  # no new pods on it; what runs there stays until the instance goes
    DRAIN = "drain"  # drained under the budget, like a voluntary disruption


class EipFailurePolicy(StrEnum):
    ABANDON = "abandon"  # the group replaces the instance
    CONTINUE = "continue"  # the instance goes in service without an address


_PERCENT = re.compile(r"^(\d{1,3})%$")


class Quantity(BaseModel):
    """A budget limit: an absolute count of nodes, or a percent of the nodes in scope."""

    # defer_build: built where the budget is (drain, sweeper), not at the intake and eip functions' cold starts
    model_config = ConfigDict(frozen=True, defer_build=True)

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


@dataclass(frozen=True)
class PlanPolicy:
    """What a lifecycle's plan may contain: chosen once per action, when it is received."""

    kubernetes: bool  # the stack has a cluster: terminating nodes are drained
    eip: bool  # Elastic IPs are on (allocate or pool)
    readiness_gate: bool  # a launch completes once its node is Ready
    rebalance: RebalancePolicy = RebalancePolicy.IGNORE
    # Scheduled maintenance is drained this long before its start (unless the group replaces it first)
    maintenance_lead: timedelta = timedelta(hours=1)


@dataclass(frozen=True)
class DrainPolicy:
    """How a terminating node is drained, and how its budget slot is asked for and kept."""

    timeout: timedelta  # after this much draining, ``on_timeout`` applies
    pod_grace_cap: int  # seconds: an evicted pod's own grace period, never more than this
    on_timeout: TimeoutPolicy
    force_grace: int  # seconds: the grace of a pod deleted by the force policy
    exclude_from_load_balancers: bool
    lb_deregistration_delay: timedelta
    poll_seconds: int  # the longest wait between two looks at the pods
    budget_retry_seconds: int  # how often a node waiting for a slot asks again
    holder_ttl: timedelta  # a budget holder that is not renewed within this expires
    # Before an action's global timeout the engine completes it whatever it waits for: a drain plans to be
    # done by then.
    settle_margin: timedelta
    # How long before its start a scheduled maintenance is drained (intake's PlanPolicy.maintenance_lead): the
    # drain times one EC2 lists at a later start than intake took in by it (see drain.acquire)
    maintenance_lead: timedelta = timedelta(hours=1)


# A maintenance's lifecycle waiting for its drain looks at EC2's listing of it again at least this often, and at least
# once per lead time: a customer may move a scheduled event earlier (ModifyInstanceEventStartTime, to any start at least
# 60 minutes ahead and up to its deadline: EC2 User Guide, "Reschedule a scheduled event"), and no AWS Health event
# tells of that, so a lifecycle asleep until the old start's drain time met the maintenance after it had struck. 15
# minutes is also the longest an SQS message waits (DelaySeconds): a waiting lifecycle's message wakes that often
# anyway. Never more often than MAINTENANCE_LOOK_LEAST (a lead of 0).
MAINTENANCE_LOOK = timedelta(minutes=15)
MAINTENANCE_LOOK_LEAST = timedelta(minutes=1)


def maintenance_look(lead: timedelta) -> timedelta:
    """How long a maintenance's lifecycle drained ``lead`` before its start waits, at most, between two looks at
    EC2's listing of it before its drain is due (see MAINTENANCE_LOOK)."""
    return max(MAINTENANCE_LOOK_LEAST, min(MAINTENANCE_LOOK, lead))


# A maintenance's drain waiting in the budget's line looks at EC2's listing of it this many times per lead time (at
# least once per MAINTENANCE_LOOK, at most once per MAINTENANCE_LOOK_LEAST). It stands in line from its due time until
# its action's end forces it past the budget, a whole drain (its timeout and tail) before the start: with the default
# drain timeout, about 18 minutes. Looking once per MAINTENANCE_LOOK there, a lead time of half an hour never looked
# before it was forced, and a maintenance moved later or called off meanwhile was drained all the same.
MAINTENANCE_LOOKS_IN_LINE = 4


def maintenance_look_in_line(lead: timedelta) -> timedelta:
    """How long a maintenance's drain waiting in the budget's line, drained ``lead`` before its start, waits at most
    between two looks at EC2's listing of it (see MAINTENANCE_LOOKS_IN_LINE): 15 minutes for the default hour's
    lead, as before its due time."""
    return maintenance_look(lead / MAINTENANCE_LOOKS_IN_LINE)


def maintenance_next_run(starts: datetime, lead: timedelta, now: datetime) -> datetime:
    """When a maintenance's lifecycle starting at ``starts`` and drained ``lead`` before it runs next: when its drain
    is due (now, when that has passed), or sooner, to look at EC2's listing of it (see maintenance_look)."""
    return max(now, min(starts - lead, now + maintenance_look(lead)))


@dataclass(frozen=True)
class ReadinessPolicy:
    """The launch readiness gate: how long a new node may take to be Ready, and what happens if it is not."""

    timeout: timedelta
    poll_seconds: int
    on_failure: ActionResult
    # Before an action's global timeout the engine completes it whatever it waits for: the gate times out
    # before that, a hook's global timeout coming before the readiness timeout
    settle_margin: timedelta


@dataclass(frozen=True)
class EipPolicy:
    mode: EipMode
    pool: str | None  # the pool's name (pool mode)
    grow_pool: bool  # allocate into an empty pool instead of failing
    on_failure: EipFailurePolicy
    # how long a launch waits for an address given back (an empty pool, the quota used up) before on_failure
    wait: timedelta = timedelta(0)

    @property
    def failure_result(self) -> ActionResult:
        return ActionResult.ABANDON if self.on_failure is EipFailurePolicy.ABANDON else ActionResult.CONTINUE
