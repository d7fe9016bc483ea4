"""HTTP/1.1 connections kept between the sandbox's AWS requests, every answer sent whole with its length.

werkzeug's development server, which serves moto, answers every request with ``Connection: close``: each AWS call
of the sandbox (the runner's, the functions', the tests') opened a TCP connection, and the server a thread for it,
on both sides of a lifecycle test's two cores. A kept connection is safe only when both ends know where each
message ends, which werkzeug does not ensure once it keeps them: an answer of unknown length goes chunked or, to a
client that reads it to the connection's end, hangs (a stack deployment did, when keep-alive was first turned on),
and after each answer werkzeug reads whatever else the client sent (to let it see a 413), which on a kept
connection is the next request. Here instead:

- a request is read whole, by its Content-Length, before the application sees it; a chunked request, or one of
  HTTP/1.0, is left to werkzeug, and its connection closed after it;
- an answer is gathered whole and sent in one write with its Content-Length (none for a HEAD, whose
  Content-Length is the application's, nor for 1xx, 204 and 304, which have no body); nothing is read after it;
- a client's ``Connection: close`` is honoured (``http.server`` reads it), and an application that fails answers
  a 500 as werkzeug's does.

Each answer is one write, and the socket does not wait to gather small writes (TCP_NODELAY): on a kept connection
Nagle's algorithm would hold an answer's second segment for the client's delayed acknowledgement (40 ms).
"""

from __future__ import annotations

import io
import logging
import socket
from typing import Any

from moto.moto_server.werkzeug_app import MotoRequestHandler
from werkzeug.exceptions import InternalServerError

_log = logging.getLogger(__name__)
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding"})


class KeepAliveRequestHandler(MotoRequestHandler):
    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def run_wsgi(self) -> None:
        length = self.headers.get("Content-Length") or "0"
        framed = (
            self.request_version == "HTTP/1.1"
            and "chunked" not in self.headers.get("Transfer-Encoding", "").lower()
            and length.isdigit()
        )
        if not framed:
            super().run_wsgi()  # (werkzeug's: it closes the connection after the answer)
            self.close_connection = True
            return
        if self.headers.get("Expect", "").lower().strip(" \t") == "100-continue":
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = self.rfile.read(int(length)) if int(length) else b""
        if len(body) < int(length):
            self.close_connection = True  # (the client went away mid-request)
            return
        self.environ = environ = self.make_environ()
        environ["wsgi.input"] = io.BytesIO(body)
        status, headers, data = self._answer(environ)
        code_text, _, reason = status.partition(" ")
        code = int(code_text)
        self.send_response(code, reason)
        bodiless = self.command == "HEAD" or 100 <= code < 200 or code in (204, 304)
        for name, value in headers:
            lower = name.lower()
            if lower in _HOP_BY_HOP or (lower == "content-length" and self.command != "HEAD"):
                continue
            self.send_header(name, value)
        if not bodiless:
            self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        # (headers and body in one write: http.server's buffer of the headers, flushed once)
        self._headers_buffer.append(b"\r\n")
        if not bodiless:
            self._headers_buffer.append(data)
        self.flush_headers()

    def _answer(self, environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bytes]:
        """The application's answer to ``environ``: its status, headers and whole body."""
        answer: dict[str, Any] = {}
        chunks: list[bytes] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            answer["status"], answer["headers"] = status, headers
            return chunks.append

        try:
            result = self.server.app(environ, start_response)
            try:
                for chunk in result:
                    chunks.append(chunk)
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()
        except Exception:
            _log.exception("error on request %s %s", self.command, self.path)
            answer.clear()
            chunks.clear()
            chunks.extend(InternalServerError()(environ, start_response))
        return answer["status"], answer["headers"], b"".join(chunks)
