"""A TCP proxy whose connections a test can cut, as a flaky network or a sleeping laptop does.

It forwards every byte both ways between a client on its address and the
server behind it. `cut` closes every connection open now; while `hold` is on,
new connections are accepted but wait, unforwarded, until `release`: the
client's reconnection reaches the server only when the test says so.
"""

from __future__ import annotations

import attrs
import trio


@attrs.define(eq=False)
class CuttableProxy:
    """Start with ``await nursery.start(proxy.run, listen_host, port)``."""

    target_host: str
    target_port: int
    _connections: set[trio.CancelScope] = attrs.field(factory=set, init=False)
    _released: trio.Event = attrs.field(factory=trio.Event, init=False)
    cuts: int = attrs.field(default=0, init=False)

    def __attrs_post_init__(self) -> None:
        self._released.set()

    async def run(
        self, host: str, port: int, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Listen on `host`:`port` until cancelled."""
        listeners = await trio.open_tcp_listeners(port, host=host)
        task_status.started()
        await trio.serve_listeners(self._serve, listeners)

    def cut(self) -> None:
        """Close every connection open now."""
        self.cuts += 1
        for scope in list(self._connections):
            scope.cancel()

    def hold(self) -> None:
        """Make new connections wait until `release`."""
        self._released = trio.Event()

    def release(self) -> None:
        """Let waiting and new connections through."""
        self._released.set()

    async def _serve(self, client: trio.SocketStream) -> None:
        with trio.CancelScope() as scope:
            self._connections.add(scope)
            try:
                await self._released.wait()
                server = await trio.open_tcp_stream(self.target_host, self.target_port)
                async with client, server, trio.open_nursery() as nursery:
                    nursery.start_soon(self._pump, client, server, nursery.cancel_scope)
                    nursery.start_soon(self._pump, server, client, nursery.cancel_scope)
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            finally:
                self._connections.discard(scope)
        await client.aclose()

    @staticmethod
    async def _pump(
        source: trio.SocketStream, sink: trio.SocketStream, both: trio.CancelScope
    ) -> None:
        try:
            while data := await source.receive_some(65536):
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        both.cancel()  # one side ended: so does the other
