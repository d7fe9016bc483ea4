"""HTTPS with the server's own CA, EKS bearer tokens, discovery, keep-alive and a clean stop."""

from __future__ import annotations

import base64
import datetime as dt
import http.client
import json
import ssl
import time
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from nodecycle_sandbox.kube import KubeServer, make_eks_token

from .conftest import Kube, connect, status_of


def _token_for_url(url: str) -> str:
    return "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


_SIGNED = "X-Amz-SignedHeaders=host%3Bx-k8s-aws-id&X-Amz-Signature=abc123"


@pytest.mark.parametrize(
    ("case", "token"),
    [
        ("a static token", "s3cr3t-static-token"),
        ("prefix but not base64url", "k8s-aws-v1.not/base64+url"),
        ("not a URL", _token_for_url("GetCallerIdentity X-Amz-Signature=1")),
        ("another STS action", _token_for_url(f"https://sts.amazonaws.com/?Action=AssumeRole&{_SIGNED}")),
        (
            "x-k8s-aws-id not signed",
            _token_for_url(
                "https://sts.amazonaws.com/?Action=GetCallerIdentity&X-Amz-SignedHeaders=host&X-Amz-Signature=a"
            ),
        ),
        (
            "no signature",
            _token_for_url(
                "https://sts.amazonaws.com/?Action=GetCallerIdentity&X-Amz-SignedHeaders=host%3Bx-k8s-aws-id"
            ),
        ),
        ("ftp URL", _token_for_url(f"ftp://sts.amazonaws.com/?Action=GetCallerIdentity&{_SIGNED}")),
    ],
)
def test_bearer_token_that_is_not_an_eks_token_is_401(server: KubeServer, case: str, token: str) -> None:
    kube = connect(server, token=token)
    with pytest.raises(ApiException) as raised:
        kube.core.list_node()
    assert raised.value.status == 401, case
    assert status_of(raised.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Unauthorized",
        "reason": "Unauthorized",
        "code": 401,
    }


def test_request_without_authorization_header_is_401(server: KubeServer) -> None:
    with pytest.raises(ApiException) as raised:
        connect(server, token=None).core.list_namespace()
    assert raised.value.status == 401
    assert status_of(raised.value)["reason"] == "Unauthorized"


def test_eks_token_made_for_any_sts_endpoint_is_accepted(server: KubeServer) -> None:
    for sts in ("https://sts.eu-west-1.amazonaws.com/", "http://127.0.0.1:5000"):
        names = [
            ns.metadata.name
            for ns in connect(server, token=make_eks_token(server.cluster_name, sts))
            .core.list_namespace()
            .items
        ]
        assert names == ["default", "kube-node-lease", "kube-public", "kube-system"]


def test_token_older_than_the_configured_max_age_is_401() -> None:
    with KubeServer(token_max_age_seconds=900) as server:
        stale = make_eks_token("sandbox", now=dt.datetime.now(dt.UTC) - dt.timedelta(minutes=16))
        with pytest.raises(ApiException) as raised:
            connect(server, token=stale).core.list_node()
        assert raised.value.status == 401
        assert connect(server).core.list_node().items == []


def test_discovery_announces_served_kinds_and_the_policy_v1_eviction_subresource(kube: Kube) -> None:
    core = {r.name: r for r in kube.core.get_api_resources().resources}
    assert {"pods", "nodes", "namespaces", "configmaps", "pods/status", "nodes/status"} <= set(core)
    eviction = core["pods/eviction"]
    assert (eviction.kind, eviction.group, eviction.version, eviction.verbs) == (
        "Eviction",
        "policy",
        "v1",
        ["create"],
    )
    apis: Any = client.ApisApi(kube.api_client)
    groups = {g.name: g.preferred_version.group_version for g in apis.get_api_versions().groups}
    assert groups == {
        "apps": "apps/v1",
        "policy": "policy/v1",
        "coordination.k8s.io": "coordination.k8s.io/v1",
        "authorization.k8s.io": "authorization.k8s.io/v1",  # access reviews (kubectl auth can-i)
        "rbac.authorization.k8s.io": "rbac.authorization.k8s.io/v1",  # what the doctor compares
    }
    apps = {r.name for r in kube.apps.get_api_resources().resources}
    assert {"deployments", "replicasets", "daemonsets"} <= apps
    version: Any = client.VersionApi(kube.api_client)
    assert version.get_code().git_version.startswith("v1.32.")


def _https(server: KubeServer) -> http.client.HTTPSConnection:
    context = ssl.create_default_context(cadata=server.ca_pem.decode())
    return http.client.HTTPSConnection("127.0.0.1", server.port, context=context, timeout=5)


def _get(conn: http.client.HTTPConnection, path: str, token: str) -> tuple[int, dict[str, object]]:
    conn.request("GET", path, headers={"Authorization": f"Bearer {token}"})
    response = conn.getresponse()
    return response.status, json.loads(response.read())


def test_server_certificate_verifies_against_ca_pem_with_stdlib_defaults(server: KubeServer) -> None:
    # Given only the CA PEM, as eks:DescribeCluster hands it out
    conn = _https(server)
    # When a strict stdlib TLS client calls the server by its IP
    status, body = _get(conn, "/version", server.token())
    # Then the handshake verifies and the API answers
    assert status == 200
    assert body["gitVersion"] == "v1.32.0-eks-sandbox"


def test_plain_http_option_serves_the_same_api_without_a_ca() -> None:
    with KubeServer(tls=False) as server:
        assert server.url.startswith("http://")
        with pytest.raises(RuntimeError):
            _ = server.ca_pem
        assert len(connect(server).core.list_namespace().items) == 4


def test_one_keep_alive_connection_serves_many_requests(server: KubeServer) -> None:
    conn = _https(server)
    token = server.token()
    _get(conn, "/api", token)
    first_socket = conn.sock
    for _ in range(50):
        status, _body = _get(conn, "/api/v1/namespaces", token)
        assert status == 200
    assert conn.sock is first_socket


def test_unknown_paths_and_kinds_are_404_status(server: KubeServer) -> None:
    conn = _https(server)
    for path in ("/apis/batch/v1/jobs", "/api/v1/services", "/nope", "/apis/apps/v2"):
        status, body = _get(conn, path, server.token())
        assert (status, body["kind"], body["reason"]) == (404, "Status", "NotFound"), path


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/v1/pods?watch=true"),  # refused rather than left hanging
        ("GET", "/api/v1/namespaces/default/pods/p/eviction"),
        ("PATCH", "/api/v1/namespaces/default/pods/p/eviction"),
        ("DELETE", "/api/v1/namespaces/default/configmaps"),
        ("POST", "/api/v1/pods"),
    ],
)
def test_unsupported_verbs_are_405_status(server: KubeServer, method: str, path: str) -> None:
    conn = _https(server)
    conn.request(method, path, body=b"{}", headers={"Authorization": f"Bearer {server.token()}"})
    response = conn.getresponse()
    body = json.loads(response.read())
    assert (response.status, body["kind"], body["reason"]) == (405, "Status", "MethodNotAllowed")


def test_stop_closes_idle_keep_alive_connections_promptly() -> None:
    server = KubeServer().start()
    conn = _https(server)
    assert _get(conn, "/api", server.token())[0] == 200
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 2.0
    with pytest.raises((OSError, http.client.HTTPException)):
        _get(conn, "/api", server.token())
