"""Finding the node of an instance: for the drain, and for the launch readiness gate."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime, timedelta

from nodecycle.domain.errors import AccessRefused, TransientError
from nodecycle.domain.model import LifecycleRecord
from nodecycle.domain.ports.cluster import Cluster, NodeInfo, Refused
from nodecycle.domain.ports.instances import Instances

# How long a node's Lease must go on being renewed on the boot it had before its instance went down (its boot id
# unchanged, its status not posted since) for its kubelet to be that boot's running on (an instance resumed from
# hibernation: no boot, and on a node that never went Unknown nothing changed for it to post before its next report,
# nodeStatusReportFrequency, 5 minutes) rather than a rebooted one that has not posted yet. A rebooted kubelet posts
# its status at its status loop's first sync, which runs beside its Lease controller (Kubelet.Run) and always posts
# (Kubelet.tryUpdateNodeStatus: no report made yet), once its registration of the existing node (a create refused and
# a get) is done: within seconds. This is the node Lease's duration, four of the kubelet's 10-s status syncs.
SAME_BOOT_AFTER = timedelta(seconds=40)
# record.extra keys: when (the drain function's clock) a look first found a node's Lease renewed on the boot from
# before, its status not posted since, and the Lease's renewTime then (see renewed_on_the_same_boot)
SAME_BOOT_SINCE = "same_boot_since"
SAME_BOOT_LEASE = "same_boot_lease"
# How far a kubelet's clock (a Lease's renewTime) may be from the functions' own: a renewal is taken for one after a
# moment only when stamped this much later (see launch.ReadinessGate, and the warm pool's watch in drain.cleanup)
CLOCK_SKEW = timedelta(seconds=5)


def renewed_on_the_same_boot(
    kept: Mapping[str, object], stamp: str, now: datetime
) -> tuple[bool, dict[str, str]]:
    """Whether the kubelet of a node whose Lease a look finds renewed (its renewTime ``stamp``) on the boot from
    before, its status not posted since, is that boot's running on: the Lease renewed on for SAME_BOOT_AFTER since a
    look first found it so (kept in ``kept``), and again since. The readiness gate and the cleanup's watches share it.
    With the marks to keep when this is that first look (none otherwise)."""
    since = kept.get(SAME_BOOT_SINCE)
    if since is None:
        return False, {SAME_BOOT_SINCE: now.isoformat(), SAME_BOOT_LEASE: stamp}
    return now >= datetime.fromisoformat(str(since)) + SAME_BOOT_AFTER and stamp != kept.get(
        SAME_BOOT_LEASE
    ), {}


PRIVATE_DNS = "private_dns"  # record.extra key: the instance's private DNS name, looked up once
# record.extra key: the name of the instance's node when it is not the instance's private DNS name (a hostname
# override, a custom AMI's naming), as a scan of every node found it by its provider id. Looked up by that name
# from then on (one GET), rather than found again only by the next scan: the readiness gate scans once in a few
# polls, so a node found not Ready yet would open the gate only at the next scan, half a minute on, whatever
# the size of the cluster listed again meanwhile.
NODE_NAME = "node_name"

log = logging.getLogger(__name__)


class NodeUnreadable(Refused):
    """The API server refused the read of the instance's node (403: a role without get or list on nodes).
    ``extra``: the record's extra with what the look learned before (the instance's DNS name), for the step to keep
    rather than ask EC2 again at each look while the refusal lasts."""

    def __init__(self, refused: Refused, extra: dict[str, object]) -> None:
        super().__init__(str(refused))
        self.extra = extra


class NodeFinder:
    """Finds the node of an instance, remembering the instance's DNS name (and the node's own name, when it is
    not that) in the record."""

    def __init__(self, cluster: Cluster, instances: Instances) -> None:
        self._cluster = cluster
        self._instances = instances

    def find(
        self, record: LifecycleRecord, *, scan: bool = True
    ) -> tuple[NodeInfo | None, dict[str, object]]:
        """When AWS refuses the instance's DNS name (ec2:DescribeInstances denied by a service control policy or a
        permissions boundary) or does not answer it (throttled, failed), the node is looked for without it (by the
        instance id's name, and by provider id when ``scan``) rather than the failure raised; it is asked again at
        the next find. The name only spares a scan of the nodes, and raised, a refusal that lasts would fail the
        step's message into the dead-letter queue after the engine's refused tries (the launch left to its global
        timeout, the terminating instance's node never drained), and throttling would hold the step in the
        engine's backoff for as long as it lasts. The API server refusing the node raises NodeUnreadable, with
        what the look learned."""
        extra: dict[str, object] = dict(record.extra)
        try:
            return self._find(record, extra, scan=scan)
        except Refused as refused:
            raise NodeUnreadable(refused, extra) from refused

    def _find(
        self, record: LifecycleRecord, extra: dict[str, object], *, scan: bool
    ) -> tuple[NodeInfo | None, dict[str, object]]:
        named = extra.get(NODE_NAME)
        if isinstance(named, str):
            node = self._cluster.get_node(named)
            if node is not None and node.instance_id == record.instance_id:
                return node, extra
            # deleted since (a node that registers again may do so under another name), or that name is another
            # instance's node now: looked for afresh
            del extra[NODE_NAME]
        if not extra.get(PRIVATE_DNS):
            # Asked again while unknown: right after RunInstances, EC2 may not describe the instance yet
            # (eventual consistency), and without its name the node is found only by listing every node.
            try:
                extra[PRIVATE_DNS] = self._instances.private_dns_name(record.instance_id)
            except TransientError as error:
                # Refused, or throttled (RequestLimitExceeded past botocore's retries: an account whose other tools
                # use up its EC2 request rate) or failed: found without it as when EC2 does not describe it yet,
                # rather than the step sent into the engine's backoff, minutes between tries for as long as the
                # throttling lasts, its node out of the budget's line and a free slot idle meanwhile
                log.log(
                    logging.ERROR if isinstance(error, AccessRefused) else logging.WARNING,
                    "the DNS name of instance %s is not answered (%s): its node is looked for by its instance id "
                    "and provider id only",
                    record.instance_id,
                    error,
                )
        dns = extra.get(PRIVATE_DNS)
        node = self._cluster.find_node(record.instance_id, dns if isinstance(dns, str) else None, scan=scan)
        if node is not None and node.name != dns and node.instance_id == record.instance_id:
            extra[NODE_NAME] = node.name
        return node, extra
