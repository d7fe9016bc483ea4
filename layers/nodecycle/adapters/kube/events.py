"""Kubernetes Events about nodes and pods: the :class:`~nodecycle.domain.ports.cluster.Events` port.

core/v1 Events, as the kubelet and the controllers write them, so that ``kubectl describe node`` (which
selects events by ``involvedObject`` kind, name and uid) and ``kubectl get events`` show them. A node's events
go to the ``default`` namespace, as the kubelet's do (a node has none); a pod's to the pod's namespace.

Best effort: an event is a courtesy to the people watching. Any failure to write one (403 without the RBAC
rule, throttling, a dead connection) is logged at DEBUG level and forgotten; it never fails a step.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes.client import ApiClient

from nodecycle.adapters.kube.core_v1 import CoreV1
from nodecycle.adapters.kube.eks_access import REQUEST_TIMEOUT
from nodecycle.domain.ports.cluster import PodInfo

log = logging.getLogger(__name__)

COMPONENT = "nodecycle"
NODE_EVENTS_NAMESPACE = "default"


class KubeEvents:
    def __init__(self, api_client: Callable[[], ApiClient], *, owner: str) -> None:
        self._api_client = api_client
        self._owner = owner  # the reporting instance: which nodecycle stack decided

    def on_node(
        self, node: str, uid: str | None, reason: str, message: str, *, warning: bool = False
    ) -> None:
        subject = {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}
        self._write(NODE_EVENTS_NAMESPACE, node, subject, reason, message, warning)

    def on_pod(self, pod: PodInfo, reason: str, message: str, *, warning: bool = False) -> None:
        subject = {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": pod.name,
            "namespace": pod.namespace,
            "uid": pod.uid or None,
        }
        self._write(pod.namespace, pod.name, subject, reason, message, warning)

    def _write(
        self,
        namespace: str,
        name: str,
        subject: dict[str, Any],
        reason: str,
        message: str,
        warning: bool,
    ) -> None:
        # Plain JSON, not the client's CoreV1Event model: see core_v1.py on what CoreV1Api costs a cold start
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{name}.", "namespace": namespace},
            "involvedObject": {k: v for k, v in subject.items() if v is not None},
            "reason": reason,
            "message": message[:1024],  # the API server refuses longer messages
            "type": "Warning" if warning else "Normal",
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self._owner,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            CoreV1(self._api_client()).create_namespaced_event(
                namespace, event, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
            )
        except Exception as error:  # best effort by design: see the module docstring
            log.debug("could not write event %s on %s/%s: %s", reason, namespace, name, error)
