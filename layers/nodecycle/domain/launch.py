"""The launch readiness gate: a launch is completed once its node has registered and is Ready."""

from __future__ import annotations

import logging
from datetime import datetime

from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.nodes import NodeFinder
from nodecycle.domain.policy import ReadinessPolicy
from nodecycle.domain.ports.runtime import Metrics

log = logging.getLogger(__name__)

POLLS = "polls"  # record.extra key: how often the gate has looked for the node so far
SCAN_EVERY = 6  # the gate lists every node once in this many polls


class ReadinessGate:
    """A launch completes once its node is registered and Ready (bounded by the readiness timeout)."""

    def __init__(self, *, finder: NodeFinder, policy: ReadinessPolicy, metrics: Metrics) -> None:
        self._finder = finder
        self._policy = policy
        self._metrics = metrics

    def __call__(self, record: LifecycleRecord, now: datetime) -> Outcome:
        deadline = record.gate_deadline or now + self._policy.timeout
        # A node that has not registered yet is looked up by its DNS name at each poll (one GET); all nodes
        # are listed only now and then, for clusters whose node names are not DNS names.
        polls = int(record.extra.get(POLLS, 0))
        node, extra = self._finder.find(record, scan=polls % SCAN_EVERY == 0)
        extra[POLLS] = polls + 1
        if node is not None and node.ready:
            log.info("node %s is Ready", node.name)
            return Outcome.next(node=node.name, zone=node.zone, outcome="node-ready", extra=extra)
        if now >= deadline:
            why = "node-not-ready" if node is not None else "node-never-joined"
            result = self._policy.on_failure
            log.error("readiness gate timed out (%s): completing with %s", why, result)
            self._metrics.count("ReadinessTimeouts")
            return Outcome.goto(Step.COMPLETE, result=result, outcome=why, extra=extra)
        return Outcome.wait(self._policy.poll_seconds, gate_deadline=deadline, extra=extra)
