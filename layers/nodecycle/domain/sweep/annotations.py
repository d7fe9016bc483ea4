"""The sweep of node annotations: nodes still annotated by this owner for a lifecycle that is over."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from nodecycle.domain.model import LifecycleRecord
from nodecycle.domain.ports.cluster import Claim, OwnedNodes
from nodecycle.domain.ports.lifecycle import RecordStore
from nodecycle.domain.ports.runtime import Metrics
from nodecycle.domain.sweep.sweeper import Counts, lifecycle_over

log = logging.getLogger(__name__)


class LeftoverAnnotations:
    """Nodes still annotated by this owner for a lifecycle that is over: clear both annotations at once."""

    def __init__(self, *, owner: str, cluster: OwnedNodes, records: RecordStore, metrics: Metrics) -> None:
        self._owner = owner
        self._cluster = cluster
        self._records = records
        self._metrics = metrics

    def __call__(self, open_records: Sequence[LifecycleRecord], now: datetime) -> Counts:
        open_ids = {record.id for record in open_records}
        cleared = 0
        for node in self._cluster.nodes_owned_by(self._owner):
            lifecycle = node.lifecycle
            if lifecycle is not None and (
                lifecycle in open_ids or not lifecycle_over(self._records, lifecycle)
            ):
                continue
            if self._cluster.release_node(node) is Claim.CLAIMED:
                log.info(
                    "cleared leftover annotations of node %s (lifecycle %s is over)", node.name, lifecycle
                )
                cleared += 1
        self._metrics.count("AnnotationsCleared", cleared)
        return {"AnnotationsCleared": cleared}
