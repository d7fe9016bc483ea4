"""From an HTTP request to an API verb: authentication, URL layout, content types, query parameters."""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from nodecycle_sandbox.kube import (
    discovery,
    errors,
    history,
    managed_fields,
    namespaces,
    representation,
    reviews,
    tables,
)
from nodecycle_sandbox.kube.access import Access
from nodecycle_sandbox.kube.admission import Admission
from nodecycle_sandbox.kube.api import Api, ListOptions
from nodecycle_sandbox.kube.auth import TokenRejected, bearer_token
from nodecycle_sandbox.kube.counters import Counters
from nodecycle_sandbox.kube.eviction import evict
from nodecycle_sandbox.kube.faults import Refusal
from nodecycle_sandbox.kube.history import API
from nodecycle_sandbox.kube.kubelet import Kubelet
from nodecycle_sandbox.kube.meta import JsonObj
from nodecycle_sandbox.kube.patching import JSON_PATCH, PATCH_TYPES, decode_json_patch
from nodecycle_sandbox.kube.rbac import Attributes, User
from nodecycle_sandbox.kube.read_versions import ReadVersion
from nodecycle_sandbox.kube.resources import PODS, ResourceType, by_path
from nodecycle_sandbox.kube.store import Store

logger = logging.getLogger(__name__)

_HEALTH_PATHS = frozenset({"/healthz", "/livez", "/readyz"})


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: Mapping[str, str]  # the last value of each parameter
    headers: Mapping[str, str]  # lower-case names
    body: bytes


@dataclass(frozen=True)
class Response:
    status: int
    body: JsonObj | str  # a str is sent as text/plain
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Target:
    rt: ResourceType
    namespace: str | None  # None: every namespace (lists of namespaced resources); "": cluster-scoped
    name: str
    subresource: str


class Router:
    def __init__(
        self,
        *,
        store: Store,
        api: Api,
        kubelet: Kubelet,
        counters: Counters,
        check_token: Callable[[str], str],
        server_address: Callable[[], str],
        access: Access,
        admission: Admission,
    ) -> None:
        self._store = store
        self._api = api
        self._kubelet = kubelet
        self._counters = counters
        self._check_token = check_token
        self._server_address = server_address
        self._access = access
        self._admission = admission

    def handle(self, request: Request, refuse: Refusal | None = None) -> Response:
        """``refuse``: an injected refusal (``faults.py``), answered once the request is authorized."""
        self._counters.begin(received=len(request.body))
        try:
            user = self._authenticate(request)
            history.requested_as(user.name)
            return self._route(request, user, refuse)
        except errors.ApiError as exc:
            return Response(exc.code, exc.status(), exc.headers())
        finally:
            history.requested_as("")  # (the thread's next write, if not a request's, is nobody's)

    def _authenticate(self, request: Request) -> User:
        token = bearer_token(request.headers.get("authorization"))
        if token is None:
            raise errors.unauthorized()
        try:
            access_key = self._check_token(token)
        except TokenRejected as exc:
            logger.debug("rejected bearer token: %s", exc)
            raise errors.unauthorized() from None
        return self._access.authenticate(access_key, request.headers)

    def _route(self, request: Request, user: User, refuse: Refusal | None) -> Response:
        path = request.path.rstrip("/") or "/"
        segments = [unquote(s) for s in path.split("/") if s]
        if request.method == "POST" and reviews.is_review_path(segments):
            self._access.authorize(user, Attributes("create", reviews.GROUP, segments[3]))
            body = (
                reviews.decode_protobuf(request.body)
                if _content_type(request) == reviews.PROTOBUF
                else _json_body(request)
            )
            return Response(201, reviews.review(self._access.rbac, user, segments[3], body))
        if request.method == "GET" and _is_non_resource(path, segments):
            self._access.authorize(user, Attributes("get", path=path))
            self._counters.add("get", path)
            return Response(200, self._non_resource(path, segments))
        target = _target(segments)
        if target is None:
            raise errors.path_not_found(path)
        attributes = _attributes(request, target)
        self._access.authorize(user, attributes)
        if refuse is not None:
            raise refuse(user, attributes)
        # NamespaceLifecycle, the first of kube-apiserver's admission plugins: before the object is decoded into
        # its kind and validated, before the webhooks
        if attributes.verb == "create":
            try:
                namespaces.refuse_creates(self._store, attributes, _peek(request.body))
            except errors.ApiError:
                # (a request admission answers is counted as one served: it is one the server had to answer)
                resource = "/".join(part for part in (target.rt.plural, target.subresource) if part)
                self._counters.add("create", resource)
                raise
        managed_fields.requested_by(
            managed_fields.request_manager(request.query, request.headers.get("user-agent", ""))
        )
        # The webhooks are asked by the write itself, where kube-apiserver asks them (``Admit`` in api.py); those
        # that do not answer are waited for first, outside the store's lock
        self._admission.wait(attributes)
        return self._serve(request, target, functools.partial(self._admission.review, attributes))

    def _non_resource(self, path: str, segments: list[str]) -> JsonObj | str:
        if path in _HEALTH_PATHS:
            return "ok"
        if path == "/version":
            return discovery.version()
        if segments == ["api"]:
            return discovery.api_versions(self._server_address())
        if segments == ["apis"]:
            listed = discovery.api_group_list()
            return {**listed, "groups": [*listed["groups"], reviews.group_entry()]}
        review_discovery = reviews.discovery(segments)
        if review_discovery is not None:
            return review_discovery
        if segments == ["openapi", "v3"]:
            return discovery.openapi_v3_index()
        if segments[:2] == ["openapi", "v3"]:
            found = discovery.openapi_v3_group_version("/".join(segments[2:]))
            if found is None:
                raise errors.path_not_found(path)
            return found
        if segments[0] == "api":
            found = discovery.api_resource_list("", segments[1])
        elif len(segments) == 2:
            found = discovery.api_group(segments[1])
        else:
            found = discovery.api_resource_list(segments[1], segments[2])
        if found is None:
            raise errors.path_not_found(path)
        return found

    def _serve(self, request: Request, target: Target, admit: Callable[[], None]) -> Response:
        rt, name, sub = target.rt, target.name, target.subresource
        namespace = target.namespace or ""
        resource = f"{rt.plural}/{sub}" if sub else rt.plural
        method = request.method
        if method != "GET" and request.query.get("dryRun"):
            raise errors.bad_request("dryRun is not supported by the nodecycle sandbox")
        if sub == "eviction" and method != "POST":
            raise errors.method_not_allowed(f"{method} is not supported on {request.path}")
        if method == "GET" and not name:
            self._counters.add("list", resource)
            if request.query.get("watch") in ("1", "true"):
                raise errors.method_not_allowed("watch is not supported by the nodecycle sandbox")
            listed = self._api.list(rt, target.namespace, _list_options(request.query))
            return self._read_response(request, rt, listed, listed["items"], listed["metadata"], is_list=True)
        if method == "GET":
            self._counters.add("get", resource)
            obj = self._api.get(rt, namespace, name, _read_version(request.query))
            version = {"resourceVersion": obj["metadata"]["resourceVersion"]}
            return self._read_response(request, rt, obj, [obj], version, is_list=False)
        if method == "POST" and not name and target.namespace is not None:
            self._counters.add("create", resource)
            return Response(
                201, self._api.create(rt, namespace, _json_body(request), source=API, admit=admit)
            )
        if method == "POST" and sub == "eviction":
            self._counters.add("create", resource)
            return Response(
                201,
                evict(
                    self._store, self._kubelet, namespace, name, _json_body(request), source=API, admit=admit
                ),
            )
        if method == "PUT" and name:
            self._counters.add("update", resource)
            updated = self._api.update(
                rt, namespace, name, _json_body(request), subresource=sub, source=API, admit=admit
            )
            return Response(200, updated)
        if method == "PATCH" and name:
            self._counters.add("patch", resource)
            content_type = _content_type(request)
            if content_type not in PATCH_TYPES:
                raise errors.unsupported_media_type(content_type)
            patched = self._api.patch(
                rt,
                namespace,
                name,
                content_type,
                # (a JSON patch keeps each test's value as sent: kube-apiserver compares it as raw text)
                _decode(request.body, decode_json_patch if content_type == JSON_PATCH else json.loads),
                subresource=sub,
                source=API,
                admit=admit,
            )
            return Response(200, patched)
        if method == "DELETE" and name and not sub:
            self._counters.add("delete", resource)
            deleted = self._api.delete(rt, namespace, name, _delete_options(request), source=API, admit=admit)
            return Response(200, deleted)
        raise errors.method_not_allowed(f"{method} is not supported on {request.path}")

    @staticmethod
    def _read_response(
        request: Request,
        rt: ResourceType,
        body: JsonObj,
        items: list[JsonObj],
        table_meta: JsonObj,
        *,
        is_list: bool,
    ) -> Response:
        """The objects, a Table (kubectl) or their metadata only, as the Accept header asks."""
        shape, version = representation.negotiate(request.headers.get("accept", ""), is_list=is_list)
        if shape is representation.Representation.TABLE:
            include = request.query.get("includeObject", "Metadata")
            return Response(200, tables.table(rt, items, table_meta, include))
        if shape is representation.Representation.METADATA:
            shaped = representation.partial_list if is_list else representation.partial_object
            return Response(200, shaped(body, version))
        return Response(200, body)

    def sent(self, data: bytes) -> None:
        """The response body the transport wrote for the request being served on this thread."""
        self._counters.add_bytes(sent=len(data))


def _is_non_resource(path: str, segments: list[str]) -> bool:
    """Health, version, discovery and OpenAPI documents (``/api/v1`` but not ``/api/v1/nodes``)."""
    if path in _HEALTH_PATHS or path == "/version" or segments[:2] == ["openapi", "v3"]:
        return True
    if segments in (["api"], ["apis"]):
        return True
    if len(segments) == 2 and segments[0] in ("api", "apis"):
        return True
    return len(segments) == 3 and segments[0] == "apis"


def _target(segments: list[str]) -> Target | None:
    """Resolve the resource URL layouts of the core group (/api/v1/...) and named groups (/apis/g/v/...)."""
    if len(segments) >= 2 and segments[0] == "api":
        group, version, rest = "", segments[1], segments[2:]
    elif len(segments) >= 3 and segments[0] == "apis":
        group, version, rest = segments[1], segments[2], segments[3:]
    else:
        return None
    namespace: str | None = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespaced = by_path(group, version, rest[2])
        if namespaced is not None and namespaced.namespaced:
            namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        return None
    rt = by_path(group, version, rest[0])
    if rt is None or (rt.namespaced and namespace is None and len(rest) > 1):
        return None  # a namespaced object is only reachable under /namespaces/{ns}/
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    if sub and not ((sub == "status" and rt.has_status) or (sub == "eviction" and rt is PODS)):
        return None
    if not rt.namespaced:
        namespace = ""
    return Target(rt, namespace, name, sub)


def _attributes(request: Request, target: Target) -> Attributes:
    """The verb and resource RBAC judges, from the method and the URL, as the API server derives them."""
    method, named = request.method, bool(target.name)
    if method == "GET":
        verb = "get" if named else ("watch" if request.query.get("watch") in ("1", "true") else "list")
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, "")
        if method == "DELETE":
            verb = "delete" if named else "deletecollection"
    return Attributes(
        verb=verb or method.lower(),
        api_group=target.rt.group,
        resource=target.rt.plural,
        subresource=target.subresource,
        namespace=target.namespace or "",
        name=target.name,
    )


def _content_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


# What kube-apiserver reads of a request's body (its MaxRequestBodyBytes default: 3 MiB), in every handler
# that decodes one (k8s.io/apiserver pkg/endpoints/handlers/rest.go: limitedReadBody); 413 past it
MAX_REQUEST_BODY_BYTES = 3 * 1024 * 1024


def _decode(body: bytes, decode: Callable[[bytes], Any] = json.loads) -> Any:
    if len(body) > MAX_REQUEST_BODY_BYTES:
        raise errors.request_entity_too_large(f"limit is {MAX_REQUEST_BODY_BYTES}")
    try:
        return decode(body) if body else None
    except ValueError as exc:
        raise errors.bad_request(f"error decoding the request body as JSON: {exc}") from None


def _peek(body: bytes) -> Any:
    """The request's JSON body for an admission plugin's look at its name; None when it is not JSON (the
    handler answers that)."""
    try:
        return json.loads(body) if body and len(body) <= MAX_REQUEST_BODY_BYTES else None
    except ValueError:
        return None


def _json_body(request: Request) -> Any:
    content_type = _content_type(request)
    if content_type not in ("", "application/json", "*/*"):
        raise errors.unsupported_media_type(content_type)
    return _decode(request.body)


def _int_param(query: Mapping[str, str], name: str) -> int | None:
    raw = query.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise errors.bad_request(f"{name} must be an integer, got {raw!r}") from None


def _list_options(query: Mapping[str, str]) -> ListOptions:
    return ListOptions(
        label_selector=query.get("labelSelector", ""),
        field_selector=query.get("fieldSelector", ""),
        limit=_int_param(query, "limit") or 0,
        continue_token=query.get("continue", ""),
        version=_read_version(query),
    )


def _read_version(query: Mapping[str, str]) -> ReadVersion:
    return ReadVersion(query.get("resourceVersion", ""), query.get("resourceVersionMatch", ""))


def _delete_options(request: Request) -> JsonObj:
    """The request's DeleteOptions: its body when it has one, else its query's parameters, never both (kube-apiserver's
    DeleteResource, handlers/delete.go: a ?gracePeriodSeconds=0 beside a body is ignored, not a force delete)."""
    if request.body.strip():
        body = _decode(request.body)
        if not isinstance(body, dict):
            raise errors.bad_request("DeleteOptions must be a JSON object")
        return body
    grace = _int_param(request.query, "gracePeriodSeconds")
    return {} if grace is None else {"gracePeriodSeconds": grace}
