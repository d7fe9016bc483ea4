"""Access to an EKS cluster from a Lambda: no kubeconfig file, no kubectl binary.

The endpoint and CA come from ``eks:DescribeCluster`` (once per container, and again when the endpoint cannot
be reached: a cluster created again under its name has another endpoint and CA). The bearer token is what
``aws eks get-token`` produces: ``k8s-aws-v1.`` + base64url (no padding) of a presigned STS
``GetCallerIdentity`` URL that signs the header ``x-k8s-aws-id: <cluster name>``. EKS accepts such a URL for
15 minutes after it was signed, so it is renewed well before that, on the request that finds it old.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from kubernetes.client import ApiClient, Configuration, rest
from urllib3 import BaseHTTPResponse
from urllib3.connectionpool import ConnectionPool
from urllib3.exceptions import MaxRetryError, NewConnectionError, ReadTimeoutError, SSLError
from urllib3.util.retry import Retry

from nodecycle import __version__
from nodecycle.adapters.aws.clients import LazyClient, client, transient_errors
from nodecycle.adapters.kube.errors import ClusterUnauthorized, OutOfTime

if TYPE_CHECKING:
    from mypy_boto3_eks import EKSClient

log = logging.getLogger(__name__)

TOKEN_PREFIX = "k8s-aws-v1."
CLUSTER_ID_HEADER = "x-k8s-aws-id"
TOKEN_REFRESH_SECONDS = 10 * 60  # EKS honours a token for 15 minutes
REQUEST_TIMEOUT = (5, 20)  # connect, read (seconds) for every Kubernetes call
# Past this much silence on the wall clock, the client's pooled connections are closed before its next call, which
# opens a new one. EKS's endpoint is a Network Load Balancer, whose idle timeout (350 s, fixed for TLS listeners:
# Elastic Load Balancing, "Update the TCP idle timeout for your Network Load Balancer listener") forgets a flow
# without a FIN: urllib3 takes the connection for open (its check before reuse sees a peer's close, not this), and
# the request sent on it meets a reset or no answer until its read timeout. A Lambda container frozen between
# invocations meets that at its first call: a write whose answer is lost (a claim, an eviction, the budget's PUT),
# or a read hung for its whole timeout. The wall clock, not the monotonic one: a frozen container's may stand still.
IDLE_SECONDS = 300.0
# What the client may send again by itself, once: a request whose connection could not be made; a GET whose
# connection failed before any answer (reset or closed: a flow lost within IDLE_SECONDS, its peer's close not seen
# while the container was frozen), at once on a new connection. Not a write so failed: it may have been applied
# (the step decides, and the budget reads its write back). Not a read that timed out (the run's time is counted for
# one read: see call_timeout), nor a 429 or 503 after its Retry-After: urllib3's default sends an idempotent request
# up to four times, sleeping out each Retry-After (up to 60 s from API Priority and Fairness), so that one call
# could outlast the function, asleep in the Lambda. Those are transient errors; the step's retry backs off.
READ_RETRIED = frozenset({"GET"})
# The least time between two descriptions of the cluster after its endpoint failed: an API server unreachable for
# minutes (a network fault, not a new cluster) costs one DescribeCluster a minute, not one per failed call
REDESCRIBE_SECONDS = 60.0
# A call is not started with less than this left of its run's time (see call_timeout)
MIN_CALL_SECONDS = 1.0


class _ClientRetry(Retry):
    """urllib3's Retry, but a read that timed out is never sent again: urllib3 counts it as a read error, as it
    counts a connection lost before the answer, and would send a GET again after it (read=1)."""

    def increment(
        self,
        method: str | None = None,
        url: str | None = None,
        response: BaseHTTPResponse | None = None,
        error: Exception | None = None,
        _pool: ConnectionPool | None = None,
        _stacktrace: TracebackType | None = None,
    ) -> Self:
        # (a read that timed out: as a Retry with no read retries left, raised as it always was, a MaxRetryError
        # for a GET)
        counted = self.new(read=0) if isinstance(error, ReadTimeoutError) else self
        return Retry.increment(counted, method, url, response, error, _pool, _stacktrace)


CLIENT_RETRIES = _ClientRetry(total=1, read=1, allowed_methods=READ_RETRIED, respect_retry_after_header=False)

TimeLeft = Callable[[], float | None]  # seconds the current run may still spend on calls; None: no end
Timeout = float | tuple[float, float] | None  # a call's _request_timeout, as the client takes it


def no_end() -> float | None:
    return None


def call_timeout(asked: Timeout, left: float | None, method: str, url: str) -> Timeout:
    """The timeout of a call with ``left`` seconds of its run's time left (None: no end, the call's own): what it
    asked for (REQUEST_TIMEOUT if nothing), cut so that the call ends within what is left; :class:`OutOfTime`
    when too little is left to start it. A hung API server (the connection taken, no answer) otherwise holds each
    call for its whole read timeout, and a step's few calls outlast the function: killed, the invocation commits
    nothing, and its message comes back only after the queue's visibility timeout (at its fifth receive, into the
    dead-letter queue). The client may connect twice (CLIENT_RETRIES), then read: two connects of a quarter of
    what is left and a read of half of it fit in it."""
    if left is None:
        return asked
    if left < MIN_CALL_SECONDS:
        path = url.split("?")[0]
        raise OutOfTime(f"{method} {path}: not started, {max(0.0, left):.1f} s left of the run's time")
    connect, read = asked if isinstance(asked, tuple) else (asked, asked) if asked else REQUEST_TIMEOUT
    return min(connect, left / 4), min(read, left / 2)


class EksTokens:
    """Bearer tokens for one cluster, renewed before EKS would refuse them.

    The age of a token is measured on the wall clock, as EKS measures it: a Lambda environment may be frozen
    between invocations for hours, and the monotonic clock may stand still meanwhile, so a thawed container
    would otherwise send a token EKS refuses.
    """

    def __init__(self, cluster_name: str, sts: Any = None) -> None:
        self._cluster_name = cluster_name
        self._sts = sts
        self._token: str | None = None
        self._issued = 0.0
        self._lock = threading.Lock()

    @property
    def cluster_name(self) -> str:
        """The cluster each token is signed for (its x-k8s-aws-id)."""
        return self._cluster_name

    def token(self) -> str:
        with self._lock:
            now = time.time()
            # a clock that went back is no reason to trust an old token either
            if self._token is None or not 0 <= now - self._issued <= TOKEN_REFRESH_SECONDS:
                self._token = self._presign()
                self._issued = now
            return self._token

    def invalidate(self) -> None:
        """Forget the token (the API server refused it): the next request presigns a new one."""
        with self._lock:
            self._token = None

    def _presign(self) -> str:
        if self._sts is None:
            self._sts = client("sts")
            events = self._sts.meta.events
            events.register("provide-client-params.sts.GetCallerIdentity", _take_cluster_id)
            events.register("before-sign.sts.GetCallerIdentity", _sign_cluster_id)
        url = self._sts.generate_presigned_url(
            "get_caller_identity",
            Params={CLUSTER_ID_HEADER: self._cluster_name},
            ExpiresIn=60,
            HttpMethod="GET",
        )
        return TOKEN_PREFIX + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


def _take_cluster_id(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
    # GetCallerIdentity has no such parameter: move it aside before botocore validates the call...
    if CLUSTER_ID_HEADER in params:
        context[CLUSTER_ID_HEADER] = params.pop(CLUSTER_ID_HEADER)


def _sign_cluster_id(request: Any, **_: Any) -> None:
    # ...and put it in the headers just before signing, so the signature covers it.
    if CLUSTER_ID_HEADER in request.context:
        request.headers[CLUSTER_ID_HEADER] = request.context[CLUSTER_ID_HEADER]


class EksCluster:
    """An authenticated ``ApiClient`` for one EKS cluster, built once per container."""

    def __init__(
        self,
        name: str,
        eks: EKSClient | None = None,
        tokens: EksTokens | None = None,
        *,
        time_left: TimeLeft = no_end,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._name = name
        self._wall_clock = wall_clock
        self._eks: LazyClient[EKSClient] = LazyClient("eks", eks)
        self._tokens = tokens or EksTokens(name)
        self._time_left = time_left
        self._api: ApiClient | None = None
        self._lock = threading.Lock()
        self._redescribed: float | None = None  # (monotonic) when the cluster was last described again

    def api_client(self) -> ApiClient:
        with self._lock:
            if self._api is None:
                self._api = self._connect()
            return self._api

    def _connect(self) -> ApiClient:
        config = Configuration()
        _point(config, self._describe())
        config.retries = CLIENT_RETRIES
        tokens = self._tokens
        config.api_key = {"authorization": tokens.token()}
        config.api_key_prefix = {"authorization": "Bearer"}
        # the client declares this hook as None-typed, but calls it before every request when set
        config.refresh_api_key_hook = lambda cfg: cfg.api_key.update(authorization=tokens.token())  # type: ignore[assignment]
        return _RenewingApiClient(config, tokens, self._time_left, self._redescribe, self._wall_clock)

    def _describe(self) -> dict[str, Any]:
        with transient_errors("describing the EKS cluster"):
            return dict(self._eks().describe_cluster(name=self._name)["cluster"])

    def _redescribe(self, api: ApiClient) -> None:
        """After a call whose connection failed: describe the cluster again and point ``api`` at its endpoint and CA
        if they changed. EKS gives a cluster created again under the same name (a replacement, a rebuild) another
        endpoint and CA, and the old endpoint stops answering; a warm container (the sweeper's, called every
        minute, lives for hours) would otherwise fail every call until Lambda recycles it. At most once a
        REDESCRIBE_SECONDS; a description that fails leaves things as they were (the call's own error is raised)."""
        with self._lock:
            now = time.monotonic()
            if self._redescribed is not None and 0 <= now - self._redescribed < REDESCRIBE_SECONDS:
                return
            self._redescribed = now
        try:
            cluster = self._describe()
        except Exception as error:  # (the failed call's error is the one to raise)
            log.warning("describing EKS cluster %s again after its endpoint failed: %s", self._name, error)
            return
        config = api.configuration
        old = (config.host, config.ssl_ca_cert)
        _point(config, cluster)
        if (config.host, config.ssl_ca_cert) != old:
            log.warning("EKS cluster %s has a new endpoint or CA: %s", self._name, config.host)
            # a new pool: the old one's connections are to the old endpoint, verified with the old CA
            api.rest_client = rest.RESTClientObject(config)


def _point(config: Configuration, cluster: dict[str, Any]) -> None:
    config.host = cluster["endpoint"]
    config.ssl_ca_cert = _write_ca(base64.b64decode(cluster["certificateAuthority"]["data"]))


class _RenewingApiClient(ApiClient):
    """An ``ApiClient`` that answers a 401 with a new token and the same request, once.

    A token can be refused before the client would renew it (a clock skew, a thawed container, an
    authenticator that restarted): one retry with a fresh token repairs that; a second 401 is a real
    authorization failure and is raised, as a :class:`ClusterUnauthorized` naming the cluster the token was signed
    for (EKS answers "Unauthorized" and nothing more: which cluster, and whose role, the operator must look at).

    Each call (the node and pod calls, the budget's ConfigMap, Events: all of them pass here) ends within its run's
    time: see :func:`call_timeout`.
    """

    def __init__(
        self,
        configuration: Configuration,
        tokens: EksTokens,
        time_left: TimeLeft = no_end,
        unreachable: Callable[[ApiClient], None] | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(configuration)
        self._unreachable = unreachable
        self._wall_clock = wall_clock
        self._used: float | None = None  # (wall clock) when a call last ended, or started
        self._used_lock = threading.Lock()
        # The API server names the manager of each write after the User-Agent's prefix: a cordon or annotation by
        # nodecycle is nodecycle's in `kubectl get node --show-managed-fields` and in the audit log, not the
        # generated client's default ("OpenAPI-Generator", like any tool built on it)
        self.user_agent = f"nodecycle/{__version__}"
        self._tokens = tokens
        self._time_left = time_left

    def call_api(
        self, method: str, url: str, header_params: dict[str, str] | None = None, *args: Any, **kwargs: Any
    ) -> Any:
        self._forget_idle_connections()
        try:
            return self._call_renewing(method, url, header_params, *args, **kwargs)
        except (MaxRetryError, NewConnectionError, SSLError) as error:
            # (a connection not made, or a certificate not verified: not an answer the API server gave, nor a
            # read that timed out)
            reason = getattr(error, "reason", error)
            if self._unreachable is not None and isinstance(reason, (NewConnectionError, SSLError)):
                self._unreachable(self)
            raise
        finally:
            with self._used_lock:
                self._used = self._wall_clock()

    def _forget_idle_connections(self) -> None:
        """Close the pooled connections when no call went out for IDLE_SECONDS (or the clock went back: no telling
        how long it was): the load balancer may have forgotten them. (A call in flight meanwhile keeps its own: the
        pool closes it when it is given back.)"""
        with self._used_lock:
            now, used = self._wall_clock(), self._used
            self._used = now
        if used is not None and not 0 <= now - used <= IDLE_SECONDS:
            log.info("no call to the API server for %.0f s: its pooled connections are closed", now - used)
            self.rest_client.pool_manager.clear()

    def _call_renewing(
        self, method: str, url: str, header_params: dict[str, str] | None = None, *args: Any, **kwargs: Any
    ) -> Any:
        # The client checks a response's status after this call (and raises ApiException then), so the 401
        # is seen here as a status; the headers were built, bearer token included, before this call.
        asked = kwargs.pop("_request_timeout", None)
        kwargs["_request_timeout"] = call_timeout(asked, self._time_left(), method, url)
        response = super().call_api(method, url, header_params, *args, **kwargs)
        if response.status != 401:
            return response
        response.read()  # give the connection back to the pool
        self._tokens.invalidate()
        headers = dict(header_params or {})
        for name in [name for name in headers if name.lower() == "authorization"]:
            headers[name] = f"Bearer {self._tokens.token()}"
        kwargs["_request_timeout"] = call_timeout(asked, self._time_left(), method, url)
        response = super().call_api(method, url, headers, *args, **kwargs)
        if response.status != 401:
            return response
        response.read()
        raise ClusterUnauthorized(
            http_resp=response, cluster=self._tokens.cluster_name, principal=_principal()
        )


def _principal() -> str:
    """Whose role the cluster refused, as far as this process knows it without a call more: a Lambda function's
    execution role, by the function's name (its role's ARN is the access entry's principal)."""
    function = os.environ.get("AWS_LAMBDA_FUNCTION_NAME")
    return f"the execution role of function {function}" if function else "this caller's IAM role"


def _write_ca(pem: bytes) -> str:
    """The client wants a file: Lambda's /tmp is the only writable place, and it lives as long as the
    container. Named by its content, so a container (or the many containers of one machine, as in the
    sandbox) keeps one file per cluster certificate, not one per container start; written whole, then renamed."""
    path = os.path.join(tempfile.gettempdir(), f"nodecycle-eks-ca-{hashlib.sha256(pem).hexdigest()[:20]}.pem")
    if not os.path.exists(path):
        handle, partial = tempfile.mkstemp(prefix="nodecycle-eks-ca-", suffix=".partial")
        with os.fdopen(handle, "wb") as stream:
            stream.write(pem)
        os.replace(partial, path)
    return path
