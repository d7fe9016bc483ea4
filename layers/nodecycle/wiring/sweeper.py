"""The sweeper function's composition root."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import cache

from nodecycle.adapters.ec2_instances import Ec2Instances
from nodecycle.domain.completion import CompleteAction
from nodecycle.domain.eip.sweep import AddressSweep
from nodecycle.domain.engine import Dispatcher
from nodecycle.domain.model import LifecycleRecord
from nodecycle.domain.sweeper import (
    Counts,
    LeftoverAnnotations,
    LifecycleRepair,
    StaleBudgetEntries,
    Sweeper,
    SweepPart,
)
from nodecycle.wiring import eip
from nodecycle.wiring.common import common


@cache
def sweeper() -> Sweeper:
    shared = common()
    settings = shared.settings
    parts: dict[str, SweepPart] = {
        "lifecycles": LifecycleRepair(
            records=shared.records,
            dispatcher=Dispatcher(
                records=shared.records, queues=shared.queues, clock=shared.clock, metrics=shared.metrics
            ),
            completion=CompleteAction(shared.autoscaling, shared.metrics),
            metrics=shared.metrics,
            resume_grace=shared.resume_grace,
            margin=shared.timing.heartbeat_margin,
            failure_result=shared.failure_result,
        )
    }
    if settings.uses_kubernetes:
        from nodecycle.wiring import drain  # the Kubernetes client only when there is a cluster

        parts["budget"] = StaleBudgetEntries(
            budget=drain.budget(),
            records=shared.records,
            node_names=drain.cluster().node_names,
            alive_instances=Ec2Instances().alive,
            waker=drain.waker(),
        )
        parts["annotations"] = LeftoverAnnotations(
            owner=settings.owner_id, cluster=drain.cluster(), records=shared.records, metrics=shared.metrics
        )
    # Always, even with EIPs off now: addresses left from when they were on still need freeing.
    parts["addresses"] = _addresses_part(eip.address_sweep())
    return Sweeper(owner=settings.owner_id, records=shared.records, clock=shared.clock, parts=parts)


def _addresses_part(sweep: AddressSweep) -> SweepPart:
    def addresses(open_records: Sequence[LifecycleRecord], now: datetime) -> Counts:
        report = sweep()
        return {"EipsReleasedBySweep": report.released, "EipsReturnedBySweep": report.returned}

    return addresses
