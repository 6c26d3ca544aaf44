"""The daemon: a Unix-socket server with one root nursery and one nursery per connection.

A failure inside one connection is logged and ends that connection only.
Shutting down stops accepting, removes the socket, cancels every run with
`Cause.SHUTDOWN` (their pending tasks are kept), waits a moment for them to
save, then cancels everything else.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket as stdlib_socket
import time
from pathlib import Path
from typing import Final

import attrs
import trio

from ...core.cause import Cause
from ...core.runtime import Runtime
from ...protocol.codec import encode
from ...protocol.frames import DaemonStatus
from ...protocol.frames import ErrorCode
from ...protocol.frames import ErrorFrame
from ...vocab.reprs import mutable
from .connection import Connection
from .connection import RunCounter
from .paths import SocketLock
from .paths import check_peer
from .paths import peer_credentials
from .paths import prepare_socket_dir
from .paths import remove_stale_socket

log = logging.getLogger("agentrt.daemon")

#: How long a shutdown waits for cancelled runs to save their pending tasks.
SHUTDOWN_GRACE: Final = 10.0


def daemon_version() -> str:
    """The installed agentrt version."""
    import importlib.metadata  # only when asked: it takes a while to import

    try:
        return importlib.metadata.version("agentrt")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


@mutable(eq=False)
class Daemon:
    """Serves one runtime on one Unix socket. Start it with ``await nursery.start(daemon.serve)``."""

    runtime: Runtime
    socket_path: Path
    #: The only uid allowed to connect (the daemon's own, unless a test says otherwise).
    uid: int = attrs.field(factory=os.getuid)
    version: str = attrs.field(factory=daemon_version)
    #: Shut down gracefully on SIGTERM / SIGINT (needs the main thread).
    handle_signals: bool = False
    #: Runs in flight over every connection.
    runs: RunCounter = attrs.field(factory=RunCounter, init=False)
    #: The HTTP API's address when the process serves one, or why the one asked for is not
    #: served (``daemon status`` shows them).
    http: str | None = None
    http_error: str | None = None
    stopping: bool = attrs.field(default=False, init=False)
    _started: float = attrs.field(factory=time.monotonic, init=False, repr=False)
    _connections: set[Connection] = attrs.field(factory=set, init=False, repr=False)
    _count: int = attrs.field(default=0, init=False, repr=False)
    _listener: trio.SocketListener | None = attrs.field(default=None, init=False, repr=False)
    _socket_inode: tuple[int, int] | None = attrs.field(default=None, init=False, repr=False)
    _root: trio.Nursery | None = attrs.field(default=None, init=False, repr=False)

    # -- windows ----------------------------------------------------------

    def claim_window(self, conn: Connection, window: str) -> bool:
        """Bind `window` to `conn`; False when another live connection holds it."""
        return self.runtime.policy.windows.claim(window, conn)

    def release_window(self, conn: Connection) -> None:
        """Forget the window `conn` held."""
        if conn.window is not None:
            self.runtime.policy.windows.release(conn.window, conn)

    @property
    def connections(self) -> int:
        """How many connections are open."""
        return len(self._connections)

    def status(self) -> DaemonStatus:
        """How this daemon is, for a ``daemon status`` request."""
        return DaemonStatus(
            pid=os.getpid(),
            socket=os.fspath(self.socket_path.absolute()),
            daemon_version=self.version,
            model=self.runtime.model.name,
            approval=self.runtime.executor.config.approval.value,
            uptime=round(time.monotonic() - self._started, 3),
            connections=len(self._connections),
            runs=self.runs.count,
            http=self.http,
            http_error=self.http_error,
            stopping=self.stopping,
        )

    def stop_soon(self) -> DaemonStatus:
        """Start a graceful `shutdown` (a ``daemon stop`` request); the daemon as it starts it.

        Its `DaemonStatus.runs` are the runs the shutdown stops, their tasks kept.
        """
        status = attrs.evolve(self.status(), stopping=True)
        if not self.stopping and self._root is not None:
            log.warning("asked to stop over the socket: shutting down; unfinished tasks are kept")
            self._root.start_soon(self.shutdown)
        return status

    # -- serving ----------------------------------------------------------

    async def serve(
        self, *, task_status: trio.TaskStatus[Daemon] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Bind the socket and serve until cancelled or `shutdown`; report ``self`` when ready.

        Raises `DaemonAlreadyRunningError` when another daemon serves the path
        and `SocketPathError` when the path is unsafe. A stale socket file
        (nobody answering) is replaced.
        """
        prepare_socket_dir(self.socket_path)
        lock = SocketLock(self.socket_path)
        lock.acquire()
        try:
            if await trio.to_thread.run_sync(remove_stale_socket, self.socket_path):
                log.info("removed a stale socket at %s", self.socket_path)
            sock = trio.socket.socket(stdlib_socket.AF_UNIX, stdlib_socket.SOCK_STREAM)
            # Bound under a name of its own, listening, then renamed into place: a client
            # that sees the socket's path can connect (never "refused" meanwhile).
            bound = _binding_name(self.socket_path)
            try:
                await sock.bind(os.fspath(bound))
                os.chmod(bound, 0o600)
            except BaseException:
                sock.close()
                if bound != self.socket_path:
                    with contextlib.suppress(OSError):
                        os.unlink(bound)
                raise
            try:
                async with trio.open_nursery() as nursery:
                    self._root = nursery
                    if self.handle_signals:
                        # Handled before anyone can connect: a SIGTERM sent by whoever saw
                        # the socket answer is a graceful stop, never the default kill.
                        await nursery.start(self._watch_signals)
                    # The system's maximum: a burst of windows connecting at once must not
                    # see connections that look open and then fail on their first write.
                    sock.listen(stdlib_socket.SOMAXCONN)
                    if bound != self.socket_path:
                        os.replace(bound, self.socket_path)
                    info = os.stat(self.socket_path)
                    self._socket_inode = (info.st_dev, info.st_ino)
                    self._listener = trio.SocketListener(sock)
                    nursery.start_soon(self._accept_loop, self._listener)
                    task_status.started(self)
            finally:
                self._remove_socket()
                if bound != self.socket_path:
                    with contextlib.suppress(OSError):
                        os.unlink(bound)  # still there only if the rename never came
                if self._listener is None:
                    sock.close()
                else:
                    with trio.CancelScope(shield=True):
                        await self._listener.aclose()
        finally:
            lock.release()

    async def shutdown(self, *, grace: float = SHUTDOWN_GRACE) -> None:
        """Stop gracefully: no new connections, runs end with `Cause.SHUTDOWN`, tasks kept."""
        if self.stopping:
            return
        self.stopping = True
        self._remove_socket()
        if self._listener is not None:
            await self._listener.aclose()
        count = self.runtime.executor.cancel_all(Cause.SHUTDOWN)
        log.info("shutting down; %d run(s) cancelled, their pending tasks are kept", count)
        with trio.move_on_after(grace):
            await self.runs.wait_idle()
        if self._root is not None:
            self._root.cancel_scope.cancel()

    async def _watch_signals(
        self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        # The handler outside the receiver. A signal still on its way when the receiver
        # closes (the daemon already stopping for a `stop` frame, say) is raised again by
        # Trio, even a moment later, at the handler that was there before the receiver
        # opened: this one, which lets the shutdown under way finish, and not the default
        # one, which would kill the daemon in the middle of it. It stays: the daemon is
        # stopping from then on. One that comes before the receiver opens is kept for it.
        early: list[int] = []
        opened = False

        def outside(signum: int, _frame: object) -> None:
            if opened or self.stopping:
                log.warning("%s: the daemon is already stopping", signal.Signals(signum).name)
            else:
                early.append(signum)

        for stop in (signal.SIGTERM, signal.SIGINT):
            signal.signal(stop, outside)
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            opened = True
            task_status.started()
            for signum in early:
                if self._stop_for(signum):
                    return
            async for signum in signals:
                if self._stop_for(signum):
                    return

    def _stop_for(self, signum: int) -> bool:
        """Shut down gracefully for the stop signal `signum`; at a second, stop now (True)."""
        name = signal.Signals(signum).name
        assert self._root is not None
        if self.stopping:
            log.warning("second %s: stopping now", name)
            self._root.cancel_scope.cancel()
            return True
        log.warning("%s: shutting down; unfinished tasks are kept", name)
        self._root.start_soon(self.shutdown)
        return False

    def _remove_socket(self) -> None:
        # Only our own socket: a newer daemon may have replaced the file already.
        if self._socket_inode is None:
            return
        try:
            info = os.stat(self.socket_path)
        except FileNotFoundError:
            return
        if (info.st_dev, info.st_ino) == self._socket_inode:
            self.socket_path.unlink(missing_ok=True)
        self._socket_inode = None

    async def _accept_loop(self, listener: trio.SocketListener) -> None:
        assert self._root is not None
        while True:
            try:
                stream = await listener.accept()
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                return
            except OSError as exc:  # out of file descriptors and the like: wait, don't die
                log.error("cannot accept a connection: %s", exc)
                await trio.sleep(0.1)
                continue
            self._root.start_soon(self._handle, stream)

    async def _handle(self, stream: trio.SocketStream) -> None:
        self._count += 1
        number = self._count
        try:
            peer = peer_credentials(stream.socket)
            refusal = check_peer(peer, self.uid)
        except OSError as exc:
            refusal = f"cannot tell who is connecting ({exc}); connect over the Unix socket"
        if refusal is not None:
            log.warning("connection %d refused: %s", number, refusal)
            await self._refuse(stream, refusal)
            return
        conn = Connection(self, stream, number)
        self._connections.add(conn)
        try:
            await conn.serve()
        except* Exception as group:
            # One connection's failure ends that connection, never the daemon.
            log.error("connection %d failed", number, exc_info=group)
        finally:
            self._connections.discard(conn)

    async def _refuse(self, stream: trio.SocketStream, message: str) -> None:
        with trio.move_on_after(1.0):
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await stream.send_all(encode(ErrorFrame(ErrorCode.FORBIDDEN, message)))
        with trio.CancelScope(shield=True), trio.move_on_after(1.0):
            await stream.aclose()


#: The longest path a Unix socket may be bound to (``sun_path`` less its NUL).
_SOCKET_PATH_MAX: Final = 107


def _binding_name(socket_path: Path) -> Path:
    """A fresh name beside `socket_path` to bind and listen on before the rename into place.

    The socket's own path when no such name fits in a socket address.
    """
    for name in (f"{socket_path.name}.{os.getpid()}", f".{os.urandom(2).hex()}"):
        candidate = socket_path.with_name(name)
        if len(os.fsencode(candidate)) <= _SOCKET_PATH_MAX and not os.path.lexists(candidate):
            return candidate
    return socket_path
