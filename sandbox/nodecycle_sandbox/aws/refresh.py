"""Instance refresh, rolling as AWS does it: terminate a batch of old instances, launch their replacements,
wait until the group is healthy again (InService + warm-up), then the next batch.

The batch size follows from `MinHealthyPercentage`: at most `desired - ceil(desired x min%)` instances are
out of service at once, and at least one. With the ReplaceRootVolume strategy a batch's instances are not
terminated but have their root volumes replaced (see `LifecycleEmulator.replace_root_volume`), and come back.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from nodecycle_sandbox.aws.records import InstanceHistory, RefreshBatch, RefreshTimeline

if TYPE_CHECKING:
    from moto.autoscaling.models import FakeAutoScalingGroup, InstanceState

DEFAULT_MIN_HEALTHY_PERCENTAGE = 90
ROLLING = "Rolling"  # StartInstanceRefresh's default Strategy


@dataclass
class RefreshStep:
    terminate: list[InstanceState] = field(default_factory=list)
    wake_at: float | None = None


@dataclass
class InstanceRefresh:
    refresh_id: str
    group: str
    instances_to_replace: list[str]
    min_healthy_percentage: int
    instance_warmup: float
    batch_size: int
    started_at: float
    status: str = "InProgress"
    finished_at: float | None = None
    batches: list[RefreshBatch] = field(default_factory=list)
    strategy: str = ROLLING
    # (ReplaceRootVolume) the instances whose replacement began: they stay in the group
    replacing: list[str] = field(default_factory=list)

    @classmethod
    def plan(
        cls,
        *,
        group_name: str,
        instance_ids: list[str],
        desired_capacity: int,
        min_healthy_percentage: int,
        instance_warmup: float,
        started_at: float,
        strategy: str = ROLLING,
    ) -> InstanceRefresh:
        healthy_floor = math.ceil(desired_capacity * min_healthy_percentage / 100)
        return cls(
            refresh_id=str(uuid.uuid4()),
            group=group_name,
            instances_to_replace=instance_ids,
            min_healthy_percentage=min_healthy_percentage,
            instance_warmup=instance_warmup,
            batch_size=max(1, desired_capacity - healthy_floor),
            started_at=started_at,
            strategy=strategy,
        )

    def finish(self, status: str, at: float) -> None:
        self.status = status
        self.finished_at = at

    def step(
        self, group: FakeAutoScalingGroup, instances: dict[str, InstanceHistory], now: float
    ) -> RefreshStep:
        """What to do now: the next batch to terminate once the group is healthy, or when to look again."""
        old = set(self.instances_to_replace) - set(self.replacing)
        old_left = [s for s in group.instance_states if s.instance.id in old]
        healthy = 0
        warm_at: list[float] = []
        for state in group.instance_states:
            history = instances.get(state.instance.id)
            if state.lifecycle_state != "InService" or history is None or history.in_service_at is None:
                continue
            ready_at = history.in_service_at + self.instance_warmup
            if ready_at <= now:
                healthy += 1
            else:
                warm_at.append(ready_at)
        desired = group.desired_capacity or 0
        if healthy < desired:
            return RefreshStep(wake_at=min(warm_at) if warm_at else None)
        if not old_left:
            self.finish("Successful", now)
            return RefreshStep()
        waiting = [s for s in old_left if s.lifecycle_state == "InService"]
        if not waiting:
            return RefreshStep()  # the last batch is still terminating
        batch = sorted(waiting, key=lambda s: s.instance.launch_time)[: self.batch_size]
        self.batches.append(RefreshBatch(started_at=now, instance_ids=[s.instance.id for s in batch]))
        if self.strategy != ROLLING:
            self.replacing += [s.instance.id for s in batch]
        return RefreshStep(terminate=batch)

    def percentage_complete(self, instances: dict[str, InstanceHistory]) -> int:
        if not self.instances_to_replace:
            return 100
        done = sum(
            1
            for i in self.instances_to_replace
            if i in instances
            and (instances[i].terminated_at is not None or instances[i].root_volume_replaced_at)
        )
        return int(100 * done / len(self.instances_to_replace))

    def describe(self, instances: dict[str, InstanceHistory]) -> dict[str, Any]:
        """The DescribeInstanceRefreshes entry."""
        answer: dict[str, Any] = {
            "InstanceRefreshId": self.refresh_id,
            "AutoScalingGroupName": self.group,
            "Status": self.status,
            "StartTime": datetime.fromtimestamp(self.started_at, tz=UTC),
            "PercentageComplete": self.percentage_complete(instances),
            "InstancesToUpdate": sum(
                1
                for i in self.instances_to_replace
                if i not in self.replacing
                and (i not in instances or instances[i].terminate_started_at is None)
            ),
            "Preferences": {
                "MinHealthyPercentage": self.min_healthy_percentage,
                "InstanceWarmup": int(self.instance_warmup),
            },
        }
        if self.finished_at is not None:
            answer["EndTime"] = datetime.fromtimestamp(self.finished_at, tz=UTC)
        return answer

    def timeline(self, instances: dict[str, InstanceHistory]) -> RefreshTimeline:
        involved = {
            i: replace(h)
            for i, h in instances.items()
            if i in self.instances_to_replace or (h.group == self.group and h.launched_at >= self.started_at)
        }
        return RefreshTimeline(
            refresh_id=self.refresh_id,
            group=self.group,
            status=self.status,
            min_healthy_percentage=self.min_healthy_percentage,
            instance_warmup=self.instance_warmup,
            batch_size=self.batch_size,
            started_at=self.started_at,
            finished_at=self.finished_at,
            batches=list(self.batches),
            instances_to_replace=list(self.instances_to_replace),
            instances=involved,
        )
