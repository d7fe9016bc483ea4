"""The eip function's composition root, and the sweeper's EIP part. Nothing here talks to Kubernetes."""

from __future__ import annotations

import os
from datetime import timedelta
from functools import cache
from typing import TYPE_CHECKING

from nodecycle.adapters.aws.address_lines import DynamoAddressLines
from nodecycle.adapters.aws.addresses import Ec2Addresses, InstanceGrants
from nodecycle.adapters.aws.queues import SqsRedeliveries
from nodecycle.domain.completion import CompleteAction, SettleResults
from nodecycle.domain.eip.assign import AssignAddress
from nodecycle.domain.eip.locked import LockedReleases
from nodecycle.domain.eip.release import ReleaseAddresses
from nodecycle.domain.eip.wake import LineWaker
from nodecycle.domain.engine import StepEngine
from nodecycle.domain.flow import Worker
from nodecycle.domain.model import Step
from nodecycle.domain.policy import EipMode
from nodecycle.settings import EipSettings
from nodecycle.wiring.common import Common, common, eip_policy
from nodecycle.wiring.common import invocation_time as invocation_time  # (the eip handler's)
from nodecycle.wiring.engines import worker_engine

if TYPE_CHECKING:  # (imported by the sweeper alone: nodecycle.settings, _CLUSTER_SETTINGS)
    from collections.abc import Callable
    from datetime import datetime

    from nodecycle.domain.model import LifecycleRecord
    from nodecycle.domain.sweep.addresses import AddressSweep
    from nodecycle.settings import SweeperSettings


@cache
def settings() -> EipSettings:
    return EipSettings.from_env(os.environ)


def shared() -> Common:
    return common(settings())


@cache
def addresses() -> Ec2Addresses:
    # (the sweeper's too: its environment is the eip function's, the template's Globals)
    config = settings()
    return Ec2Addresses(
        grants=InstanceGrants(names=frozenset(config.managed_groups), by_tag=config.managed_by_tag)
    )


@cache
def redeliveries() -> SqsRedeliveries | None:
    """The EIP queue, as a record of it retried on purpose comes back sooner than its visibility timeout (None:
    the function not told the queue it polls)."""
    config = settings()
    url = config.work_queue_url
    return None if url is None else SqsRedeliveries(url, config.work_visibility_timeout_seconds)


@cache
def engine() -> StepEngine:
    config = settings()
    ports = shared()
    policy = eip_policy(config)
    lines = DynamoAddressLines(config.record_table)
    # (the first launch in line gets an address given back now, not at its next look; and one a launch ahead of
    # it leaves, or a spare released under the quota)
    waker = _line_waker(config, ports, lines)
    assign = _assign(config, ports, lines, waker)
    return worker_engine(
        ports,
        Worker.EIP,
        {
            Step.ASSIGN_EIP: assign,
            Step.RELEASE_EIP: ReleaseAddresses(
                owner=config.owner_id,
                addresses=addresses(),
                metrics=ports.metrics,
                waker=waker,
                lines=lines,
                locked=LockedReleases(owner=config.owner_id, locks=lines, metrics=ports.metrics),
            ),
            Step.COMPLETE: CompleteAction(ports.autoscaling, ports.metrics, ports.records),
        },
        # (readiness too: a step that ends past the guard's point is judged again there, when the launch has moved on
        # to its readiness gate, which only the drain function runs: see ``StepEngine._run_step``)
        SettleResults(eip=policy.failure_result, readiness=config.readiness_failure_result),
        # (a launch in line that the engine settles or finds lapsed leaves the line as one giving up does)
        out_of_line=assign.ended_in_line,
    )


def address_sweep(config: SweeperSettings, ports: Common) -> AddressSweep:
    # (imported here: the sweeper's alone, which the eip function's cold start would import for nothing)
    from nodecycle.domain.sweep.addresses import AddressSweep

    lines = DynamoAddressLines(config.record_table)
    return AddressSweep(
        owner=config.owner_id,
        addresses=addresses(),
        clock=ports.clock,
        metrics=ports.metrics,
        grace=timedelta(seconds=config.sweep_grace_seconds),
        waker=_line_waker(config, ports, lines),
        locked=LockedReleases(owner=config.owner_id, locks=lines, metrics=ports.metrics),
    )


def line_leaver(config: SweeperSettings, ports: Common) -> Callable[[LifecycleRecord, datetime], None] | None:
    """What the sweeper tells of a launch waiting in an address line that it settles or finds lapsed: the
    launch leaves the line and the next is woken, as when the engine moves it on. None without addresses."""
    policy = eip_policy(config)
    if policy.mode is EipMode.OFF:
        return None
    lines = DynamoAddressLines(config.record_table)
    return _assign(config, ports, lines, _line_waker(config, ports, lines)).ended_in_line


def _assign(
    config: EipSettings | SweeperSettings, ports: Common, lines: DynamoAddressLines, waker: LineWaker
) -> AssignAddress:
    return AssignAddress(
        owner=config.owner_id,
        policy=eip_policy(config),
        addresses=addresses(),
        metrics=ports.metrics,
        lines=lines,
        records=ports.records,
        groups=ports.autoscaling,
        waker=waker,
        offers=lines,
        refusals=lines,
    )


def _line_waker(config: EipSettings | SweeperSettings, ports: Common, lines: DynamoAddressLines) -> LineWaker:
    """The waker of this owner's lines: the quota's, and the line of the pool whose launches wait for the quota
    there too (a pool that may grow: its launches allocate when it is empty)."""
    policy = eip_policy(config)
    quota_pool = policy.pool if policy.mode is EipMode.POOL and policy.grow_pool else None
    return LineWaker(
        owner=config.owner_id,
        lines=lines,
        records=ports.records,
        queues=ports.queues,
        quota_pool=quota_pool,
        addresses=addresses(),
        offers=lines,
        refusals=lines,
    )
