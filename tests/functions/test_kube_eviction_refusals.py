"""The Kubernetes adapter over HTTP, for the evictions an API server refuses for one pod: a refusal is that
pod's answer (``Eviction.REFUSED``, with the server's words), never an error that ends the drain's step and
leaves the node's other pods where they are."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import ClassVar

import pytest
from kubernetes.client import ApiClient, Configuration

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.errors import TransientError
from nodecycle.domain.ports.cluster import Eviction, EvictionResult, PodInfo
from tests.support.http_stub import serving

WEB = PodInfo(
    namespace="apps",
    name="web-1",
    uid="uid-web-1",
    controller_kind="ReplicaSet",
    mirror=False,
    grace_period=30,
)
# What an API server answers, as (status, reason, message, cause)
REFUSALS = {
    "namespace-terminating": (
        403,
        "Forbidden",
        'pods "web-1" is forbidden: unable to create new content in namespace apps because it is being '
        "terminated",
        "NamespaceTerminating",
    ),
    "webhook-denied": (
        400,
        "BadRequest",
        'admission webhook "evictions.example.com" denied the request: pod web-1 is pinned',
        None,
    ),
    "invalid": (422, "Invalid", 'Eviction.policy "web-1" is invalid: deleteOptions: Invalid value', None),
}


class _Refusing(BaseHTTPRequestHandler):
    answer: ClassVar[tuple[int, str, str, str | None]] = REFUSALS["namespace-terminating"]
    paths: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.paths.append(self.path)
        code, reason, message, cause = self.answer
        status: dict[str, object] = {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "message": message,
        }
        status |= {"reason": reason, "code": code}
        if cause:
            status["details"] = {"causes": [{"reason": cause, "message": message}]}
        body = json.dumps(status).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    with serving(_Refusing) as url:
        yield url


@pytest.mark.parametrize("refusal", list(REFUSALS))
def test_an_eviction_the_api_server_refuses_is_that_pods_answer_with_the_servers_words(
    server: str, refusal: str
) -> None:
    # Given an API server that refuses the eviction of one pod
    _Refusing.answer = REFUSALS[refusal]
    _Refusing.paths = []
    configuration = Configuration(host=server)
    cluster = KubeCluster(lambda: ApiClient(configuration))

    # When the pod is evicted
    answer = cluster.evict(WEB, grace_seconds=30)

    # Then the refusal is the answer, with the server's message (a namespace being deleted: its own answer)
    assert answer.kind is (
        Eviction.NAMESPACE_TERMINATING if refusal == "namespace-terminating" else Eviction.REFUSED
    )
    assert answer.detail == REFUSALS[refusal][2]
    assert _Refusing.paths == ["/api/v1/namespaces/apps/pods/web-1/eviction"]


# What an API server answers 500 for: one of them only is the pod's (two PodDisruptionBudgets select it, the
# eviction subresource's fixed words); the others are the server's own failures, worth retrying later
MULTIPLE_PDBS = (
    "Internal error occurred: This pod has more than one PodDisruptionBudget, which the eviction subresource "
    "does not support."
)
SERVER_FAILURES = {
    "etcd-timeout": "Internal error occurred: etcdserver: request timed out",
    "webhook-unreachable": 'Internal error occurred: failed calling webhook "validate.kyverno.svc-fail": failed '
    'to call webhook: Post "https://kyverno-svc.kyverno.svc:443/validate/fail?timeout=10s": context deadline '
    "exceeded",
}


def evict_answered(server: str, message: str) -> EvictionResult:
    _Refusing.answer = (500, "InternalError", message, None)
    cluster = KubeCluster(lambda: ApiClient(Configuration(host=server)))
    return cluster.evict(WEB, grace_seconds=30)


def test_a_pod_that_two_disruption_budgets_select_is_misconfigured(server: str) -> None:
    answer = evict_answered(server, MULTIPLE_PDBS)

    assert answer.kind is Eviction.MISCONFIGURED
    assert answer.detail == MULTIPLE_PDBS


@pytest.mark.parametrize("failure", list(SERVER_FAILURES))
def test_any_other_internal_error_of_an_eviction_is_transient_not_a_pods_misconfiguration(
    server: str, failure: str
) -> None:
    # A webhook that cannot be called costs its timeout (10 s) per eviction: as a transient failure, the pass
    # stops after a few of them (FAILURES_PER_PASS) instead of calling every pod of the node
    with pytest.raises(
        TransientError, match=r"HTTP 500 Internal error occurred: (etcdserver|failed calling)"
    ):
        evict_answered(server, SERVER_FAILURES[failure])


class _Created(BaseHTTPRequestHandler):
    """An API server that answers every eviction 201 Created, with ``body`` (kube-apiserver's create handler writes
    any result so, a Failure Status of the eviction subresource's included)."""

    body: ClassVar[dict[str, object]] = {}

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps(self.body).encode()
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


TWO_BUDGETS = (
    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
)


@pytest.mark.parametrize(
    ("body", "kind", "detail"),
    [
        # evictionREST's result for a pod two budgets select: a Status of code 500, no reason, written with 201
        (
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": TWO_BUDGETS,
                "code": 500,
            },
            Eviction.MISCONFIGURED,
            TWO_BUDGETS,
        ),
        # its result for an eviction: a Status of Success
        (
            {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201},
            Eviction.EVICTED,
            "",
        ),
    ],
)
def test_a_failure_status_in_a_created_answer_is_the_refusal_it_says_not_an_eviction(
    body: dict[str, object], kind: Eviction, detail: str
) -> None:
    # Given an API server whose answer to the eviction is 201 Created, with a Status
    _Created.body = body
    with serving(_Created) as url:
        cluster = KubeCluster(lambda: ApiClient(Configuration(host=url)))

        # When the pod is evicted
        answer = cluster.evict(WEB, grace_seconds=30)

    # Then the answer is what the Status says, as client-go reads it: a Failure its refusal, in its words
    assert (answer.kind, answer.detail) == (kind, detail)


KUBEVIRT = (
    'admission webhook "virt-launcher-eviction-interceptor.kubevirt.io" denied the request: Eviction triggered '
    'evacuation of VMI "apps/web-1"'
)


@pytest.mark.parametrize(
    ("reason", "message", "kind"),
    [
        # an admission webhook's 429 (KubeVirt's, which names no reason): that pod's "not now"
        ("", KUBEVIRT, Eviction.DEFERRED),
        ("TooManyRequests", KUBEVIRT, Eviction.DEFERRED),
        # a 429 of the server's own, no budget named and no webhook's words: load shed
        ("TooManyRequests", "Too many requests, please try again later.", Eviction.THROTTLED),
    ],
)
def test_a_429_an_admission_webhook_gives_one_pod_is_deferred_not_throttled(
    server: str, reason: str, message: str, kind: Eviction
) -> None:
    _Refusing.answer = (429, reason, message, None)
    cluster = KubeCluster(lambda: ApiClient(Configuration(host=server)))

    answer = cluster.evict(WEB, grace_seconds=30)

    assert (answer.kind, answer.detail) == (kind, message)
