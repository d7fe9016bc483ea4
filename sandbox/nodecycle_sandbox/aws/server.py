"""moto in server mode, in this process, on a free loopback port, with the lifecycle emulation installed."""

from __future__ import annotations

import functools
import os
import threading
from typing import Any

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import BaseWSGIServer, make_server

from nodecycle_sandbox.aws import faults
from nodecycle_sandbox.aws.ec2_throttling import THROTTLING
from nodecycle_sandbox.aws.install import install
from nodecycle_sandbox.aws.keep_alive import KeepAliveRequestHandler

# A service's Flask app, as moto's server makes one at its first request (its routes, and the backend of another
# region that moto makes to read them): made once per process, and once per zygote for the services the sandbox
# serves (``warm.py``), not once per sandbox.
backend_app = functools.cache(create_backend_app)


def prepare() -> None:
    """What moto needs before it serves the sandbox: its settings and the emulation installed. Idempotent."""
    # moto builds some 130,000 stock AMIs with each region's EC2 backend (a CPU-second and more, again at
    # each reset); the sandbox launches its own image id, which moto accepts without one (SANDBOX_AMI).
    os.environ.setdefault("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    # Lambda's reserved concurrency within an account at the default limit (1,000, 100 kept unreserved): moto
    # refuses a reservation past it only when told the account's limit
    os.environ.setdefault("MOTO_LAMBDA_CONCURRENCY_QUOTA", "1000")
    install()


class _QuietRequestHandler(KeepAliveRequestHandler):
    def log_request(self, *args: Any, **kwargs: Any) -> None:
        """One line per request would drown the sandbox's own output; errors are still logged."""


class MotoServer:
    """Like `moto.server.ThreadedMotoServer`, but quiet, on port 0 by default, and emulation-aware."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._host = host
        self._port = port
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the moto server is not started")
        return f"http://{self._host}:{self._server.server_port}"

    def start(self) -> str:
        prepare()
        THROTTLING.reset()  # (a server's account starts with its EC2 buckets full, whatever the zygote did)
        app = faults.middleware(DomainDispatcherApplication(backend_app))
        self._server = make_server(
            self._host, self._port, app, threaded=True, request_handler=_QuietRequestHandler
        )
        # (a shutdown waits for the loop's next look: every 0.5 s by default, half a second of each stop)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="moto-server", daemon=True
        )
        self._thread.start()
        return self.url

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server = None
        self._thread = None
