"""The eip function's composition root, and the sweeper's EIP part. Nothing here talks to Kubernetes."""

from __future__ import annotations

from datetime import timedelta
from functools import cache

from nodecycle.adapters.ec2_addresses import Ec2Addresses
from nodecycle.domain.eip.assign import AssignAddress
from nodecycle.domain.eip.release import ReleaseAddresses
from nodecycle.domain.eip.sweep import AddressSweep
from nodecycle.domain.engine import StepEngine
from nodecycle.domain.flow import Worker
from nodecycle.domain.model import Step
from nodecycle.wiring.common import common


@cache
def addresses() -> Ec2Addresses:
    return Ec2Addresses()


@cache
def engine() -> StepEngine:
    shared = common()
    settings = shared.settings
    return shared.engine(
        Worker.EIP,
        {
            Step.ASSIGN_EIP: AssignAddress(settings=settings, addresses=addresses(), metrics=shared.metrics),
            Step.RELEASE_EIP: ReleaseAddresses(
                owner=settings.owner_id, addresses=addresses(), metrics=shared.metrics
            ),
        },
    )


@cache
def address_sweep() -> AddressSweep:
    shared = common()
    settings = shared.settings
    return AddressSweep(
        owner=settings.owner_id,
        addresses=addresses(),
        clock=shared.clock,
        metrics=shared.metrics,
        grace=timedelta(seconds=settings.sweep_grace_seconds),
    )
