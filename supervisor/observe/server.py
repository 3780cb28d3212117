"""The metrics server: a process the master forks to answer `/metrics` and `/healthz`.

The master has no threads and must never wait on a scrape, so it binds the port,
forks this process (title `forkq: master metrics`, or `forkq: supervisor metrics` when
the supervisor of several databases serves their one port) and closes its own copy. This
process dies with the master (PR_SET_PDEATHSIG), reads only the metrics directory and
the pulse in shared memory (never the database), and serves with the standard
library's threading HTTP server: threads are fine here, it never forks.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
from http.server import ThreadingHTTPServer
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import MetricsHandler

from supervisor import events, logs
from supervisor.config import parse_listen
from supervisor.kinds import Role
from supervisor.observe.collect import ForkqCollector
from supervisor.observe.several import SeveralCollector
from supervisor.observe.shared import Pulse
from supervisor.proc import die_with_parent, fork_process, set_title

REQUEST_TIMEOUT = 30.0  # seconds a client may take to send a request and read the answer


def bind(listen: str) -> socket.socket:
    """The listening socket, bound in the master so a taken port is its log line."""
    host, port = parse_listen(listen)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=64)


def spawn(sock: socket.socket, directory: str, pulse: Pulse | None, close_fds: list[int]) -> int:
    """Fork the server (proc.fork_process); its pid."""
    master = os.getpid()

    def body() -> int:  # in the server
        die_with_parent(signal.SIGKILL)
        if os.getppid() == master:  # else the master died before we asked to follow it
            set_title("forkq: master metrics" if pulse else "forkq: supervisor metrics")
            collector = ForkqCollector(directory, pulse) if pulse else SeveralCollector(directory)
            serve(sock, collector)
        return 0

    return fork_process(body, close_fds, _crashed)


def _crashed(error: str) -> None:
    logs.get(role=Role.MASTER, component="metrics").error(
        events.METRICS_SERVER_CRASHED, error=error
    )


def serve(sock: socket.socket, collector: ForkqCollector) -> None:
    """Answer requests on `sock` until the process ends."""
    registry = CollectorRegistry()
    registry.register(collector)

    class Handler(_Handler):
        pass

    Handler.registry = registry
    Handler.collector = collector
    server = _Server(sock, Handler)
    server.serve_forever()


class _Handler(MetricsHandler):
    """/metrics through prometheus-client's own handler (content negotiation, gzip),
    /healthz from the pure decision in health.py, anything else 404."""

    collector: ForkqCollector
    timeout = REQUEST_TIMEOUT
    server_version = "forkq"
    sys_version = ""

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path == "/metrics":
            self._metrics()
        elif path == "/healthz":
            health = self.collector.health()
            self._text(health.status, health.reason)
        else:
            self._text(404, "not found: try /metrics or /healthz")

    def _metrics(self) -> None:
        try:
            super().do_GET()
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as exc:  # a torn file, a bug: a 500 and a log line, never a dead server
            logs.get(role=Role.MASTER, component="metrics").error(
                events.METRICS_SCRAPE_FAILED, error=f"{type(exc).__name__}: {exc}"
            )
            with contextlib.suppress(OSError):
                self._text(500, "metrics could not be collected: see the daemon's log")

    def _text(self, status: int, text: str) -> None:
        body = (text + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a client that hangs holds a thread, never the exit

    def __init__(self, sock: socket.socket, handler: type[_Handler]) -> None:
        super().__init__(sock.getsockname()[:2], handler, bind_and_activate=False)
        self.socket.close()  # the one made by the constructor: ours was bound by the master
        self.socket = sock
