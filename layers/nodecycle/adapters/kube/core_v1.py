"""The few core/v1 calls nodecycle makes (and its one call outside core/v1, the read of a kubelet's Lease),
through the official client's ``ApiClient`` (configuration, bearer token refresh, TLS, connection pool,
``ApiException``) but not through its generated ``CoreV1Api``.

Importing ``kubernetes.client.api.core_v1_api`` builds the pydantic models of every core/v1 type its
methods mention: about 250 modules, seconds of every cold start of the drain and sweeper functions, for
calls whose answers nodecycle reads as raw JSON anyway. The methods here keep ``CoreV1Api``'s names,
arguments and errors for the calls nodecycle makes, so the adapters read the same either way (tests and
tools may pass a ``CoreV1Api``): a non-2xx answer raises ``ApiException`` (404 ``NotFoundException``, 409
``ConflictException``...), ``_preload_content=False`` returns the urllib3 response, and the ConfigMap calls
return and take ``V1ConfigMap`` models, whose modules are few.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from kubernetes.client import ApiClient, V1ConfigMap
from kubernetes.client.exceptions import ApiException

JSON = "application/json"
AUTH = ["BearerToken"]  # the Authorization header, from the configuration's api_key and its refresh hook
Timeout = float | tuple[float, float] | None


class CoreV1:
    def __init__(self, api_client: ApiClient) -> None:
        self.api_client = api_client

    # -- nodes ------------------------------------------------------------------------------------------

    def read_node(self, name: str, *, _preload_content: bool = False, **options: Any) -> Any:
        _raw_only(_preload_content)
        return self._call("GET", f"/api/v1/nodes/{_segment(name)}", **options)

    def list_node(self, **options: Any) -> Any:
        return self._call("GET", "/api/v1/nodes", query=_list_query(options), **options)

    def patch_node(
        self,
        name: str,
        body: dict[str, Any] | list[dict[str, Any]],
        *,
        _content_type: str,
        _preload_content: bool = False,
        **options: Any,
    ) -> Any:
        _raw_only(_preload_content)
        return self._call(
            "PATCH", f"/api/v1/nodes/{_segment(name)}", body=body, content_type=_content_type, **options
        )

    # -- pods -------------------------------------------------------------------------------------------

    def list_pod_for_all_namespaces(self, **options: Any) -> Any:
        return self._call("GET", "/api/v1/pods", query=_list_query(options), **options)

    def create_namespaced_pod_eviction(
        self, name: str, namespace: str, body: Any, *, _preload_content: bool = False, **options: Any
    ) -> Any:
        _raw_only(_preload_content)
        path = f"/api/v1/namespaces/{_segment(namespace)}/pods/{_segment(name)}/eviction"
        response = self._call("POST", path, body=body, **options)
        _raise_failure_status(response)
        return response

    def delete_namespaced_pod(
        self,
        name: str,
        namespace: str,
        *,
        grace_period_seconds: int | None = None,
        body: Any = None,
        _preload_content: bool = False,
        **options: Any,
    ) -> Any:
        _raw_only(_preload_content)
        query = [] if grace_period_seconds is None else [("gracePeriodSeconds", grace_period_seconds)]
        path = f"/api/v1/namespaces/{_segment(namespace)}/pods/{_segment(name)}"
        return self._call("DELETE", path, query=query, body=body, **options)

    # -- events -----------------------------------------------------------------------------------------

    def create_namespaced_event(
        self, namespace: str, body: dict[str, Any], *, _preload_content: bool = False, **options: Any
    ) -> Any:
        _raw_only(_preload_content)
        return self._call("POST", f"/api/v1/namespaces/{_segment(namespace)}/events", body=body, **options)

    # -- leases: coordination.k8s.io/v1, with CoordinationV1Api's name for the call -------------------------

    def read_namespaced_lease(
        self, name: str, namespace: str, *, _preload_content: bool = False, **options: Any
    ) -> Any:
        _raw_only(_preload_content)
        path = f"/apis/coordination.k8s.io/v1/namespaces/{_segment(namespace)}/leases/{_segment(name)}"
        return self._call("GET", path, **options)

    # -- configmaps (the budget's store works on V1ConfigMap models) ---------------------------------------

    def read_namespaced_config_map(self, name: str, namespace: str, **options: Any) -> V1ConfigMap:
        response = self._call("GET", _config_map(namespace, name), **options)
        return self._config_map(response)

    def read_namespaced_config_map_with_http_info(
        self, name: str, namespace: str, **options: Any
    ) -> tuple[V1ConfigMap, int, Any]:
        """The ConfigMap, the answer's status and its headers (the API server's ``Date``)."""
        response = self._call("GET", _config_map(namespace, name), **options)
        return self._config_map(response), response.status, response.headers

    def create_namespaced_config_map(self, namespace: str, body: Any, **options: Any) -> V1ConfigMap:
        path = f"/api/v1/namespaces/{_segment(namespace)}/configmaps"
        return self._config_map(self._call("POST", path, body=body, **options))

    def replace_namespaced_config_map(
        self, name: str, namespace: str, body: Any, *, field_manager: str | None = None, **options: Any
    ) -> V1ConfigMap:
        query = [] if field_manager is None else [("fieldManager", field_manager)]
        response = self._call("PUT", _config_map(namespace, name), query=query, body=body, **options)
        return self._config_map(response)

    # -- the wire -----------------------------------------------------------------------------------------

    def _call(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, Any]] | None = None,
        body: Any = None,
        content_type: str = JSON,
        _headers: dict[str, str] | None = None,
        _request_timeout: Timeout = None,
    ) -> Any:
        headers = {"Accept": JSON, **(_headers or {})}
        if body is not None:
            headers["Content-Type"] = content_type
        request = self.api_client.param_serialize(
            method, path, query_params=query or None, header_params=headers, body=body, auth_settings=AUTH
        )
        response = self.api_client.call_api(*request, _request_timeout=_request_timeout)
        if not 200 <= response.status <= 299:
            response.read()
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return response.response  # the urllib3 response: .data is the body

    def _config_map(self, response: Any) -> V1ConfigMap:
        found: V1ConfigMap = self.api_client.deserialize(response.data.decode(), "V1ConfigMap", JSON)
        return found


def finished(response: Any) -> None:
    """Read the rest of a raw answer whose body the caller does not need (a patched node, a deleted pod, a created
    Event), so that its connection goes back to the client's pool: urllib3 keeps a connection with an answer unread
    out of it (HTTPResponse.drain_conn: "unread data ... blocks the connection from being released back to the
    pool"), and the next call opened another, a TCP and a TLS handshake with the API server. The answer's status is
    what counts, already read: a body that fails to come (the connection lost mid-way) changes nothing of it."""
    response.drain_conn()


def _raise_failure_status(response: Any) -> None:
    """Raise the refusal a 2xx answer carries: a ``Status`` whose status is ``Failure``, as the error of its own
    code (500 when it names none), as client-go reads such an answer (rest.Request.transformResponse: "Failed
    requests are clearly just an error"). The eviction subresource refuses a pod that two or more
    PodDisruptionBudgets select so: evictionREST.Create returns a Status of code 500 as its result, not as an
    error, and kube-apiserver's create handler writes it with 201 Created, as any result. Read by its HTTP status
    alone, that refusal was an eviction: the pod stayed, asked again and counted evicted at every poll, and no one
    was told of the budgets until the drain's timeout forced it."""
    try:
        answer = json.loads(response.data or b"{}")
    except (ValueError, UnicodeDecodeError):
        return  # (not JSON: no Status to read; the eviction's answer is its status code)
    if not isinstance(answer, dict) or answer.get("kind") != "Status" or answer.get("status") != "Failure":
        return
    code = answer.get("code")
    status = code if isinstance(code, int) and code >= 400 else 500
    raise ApiException(
        status=status,
        reason=str(answer.get("reason") or "Failure"),
        http_resp=response,
        body=response.data.decode("utf-8", "replace"),
    )


def _raw_only(preload: bool) -> None:
    if preload:
        raise ValueError("CoreV1 answers node and pod calls with raw responses only (_preload_content=False)")


def _segment(value: str) -> str:
    return quote(value, safe="")


def _config_map(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{_segment(namespace)}/configmaps/{_segment(name)}"


_LIST_PARAMETERS = {
    "label_selector": "labelSelector",
    "field_selector": "fieldSelector",
    "limit": "limit",
    "_continue": "continue",
    "resource_version": "resourceVersion",
}


def _list_query(options: dict[str, Any]) -> list[tuple[str, Any]]:
    """The list's query parameters (removed from ``options``), those that are set."""
    _raw_only(options.pop("_preload_content", False))
    query = []
    for argument, parameter in _LIST_PARAMETERS.items():
        value = options.pop(argument, None)
        if value not in (None, ""):
            query.append((parameter, value))
    return query
