"""The intake function's composition root."""

from __future__ import annotations

import os
import time
from datetime import timedelta
from functools import cache
from typing import TYPE_CHECKING

from nodecycle.adapters.aws.instances import Ec2Instances
from nodecycle.adapters.aws.queues import SqsIntakeQueue, SqsRedeliveries
from nodecycle.domain.catalog import LifecycleHooks, ManagedGroups
from nodecycle.domain.intake import Intake
from nodecycle.domain.intake_budget import IntakeBudget
from nodecycle.domain.policy import EipMode, PlanPolicy
from nodecycle.settings import IntakeSettings, Timing
from nodecycle.wiring.common import Common, common
from nodecycle.wiring.common import invocation_time as invocation_time  # (the intake handler's)

if TYPE_CHECKING:  # (imported by the sweeper alone: nodecycle.settings, _CLUSTER_SETTINGS)
    from nodecycle.settings import SweeperSettings


@cache
def settings() -> IntakeSettings:
    return IntakeSettings.from_env(os.environ)


def shared() -> Common:
    return common(settings())


@cache
def intake() -> Intake:
    config, ports = settings(), shared()
    return build_intake(
        config, ports, managed_groups(config, ports), LifecycleHooks(ports.autoscaling, ports.clock)
    )


@cache
def budget() -> IntakeBudget:
    ports = shared()
    return IntakeBudget(ports.records, ports.clock, owner=settings().owner_id)


@cache
def intake_queue() -> SqsIntakeQueue | None:
    """The intake queue, where an event from EventBridge retried on purpose is handed (None: not set)."""
    url = settings().intake_queue_url
    return None if url is None else SqsIntakeQueue(url)


# The intake queue's visibility timeout, as template.yaml declares it (IntakeQueue; a test holds the two equal):
# a record retried on purpose comes back sooner than it (nodecycle/entrypoints.py)
INTAKE_QUEUE_VISIBILITY_SECONDS = 180


@cache
def redeliveries() -> SqsRedeliveries | None:
    """The intake queue, as a record of it retried on purpose comes back sooner (None: its url not set)."""
    url = settings().intake_queue_url
    return None if url is None else SqsRedeliveries(url, INTAKE_QUEUE_VISIBILITY_SECONDS)


def adopt_after(config: Timing) -> timedelta:
    """How long the sweeper leaves an action held with no record to intake before adopting it: half a sweep
    interval, so the sweep after the one that first found it (schedules are not exact to the second)."""
    return timedelta(seconds=config.sweep_interval_seconds / 2)


def managed_groups(config: IntakeSettings | SweeperSettings, ports: Common) -> ManagedGroups:
    return ManagedGroups(
        owner=config.owner_id,
        names=config.managed_groups,
        by_tag=config.managed_by_tag,
        hooks=config.managed_hooks,
        autoscaling=ports.autoscaling,
        clock=ports.clock,
        # (anyone allowed to send to the intake queue can name as many groups as they like: see LOOKUP_BURST)
        bounded_lookups=True,
        tagged=lambda owner: ports.autoscaling.groups_tagged(owner),
    )


def build_intake(
    config: IntakeSettings | SweeperSettings, ports: Common, groups: ManagedGroups, hooks: LifecycleHooks
) -> Intake:
    """Intake as the intake function runs it, and as the sweeper adopts an action whose event was lost (with
    the sweeper's own catalog of groups and hooks: one cache of each per container)."""
    return Intake(
        owner=config.owner_id,
        plan=PlanPolicy(
            kubernetes=config.uses_kubernetes,
            eip=config.eip_mode is not EipMode.OFF,
            readiness_gate=config.readiness_gate,
            rebalance=config.rebalance_policy,
            maintenance_lead=timedelta(minutes=config.maintenance_lead_minutes),
        ),
        records=ports.records,
        queues=ports.queues,
        groups=groups,
        hooks=hooks,
        autoscaling=ports.autoscaling,
        clock=ports.clock,
        metrics=ports.metrics,
        resume_grace=ports.resume_grace,
        retry_window=timedelta(seconds=config.heartbeat_margin_seconds + config.redelivery_seconds),
        min_heartbeat=timedelta(seconds=config.min_heartbeat_timeout_seconds),
        instances=Ec2Instances(),
        adopt_after=adopt_after(config),
        # (waits out EC2's listing of an instance launched moments ago: see Intake._listed_late)
        pause=pause,
    )


def pause(seconds: float) -> None:
    """How intake waits for EC2 to list an instance (a test replaces it before the first invocation, whose
    wiring takes it, with one that moves its clocks on instead of sleeping)."""
    time.sleep(seconds)
