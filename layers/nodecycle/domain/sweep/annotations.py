"""The sweep of node annotations: nodes still annotated by this owner for a lifecycle that is over."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from nodecycle.domain.model import LifecycleRecord
from nodecycle.domain.ports.cluster import Claim, NodeInfo, OwnedNodes
from nodecycle.domain.ports.lifecycle import RecordStore
from nodecycle.domain.ports.runtime import Metrics
from nodecycle.domain.sweep.sweep_time import SweepTime
from nodecycle.domain.sweep.sweeper import Counts, SweepFailed, lifecycle_over, listed_or_none

log = logging.getLogger(__name__)


class LeftoverAnnotations:
    """Nodes still annotated by this owner for a lifecycle that is over: clear both annotations at once."""

    def __init__(self, *, owner: str, cluster: OwnedNodes, records: RecordStore, metrics: Metrics) -> None:
        self._owner = owner
        self._cluster = cluster
        self._records = records
        self._metrics = metrics

    def __call__(self, open_records: Sequence[LifecycleRecord], now: datetime, time: SweepTime) -> Counts:
        open_ids = {record.id for record in listed_or_none(open_records, "annotations")}
        cleared = failed = unseen = 0
        for node in self._cluster.nodes_owned_by(self._owner):
            if not time.enough():
                unseen += 1
                continue
            try:
                cleared += self._clear(node, open_ids)
            except Exception:
                # One node the API server will not patch (an admission webhook denying it, throttling) must
                # not keep the nodes listed after it annotated, sweep after sweep (the list comes in the same
                # order): counted, and the sweep fails once all were seen.
                log.exception("could not clear the leftover annotations of node %s", node.name)
                failed += 1
        self._metrics.count("AnnotationsCleared", cleared)
        if failed:
            self._metrics.count("AnnotationFailures", failed)
        if unseen:
            raise time.cut_short(f"{unseen} nodes not judged, {failed} could not be cleared")
        if failed:
            raise SweepFailed(f"could not clear the annotations of {failed} nodes (the others were cleared)")
        return {"AnnotationsCleared": cleared}

    def _clear(self, node: NodeInfo, open_ids: set[str]) -> bool:
        """Clear a node's annotations if its lifecycle is over; whether they were cleared."""
        lifecycle = node.lifecycle
        if lifecycle is not None and (lifecycle in open_ids or not lifecycle_over(self._records, lifecycle)):
            return False
        if self._cluster.release_node(node) is not Claim.CLAIMED:
            return False  # changed since the listing (the next sweep judges it again), or gone
        log.info("cleared leftover annotations of node %s (lifecycle %s is over)", node.name, lifecycle)
        return True
