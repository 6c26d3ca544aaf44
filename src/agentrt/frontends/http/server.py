"""`serve_http`: the HTTP API and web page on hypercorn's Trio worker, with bounded connections.

hypercorn serves each connection (HTTP/1.1 parsing, keep-alive, the ASGI
calls); this module keeps only the accept loop for itself. hypercorn's Trio
worker accepts every connection it is offered (``trio.serve_listeners`` has no
bound), so a local client opening a thousand slow connections used up the
process's file descriptors and the daemon's Unix socket could not accept a
terminal window. Here a connection is accepted only when one of
`connection_limit` slots is free; the rest wait in the kernel's listen backlog
and cost the process nothing.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import resource
from typing import Any
from typing import Final
from typing import cast

import trio
from hypercorn.config import Config
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ConnectionState
from hypercorn.utils import wrap_app

from ...core.runtime import Runtime
from ...vocab.terms import WEB
from .app import allowed_hosts
from .app import build_app
from .frontend import WebFrontEnd

log = logging.getLogger("agentrt.http")

#: The prefix of the sessions whose questions the web page answers.
WEB_PREFIX = WEB
#: HTTP connections served at once, at most (fewer when file descriptors are scarce).
MAX_CONNECTIONS: Final = 256
#: Connections the kernel holds for us while every slot is taken.
BACKLOG: Final = 128
#: Seconds a new or idle connection may take to send a complete request head.
HEAD_TIMEOUT: Final = 5.0
#: The largest request head (request line and headers), in bytes.
MAX_HEAD: Final = 16 * 1024
# Accept errors that mean "out of a resource for now": wait and accept again.
_SCARCE = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})


def _bind(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def connection_limit() -> int:
    """`MAX_CONNECTIONS`, or a quarter of the file descriptors the process may open if less.

    The rest stay for the Unix socket's windows, the task store, the bots and
    the tools' pipes.
    """
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(4, min(MAX_CONNECTIONS, soft // 4))


def _config() -> Config:
    config = Config()
    config.accesslog = None
    config.errorlog = logging.getLogger("agentrt.http.server")
    config.backlog = BACKLOG
    # hypercorn's idle timer runs from accept until a request head is complete, and
    # between requests: a client that trickles its headers is closed after this long.
    config.keep_alive_timeout = HEAD_TIMEOUT
    config.h11_max_incomplete_size = MAX_HEAD
    # No read_timeout: it bounds every read, so it would cut an idle event stream,
    # whose client rightly sends nothing. Bodies have their own deadline (read_body).
    config.read_timeout = None
    config.graceful_timeout = 1.0
    return config


async def serve_http(
    runtime: Runtime,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    token: str,
    max_connections: int | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the HTTP API and the web chat page until cancelled; report the bound port.

    Start it with ``port = await nursery.start(serve_http, runtime, host, port,
    token=...)``; port 0 picks a free one. Runs started over HTTP live in this
    server's nursery; when it is cancelled they stop with the shutdown cause,
    which keeps their pending tasks. The server holds the one ``"chat-"``
    listener of the registry for its lifetime. At most `max_connections`
    (default `connection_limit()`) connections are served at once.
    """
    if not token:
        raise ValueError("serve_http needs a token: use load_or_create_token(state_dir)")
    if not _is_loopback(host):
        log.warning("the HTTP API listens on %s, which is not a loopback address", host)
    limit = connection_limit() if max_connections is None else max_connections
    if limit < 1:
        raise ValueError(f"max_connections must be at least 1, not {limit}")
    config = _config()
    config.bind = [_bind(host, port)]
    sockets = config.create_sockets().insecure_sockets
    listeners: list[trio.SocketListener] = []
    try:
        for sock in sockets:
            sock.listen(config.backlog)
            listeners.append(trio.SocketListener(trio.socket.from_stdlib_socket(sock)))
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    bound = int(sockets[0].getsockname()[1])
    with runtime.registry.listen(WEB_PREFIX, name="web") as listener:
        async with trio.open_nursery() as nursery:
            frontend = WebFrontEnd(runtime, nursery, listener)
            nursery.start_soon(frontend.serve_questions)
            # hypercorn types its app more narrowly than Starlette declares itself.
            asgi: Any = build_app(frontend, token, hosts=allowed_hosts(host, bound))
            app = wrap_app(asgi, 0, "asgi")
            server = _Server(app, config, trio.Semaphore(limit))
            for each in listeners:
                nursery.start_soon(server.accept_loop, each)
            log.info("HTTP API on http://%s (at most %d connections)", _bind(host, bound), limit)
            task_status.started(bound)


class _Server:
    """Accepts while a slot is free and hands each connection to hypercorn's `TCPServer`."""

    def __init__(self, app: Any, config: Config, slots: trio.Semaphore) -> None:
        self.app = app
        self.config = config
        self.slots = slots
        self.context = WorkerContext(None)
        self._scarce_logged = -1.0

    async def accept_loop(self, listener: trio.SocketListener) -> None:
        async with listener, trio.open_nursery() as connections:
            while True:
                await self.slots.acquire()
                try:
                    stream = await listener.accept()
                except OSError as exc:
                    self.slots.release()
                    if exc.errno not in _SCARCE:
                        raise
                    self._log_scarce(exc)
                    await trio.sleep(0.1)
                    continue
                connections.start_soon(self._serve, stream)

    async def _serve(self, stream: trio.SocketStream) -> None:
        try:
            # Closed here too: TCPServer leaves the socket open when the server is
            # cancelled (shut down) while it serves the connection.
            async with stream:
                # TCPServer tells a plain stream from a TLS one by duck typing; it takes both.
                tls_or_plain = cast(trio.SSLStream[trio.SocketStream], stream)
                await TCPServer(
                    self.app, self.config, self.context, ConnectionState({}), tls_or_plain
                )
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the client went away: nothing to report
        except Exception as exc:
            # One connection's failure never reaches the server, and a flood of them
            # must not flood the log: one line each, the traceback only when debugging.
            log.warning("HTTP: a connection failed: %s: %s", type(exc).__name__, exc)
            log.debug("HTTP: the connection's failure", exc_info=exc)
        finally:
            self.slots.release()

    def _log_scarce(self, exc: OSError) -> None:
        # One line a minute at most: a flood of these is the problem, not its description.
        now = trio.current_time()
        if self._scarce_logged < 0 or now - self._scarce_logged >= 60:
            self._scarce_logged = now
            log.warning("HTTP: cannot accept a connection now (%s); retrying", exc.strerror)
