"""Runs the window on prompt_toolkit's asyncio loop and the daemon connection on Trio.

prompt_toolkit drives its application on asyncio; the daemon client, like the
rest of the project, is Trio. Trio's guest mode runs the Trio side on the
asyncio loop's thread, between asyncio callbacks, so both sides share one
thread and the window's state needs no locks. Key handlers (asyncio side)
hand frames to Trio through the Trio token; the reader task (Trio side)
calls the application directly and asks it to redraw.

The window is drawn at once; the connection comes after. When no daemon
answers, one is started. When the connection is lost, the window says so and
connects again, with a growing pause between attempts, starting a daemon
again if none answers. A daemon that fails to start twice in a row (it exits
before answering, or dies with an error status just after) is started no
more: the window shows its last error and how to fix it, and connects once
a daemon answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import outcome
import trio
from prompt_toolkit.history import History

from agentrt.protocol.client import BrokenDaemonConnectionError
from agentrt.protocol.client import Client
from agentrt.protocol.client import ClientError
from agentrt.protocol.client import DaemonNotRunningError
from agentrt.protocol.frames import ClientFrame
from agentrt.vocab.reprs import mutable

from ._app import TuiApp
from ._launch import DaemonStartError
from ._launch import Started
from ._launch import start_daemon
from ._launch import tail
from ._launch import wait_exit
from ._state import TuiState

#: The pauses between connection attempts: quick at first, then every few seconds.
BACKOFF: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0)
#: Failed starts of the daemon in a row after which a window starts it no more.
MAX_FAILED_STARTS = 2
#: How long a lost daemon this window started is given to exit, to tell how it ended.
EXIT_WAIT = 2.0


def backoff() -> Iterator[float]:
    """The pauses before each next connection attempt, the last one repeated forever."""
    yield from BACKOFF
    while True:
        yield BACKOFF[-1]


@mutable(eq=False)
class Bridge:
    """The Trio side of one window: its connection to the daemon and the outbox feeding it.

    `state_dir`, `model`, `base_url` and `daemon_options` (more of the daemon's flags, such
    as ``--approval full-auto``) are used only for a daemon this window has to start.
    """

    socket_path: Path
    window: str
    state_dir: Path | None = None
    model: str | None = None
    app: TuiApp | None = None
    base_url: str | None = None
    daemon_options: tuple[str, ...] = ()
    _token: trio.lowlevel.TrioToken | None = attrs.field(default=None, init=False)
    _outbox: trio.MemorySendChannel[ClientFrame] | None = attrs.field(default=None, init=False)
    #: Frames sent before the Trio side was up; flushed once it is.
    _early: list[ClientFrame] = attrs.field(factory=list, init=False)
    _scope: trio.CancelScope | None = attrs.field(default=None, init=False)
    _stopped: bool = attrs.field(default=False, init=False)
    #: The daemon this window started last, until its connection ends.
    _started: Started | None = attrs.field(default=None, init=False)
    #: Starts in a row whose daemon never answered, or died with an error status.
    _failed_starts: int = attrs.field(default=0, init=False)
    #: The last error, once the window stopped starting daemons.
    _gave_up: str | None = attrs.field(default=None, init=False)
    _last_error: str | None = attrs.field(default=None, init=False)

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
        """The Trio side: connect (starting a daemon if needed), serve, reconnect; until stopped."""
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
            await self._connect_and_serve(app, receive)
            await trio.sleep_forever()

    async def _connect_and_serve(
        self, app: TuiApp, outbox: trio.MemoryReceiveChannel[ClientFrame]
    ) -> None:
        pauses = backoff()
        first = True
        while True:
            try:
                client = await self._connect(app, first=first)
            except DaemonStartError as exc:
                if first:
                    # The window cannot work at all: say why, as before it was drawn.
                    app.fail(exc)
                    return
                error = str(exc)
                self._start_failed(error)
            except ClientError as exc:
                # A daemon this attempt started that does not even answer its hello failed.
                error = self._start_failed(await self._why_gone(str(exc))) or str(exc)
            else:
                first = False
                pauses = backoff()
                # Frames queued for the connection that was lost belong to runs now gone.
                _drain(outbox)
                async with client:
                    assert client.welcome is not None
                    app.receive(client.welcome)
                    reason = await _serve(client, outbox, app)
                pause = next(pauses)
                again = trio.current_time() + pause
                app.disconnected(reason, app.now() + pause)
                # A daemon this window started that dies with an error status failed to start,
                # though it answered for a moment (a bot without its token, say).
                self._start_failed(await self._why_gone(None))
                await trio.sleep_until(again)
                continue
            pause = next(pauses)
            if self._failed_starts >= MAX_FAILED_STARTS and self._gave_up is None:
                self._gave_up = self._last_error or error
                app.gave_up(self._give_up_text(self._gave_up), app.now() + pause)
            else:
                app.connect_failed(error, app.now() + pause)
            await trio.sleep(pause)

    def _start_failed(self, error: str | None) -> str | None:
        """Count a failed start of the daemon this window started (None: it did not fail)."""
        if error is not None:
            self._failed_starts += 1
            self._last_error = error
        return error

    async def _why_gone(self, reason: str | None) -> str | None:
        """Why the daemon this window started last is gone, if it died with an error status.

        `reason` is why its hello failed, None once its connection served and ended. The
        connection ends just before the process does: it is given a moment to exit. None
        when this window started none, or it lives on, or it ended well (it was stopped).
        """
        started, self._started = self._started, None
        if started is None:
            return None
        process = started.process
        status = await wait_exit(process, EXIT_WAIT)
        if status is not None and status > 0:
            said = f" ({reason})" if reason else ""
            return (
                f"the daemon (pid {process.pid}) exited with status {status} on "
                f"{self.socket_path}{said}; see {started.log}{tail(started.log)}"
            )
        if status is not None or reason is None:
            self._failed_starts = 0  # it served, or was stopped: a start that worked
        return None

    def _give_up_text(self, error: str) -> str:
        where = f" --state-dir {self.state_dir}" if self.state_dir is not None else ""
        return (
            f"The daemon failed to start {MAX_FAILED_STARTS} times: this window starts it no "
            f"more. Its last error: {error}\nFix that, then start it yourself with "
            f"'agentrt daemon --socket {self.socket_path}{where}' (this window connects once "
            "it answers), or open agenttui again."
        )

    async def _connect(self, app: TuiApp, *, first: bool) -> Client:
        """A connection to the daemon, started first when none answers (unless given up)."""
        try:
            client = await Client.connect(self.socket_path, window=self.window)
        except DaemonNotRunningError:
            if self._failed_starts >= MAX_FAILED_STARTS:
                raise
        else:
            # A daemon answers without being started: whatever failed is behind us.
            self._failed_starts = 0
            self._gave_up = None
            given = (
                ("--model", self.model),
                ("--base-url", self.base_url),
                *zip(self.daemon_options[::2], self.daemon_options[1::2], strict=True),
            )
            asked = [f"{flag} {value}" for flag, value in given if value is not None]
            if first and asked:
                app.notify(
                    f"A daemon was already running on {self.socket_path}; "
                    f"{' and '.join(asked)} {'is' if len(asked) == 1 else 'are'} ignored"
                )
            return client
        app.starting_daemon(str(self.socket_path))
        started = await start_daemon(
            self.socket_path,
            state_dir=self.state_dir,
            model=self.model,
            base_url=self.base_url,
            options=self.daemon_options,
        )
        self._started = started
        client = await Client.connect(self.socket_path, window=self.window)
        app.daemon_started(
            f"Started a daemon (pid {started.process.pid}) on {self.socket_path} "
            f"(log: {started.log})"
        )
        return client


def _put(outbox: trio.MemorySendChannel[ClientFrame], frame: ClientFrame) -> None:
    with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError):
        outbox.send_nowait(frame)


def _drain(outbox: trio.MemoryReceiveChannel[ClientFrame]) -> None:
    with contextlib.suppress(trio.WouldBlock):
        while True:
            outbox.receive_nowait()


async def _serve(
    client: Client, outbox: trio.MemoryReceiveChannel[ClientFrame], app: TuiApp
) -> str:
    """Read frames into the window and write its outbox until the connection ends; why it did."""
    reason = "the connection closed"

    async def read(scope: trio.CancelScope) -> None:
        nonlocal reason
        while True:
            try:
                frame = await client.receive()
            except BrokenDaemonConnectionError as exc:
                reason = str(exc)
                scope.cancel()
                return
            app.receive(frame)
            if app.streamed(frame) and not client.ready:
                # What streams in is drawn every `app.interval` at most: the pieces that
                # come meanwhile are read together then (in one read, handled one after
                # the other), not each on a wake-up of its own.
                await trio.sleep(app.interval)

    async def write(scope: trio.CancelScope) -> None:
        nonlocal reason
        async for frame in outbox:
            try:
                await client.send(frame)
            except ClientError as exc:
                reason = str(exc)
                scope.cancel()
                return

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read, nursery.cancel_scope)
        nursery.start_soon(write, nursery.cancel_scope)
    return reason


def run_window(
    socket_path: Path,
    window: str,
    *,
    state_dir: Path | None = None,
    model: str | None = None,
    base_url: str | None = None,
    history: History | None = None,
    daemon_options: Sequence[str] = (),
    on_first_screen: Callable[[], None] | None = None,
) -> None:
    """Show the window until the user quits; the connection runs on Trio in guest mode.

    `daemon_options` are more flags for a daemon the window starts (pairs of flag and
    value); `on_first_screen` is called once the window is first drawn. Raises
    `DaemonStartError` when no daemon answered and none could be started.
    """
    bridge = Bridge(
        socket_path,
        window,
        state_dir,
        model,
        base_url=base_url,
        daemon_options=tuple(daemon_options),
    )
    asyncio.run(_host(bridge, history, on_first_screen))


async def _host(
    bridge: Bridge, history: History | None, on_first_screen: Callable[[], None] | None = None
) -> None:
    loop = asyncio.get_running_loop()
    state = TuiState(window=bridge.window, cwd=os.getcwd())
    app = (
        TuiApp(state, bridge.send, history=history)
        if history is not None
        else TuiApp(state, bridge.send)
    )
    bridge.app = app
    if on_first_screen is not None:
        first_screen = on_first_screen

        def drawn(_: object) -> None:
            app.application.after_render -= drawn
            first_screen()

        app.application.after_render += drawn
    trio_done: asyncio.Future[outcome.Outcome[None]] = loop.create_future()

    def done(result: outcome.Outcome[None]) -> None:
        if not trio_done.done():
            trio_done.set_result(result)
        if isinstance(result, outcome.Error):
            app.fail(result.error)

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
