"""The HTTP(S) transport: a threaded HTTP/1.1 server with keep-alive, TLS handshakes off the accept thread,
and a clean stop that also closes idle keep-alive connections.

Between the client and it, a load balancer as EKS puts before its API servers (a Network Load Balancer): a
connection idle longer than its idle timeout (350 s for TCP and TLS listeners, "the connection is closed":
Elastic Load Balancing, "Update the TCP idle timeout for your Network Load Balancer listener") is forgotten
silently, no FIN to either end, so the client's pool still holds it as open and sends its next request on it.
That request never reaches the API server: the client meets a reset (RST), or, through a hop that drops what it
no longer tracks, no answer until its read timeout. See KubeHTTPServer.drop_idle_flows."""

from __future__ import annotations

import json
import logging
import select
import socket
import ssl
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from nodecycle_sandbox.kube import api
from nodecycle_sandbox.kube.faults import KubeFaultAction, KubeFaults
from nodecycle_sandbox.kube.routing import Request, Router

logger = logging.getLogger(__name__)

_HANDSHAKE_TIMEOUT = 10.0
_HANG_POLL = 0.5  # seconds: how often a hung request looks whether its client or the server gave up
# The load balancer's idle timeout (a Network Load Balancer's, for TCP and TLS listeners: 350 s)
FLOW_IDLE_TIMEOUT = 350.0
# What becomes of a request sent on a flow the load balancer forgot: "reset" (an RST), or "blackhole" (nothing)
DROPS = ("reset", "blackhole")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so urllib3 pools and Go's transport reuse connections
    server: KubeHTTPServer
    _cut = False  # this request's answer is cut half-way through its body (the kube-cut-answer fault)
    timeout = 300  # a read or write within a request that takes longer fails (an idle connection: see _idle)

    def setup(self) -> None:
        if isinstance(self.request, ssl.SSLSocket):
            self.request.settimeout(_HANDSHAKE_TIMEOUT)
            self.request.do_handshake()
        super().setup()
        self.server.track(self.request)

    def finish(self) -> None:
        self.server.untrack(self.request)
        super().finish()

    def handle_one_request(self) -> None:
        drop = self._idle()
        if drop is None:
            try:
                super().handle_one_request()
            finally:
                self.server.idle(self.request)
            return
        # The flow was forgotten while idle: the request sent on it never reaches the API server
        self.close_connection = True
        if drop == "blackhole":
            self._swallow()
            self._hang_up()
        else:
            self._reset()

    def _idle(self) -> str | None:
        """Wait while the connection is idle, until its client sends its next request (or closes it); what the
        load balancer did meanwhile: None (the flow still tracked), or how it drops the flow (see DROPS)."""
        since = time.monotonic()
        while True:
            try:
                readable, _, _ = select.select([self.request], [], [], _HANG_POLL)
            except (OSError, ValueError):  # closed under us (the server stops)
                readable = [self.request]
            if time.monotonic() - since > self.server.flow_idle_timeout:
                self.server.drop(self.request, "reset")
            if readable:
                return self.server.busy(self.request)

    def _swallow(self) -> None:
        """Take whatever the client sends, answer nothing, until it closes the connection (its read timeout) or
        the server stops (it shuts every connection down)."""
        while True:
            try:
                readable, _, _ = select.select([self.request], [], [], _HANG_POLL)
                if readable and not self.request.recv(65536):
                    return
            except (OSError, ValueError):  # reset, or closed under us
                return

    def _reset(self) -> None:
        """Close with an RST, as a load balancer answers a segment of a flow it no longer tracks."""
        try:
            self.request.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.request.close()
        except OSError:
            logger.debug("connection already closed", exc_info=True)

    def do_GET(self) -> None:
        self._serve()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _serve(self) -> None:
        self._cut = False
        parts = urlsplit(self.path)
        request = Request(
            method=self.command,
            path=parts.path,
            query=dict(parse_qsl(parts.query, keep_blank_values=True)),
            headers=_headers(self.headers),
            body=self._read_body(),
        )
        fault = self.server.faults.decide(request.method, request.path, request.body)
        if fault is not None and self._inject(fault):
            return
        try:
            response = self.server.router.handle(request, refuse=None if fault is None else fault.refuse)
        except Exception:
            logger.exception("sandbox API server failed on %s %s", self.command, self.path)
            self._send(500, "application/json", _internal_error())
            return
        if fault is not None and fault.drop_after:
            self._hang_up()  # served, but the client never hears of it
            return
        self._cut = fault is not None and fault.cut_answer
        headers = dict(response.headers)
        if isinstance(response.body, str):
            self._send(response.status, "text/plain; charset=utf-8", response.body.encode(), headers)
        else:
            data = json.dumps(response.body, separators=(",", ":")).encode()
            self._send(response.status, "application/json", data, headers)

    def _inject(self, fault: KubeFaultAction) -> bool:
        """Apply a fault before serving; True when the request must not be served at all."""
        if fault.delay:
            time.sleep(fault.delay)
        if fault.hang is not None:
            self._wait_for_hang_up(fault.hang or None)
            self._hang_up()
            return True
        if fault.drop_before:
            self._hang_up()
            return True
        if fault.respond is not None:
            status, body, headers = fault.respond
            if isinstance(body, str):
                self._send(status, "text/plain; charset=utf-8", body.encode(), headers)
            else:
                self._send(status, "application/json", json.dumps(body).encode(), headers)
            return True
        return False

    def _wait_for_hang_up(self, limit: float | None) -> None:
        """Answer nothing until the client closes the connection (its read timeout), the server stops (it shuts
        every connection down), or ``limit`` seconds have passed. The client sends nothing more while it waits for
        this answer: the socket turns readable only when it is closed, or shut down."""
        ends = None if limit is None else time.monotonic() + limit
        while ends is None or time.monotonic() < ends:
            wait = _HANG_POLL if ends is None else max(0.0, min(_HANG_POLL, ends - time.monotonic()))
            try:
                readable, _, _ = select.select([self.request], [], [], wait)
            except (OSError, ValueError):  # closed under us
                return
            if readable:
                return

    def _hang_up(self) -> None:
        self.close_connection = True
        try:
            self.request.shutdown(socket.SHUT_RDWR)
        except OSError:
            logger.debug("connection already closed", exc_info=True)

    def _send(
        self, status: int, content_type: str, data: bytes, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.server.router.sent(data)  # counted first: a client that got the answer finds it counted
        # idle from here, as its client sees it: a test that drops idle flows once it has the answer drops this one
        self.server.idle(self.request)
        if self._cut:
            self.wfile.write(data[: len(data) // 2])
            self._hang_up()  # the answer cut half-way through its body
            return
        self.wfile.write(data)

    def date_time_string(self, timestamp: float | None = None) -> str:
        # Every answer's Date (http.server sends one, as Go's server does for kube-apiserver) by the clock that stamps
        # the objects (creationTimestamp): a client may read the API server's time from it
        return super().date_time_string(api.time.time() if timestamp is None else timestamp)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s - " + format, self.address_string(), *args)


def _headers(message: Any) -> dict[str, str]:
    """Lower-case names; a header sent several times (Impersonate-Group) is joined with commas."""
    headers: dict[str, str] = {}
    for name, value in message.items():
        key = name.lower()
        headers[key] = f"{headers[key]},{value}" if key in headers else value
    return headers


def _internal_error() -> bytes:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Internal error occurred: the sandbox API server failed; see its log",
        "reason": "InternalError",
        "code": 500,
    }
    return json.dumps(body).encode()


class KubeHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    # Many clients connecting at once (a test's thread pool) must not overflow the listen backlog.
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        router: Router,
        ssl_context: ssl.SSLContext | None,
        faults: KubeFaults | None = None,
    ) -> None:
        self.router = router
        self.faults = faults or KubeFaults()
        self._ssl_context = ssl_context
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        self.flow_idle_timeout = FLOW_IDLE_TIMEOUT
        self._busy: set[socket.socket] = set()  # connections serving a request (the others are idle)
        self._dropped: dict[socket.socket, str] = {}  # flows the load balancer forgot, and how it drops them
        # Connections accepted so far: each one a client did not reuse costs it a TCP and a TLS handshake with a real
        # API server (EKS's endpoint), where the sandbox's are free
        self.accepted = 0
        super().__init__(address, _Handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = super().get_request()
        with self._connections_lock:
            self.accepted += 1
        # Without TCP_NODELAY a response written as headers + body can wait for a delayed ACK (40 ms).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._ssl_context is not None:
            # The handshake runs on the connection's own thread (see _Handler.setup), never on this one.
            sock = self._ssl_context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, address

    def track(self, sock: socket.socket) -> None:
        with self._connections_lock:
            self._connections.add(sock)

    def untrack(self, sock: socket.socket) -> None:
        with self._connections_lock:
            self._connections.discard(sock)
            self._busy.discard(sock)
            self._dropped.pop(sock, None)

    def busy(self, sock: socket.socket) -> str | None:
        """The connection's client sent a request: how the load balancer drops it (see DROPS), or None, and then
        the connection is serving it."""
        with self._connections_lock:
            how = self._dropped.get(sock)
            if how is None:
                self._busy.add(sock)
            return how

    def idle(self, sock: socket.socket) -> None:
        """The connection answered its request (or failed to): idle until its client sends another."""
        with self._connections_lock:
            self._busy.discard(sock)

    def drop(self, sock: socket.socket, how: str) -> None:
        with self._connections_lock:
            self._dropped.setdefault(sock, how)

    def drop_idle_flows(self, how: str = "reset") -> int:
        """The load balancer forgets every connection idle now, as after an idle timeout's worth of silence (a
        Lambda container frozen between invocations): the next request on each meets ``how`` (see DROPS). How many
        it forgot."""
        if how not in DROPS:
            raise ValueError(f"how a flow is dropped: one of {', '.join(DROPS)}, not {how!r}")
        with self._connections_lock:
            idle = self._connections - self._busy
            for sock in idle:
                self._dropped.setdefault(sock, how)
            return len(idle)

    def close_connections(self) -> None:
        """Wake every connection thread blocked on an idle keep-alive socket, so stop() leaves nothing behind."""
        with self._connections_lock:
            connections = list(self._connections)
        for sock in connections:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                logger.debug("connection already closed", exc_info=True)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients hanging up mid-request and failed TLS handshakes are routine for a test server.
        logger.debug("connection from %s failed", client_address, exc_info=True)
