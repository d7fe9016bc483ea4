"""A group's warm pool, as Auto Scaling keeps one (the user guide's "Use lifecycle hooks with a warm pool"), in
any of its PoolStates: Stopped, Running or Hibernated.

An instance launched into the pool goes `Warmed:Pending` (`Warmed:Pending:Wait` while the launch hooks hold it,
events Origin "EC2", Destination "WarmPool"), `Warmed:Pending:Proceed`, then waits in the pool's state:
`Warmed:Stopped` stopped (EC2 tells its stopping and stopped; its node, if it has one, goes NotReady),
`Warmed:Hibernated` the same (a stop that keeps the memory: to the cluster, a stopped instance), or
`Warmed:Running` still running (a node it has stays Ready, its kubelet alive). A scale out takes the pool's
instances first, running ones first (they are ready soonest), each kind oldest first: a stopped or hibernated
one is started (its kubelet back once it has booted, the node plan's `join_after`), a running one goes at
once; each registers its node if it has none yet (the first time it enters the group: the user data AWS
documents for warm pools starts the kubelet only then, also in a running pool), then goes `Pending:Wait` under
the launch hooks (Origin "WarmPool", Destination "AutoScalingGroup") and `InService`. With
`InstanceReusePolicy.ReuseOnScaleIn` a scale in sends the instance back to the pool instead of terminating it:
`Warmed:Pending:Wait` under the terminating hooks (Origin "AutoScalingGroup", Destination "WarmPool"), then into
the pool's state as above; an instance not yet in service (Pending:Wait) goes so too, its launch action ended by the
move, as a termination ends it. A pool whose PoolState changes keeps its instances as they are; new ones take the
new state. Pool instances count toward no capacity and are listed by DescribeWarmPool alone (in pages of
MaxRecords, at most 50, with a NextToken), not among the group's Instances. The pool keeps max(MinSize,
MaxGroupPreparedCapacity (the group's MaxSize when unset) - desired) instances: it launches what it lacks, and
terminates what it has too many of (waiting ones, through the terminating hooks: `Warmed:Terminating:Wait`,
Origin "WarmPool", Destination "EC2").

Not emulated: DeleteWarmPool's termination of the pool's instances.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from moto.autoscaling.exceptions import ValidationError

from nodecycle_sandbox.aws.records import GROUP, TERMINATING, WARM_POOL

if TYPE_CHECKING:
    from moto.autoscaling.models import FakeAutoScalingGroup, FakeWarmPool, InstanceState

    from nodecycle_sandbox.aws.lifecycle import LifecycleEmulator

POOL_PREFIX = "Warmed:"
POOL_STATES = ("Stopped", "Running", "Hibernated")
DEFAULT_POOL_STATE = "Stopped"
# DescribeWarmPool's page: MaxRecords at most (and by default) 50
MAX_RECORDS = 50
# The states of instances waiting in the pool, in the order a scale out takes them (running ones are ready soonest)
WAITING = ("Warmed:Running", "Warmed:Stopped", "Warmed:Hibernated")


def in_pool(state: InstanceState) -> bool:
    return state.lifecycle_state.startswith(POOL_PREFIX)


def pool_instances(group: FakeAutoScalingGroup) -> list[InstanceState]:
    """What DescribeWarmPool lists: every instance in a `Warmed:*` state."""
    return [s for s in group.instance_states if in_pool(s)]


def group_instances(group: FakeAutoScalingGroup) -> list[InstanceState]:
    """What DescribeAutoScalingGroups lists as the group's Instances: not those of its warm pool."""
    return [s for s in group.instance_states if not in_pool(s)]


def check_pool_state(pool_state: str | None) -> None:
    if pool_state not in (None, *POOL_STATES):
        raise ValidationError(
            f"Value '{pool_state}' at 'poolState' failed to satisfy constraint: Member must satisfy enum value "
            f"set: [{', '.join(POOL_STATES)}]"
        )


def pool_page(
    instances: list[InstanceState], max_records: str | None, next_token: str | None
) -> tuple[list[InstanceState], str | None]:
    """One page of DescribeWarmPool's instances, and the token of the next page (None after the last)."""
    size = MAX_RECORDS if max_records is None else int(max_records)
    if not 1 <= size <= MAX_RECORDS:
        raise ValidationError(
            f"Value '{size}' at 'maxRecords' failed to satisfy constraint: Member must have value less than or "
            f"equal to {MAX_RECORDS}"
        )
    start = 0
    if next_token:
        if not next_token.isdigit() or int(next_token) > len(instances):
            raise ValidationError(f"The token '{next_token}' is invalid.")
        start = int(next_token)
    end = start + size
    return instances[start:end], str(end) if end < len(instances) else None


def warm_pool_of(group: FakeAutoScalingGroup) -> FakeWarmPool | None:
    # (moto sets the group's desired capacity before it gives the group the attribute)
    return getattr(group, "warm_pool", None)


def _flag(value: object) -> bool:
    # (the query protocol hands moto "true"/"false")
    return value is True or str(value).lower() == "true"


class WarmPoolEmulator:
    def __init__(self, lifecycle: LifecycleEmulator) -> None:
        self._lifecycle = lifecycle

    # -- configuration ----------------------------------------------------------------------------

    def reuses(self, group: FakeAutoScalingGroup) -> bool:
        pool = warm_pool_of(group)
        return pool is not None and _flag((pool.instance_reuse_policy or {}).get("ReuseOnScaleIn"))

    def _size(self, group: FakeAutoScalingGroup, pool: FakeWarmPool) -> int:
        prepared = pool.max_group_prepared_capacity
        ceiling = int(group.max_size or 0) if prepared is None or int(prepared) < 0 else int(prepared)
        return max(int(pool.min_size or 0), ceiling - int(group.desired_capacity or 0))

    def maintain(self, group: FakeAutoScalingGroup) -> None:
        """Launch what the pool lacks, terminate what it has too many of (of its waiting instances: an instance
        on its way into the pool is counted, not taken)."""
        pool = warm_pool_of(group)
        if pool is None:
            return
        members = [s for s in pool_instances(group) if not s.lifecycle_state.startswith("Warmed:Terminating")]
        missing = self._size(group, pool) - len(members)
        for _ in range(missing):
            state = self._lifecycle.run_instance(group)
            state.lifecycle_state = "Warmed:Pending"
            group.instance_states.append(state)
            self._lifecycle.launched(group, state, WARM_POOL)
        waiting = sorted(
            (s for s in members if s.lifecycle_state in WAITING), key=lambda s: s.instance.launch_time
        )
        for state in waiting[: max(0, -missing)]:
            self._lifecycle.begin_terminate(group, state, "warm-pool-excess")

    # -- into the pool ----------------------------------------------------------------------------

    def scale_in_to(self, group: FakeAutoScalingGroup, state: InstanceState) -> None:
        """A scale in with ReuseOnScaleIn: back to the pool, through the terminating hooks."""
        hooks = self._lifecycle.hooks(group.name, TERMINATING)
        if not hooks:
            self.returned(group, state)
            return
        state.lifecycle_state = "Warmed:Pending:Wait"
        self._lifecycle.start_round(group, state, hooks, origin=GROUP, destination=WARM_POOL)

    def warmed(self, group: FakeAutoScalingGroup, state: InstanceState) -> None:
        """Launched into the pool, its launch hooks over: into the pool's state."""
        self._park(group, state)

    def returned(self, group: FakeAutoScalingGroup, state: InstanceState) -> None:
        """Scaled in to the pool, its terminating hooks over: into the pool's state."""
        self._park(group, state)

    def _park(self, group: FakeAutoScalingGroup, state: InstanceState) -> None:
        instance_id = state.instance.id
        pool = warm_pool_of(group)
        pool_state = (pool.pool_state if pool is not None else None) or DEFAULT_POOL_STATE
        state.lifecycle_state = "Warmed:Pending:Proceed"
        if pool_state != "Running":
            # hibernated or stopped, the instance is stopped to EC2 and to the cluster (hibernation keeps its
            # memory, not its kubelet's heartbeat): EC2 tells of the stop as of any other, the node goes NotReady
            self._lifecycle.backend.ec2_backend.stop_instances([instance_id])
            self._lifecycle.disruptions.state_changed([instance_id], ("stopping", "stopped"))
        state.lifecycle_state = f"{POOL_PREFIX}{pool_state}"
        history = self._lifecycle.instances.get(instance_id)
        if history is not None:
            history.pool_entered_at.append(time.time())
        self.maintain(group)  # one more waiting instance than the pool keeps: the excess goes

    # -- out of the pool --------------------------------------------------------------------------

    def take(self, group: FakeAutoScalingGroup, count: int) -> int:
        """A scale out of `count`: up to that many waiting instances leave the pool (running ones first, each
        kind oldest first), started unless running, then through the launch hooks into the group. How many it
        took."""
        if warm_pool_of(group) is None:
            return 0
        ready = sorted(
            (s for s in group.instance_states if s.lifecycle_state in WAITING),
            key=lambda s: (WAITING.index(s.lifecycle_state), s.instance.launch_time),
        )[:count]
        for state in ready:
            instance_id = state.instance.id
            running = state.lifecycle_state == "Warmed:Running"
            hibernated = state.lifecycle_state == "Warmed:Hibernated"
            state.lifecycle_state = "Pending"
            history = self._lifecycle.instances.get(instance_id)
            if history is not None:
                history.pool_left_at.append(time.time())
            if not running:
                self._lifecycle.backend.ec2_backend.start_instances([instance_id])
            if not self._lifecycle.joined(instance_id):
                self._lifecycle.join(state)
            elif hibernated:
                # resumed, not booted: the same boot id, its kubelet running on (Controllers.instance_resumed)
                self._lifecycle.instance_resumed(instance_id, after=self._lifecycle.node_plan.join_after)
            elif not running:
                # its kubelet back once the instance has booted (as long as a first one takes to join): until
                # then its node object is as the stop left it (still Ready for the node monitor grace period)
                self._lifecycle.instance_started(instance_id, boot=self._lifecycle.node_plan.join_after)
            # (a running one's kubelet never stopped: its node stays Ready, as it was in the pool)
            self._lifecycle.enter(group, state, origin=WARM_POOL, destination=GROUP)
        return len(ready)
