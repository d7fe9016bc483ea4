"""Powertools Logger, Tracer and Metrics for every function, and the domain's Metrics port on top of them.

The domain logs through the standard ``logging`` module under ``nodecycle.*``; the powertools Logger owns
the ``nodecycle`` logger, so those records come out as the same structured JSON with the same correlation
keys.
"""

from __future__ import annotations

import warnings

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit, single_metric

SERVICE = "nodecycle"
NAMESPACE = "NodeCycle"

logger = Logger(service=SERVICE)
tracer = Tracer(service=SERVICE, patch_modules=("botocore",))
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)

# Many invocations emit only dimensioned metrics, which are flushed on their own (see PowertoolsMetrics):
# an empty shared document at the end of such an invocation is expected, not worth a warning per call.
warnings.filterwarnings("ignore", message="No application metrics to publish")


class PowertoolsMetrics:
    """Counts and durations as CloudWatch EMF, always with the ``owner`` dimension.

    Metrics with extra dimensions (a transition, a reason) are flushed at once as their own EMF document,
    because the dimensions of the shared document apply to every metric in it.
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
        if not dimensions:
            metrics.add_metric(name=name, unit=unit, value=value)
            return
        with single_metric(
            name=name,
            unit=unit,
            value=value,
            namespace=NAMESPACE,
            default_dimensions={"owner": self._owner, **dimensions},
        ):
            pass
