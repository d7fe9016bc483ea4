"""The settings sections only the functions that act on the cluster read (drain, budget, sweep), and the
settings that include them: the drain function's, the sweeper's, and every setting of a stack (tools).

Apart from :mod:`nodecycle.settings` so that the intake and eip functions' cold starts do not create these
classes (see ``_CLUSTER_SETTINGS`` there); named there too, imported at their first use.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Self

from pydantic import BeforeValidator, Field, field_validator, model_validator

from nodecycle.domain.engine import MAX_RETRY_BACKOFF_SECONDS
from nodecycle.domain.policy import Quantity, TimeoutPolicy
from nodecycle.settings import (
    LONGEST_GLOBAL_TIMEOUT_SECONDS,
    Disruptions,
    Eip,
    FunctionSettings,
    IntakeSettings,
    LifecycleSeconds,
    Readiness,
    Scope,
    _Section,
)


def _quantity(value: Any) -> Any:
    return Quantity.parse(value) if isinstance(value, str) else value


def _optional_quantity(value: Any) -> Any:
    if isinstance(value, str) and value.strip().lower() in ("", "none", "off"):
        return None
    return _quantity(value)


Limit = Annotated[Quantity, BeforeValidator(_quantity)]
OptionalLimit = Annotated[Quantity | None, BeforeValidator(_optional_quantity)]
Seconds = LifecycleSeconds  # no drain outlasts its action


class Drain(_Section):
    drain_timeout_seconds: Seconds = 900
    pod_grace_cap_seconds: Seconds = 120
    timeout_policy: TimeoutPolicy = TimeoutPolicy.FORCE
    force_grace_seconds: Seconds = 10
    exclude_from_load_balancers: bool = True
    lb_deregistration_delay_seconds: Annotated[int, Field(ge=0, le=900)] = 0
    drain_poll_seconds: Annotated[int, Field(ge=1, le=300)] = 5


# A label selector as the API server parses it (labels.Parse): requirements separated by commas, each a key
# alone or negated, a key compared with = == != to one value, with in/notin to a set of values (members may be
# empty: "x in (foo,,baz)", "z notin ()"), or with < > to a whole number (a label value: no sign). Keys: an
# optional DNS subdomain prefix and a name of up to 63 characters; values: up to 63, or empty.
_LABEL_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_KEY = rf"(?:[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*/)?{_LABEL_NAME}"
_LABEL_VALUE = rf"(?:{_LABEL_NAME})?"
# Whitespace is the lexer's (labels.isWhitespace): a space, a tab, a CR, an LF. Any other (a no-break space, a
# vertical tab: Python's \s) is part of the key or value it touches, which the API server then refuses.
_WS = r"[ \t\r\n]"
_REQUIREMENT = (
    rf"{_WS}*(?:!{_WS}*{_LABEL_KEY}|{_LABEL_KEY}{_WS}*(?:==?|!=){_WS}*{_LABEL_VALUE}"
    rf"|{_LABEL_KEY}{_WS}+(?:in|notin){_WS}*\({_WS}*{_LABEL_VALUE}(?:{_WS}*,{_WS}*{_LABEL_VALUE})*{_WS}*\)"
    rf"|{_LABEL_KEY}{_WS}*[<>]{_WS}*[0-9]{{1,63}}|{_LABEL_KEY}){_WS}*"
)
_LABEL_SELECTOR = re.compile(rf"(?:{_REQUIREMENT}(?:,{_REQUIREMENT})*)?")
# What the syntax above cannot bound: a key's prefix is a DNS subdomain of 253 characters at most, and the bound
# of < or > is read as a 64-bit integer (labels.NewRequirement: strconv.ParseInt). In a selector that parses,
# only a key has a "/", and only a bound follows a < or >.
_KEY_PREFIX = re.compile(r"([^ \t\r\n,()!=<>/]+)/")
_BOUND = re.compile(rf"[<>]{_WS}*([0-9]+)")


class Budget(_Section):
    budget_max_unavailable: Limit = Quantity(value=1)
    budget_max_unavailable_per_zone: OptionalLimit = None
    budget_namespace: str = Field(
        default="nodecycle", min_length=1
    )  # as the template's, and deploy/rbac.yaml's
    budget_node_selector: str = ""
    budget_count_unavailable: bool = False
    budget_holder_ttl_seconds: Annotated[int, Field(ge=30, le=LONGEST_GLOBAL_TIMEOUT_SECONDS)] = 600
    budget_retry_seconds: Annotated[int, Field(ge=1, le=900)] = 30

    @field_validator("budget_node_selector")
    @classmethod
    def _label_selector(cls, value: str) -> str:
        if (
            _LABEL_SELECTOR.fullmatch(value) is None
            or any(len(prefix) > 253 for prefix in _KEY_PREFIX.findall(value))
            or any(int(bound) >= 2**63 for bound in _BOUND.findall(value))
        ):
            raise ValueError(f"not a label selector the API server would accept: {value!r}")
        return value

    @model_validator(mode="after")
    def _retry_within_ttl(self) -> Self:
        if self.budget_retry_seconds >= self.budget_holder_ttl_seconds:
            # a waiter that retries less often than its entry expires would lose its place in the queue
            raise ValueError(
                "NODECYCLE_BUDGET_RETRY_SECONDS must be shorter than NODECYCLE_BUDGET_HOLDER_TTL_SECONDS"
            )
        return self


class Sweep(_Section):
    sweep_grace_seconds: Annotated[int, Field(ge=300, le=365 * 24 * 3600)] = 600  # the longest record TTL


class DrainSettings(FunctionSettings, Drain, Budget, Readiness, Disruptions):
    @model_validator(mode="after")
    def _holders_outlive_their_renewals(self) -> Self:
        renewal_gap = max(3 * self.drain_poll_seconds, self.redelivery_seconds + MAX_RETRY_BACKOFF_SECONDS)
        if self.budget_holder_ttl_seconds < renewal_gap:
            # a draining node renews its slot at each step; the longest gap between two steps (a poll, or a
            # crashed step's retry after a backoff) must not let the slot expire and go to another node
            raise ValueError(
                f"NODECYCLE_BUDGET_HOLDER_TTL_SECONDS must be at least {renewal_gap} (3 drain polls, or the "
                "later of the work queues' visibility timeout and the resume grace + 2, plus the longest retry "
                "backoff)"
            )
        return self


class SweeperSettings(FunctionSettings, Scope, Budget, Eip, Readiness, Disruptions, Sweep):
    """The sweeper adopts an action whose event never became a record through intake's own path: it reads
    what intake reads to find the stack's groups and plan a lifecycle."""


# (the pydantic mypy plugin types each section's generated model_construct by its own fields, so it sees the
# bases' constructors as incompatible; pydantic builds the union of the fields, which is what is meant)
class Settings(IntakeSettings, DrainSettings, SweeperSettings):  # type: ignore[misc]
    """Every setting of a stack: what tools that start or inspect a stack (the sandbox, the CLI) read."""
