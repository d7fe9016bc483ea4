from __future__ import annotations

from functools import cache

from nodecycle.domain.catalog import HookTimeouts, ManagedGroups
from nodecycle.domain.intake import Intake
from nodecycle.wiring.common import common


@cache
def intake() -> Intake:
    shared = common()
    settings = shared.settings
    return Intake(
        settings=settings,
        records=shared.records,
        queues=shared.queues,
        groups=ManagedGroups(
            owner=settings.owner_id,
            names=settings.managed_groups,
            by_tag=settings.managed_by_tag,
            hooks=settings.managed_hooks,
            autoscaling=shared.autoscaling,
            clock=shared.clock,
        ),
        hooks=HookTimeouts(shared.autoscaling),
        clock=shared.clock,
        metrics=shared.metrics,
        resume_grace=shared.resume_grace,
    )
