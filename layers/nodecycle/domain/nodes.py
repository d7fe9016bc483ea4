"""Finding the node of an instance: for the drain, and for the launch readiness gate."""

from __future__ import annotations

from nodecycle.domain.model import LifecycleRecord
from nodecycle.domain.ports.cluster import Cluster, NodeInfo
from nodecycle.domain.ports.instances import Instances

PRIVATE_DNS = "private_dns"  # record.extra key: the instance's private DNS name, looked up once


class NodeFinder:
    """Finds the node of an instance, remembering the instance's DNS name in the record."""

    def __init__(self, cluster: Cluster, instances: Instances) -> None:
        self._cluster = cluster
        self._instances = instances

    def find(
        self, record: LifecycleRecord, *, scan: bool = True
    ) -> tuple[NodeInfo | None, dict[str, object]]:
        extra: dict[str, object] = dict(record.extra)
        if not extra.get(PRIVATE_DNS):
            # Asked again while unknown: right after RunInstances, EC2 may not describe the instance yet
            # (eventual consistency), and without its name the node is found only by listing every node.
            extra[PRIVATE_DNS] = self._instances.private_dns_name(record.instance_id)
        dns = extra[PRIVATE_DNS]
        node = self._cluster.find_node(record.instance_id, dns if isinstance(dns, str) else None, scan=scan)
        return node, extra
