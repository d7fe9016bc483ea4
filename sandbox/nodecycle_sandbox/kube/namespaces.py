"""A namespace's end, as kube-apiserver and the namespace controller bring it about.

Deleting a namespace marks it (``deletionTimestamp``, ``status.phase: Terminating``); the namespace controller
then deletes everything in it (pods gracefully, each with its own grace, so they stay Terminating while their
kubelet stops them) and removes the namespace once nothing is left. Meanwhile kube-apiserver's
NamespaceLifecycle admission (k8s.io/apiserver ``pkg/admission/plugin/namespace/lifecycle``) refuses every
create in it, subresources included (an eviction is a create of ``pods/eviction``, an Event a create of
``events``), with 403 Forbidden and the cause ``NamespaceTerminating``; updates, patches, deletes and reads pass.

The namespace controller reacts within moments; ``lag`` seconds (the server's ``namespace_controller_lag_seconds``)
hold it back, as a busy or failing controller would: the namespace is Terminating, its pods not yet deleted.
"""

from __future__ import annotations

import time
from typing import Any

from nodecycle_sandbox.kube import errors, finalizers
from nodecycle_sandbox.kube.history import SANDBOX
from nodecycle_sandbox.kube.kubelet import Kubelet
from nodecycle_sandbox.kube.meta import JsonObj, is_terminating, json_copy, name_of, parse_rfc3339, rfc3339
from nodecycle_sandbox.kube.rbac import Attributes
from nodecycle_sandbox.kube.resources import ALL, NAMESPACES, PODS
from nodecycle_sandbox.kube.store import Store

TERMINATING = "Terminating"
# core/v1 NamespaceTerminatingCause: the cause kube-apiserver names in a create refused in a namespace being deleted
TERMINATING_CAUSE = "NamespaceTerminating"


def terminating(store: Store, namespace: str) -> bool:
    """Whether ``namespace`` is being deleted (cluster-scoped objects, ``""``, never are)."""
    found = store.get(NAMESPACES, "", namespace) if namespace else None
    return found is not None and is_terminating(found)


def refuse_creates(store: Store, attributes: Attributes, body: Any) -> None:
    """NamespaceLifecycle's answer to a request: 403 for a create in a namespace being deleted, else nothing.
    The message and details name the resource without its subresource (``pods``, for an eviction) and the
    object by its name, else its ``generateName``, else ``Unknown`` (admission.NewForbidden)."""
    if attributes.verb != "create" or not terminating(store, attributes.namespace):
        return
    meta = (body.get("metadata") if isinstance(body, dict) else None) or {}
    name = attributes.name or str(meta.get("name") or meta.get("generateName") or "Unknown")
    resource = (
        f"{attributes.resource}.{attributes.api_group}" if attributes.api_group else attributes.resource
    )
    namespace = attributes.namespace
    details: dict[str, Any] = {"name": name, "kind": attributes.resource}
    if attributes.api_group:
        details["group"] = attributes.api_group
    details["causes"] = [
        {
            "reason": TERMINATING_CAUSE,
            "message": f"namespace {namespace} is being terminated",
            "field": "metadata.namespace",
        }
    ]
    raise errors.ApiError(
        403,
        "Forbidden",
        f'{resource} "{name}" is forbidden: unable to create new content in namespace {namespace} because it '
        "is being terminated",
        details,
    )


def mark(store: Store, namespace: JsonObj, *, source: str) -> JsonObj:
    """The namespace, deleted: Terminating from now on (a namespace already being deleted stays as it is)."""
    if is_terminating(namespace):
        return namespace
    marked = json_copy(namespace)
    marked["metadata"]["deletionTimestamp"] = rfc3339(time.time())
    marked["metadata"]["deletionGracePeriodSeconds"] = 0
    marked.setdefault("status", {})["phase"] = TERMINATING
    return store.write(NAMESPACES, marked, verb="delete", source=source)


def due(namespace: JsonObj, lag: float) -> float:
    """When (``time.time()``) the namespace controller gets to a namespace being deleted."""
    return parse_rfc3339(str(namespace["metadata"]["deletionTimestamp"])) + lag


def empty(store: Store, kubelet: Kubelet, namespace: str) -> bool:
    """One pass of the namespace controller over a namespace being deleted: its pods deleted (each with its own
    grace: they go once their kubelet stopped them), everything else removed (or, with finalizers, marked), and
    the namespace removed once nothing is left. Returns whether anything changed."""
    changed = False
    for rt in ALL:
        if not rt.namespaced:
            continue
        for obj in store.items(rt, namespace):
            if is_terminating(obj):
                continue  # on its way out: its kubelet, or whoever holds its finalizers, ends it
            changed = True
            if rt is PODS:
                kubelet.delete_pod(obj, None, verb="delete", resource="pods", source=SANDBOX)
            elif finalizers.pending(obj):
                store.write(rt, finalizers.marked(obj, 0), verb="delete", source=SANDBOX)
            else:
                store.remove(rt, namespace, name_of(obj), verb="delete", source=SANDBOX)
    if not any(store.items(rt, namespace) for rt in ALL if rt.namespaced):
        store.remove(NAMESPACES, "", namespace, verb="delete", source=SANDBOX)
        return True
    return changed


def remove_at_once(store: Store, namespace: str) -> None:
    """The namespace and everything in it gone now, finalizers and graces aside (a test's clean-up)."""
    for rt in ALL:
        if rt.namespaced:
            for obj in store.items(rt, namespace):
                store.remove(rt, namespace, name_of(obj), verb="delete", source=SANDBOX)
    store.remove(NAMESPACES, "", namespace, verb="delete", source=SANDBOX)
