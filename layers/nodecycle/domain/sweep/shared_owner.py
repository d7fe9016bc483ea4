"""Lifecycles this owner id names that this stack's records do not hold: another stack deployed with the same
owner id (its parameters copied from this one's), draining an instance of a group of its own.

A budget entry or a node's annotations name their owner and their lifecycle's record id, nothing of the stack: a
lifecycle missing from this stack's records table was taken for one over, and swept. Under a shared owner id that
freed the other stack's slot while its drain evicted (the next node took it: invariant 1), and cleared its node's
annotations mid-drain (invariant 3), at every sweep, and silently. What tells the other stack's is the instance:
alive in a group this stack does not manage. An instance of this stack's own groups (the leftover of a stack of
this name deleted mid-drain and deployed again, its table new) or one gone is swept as before.

Both stacks manage the same groups (copied with the owner id, or tagged ``nodecycle:owner`` for it) and nothing
here tells them apart: ``nodecycle doctor`` names the stacks of the region that share the owner id."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from nodecycle.domain.ports.instances import up
from nodecycle.domain.ports.lifecycle import Membership, RecordStore
from nodecycle.domain.sweep.sweeper import SweepFailed, record_over


@dataclass(frozen=True)
class Foreign:
    """A lifecycle of this owner id that another stack runs: what a sweep left alone, and where."""

    record_id: str
    instance_id: str
    group: str
    node: str


class OtherStacks:
    """Tells a lifecycle missing from this stack's records that another stack of its owner id runs."""

    def __init__(
        self, *, owner: str, membership: Callable[[str], Membership], manages_group: Callable[[str], bool]
    ) -> None:
        """``membership``: where Auto Scaling (else EC2) says the instance is; ``manages_group``: whether a group is
        this stack's (named, or tagged for its owner id)."""
        self._owner = owner
        self._membership = membership
        self._manages_group = manages_group

    def group_of(self, instance_id: str | None) -> str | None:
        """The group not this stack's that holds the instance, alive; None when the instance is gone, in no group,
        or in one of this stack's (asked only of a lifecycle missing from the records: one call each)."""
        if instance_id is None:
            return None
        where = self._membership(instance_id)
        if where.group is None:
            return None
        if where.lifecycle_state is None and not up(where.ec2_state):
            return None  # (no group lists it any more, and EC2 has it gone: its lifecycle is over)
        return None if self._manages_group(where.group) else where.group

    def refusal(self, found: Mapping[str, Foreign], what: str) -> SweepFailed:
        """The failure of a sweep part that left ``found`` alone (record id -> where), naming the shared owner id."""
        named = "; ".join(
            f"lifecycle {f.record_id} of instance {f.instance_id} in group {f.group} (node {f.node})"
            for f in found.values()
        )
        return SweepFailed(
            f"owner id {self._owner} is another stack's too: {len(found)} {what} of this owner id name lifecycles "
            f"missing from this stack's records, of groups it does not manage, left alone: {named}. Give each stack "
            "its own OwnerId (nodecycle doctor --stack STACK names the stacks that share it)"
        )


def lifecycle_over(
    records: RecordStore,
    record_id: str,
    token: str | None = None,
    *,
    others: OtherStacks | None = None,
    instance_id: str | None = None,
    node: str = "",
) -> bool | Foreign:
    """Whether a lifecycle missing from the sweep's list of open ones is really over; or, its record missing and its
    instance alive in a group of another stack's (``others``: see OtherStacks), where that stack's lifecycle is
    (it shares this owner id: left alone). The list is a snapshot from an index that lags: a lifecycle that started
    since, or that the index has not caught up with, is read again, consistently, before anything of it is removed.
    With ``token``, the lifecycle under that token: a record that started over under another (a disruption's record)
    is a lifecycle of its own."""
    record = records.get(record_id)
    if record is None and others is not None:
        group = others.group_of(instance_id)
        if group is not None:
            return Foreign(record_id, instance_id or "", group, node)
    return record_over(record, token)
