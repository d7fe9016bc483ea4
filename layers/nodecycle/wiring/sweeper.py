"""The sweeper function's composition root."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from functools import cache

from nodecycle.adapters.aws.instances import Ec2Instances
from nodecycle.domain.catalog import LifecycleHooks
from nodecycle.domain.completion import CompleteAction, SettleResults
from nodecycle.domain.model import LifecycleRecord
from nodecycle.domain.sweep.addresses import AddressSweep
from nodecycle.domain.sweep.annotations import LeftoverAnnotations
from nodecycle.domain.sweep.budget_entries import StaleBudgetEntries
from nodecycle.domain.sweep.lifecycles import LifecycleRepair
from nodecycle.domain.sweep.nodes import SweepNodes
from nodecycle.domain.sweep.order import sweep_parts
from nodecycle.domain.sweep.orphans import OrphanedActions
from nodecycle.domain.sweep.shared_owner import OtherStacks
from nodecycle.domain.sweep.sweep_time import SHARES, SweepTime
from nodecycle.domain.sweep.sweeper import Counts, Sweeper, SweepPart
from nodecycle.observability import PowertoolsMetrics, metrics
from nodecycle.settings import SweeperSettings
from nodecycle.wiring import eip
from nodecycle.wiring.common import Common, common, eip_policy
from nodecycle.wiring.engines import engine_timing
from nodecycle.wiring.intake import adopt_after, build_intake, managed_groups


@cache
def settings() -> SweeperSettings:
    return SweeperSettings.from_env(os.environ)


def shared() -> Common:
    # (the sweep's metrics out as they are counted: see MetricsOutAtOnce)
    ports = common(settings())
    return replace(ports, metrics=MetricsOutAtOnce(ports.settings.owner_id))


class MetricsOutAtOnce(PowertoolsMetrics):
    """The sweeper's metrics, each written out (its EMF line) as it is counted, not when the invocation ends.

    Powertools holds a metric without dimensions until the handler returns, and a sweep runs for minutes: one the
    runtime ends (its timeout, out of memory) loses what it counted. Most counts the next sweep makes again, but not
    the pages counted once per action beside a write that says so: GlobalTimeoutsNear with the settlement's claim,
    LifecycleActionsExpired with the lifecycle moved past its expiry. A sweep killed after such a write (its
    completion call hung until the timeout) left the record saying counted and the alarm never told. A few dozen
    lines a sweep, once every few minutes."""

    def count(self, name: str, value: float = 1, **dimensions: str) -> None:
        super().count(name, value, **dimensions)
        if not dimensions:  # (one with dimensions is written out at once already)
            metrics.flush_metrics()

    def seconds(self, name: str, value: float, **dimensions: str) -> None:
        super().seconds(name, value, **dimensions)
        if not dimensions:
            metrics.flush_metrics()


@cache
def sweeper() -> Sweeper:
    config = settings()
    ports = shared()
    # (one catalog of this stack's groups and hooks: the orphan sweep's and the intake it adopts through)
    groups, hooks = managed_groups(config, ports), LifecycleHooks(ports.autoscaling, ports.clock)
    orphans = OrphanedActions(
        groups=groups,
        hooks=hooks,
        autoscaling=ports.autoscaling,
        intake=build_intake(config, ports, groups, hooks),
        records=ports.records,
        metrics=ports.metrics,
        adopt_after=adopt_after(config),
    )
    repair = LifecycleRepair(
        records=ports.records,
        dispatcher=ports.dispatcher(),
        autoscaling=ports.autoscaling,
        completion=CompleteAction(ports.autoscaling, ports.metrics, ports.records),
        metrics=ports.metrics,
        resume_grace=ports.resume_grace,
        margin=engine_timing(ports).heartbeat_margin,
        interval=timedelta(minutes=config.sweep_interval_minutes),
        settle_before=engine_timing(ports).settle_before,
        lateness=timedelta(seconds=config.sweep_lateness_seconds),
        failure_result=SettleResults(
            eip=eip_policy(config).failure_result, readiness=config.readiness_failure_result
        ),
        clock=ports.clock,
        out_of_line=eip.line_leaver(config, ports),
        hooks=hooks,
    )
    # (the hooks read again at each sweep: a timeout lowered since reaches the next sweep's heartbeats)
    fresh: list[Callable[[], None]] = [hooks.forget_groups]
    cluster: dict[str, SweepPart] = {}
    if config.uses_kubernetes:
        from nodecycle.wiring import drain  # the Kubernetes client only when there is a cluster

        # (one list of the nodes' metadata in a sweep, for the budget's part and the annotations')
        nodes = SweepNodes(drain.cluster(config))
        fresh.append(nodes.forget)
        # (what tells another stack's lifecycle under this owner id from one over: see domain/sweep/shared_owner)
        others = OtherStacks(
            owner=config.owner_id, membership=ports.autoscaling.membership, manages_group=groups.manages_group
        )
        cluster["budget"] = StaleBudgetEntries(
            budget=drain.budget(config, ports),
            records=ports.records,
            node_names=nodes.node_names,
            nodes_now=nodes.nodes_now,
            alive_instances=Ec2Instances().alive,
            waker=ports.dispatcher(),
            others=others,
        )
        cluster["annotations"] = LeftoverAnnotations(
            owner=config.owner_id, cluster=nodes, records=ports.records, metrics=ports.metrics, others=others
        )
    # In their order: the last chances, then the heartbeats that keep actions alive (nodecycle.domain.sweep.order)
    parts = sweep_parts(
        keep_alive=orphans.keep_alive,
        repair=repair,
        adopt=orphans.adopt,
        cluster=cluster,
        addresses=_addresses_part(eip.address_sweep(config, ports)),
    )
    return Sweeper(
        owner=config.owner_id,
        records=ports.records,
        clock=ports.clock,
        metrics=ports.metrics,
        parts=parts,
        shares=SHARES,
        fresh=fresh,
        # (a sweep later than its schedule's minute, or a margin if longer: an action of the shortest heartbeat
        # timeout allowed may lapse before it. No sooner: the settings allow for that much (sweep_lateness_seconds),
        # and EventBridge runs a rate schedule "within that minute": under a margin of 5 s, most sweeps on schedule
        # were counted late, their alarm paging for nothing)
        late_after=timedelta(seconds=config.sweep_lateness_seconds),
    )


def _addresses_part(sweep: AddressSweep) -> SweepPart:
    def addresses(open_records: Sequence[LifecycleRecord], now: datetime, time: SweepTime) -> Counts:
        report = sweep(time)
        return {"EipsReleasedBySweep": report.released, "EipsReturnedBySweep": report.returned}

    return addresses
