"""The cluster's nodes as the parts of one sweep see them: listed once, by their metadata.

The budget's part needs the names of every node, the leftover annotations' part the nodes this owner
annotated: both are in the nodes' metadata, and one list serves both. At 5,000 nodes a list is megabytes
(their metadata carries managedFields, several KB each), and the API server sends it whole.
"""

from __future__ import annotations

from collections.abc import Collection

from nodecycle.domain.ports.cluster import Claim, NodeInfo, NodeMetadata


class SweepNodes:
    """The nodes (their metadata) listed on first use in a sweep and kept for the rest of it; :meth:`forget`
    as the next sweep begins. A listing that fails raises in the part that asked, and the next part that asks
    lists them again."""

    def __init__(self, cluster: NodeMetadata) -> None:
        self._cluster = cluster
        self._listed: list[NodeInfo] | None = None

    def forget(self) -> None:
        self._listed = None

    def node_names(self) -> set[str]:
        return {node.name for node in self._nodes()}

    def nodes_now(self, names: Collection[str]) -> set[str]:
        """Of ``names``, those that are nodes now, each read again (never from the sweep's list): the list may lag
        behind the nodes (the Kubernetes adapter's comes from the API server's watch cache)."""
        return self._cluster.nodes_now(names) if names else set()

    def nodes_owned_by(self, owner: str) -> list[NodeInfo]:
        # (annotations cannot be selected on: filtered here)
        return [node for node in self._nodes() if node.owner == owner]

    def release_node(self, node: NodeInfo, *, uncordon: bool = False) -> Claim:
        return self._cluster.release_node(node, uncordon=uncordon)

    def _nodes(self) -> list[NodeInfo]:
        if self._listed is None:
            self._listed = self._cluster.node_metadata()
        return self._listed
