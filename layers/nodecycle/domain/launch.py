"""The launch readiness gate: a launch is completed once its node has registered and is Ready."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.nodes import NodeFinder
from nodecycle.domain.policy import ReadinessPolicy
from nodecycle.domain.ports.runtime import Metrics

log = logging.getLogger(__name__)

POLLS = "polls"  # record.extra key: how often the gate has looked for the node so far
# A node is looked up by its instance's private DNS name, the name EKS nodes register under: one GET, whatever
# the size of the cluster. Listing every node to match provider ids costs the whole cluster, so it is kept for
# clusters that name nodes otherwise: once the node has had time to register (a DNS-named node registers well
# within this), then once in SCAN_EVERY polls, and at the last poll before the gate times out.
SCAN_AFTER = timedelta(minutes=2)
SCAN_EVERY = 6


class ReadinessGate:
    """A launch completes once its node is registered and Ready (bounded by the readiness timeout)."""

    def __init__(self, *, finder: NodeFinder, policy: ReadinessPolicy, metrics: Metrics) -> None:
        self._finder = finder
        self._policy = policy
        self._metrics = metrics

    def __call__(self, record: LifecycleRecord, now: datetime) -> Outcome:
        deadline = record.gate_deadline or now + self._policy.timeout
        polls = int(record.extra.get(POLLS, 0))
        node, extra = self._finder.find(record, scan=self._scan(polls, now, deadline))
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

    def _scan(self, polls: int, now: datetime, deadline: datetime) -> bool:
        """Whether this poll may list every node (see SCAN_AFTER)."""
        policy = self._policy
        started = deadline - policy.timeout
        if now + timedelta(seconds=policy.poll_seconds) >= deadline:
            return True  # the last look before giving up
        return now - started >= SCAN_AFTER and polls % SCAN_EVERY == 0
