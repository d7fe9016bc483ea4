"""Instances become Kubernetes nodes: the port to the cluster and the plan for how new nodes join.

`NodeRegistry` is the part of `nodecycle_sandbox.kube.KubeServer` the emulation needs, so the real server
satisfies it structurally and tests can pass a fake.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

ZONE_LABEL = "topology.kubernetes.io/zone"


class NodeRegistry(Protocol):
    def add_node(
        self,
        name: str,
        *,
        instance_id: str,
        zone: str,
        ready: bool = True,
        ready_after: float | None = None,
        labels: dict[str, str] | None = None,
        pods_capacity: int = 110,
    ) -> Any: ...

    def remove_node(self, name: str) -> Any: ...

    def instance_terminated(self, name: str) -> Any: ...

    def instance_stopped(self, name: str) -> Any: ...

    def instance_started(self, name: str) -> Any: ...

    def instance_resumed(self, name: str) -> Any: ...

    def instance_rebooting(self, name: str) -> Any: ...


@dataclass
class NodePlan:
    """How the nodes of newly launched instances join the cluster.

    `never_ready` and `never_join` count down: the next N launches get a node that stays NotReady, or no
    node at all (a kubelet that never starts), which is what a launch readiness gate must survive.
    """

    ready_after: float = 0.0
    # Seconds between an instance's launch and its node's registration (on EKS the kubelet starts after boot).
    join_after: float = 0.0
    # Seconds between an instance's end and its node's removal (on EKS the cloud controller deletes it once the
    # node controller found it NotReady, 40 s after its kubelet went with the instance, and EC2 says the instance
    # is gone). Meanwhile the node stays, its kubelet gone.
    remove_after: float = 0.0
    never_ready: int = 0
    never_join: int = 0
    labels: dict[str, str] = field(default_factory=dict)

    def next_join(self) -> str:
        """Consume the plan for one launch: "ready", "not-ready" or "absent"."""
        if self.never_join > 0:
            self.never_join -= 1
            return "absent"
        if self.never_ready > 0:
            self.never_ready -= 1
            return "not-ready"
        return "ready"


def register_node(
    registry: NodeRegistry, plan: NodePlan, *, name: str, instance_id: str, zone: str, join: str
) -> None:
    if join == "absent":
        return
    labels = {ZONE_LABEL: zone, "kubernetes.io/hostname": name, **plan.labels}
    if join == "not-ready":
        registry.add_node(name, instance_id=instance_id, zone=zone, ready=False, labels=labels)
    elif plan.ready_after > 0:
        registry.add_node(
            name, instance_id=instance_id, zone=zone, ready=False, ready_after=plan.ready_after, labels=labels
        )
    else:
        registry.add_node(name, instance_id=instance_id, zone=zone, ready=True, labels=labels)
