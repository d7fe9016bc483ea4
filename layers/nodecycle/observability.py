"""Powertools Logger, Tracer and Metrics for every function, and the domain's Metrics port on top of them.

The domain logs through the standard ``logging`` module under ``nodecycle.*``; the powertools Logger owns
the ``nodecycle`` logger, so those records come out as the same structured JSON with the same correlation
keys.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit, single_metric
from aws_lambda_powertools.shared.functions import resolve_truthy_env_var_choice

if TYPE_CHECKING:
    from aws_lambda_powertools import Tracer

SERVICE = "nodecycle"
NAMESPACE = "NodeCycle"


class _Untraced:
    """The tracer of a stack deployed without tracing (``Tracing=PassThrough``): nothing.

    Powertools' ``Tracer`` imports the X-Ray SDK even when disabled (its provider is built first), and that
    import is a measurable share of every cold start (``python -m benchmarks --only cold``)."""

    def capture_lambda_handler[F: Callable[..., Any]](self, handler: F) -> F:
        return handler


def _tracer() -> Tracer | _Untraced:
    # The template sets POWERTOOLS_TRACE_DISABLED from its Tracing parameter
    if resolve_truthy_env_var_choice(env=os.getenv("POWERTOOLS_TRACE_DISABLED", "false")):
        return _Untraced()
    from aws_lambda_powertools import Tracer

    return Tracer(service=SERVICE, patch_modules=("botocore",))


logger = Logger(service=SERVICE)
tracer = _tracer()
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)

# Many invocations emit only dimensioned metrics, which are flushed on their own (see PowertoolsMetrics):
# an empty shared document at the end of such an invocation is expected, not worth a warning per call.
warnings.filterwarnings("ignore", message="No application metrics to publish")


# The pages (an alarm of template.yaml fires at their first count, on the owner and service series) counted once
# per action (or per decision) beside the write that says so: the engine's guard's GlobalTimeoutsNear with its
# settlement's commit, LifecycleActionsExpired and LifecycleActionsUnknown with the commit past the action, a
# step's DrainTimeouts, NodesClaimedElsewhere, ReadinessTimeouts or EipFailures with the outcome it commits,
# ForcedSlots and BudgetQueueFull with the budget document's write, HeartbeatsThrottledLate with the heartbeat's
# retry time.
# Powertools holds a metric without dimensions until the handler returns: an invocation the runtime ends after
# such a write (its timeout: a later record of its batch hung; out of memory) lost the page, and the delivery
# again finds the write made and counts nothing. So these are written out (their own EMF line) as they are
# counted. They are rare (each one pages); the ordinary counters stay in the one document of the invocation.
# Not EvictionErrors: counted at every poll while the refusal lasts (the next poll counts it again), many a drain.
PAGES = frozenset(
    {
        "BudgetQueueFull",
        "DrainTimeouts",
        "EipFailures",
        "ForcedSlots",
        "GlobalTimeoutsNear",
        "HeartbeatsThrottledLate",
        "LifecycleActionsExpired",
        "LifecycleActionsUnknown",
        "NodesClaimedElsewhere",
        "ReadinessTimeouts",
    }
)


class PowertoolsMetrics:
    """Counts and durations as CloudWatch EMF, always with the ``owner`` dimension.

    Metrics with extra dimensions (a transition, a reason) are flushed at once as their own EMF document,
    because the dimensions of the shared document apply to every metric in it; so are the ``PAGES``, so that an
    invocation killed after counting one has told it.
    """

    def __init__(self, owner: str) -> None:
        self._owner = owner
        if metrics.default_dimensions.get("owner") != owner:  # set once per container
            metrics.set_default_dimensions(owner=owner)

    def count(self, name: str, value: float = 1, **dimensions: str) -> None:
        self._emit(name, MetricUnit.Count, value, dimensions)

    def seconds(self, name: str, value: float, **dimensions: str) -> None:
        self._emit(name, MetricUnit.Seconds, value, dimensions)

    def _emit(self, name: str, unit: MetricUnit, value: float, dimensions: dict[str, str]) -> None:
        if not dimensions and name not in PAGES:
            metrics.add_metric(name=name, unit=unit, value=value)
            return
        with single_metric(
            name=name,
            unit=unit,
            value=value,
            namespace=NAMESPACE,
            # service named here, as the shared document's is (Metrics(service=...)): single_metric would take
            # it from POWERTOOLS_SERVICE_NAME, or leave it out, and the dashboard's rows and the alarms would
            # match nothing
            default_dimensions={"owner": self._owner, "service": SERVICE, **dimensions},
        ):
            pass
