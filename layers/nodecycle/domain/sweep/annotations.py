"""The sweep of node annotations: nodes still annotated by this owner for a lifecycle that is over."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from nodecycle.domain.model import LifecycleRecord
from nodecycle.domain.ports.cluster import Claim, NodeInfo, OwnedNodes
from nodecycle.domain.ports.lifecycle import RecordStore
from nodecycle.domain.ports.runtime import Metrics
from nodecycle.domain.sweep.shared_owner import Foreign, OtherStacks, lifecycle_over
from nodecycle.domain.sweep.sweep_time import SweepTime
from nodecycle.domain.sweep.sweeper import Counts, SweepFailed, failed_item, listed_or_none

log = logging.getLogger(__name__)


class LeftoverAnnotations:
    """Nodes still annotated by this owner for a lifecycle that is over: clear both annotations at once."""

    def __init__(
        self,
        *,
        owner: str,
        cluster: OwnedNodes,
        records: RecordStore,
        metrics: Metrics,
        others: OtherStacks | None = None,
    ) -> None:
        """``others`` tells a node whose lifecycle is missing from the records that another stack of this owner id
        drains (None: the lifecycle of every such node is over)."""
        self._owner = owner
        self._others = others
        self._cluster = cluster
        self._records = records
        self._metrics = metrics

    def __call__(self, open_records: Sequence[LifecycleRecord], now: datetime, time: SweepTime) -> Counts:
        open_ids = {record.id for record in listed_or_none(open_records, "annotations")}
        cleared = failed = unseen = 0
        foreign: dict[str, Foreign] = {}  # another stack's, of this owner id: left alone (see shared_owner)
        for node in self._cluster.nodes_owned_by(self._owner):
            if not time.enough():
                unseen += 1
                continue
            try:
                cleared += self._clear(node, open_ids, foreign)
            except Exception:
                # One node the API server will not patch (an admission webhook denying it, throttling) must
                # not keep the nodes listed after it annotated, sweep after sweep (the list comes in the same
                # order): counted, and the sweep fails once all were seen.
                failed_item(log, "could not clear the leftover annotations of node %s", node.name)
                failed += 1
        self._metrics.count("AnnotationsCleared", cleared)
        if failed:
            self._metrics.count("AnnotationFailures", failed)
        refusal = self._others.refusal(foreign, "annotated nodes") if foreign and self._others else None
        if refusal is not None:
            log.error("%s", refusal)
        if unseen:
            raise time.cut_short(f"{unseen} nodes not judged, {failed} could not be cleared")
        if failed:
            raise SweepFailed(f"could not clear the annotations of {failed} nodes (the others were cleared)")
        if refusal is not None:
            raise refusal
        return {"AnnotationsCleared": cleared}

    def _clear(self, node: NodeInfo, open_ids: set[str], foreign: dict[str, Foreign]) -> bool:
        """Clear a node's annotations if its lifecycle is over; whether they were cleared. A lifecycle missing from
        the records whose instance lives in a group of another stack's is that stack's drain (it shares this owner
        id): left alone, noted in ``foreign``."""
        lifecycle = node.lifecycle
        if lifecycle is not None:
            if lifecycle in open_ids:
                return False
            # (the instance the annotation names: the sweep lists the nodes' metadata, without their providerID)
            instance = str(node.progress().get("instance") or node.instance_id or "") or None
            over = lifecycle_over(
                self._records, lifecycle, others=self._others, instance_id=instance, node=node.name
            )
            if isinstance(over, Foreign):
                foreign[lifecycle] = over
                return False
            if not over:
                return False
        if self._cluster.release_node(node) is not Claim.CLAIMED:
            return False  # changed since the listing (the next sweep judges it again), or gone
        log.info("cleared leftover annotations of node %s (lifecycle %s is over)", node.name, lifecycle)
        return True
