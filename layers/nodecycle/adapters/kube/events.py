"""Kubernetes Events about nodes and pods: the :class:`~nodecycle.domain.ports.cluster.Events` port.

core/v1 Events, as the kubelet and the controllers write them, so that ``kubectl describe node`` (which
selects events by ``involvedObject`` kind, name and uid) and ``kubectl get events`` show them. A node's events
go to the ``default`` namespace, as the kubelet's do (a node has none); a pod's to the pod's namespace.

Best effort: an event is a courtesy to the people watching. Any failure to write one (403 without the RBAC
rule, throttling, a dead connection) is logged at DEBUG level and forgotten; it never fails a step, nor holds it
long: a write waits at most ``EVENT_TIMEOUT``, and after one that failed for the API server's sake (no answer in
time, a dead connection, a 5xx, a 429) none is tried for ``QUIET_AFTER_FAILURE``, so a step that tells of many
pods against a hung or overloaded API server waits out one timeout, not one per event. A namespace being deleted
takes no Event (403, cause NamespaceTerminating): it is not asked again for ``ENDING_NAMESPACE_TTL``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from nodecycle.adapters.kube.core_v1 import CoreV1, finished
from nodecycle.adapters.kube.errors import OutOfTime, kube_errors, namespace_terminating
from nodecycle.domain.errors import TransientError
from nodecycle.domain.ports.cluster import PodInfo

log = logging.getLogger(__name__)

COMPONENT = "nodecycle"
NODE_EVENTS_NAMESPACE = "default"
# connect, read (seconds): shorter than the other calls' (eks_access.REQUEST_TIMEOUT): an event that takes longer
# is not worth the step's time
EVENT_TIMEOUT = (3, 5)
QUIET_AFTER_FAILURE = 60.0  # seconds without events after a write the API server failed
ENDING_NAMESPACE_TTL = 300.0  # seconds a namespace found being deleted is not written to


class KubeEvents:
    def __init__(
        self,
        api_client: Callable[[], ApiClient],
        *,
        owner: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api_client = api_client
        self._owner = owner  # the reporting instance: which nodecycle stack decided
        self._clock = clock
        self._quiet_until = 0.0  # (clock) no event is tried before then: the API server failed one
        self._ending: dict[str, float] = {}  # namespace being deleted -> (clock) until when it is not tried

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
        moment = self._clock()
        if moment < self._quiet_until or moment < self._ending.get(namespace, 0.0):
            log.debug(
                "event %s on %s/%s not written: the API server failed or refused one", reason, namespace, name
            )
            return
        try:
            with kube_errors(f"writing event {reason} on {namespace}/{name}"):
                finished(
                    CoreV1(self._api_client()).create_namespaced_event(
                        namespace, event, _preload_content=False, _request_timeout=EVENT_TIMEOUT
                    )
                )
        except OutOfTime as error:  # (not asked: the run had no time left; the API server is not to blame)
            log.debug("event %s on %s/%s not written: %s", reason, namespace, name, error)
        except TransientError as error:  # (the API server's failure: no answer in time, a 5xx, a 429)
            log.debug("could not write event %s on %s/%s: %s", reason, namespace, name, error)
            self._quiet_until = self._clock() + QUIET_AFTER_FAILURE
        except Exception as error:  # best effort by design: see the module docstring
            log.debug("could not write event %s on %s/%s: %s", reason, namespace, name, error)
            if isinstance(error, ApiException) and namespace_terminating(error):
                self._ending[namespace] = self._clock() + ENDING_NAMESPACE_TTL
