"""The verbs of the Kubernetes API (get, list, create, update, patch, delete) with the checks and defaults a real
API server applies: names, namespaces, resourceVersion preconditions, status subresources, generation."""

from __future__ import annotations

import base64
import binascii
import builtins
import dataclasses
import json
import re
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nodecycle_sandbox.kube import errors, finalizers, namespaces, node_lifecycle, rbac
from nodecycle_sandbox.kube.builders import random_suffix
from nodecycle_sandbox.kube.events import event_problem
from nodecycle_sandbox.kube.history import API
from nodecycle_sandbox.kube.kubelet import Kubelet
from nodecycle_sandbox.kube.meta import (
    DEFAULT_GRACE_SECONDS,
    SHUTDOWN_ANNOTATION,
    START_ANNOTATION,
    JsonObj,
    annotations_of,
    json_copy,
    labels_of,
    rfc3339,
)
from nodecycle_sandbox.kube.object_meta import metadata_problem
from nodecycle_sandbox.kube.patching import PatchError, apply_patch, refusal
from nodecycle_sandbox.kube.read_versions import LATEST, ReadVersion
from nodecycle_sandbox.kube.resources import (
    CONFIGMAPS,
    DAEMONSETS,
    DEPLOYMENTS,
    EVENTS,
    NAMESPACES,
    NODES,
    PDBS,
    PODS,
    RBAC_TYPES,
    REPLICASETS,
    ResourceType,
)
from nodecycle_sandbox.kube.selectors import (
    from_label_selector_object,
    parse_field_selector,
    parse_label_selector,
)
from nodecycle_sandbox.kube.store import Store
from nodecycle_sandbox.kube.watch_cache import WatchCache

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_PERCENT = re.compile(r"^[0-9]+%$")
_SECONDS = re.compile(r"^[0-9]+(\.[0-9]+)?$")
_CONFIG_KEY = re.compile(r"[-._a-zA-Z0-9]+")
_WORKLOADS = (DEPLOYMENTS, REPLICASETS, DAEMONSETS)
# Metadata the server owns: a client's copy of these is ignored on update.
_SERVER_METADATA = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "managedFields",  # kept by the server from what each manager wrote (managed_fields.py)
)


@dataclass(frozen=True)
class ListOptions:
    label_selector: str = ""
    field_selector: str = ""
    limit: int = 0
    continue_token: str = ""
    version: ReadVersion = LATEST


# The validating admission webhooks' judgment of the request being served (`Admission.review` of its attributes),
# asked where kube-apiserver asks it: after the object is read (404) and the write's own checks (400, 409,
# 422), before anything is written. None for the sandbox's own writes, which no webhook sees.
Admit = Callable[[], None] | None


def check_preconditions(rt: ResourceType, obj: JsonObj, options: JsonObj) -> None:
    """DeleteOptions.preconditions: a uid or resourceVersion that no longer matches is a 409."""
    pre = options.get("preconditions") or {}
    meta = obj["metadata"]
    for field, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
        if pre.get(field) and pre[field] != meta.get(field):
            raise errors.conflict(
                rt,
                meta["name"],
                f"Precondition failed: {label} in precondition: {pre[field]}, {label} in object meta: {meta.get(field)}",
            )


class Api:
    def __init__(self, store: Store, kubelet: Kubelet) -> None:
        self._store = store
        self._kubelet = kubelet
        # How long the namespace controller takes to get to a namespace deleted (see namespaces.py)
        self.namespace_lag = 0.0
        # What resourceVersion=0 reads see of a resource whose watch cache a test holds behind (see watch_cache.py)
        self.watch_cache = WatchCache()
        # The objects each paged list read, by resource, namespace and revision, for its continued pages
        self._paged: OrderedDict[tuple[ResourceType, str | None, int], list[JsonObj]] = OrderedDict()

    # --- reads ------------------------------------------------------------------------------------

    def get(self, rt: ResourceType, namespace: str, name: str, version: ReadVersion = LATEST) -> JsonObj:
        with self._store.lock:
            version.check(self._store.revision)
            obj = self._store.get(rt, namespace, name)
        cached = (
            self.watch_cache.state(rt, namespace if rt.namespaced else "") if version.from_cache() else None
        )
        if cached is not None:
            version.check_cached(cached[0])
            obj = next((o for o in cached[1] if o["metadata"]["name"] == name), None)
        if obj is None:
            raise errors.not_found(rt, name)
        return obj

    def list(self, rt: ResourceType, namespace: str | None, options: ListOptions) -> JsonObj:
        labels = parse_label_selector(options.label_selector)
        fields = parse_field_selector(options.field_selector, rt)
        with self._store.lock:
            options.version.check(self._store.revision, continuing=bool(options.continue_token))
            items = self._store.items(rt, namespace)
            revision, compacted = self._store.revision, self._store.compacted
        if options.version.from_cache(limit=options.limit):
            options = dataclasses.replace(options, limit=0)  # the watch cache sends everything at once
            cached = self.watch_cache.state(rt, namespace)
            if cached is not None:  # held behind: the state it lags at
                options.version.check_cached(cached[0])
                revision, items = cached
        start_after: tuple[str, str] | None = None
        if options.continue_token:
            revision, start_after = _decode_continue(options.continue_token)
            if revision < compacted:
                raise errors.expired_continue()
            # (the objects as they were at the first page's revision, as etcd reads a continued list: none
            # created, changed or deleted since shows; the latest state only for a list no longer held)
            with self._store.lock:
                items = self._paged.get((rt, namespace, revision), items)
        remaining = [o for o in items if start_after is None or _key(o) > start_after]
        selected = [o for o in remaining if labels.matches(labels_of(o)) and fields.matches(o)]
        meta: JsonObj = {"resourceVersion": str(revision)}
        if 0 < options.limit <= len(selected):
            selected = selected[: options.limit]
            # Continued while any object follows the page, selected or not, as etcd's store pages a list (its
            # hasMore: another key past a full page): the next page may come back empty
            following = sum(1 for o in remaining if _key(o) > _key(selected[-1]))
            if following:
                meta["continue"] = _encode_continue(revision, _key(selected[-1]))
                self._hold_for_paging(rt, namespace, revision, items)
                if not options.label_selector and not options.field_selector:
                    meta["remainingItemCount"] = following
        return {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta, "items": selected}

    def _hold_for_paging(
        self, rt: ResourceType, namespace: str | None, revision: int, items: builtins.list[JsonObj]
    ) -> None:
        """Keep what a paged list read at ``revision`` for its continued pages (stored objects are never mutated:
        the references are a snapshot), the latest PAGED_LISTS lists."""
        with self._store.lock:
            self._paged[(rt, namespace, revision)] = items
            self._paged.move_to_end((rt, namespace, revision))
            while len(self._paged) > PAGED_LISTS:
                self._paged.popitem(last=False)

    # --- writes -----------------------------------------------------------------------------------

    def create(
        self, rt: ResourceType, namespace: str, body: Any, *, source: str = API, admit: Admit = None
    ) -> JsonObj:
        obj = _decoded(rt, body)
        meta = obj["metadata"]
        with self._store.lock:
            if rt.namespaced:
                if meta.get("namespace", namespace) != namespace:
                    raise errors.bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request"
                    )
                if self._store.get(NAMESPACES, "", namespace) is None:
                    raise errors.not_found(NAMESPACES, namespace)
                meta["namespace"] = namespace
            else:
                meta.pop("namespace", None)
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = self._generated_name(rt, namespace, str(meta["generateName"]))
            name = str(meta.get("name") or "")
            _validate_name(rt, name)
            if meta.get("resourceVersion"):
                raise errors.bad_request("resourceVersion should not be set on objects to be created")
            for key in ("deletionTimestamp", "deletionGracePeriodSeconds"):
                meta.pop(key, None)
            meta["uid"] = self._store.new_uid()
            meta["creationTimestamp"] = rfc3339(time.time())
            if rt.tracks_generation:
                meta["generation"] = 1
            else:
                meta.pop("generation", None)
            if rt is PODS:
                # Whatever status a client sends, a new pod starts Pending: status is the kubelet's to write.
                obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
            _default_and_validate(rt, obj)
            if rt is NODES:
                node_lifecycle.registered_not_ready(obj)
            if admit is not None:
                admit()
            # (the store's create, after the webhooks: an existing name is a 409 only then)
            if self._store.get(rt, namespace, name) is not None:
                raise errors.already_exists(rt, name)
            return self._store.write(rt, obj, verb="create", source=source)

    def update(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        body: Any,
        *,
        subresource: str = "",
        source: str = API,
        admit: Admit = None,
    ) -> JsonObj:
        obj = _decoded(rt, body)
        with self._store.lock:
            current = self.get(rt, namespace, name)
            # The object's uid, when it names one, is the replace's precondition (DefaultUpdatedObjectInfo
            # .Preconditions), checked before its resourceVersion: a copy of an object deleted and created again
            # under its name is refused even when sent without its version (an unconditional replace)
            check_preconditions(rt, current, {"preconditions": {"uid": obj["metadata"].get("uid")}})
            return self._replace(rt, current, obj, subresource, "update", source, admit)

    def patch(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        content_type: str,
        patch: Any,
        *,
        subresource: str = "",
        source: str = API,
        admit: Admit = None,
    ) -> JsonObj:
        with self._store.lock:
            current = self.get(rt, namespace, name)
            try:
                patched = apply_patch(content_type, current, patch)
            except PatchError as exc:
                raise refusal(content_type, exc) from None
            # A resourceVersion left in (or put into) the patched object is a precondition, as in kube-apiserver.
            return self._replace(rt, current, _decoded(rt, patched), subresource, "patch", source, admit)

    def delete(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        options: JsonObj,
        *,
        source: str = API,
        admit: Admit = None,
    ) -> JsonObj:
        with self._store.lock:
            current = self.get(rt, namespace, name)
            check_preconditions(rt, current, options)
            if admit is not None:
                admit()
            if rt is PODS:
                # Pods answer with the object (still there, terminating, when the deletion is graceful);
                # every other kind answers with a Status.
                grace = options.get("gracePeriodSeconds")
                return self._kubelet.delete_pod(
                    current,
                    None if grace is None else int(grace),
                    verb="delete",
                    resource="pods",
                    source=source,
                )
            if finalizers.pending(current):
                # Marked, not removed: it goes when an update removes its last finalizer.
                return self._store.write(rt, finalizers.marked(current, 0), verb="delete", source=source)
            if rt is NAMESPACES:
                # Terminating until the namespace controller has deleted what it holds (see namespaces.py): at
                # once when nothing in it takes time to go, unless the controller lags
                namespaces.mark(self._store, current, source=source)
                if self.namespace_lag <= 0:
                    namespaces.empty(self._store, self._kubelet, name)
            else:
                self._store.remove(rt, namespace, name, verb="delete", source=source)
        details: JsonObj = {"name": name, "kind": rt.plural, "uid": current["metadata"]["uid"]}
        if rt.group:
            details["group"] = rt.group
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}

    # --- internals --------------------------------------------------------------------------------

    def _generated_name(self, rt: ResourceType, namespace: str, prefix: str) -> str:
        # k8s.io/apiserver pkg/storage/names/generate.go: a prefix is cut to 58 characters, so that the name
        # with its five random ones fits 63 (an Event's for a node of a long name, say)
        prefix = prefix[:MAX_GENERATED_NAME_PREFIX]
        while True:
            name = prefix + random_suffix()
            if self._store.get(rt, namespace, name) is None:
                return name

    def _replace(
        self,
        rt: ResourceType,
        current: JsonObj,
        new: JsonObj,
        subresource: str,
        verb: str,
        source: str,
        admit: Admit = None,
    ) -> JsonObj:
        cur_meta, meta = current["metadata"], new["metadata"]
        name = cur_meta["name"]
        if meta.get("name", name) != name:
            raise errors.bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({name})"
            )
        if rt.namespaced and meta.get("namespace", cur_meta["namespace"]) != cur_meta["namespace"]:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        wanted_version = meta.get("resourceVersion")
        if wanted_version and wanted_version != cur_meta["resourceVersion"]:
            raise errors.stale_resource_version(rt, name)
        if subresource != "status" and meta.get("uid") and meta["uid"] != cur_meta["uid"]:
            # (a patch that sets another: ValidateObjectMetaUpdate; a replace's was its precondition)
            raise errors.invalid(
                rt, name, "metadata.uid", f'Invalid value: "{meta["uid"]}": field is immutable'
            )
        if subresource == "status":
            result = json_copy(current)
            result["status"] = new.get("status") or {}
        else:
            result = new
            meta["name"] = name
            if rt.namespaced:
                meta["namespace"] = cur_meta["namespace"]
            for key in _SERVER_METADATA:
                if key in cur_meta:
                    meta[key] = cur_meta[key]
                else:
                    meta.pop(key, None)
            if rt.has_status:
                if "status" in current:
                    result["status"] = json_copy(current["status"])
                else:
                    result.pop("status", None)
            _default_and_validate(rt, result)
            _validate_update(rt, current, result)
            finalizers.check_update(rt, current, result)
            if rt.tracks_generation and _spec_of(result) != _spec_of(current):
                meta["generation"] = int(cur_meta.get("generation", 0)) + 1
        result["metadata"]["resourceVersion"] = cur_meta["resourceVersion"]
        if admit is not None:
            admit()  # a write that changes nothing is judged too: the webhooks are asked before it is compared
        if result == current:
            return current  # a write that changes nothing keeps its resourceVersion, as in kube-apiserver
        resource = f"{rt.plural}/{subresource}" if subresource else rt.plural
        written = self._store.write(rt, result, verb=verb, source=source, resource=resource)
        if finalizers.complete(rt, written):
            # The last finalizer of an object being deleted is gone: so is the object.
            self._store.remove(
                rt, cur_meta.get("namespace", ""), name, verb=verb, source=source, resource=resource
            )
        return written


def _key(obj: JsonObj) -> tuple[str, str]:
    meta = obj["metadata"]
    return meta.get("namespace", ""), meta["name"]


def _encode_continue(revision: int, key: tuple[str, str]) -> str:
    raw = json.dumps({"rv": revision, "start": list(key)}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        namespace, name = data["start"]
        return int(data["rv"]), (str(namespace), str(name))
    except (binascii.Error, ValueError, KeyError, TypeError):
        raise errors.bad_request(f"continue key is not valid: {token!r}") from None


def _decoded(rt: ResourceType, body: Any) -> JsonObj:
    """A private copy of a request body, checked to be an object of ``rt``."""
    if not isinstance(body, dict):
        raise errors.bad_request(f"the body of the request must be a {rt.kind} object")
    for field, expected in (("apiVersion", rt.api_version), ("kind", rt.kind)):
        if body.get(field, expected) != expected:
            raise errors.bad_request(
                f"the {field} in the data ({body.get(field)}) does not match the expected {expected}"
            )
    obj: JsonObj = json_copy(body)
    obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
    if not isinstance(obj.get("metadata"), dict):
        obj["metadata"] = {}
    for key in ("labels", "annotations", "ownerReferences", "finalizers"):
        if not obj["metadata"].get(key, True):
            del obj["metadata"][key]  # empty collections are omitted, as Go's omitempty does on a real server
    return obj


def _spec_of(obj: JsonObj) -> JsonObj:
    """Everything a generation counts: the object without its metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def _validate_name(rt: ResourceType, name: str) -> None:
    if not name:
        raise errors.invalid(rt, name, "metadata.name", "Required value: name or generateName is required")
    pattern, limit = (_LABEL, 63) if rt is NAMESPACES else (_SUBDOMAIN, 253)
    if len(name) > limit or not pattern.match(name):
        raise errors.invalid(rt, name, "metadata.name", f"Invalid value: {name!r}: a lowercase RFC 1123 name")


MAX_GENERATED_NAME_PREFIX = 63 - 5
# How many paged lists the server keeps the snapshot of for their continued pages (a continued list whose snapshot
# went is read from the latest state; etcd keeps every revision until its compaction: see Store.compact)
PAGED_LISTS = 64
# The API server refuses a ConfigMap whose data and binaryData together exceed this (as it does a Secret).
MAX_CONFIGMAP_BYTES = 1024 * 1024


def _default_and_validate(rt: ResourceType, obj: JsonObj) -> None:
    name = obj["metadata"]["name"]
    problem = metadata_problem(obj["metadata"])
    if problem is not None:
        raise errors.invalid(rt, name, *problem)
    if rt is CONFIGMAPS:
        _validate_config_map(rt, name, obj)
        return
    if rt is EVENTS:
        problem = event_problem(obj)
        if problem is not None:
            raise errors.invalid(rt, name, *problem)
        return
    if rt in RBAC_TYPES:
        why = rbac.invalid(obj)
        if why is not None:
            field, _, message = why.partition(": ")
            raise errors.invalid(rt, name, field, message)
        return
    if rt is NAMESPACES:
        obj.setdefault("spec", {"finalizers": ["kubernetes"]})
        obj.setdefault("status", {"phase": "Active"})
        return
    if rt is not PODS and rt is not PDBS and rt not in _WORKLOADS:
        return
    spec = obj.setdefault("spec", {})
    if not isinstance(spec, dict):
        raise errors.invalid(rt, name, "spec", "Invalid value: must be an object")
    if rt is PODS:
        _validate_pod_spec(rt, name, spec, "spec")
        _validate_sandbox_annotations(rt, name, obj)
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS)
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("dnsPolicy", "ClusterFirst")
    elif rt in _WORKLOADS:
        if rt is not DAEMONSETS:
            spec.setdefault("replicas", 1)
            if not isinstance(spec["replicas"], int) or spec["replicas"] < 0:
                raise errors.invalid(
                    rt, name, "spec.replicas", "Invalid value: must be a non-negative integer"
                )
        selector = spec.get("selector")
        if not isinstance(selector, dict) or not (
            selector.get("matchLabels") or selector.get("matchExpressions")
        ):
            raise errors.invalid(rt, name, "spec.selector", "Required value")
        template = spec.get("template") or {}
        try:
            matches = from_label_selector_object(selector).matches(
                (template.get("metadata") or {}).get("labels") or {}
            )
        except ValueError as exc:
            raise errors.invalid(rt, name, "spec.selector", f"Invalid value: {exc}") from None
        if not matches:
            raise errors.invalid(
                rt,
                name,
                "spec.template.metadata.labels",
                "Invalid value: `selector` does not match template `labels`",
            )
        _validate_pod_spec(rt, name, template.get("spec"), "spec.template.spec")
        _validate_sandbox_annotations(rt, name, template)
    else:
        present = [k for k in ("minAvailable", "maxUnavailable") if spec.get(k) is not None]
        if len(present) > 1:
            raise errors.invalid(
                rt, name, "spec", "Invalid value: minAvailable and maxUnavailable cannot be both set"
            )
        for key in present:
            value = spec[key]
            if not (
                (isinstance(value, int) and value >= 0) or (isinstance(value, str) and _PERCENT.match(value))
            ):
                raise errors.invalid(
                    rt, name, f"spec.{key}", f"Invalid value: {value!r}: an integer or a percentage"
                )
        try:
            from_label_selector_object(spec.get("selector"))
        except ValueError as exc:
            raise errors.invalid(rt, name, "spec.selector", f"Invalid value: {exc}") from None


def _validate_config_map(rt: ResourceType, name: str, obj: JsonObj) -> None:
    """As ``ValidateConfigMap`` (kubernetes pkg/apis/core/validation): keys of ``[-._a-zA-Z0-9]``, and the
    values' bytes (UTF-8; binaryData's decoded), not their keys, 1 MiB at most in all."""
    data, binary = obj.get("data") or {}, obj.get("binaryData") or {}
    for field, key in [*(("data", k) for k in data), *(("binaryData", k) for k in binary)]:
        if len(key) > 253 or not _CONFIG_KEY.fullmatch(key) or key in (".", "..") or key.startswith(".."):
            raise errors.invalid(
                rt,
                name,
                f"{field}[{key}]",
                f"Invalid value: {key!r}: a valid config key must consist of alphanumeric characters, '-', '_' "
                "or '.'",
            )
    size = sum(len(str(value).encode()) for value in data.values())
    size += sum(len(base64.b64decode(value)) for value in binary.values())
    if size > MAX_CONFIGMAP_BYTES:
        raise errors.invalid(rt, name, "[]", f"Too long: must have at most {MAX_CONFIGMAP_BYTES} bytes")


def _validate_sandbox_annotations(rt: ResourceType, name: str, pod: JsonObj) -> None:
    """The sandbox's timing annotations must be seconds: a typo would otherwise go unnoticed in a test."""
    for key in (SHUTDOWN_ANNOTATION, START_ANNOTATION):
        raw = annotations_of(pod).get(key)
        if raw is not None and not _SECONDS.match(str(raw)):
            raise errors.invalid(
                rt,
                name,
                f"metadata.annotations[{key}]",
                f"Invalid value: {raw!r}: a non-negative number of seconds",
            )


def _validate_pod_spec(rt: ResourceType, name: str, spec: Any, path: str) -> None:
    containers = spec.get("containers") if isinstance(spec, dict) else None
    if not isinstance(containers, list) or not containers:
        raise errors.invalid(rt, name, f"{path}.containers", "Required value")


def _immutable_pod_spec(spec: JsonObj) -> JsonObj:
    """The pod spec without the fields Kubernetes lets an update change."""
    frozen = {
        k: v
        for k, v in spec.items()
        if k not in ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds")
    }
    for key in ("containers", "initContainers"):
        if key in frozen:
            frozen[key] = [{k: v for k, v in c.items() if k != "image"} for c in frozen[key]]
    return frozen


def _validate_update(rt: ResourceType, current: JsonObj, new: JsonObj) -> None:
    name = current["metadata"]["name"]
    if rt is CONFIGMAPS and current.get("immutable") is True:
        # ValidateConfigMapUpdate: an immutable ConfigMap keeps its data (deleted and created again to change it)
        for field, changed in (
            ("immutable", new.get("immutable") is not True),
            ("data", (new.get("data") or {}) != (current.get("data") or {})),
            ("binaryData", (new.get("binaryData") or {}) != (current.get("binaryData") or {})),
        ):
            if changed:
                raise errors.invalid(
                    rt,
                    name,
                    field,
                    "Forbidden: field is immutable when `immutable` is set",
                    "FieldValueForbidden",
                )
    old_spec, new_spec = current.get("spec") or {}, new.get("spec") or {}
    if rt is PODS and _immutable_pod_spec(old_spec) != _immutable_pod_spec(new_spec):
        raise errors.invalid(
            rt,
            name,
            "spec",
            "Forbidden: pod updates may not change fields other than `spec.containers[*].image`, "
            "`spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to "
            "existing tolerations) or `spec.terminationGracePeriodSeconds`",
        )
    if rt in _WORKLOADS and old_spec.get("selector") != new_spec.get("selector"):
        raise errors.invalid(rt, name, "spec.selector", "Invalid value: field is immutable")
