"""A TCP proxy in front of a real server that a test can cut and restore: an outage on demand."""

from __future__ import annotations

import contextlib
from typing import Any

import attrs
import trio


@attrs.define(eq=False)
class TcpProxy:
    """Forwards connections from a loopback port to `host`:`port` until `cut`.

    `cut` closes every connection it carries and refuses new ones (they are
    accepted and closed at once, as a server going down looks to a client);
    `hold` keeps new ones open without an answer, as a server that does not
    answer yet (`holding` waits for them), until `fail_held` closes them;
    `restore` forwards again, and closes the connections still held.
    """

    host: str
    port: int
    listen_port: int = 0
    _up: bool = True
    _holding: bool = False
    _scopes: set[trio.CancelScope] = attrs.field(factory=set)
    #: Connections held so far (`hold`).
    held: int = 0
    _arrived: trio.Event = attrs.field(factory=trio.Event)
    _released: trio.Event = attrs.field(factory=trio.Event)

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.listen_port = listeners[0].socket.getsockname()[1]
        task_status.started(self.listen_port)
        await trio.serve_listeners(self._handle, listeners)

    def cut(self) -> None:
        """Close every forwarded or held connection and refuse new ones."""
        self._up, self._holding = False, False
        self.fail_held()
        for scope in list(self._scopes):
            scope.cancel()

    def hold(self) -> None:
        """Keep new connections open, unanswered, until `fail_held`, `cut` or `restore`."""
        self._up, self._holding = False, True

    async def holding(self, count: int) -> None:
        """Wait until `count` connections have been held in all."""
        while self.held < count:
            await self._arrived.wait()

    def fail_held(self) -> None:
        """Close the connections held now (each fails as its client sees it); hold on."""
        self._released.set()
        self._released = trio.Event()

    def restore(self) -> None:
        """Forward new connections again; close those held."""
        self._up, self._holding = True, False
        self.fail_held()

    async def _handle(self, client: trio.SocketStream) -> None:
        async with client:
            if self._holding:
                released = self._released
                self.held += 1
                self._arrived.set()
                self._arrived = trio.Event()
                await released.wait()
                return
            if not self._up:
                return
            with trio.CancelScope() as scope:
                self._scopes.add(scope)
                try:
                    server = await trio.open_tcp_stream(self.host, self.port)
                    async with server, trio.open_nursery() as nursery:
                        nursery.start_soon(_pump, client, server, nursery.cancel_scope)
                        nursery.start_soon(_pump, server, client, nursery.cancel_scope)
                finally:
                    self._scopes.discard(scope)


async def _pump(source: Any, sink: Any, scope: trio.CancelScope) -> None:
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        while True:
            data = await source.receive_some(65536)
            if not data:
                break
            await sink.send_all(data)
    scope.cancel()
