"""Runs the window on prompt_toolkit's asyncio loop and the daemon connection on Trio.

prompt_toolkit drives its application on asyncio; the daemon client, like the
rest of the project, is Trio. Trio's guest mode runs the Trio side on the
asyncio loop's thread, between asyncio callbacks, so both sides share one
thread and the window's state needs no locks. Key handlers (asyncio side)
hand frames to Trio through the Trio token; the reader task (Trio side)
calls the application directly and asks it to redraw.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from pathlib import Path
from typing import Any

import attrs
import outcome
import trio

from agentrt.client import BrokenDaemonConnectionError, Client, ClientError
from agentrt.frames import ClientFrame

from ._app import TuiApp
from ._state import TuiState

#: How often the status line's spinner and elapsed time move while a run is going.
TICK = 0.1


@attrs.define(eq=False)
class Bridge:
    """The Trio side of one window: its connection to the daemon and the outbox feeding it."""

    socket_path: Path
    window: str
    app: TuiApp | None = None
    _token: trio.lowlevel.TrioToken | None = attrs.field(default=None, init=False)
    _outbox: trio.MemorySendChannel[ClientFrame] | None = attrs.field(default=None, init=False)
    #: Frames sent before the Trio side was up; flushed once it is.
    _early: list[ClientFrame] = attrs.field(factory=list, init=False)
    _scope: trio.CancelScope | None = attrs.field(default=None, init=False)
    _stopped: bool = attrs.field(default=False, init=False)

    def send(self, frame: ClientFrame) -> None:
        """Queue a frame for the daemon; callable from the asyncio side, never blocks."""
        if self._token is None or self._outbox is None:
            self._early.append(frame)
            return
        outbox = self._outbox
        self._token.run_sync_soon(_put, outbox, frame)

    def stop(self) -> None:
        """Ask the Trio side to finish: the connection closes, the daemon keeps the task."""
        self._stopped = True
        if self._token is not None and self._scope is not None:
            self._token.run_sync_soon(self._scope.cancel)

    async def run(self) -> None:
        """The Trio side: connect, then read frames and write the outbox until stopped."""
        app = self.app
        assert app is not None, "set Bridge.app before running it"
        send, receive = trio.open_memory_channel[ClientFrame](math.inf)
        with trio.CancelScope() as scope:
            self._scope = scope
            if self._stopped:
                return
            self._outbox = send
            for frame in self._early:
                send.send_nowait(frame)
            self._early.clear()
            self._token = trio.lowlevel.current_trio_token()
            try:
                client = await Client.connect(self.socket_path, window=self.window)
            except ClientError as exc:
                app.disconnected(str(exc))
                await trio.sleep_forever()
            async with client, trio.open_nursery() as nursery:
                assert client.welcome is not None
                app.receive(client.welcome)
                nursery.start_soon(_write, client, receive, app)
                nursery.start_soon(_tick, app)
                reason = await _read(client, app)
                app.disconnected(reason)
                nursery.cancel_scope.cancel()
            await trio.sleep_forever()


def _put(outbox: trio.MemorySendChannel[ClientFrame], frame: ClientFrame) -> None:
    with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError):
        outbox.send_nowait(frame)


async def _read(client: Client, app: TuiApp) -> str:
    while True:
        try:
            frame = await client.receive()
        except BrokenDaemonConnectionError as exc:
            return str(exc)
        app.receive(frame)


async def _write(
    client: Client, frames: trio.MemoryReceiveChannel[ClientFrame], app: TuiApp
) -> None:
    async for frame in frames:
        try:
            await client.send(frame)
        except ClientError as exc:
            app.disconnected(str(exc))
            return


async def _tick(app: TuiApp) -> None:
    while True:
        await trio.sleep(TICK)
        if app.state.run is not None:
            app.application.invalidate()


def run_window(socket_path: Path, window: str, *, notice: str | None = None) -> None:
    """Show the window until the user quits; the connection runs on Trio in guest mode."""
    asyncio.run(_host(socket_path, window, notice))


async def _host(socket_path: Path, window: str, notice: str | None) -> None:
    loop = asyncio.get_running_loop()
    bridge = Bridge(socket_path, window)
    app = TuiApp(TuiState(window=window), bridge.send)
    bridge.app = app
    if notice:
        app.notify(notice)
    trio_done: asyncio.Future[outcome.Outcome[None]] = loop.create_future()

    def done(result: outcome.Outcome[None]) -> None:
        if not trio_done.done():
            trio_done.set_result(result)
        future = app.application.future
        if isinstance(result, outcome.Error) and future is not None and not future.done():
            app.application.exit(exception=result.error)

    def run_soon(fn: Any) -> None:
        loop.call_soon_threadsafe(fn)

    trio.lowlevel.start_guest_run(
        bridge.run,
        run_sync_soon_threadsafe=run_soon,
        done_callback=done,
        # asyncio owns the signal wakeup fd (prompt_toolkit watches SIGWINCH through it).
        host_uses_signal_set_wakeup_fd=True,
    )
    try:
        await app.application.run_async()
    finally:
        bridge.stop()
        result = await trio_done
    result.unwrap()
