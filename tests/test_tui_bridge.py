"""The window's Trio side: connecting, losing the daemon, reconnecting with growing pauses."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from prompt_toolkit.application import create_app_session
from prompt_toolkit.input import DummyInput
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput

from agentrt.protocol.client import BrokenDaemonConnectionError
from agentrt.protocol.client import Client
from agentrt.protocol.client import HandshakeError
from agentrt.protocol.frames import ClientFrame
from agentrt.protocol.frames import DaemonAction
from agentrt.protocol.frames import DaemonFrame
from agentrt.protocol.frames import DaemonRequest
from agentrt.protocol.frames import PendingAction
from agentrt.protocol.frames import PendingRequest
from agentrt.protocol.frames import TextFrame
from agentrt.protocol.frames import Welcome
from agenttui import _bridge
from agenttui import _transitions_daemon
from agenttui._app import TuiApp
from agenttui._bridge import BACKOFF
from agenttui._bridge import Bridge
from agenttui._bridge import backoff
from agenttui._state import Action
from agenttui._state import TuiState
from agenttui._status import status_text

SOCKET = Path("/nonexistent/d.sock")


@pytest.fixture(autouse=True)
def app_session() -> Iterator[None]:
    with create_app_session(input=DummyInput(), output=DummyOutput()):
        yield


def make_bridge() -> tuple[Bridge, TuiApp]:
    """A bridge and its window, as `run_window` wires them, on Trio's clock."""
    bridge = Bridge(SOCKET, "w1")
    bridge.app = TuiApp(TuiState(window="w1"), bridge.send, clock=trio.current_time)
    return bridge, bridge.app


def is_connected(app: TuiApp) -> bool:
    """Read through a call, so that the type checker does not narrow it across awaits."""
    return app.state.connected


def gave_up(app: TuiApp) -> bool:
    """Read through a call, so that the type checker does not narrow it across awaits."""
    return app.state.gave_up


def test_the_pauses_grow_then_stay() -> None:
    pauses = backoff()
    assert [next(pauses) for _ in range(7)] == [*BACKOFF, BACKOFF[-1], BACKOFF[-1]]
    assert list(BACKOFF) == sorted(BACKOFF)


async def test_refused_connections_are_retried_with_growing_pauses(
    monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.testing.MockClock
) -> None:
    attempts: list[float] = []

    async def refuse(cls: type[Client], *args: Any, **kwargs: Any) -> Client:
        attempts.append(trio.current_time())
        raise HandshakeError("the window is held by another live connection")

    monkeypatch.setattr(Client, "connect", classmethod(refuse))
    bridge, app = make_bridge()
    with trio.move_on_after(sum(BACKOFF) + 2 * BACKOFF[-1] + 0.1):
        await bridge.run()
    gaps = [round(later - earlier, 6) for earlier, later in itertools.pairwise(attempts)]
    assert gaps == [*BACKOFF, BACKOFF[-1], BACKOFF[-1]]
    assert app.state.link_error == "the window is held by another live connection"
    assert "no daemon: reconnecting in" in status_text(app.state, trio.current_time())


@attrs.define(eq=False)
class FakeClient:
    """A connection that answers hello, then is lost when the test says so."""

    welcome: Welcome
    lost: trio.Event = attrs.field(factory=trio.Event)
    sent: list[ClientFrame] = attrs.field(factory=list)

    async def receive(self) -> DaemonFrame:
        await self.lost.wait()
        raise BrokenDaemonConnectionError("the daemon closed the connection")

    async def send(self, frame: ClientFrame) -> None:
        await trio.lowlevel.checkpoint()
        self.sent.append(frame)

    async def __aenter__(self) -> FakeClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await trio.lowlevel.checkpoint()


async def test_a_lost_connection_is_said_then_made_again_and_pending_tasks_are_asked_for(
    monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.testing.MockClock
) -> None:
    clients: list[FakeClient] = []

    async def connect(cls: type[Client], *args: Any, **kwargs: Any) -> FakeClient:
        await trio.lowlevel.checkpoint()
        clients.append(FakeClient(Welcome(1, "0.1.0", "w1")))
        return clients[-1]

    monkeypatch.setattr(Client, "connect", classmethod(connect))
    bridge, app = make_bridge()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(bridge.run)
        await trio.testing.wait_all_tasks_blocked()
        assert is_connected(app)
        # A first connection asks only how the daemon is (an HTTP API it could not serve).
        assert clients[0].sent == [DaemonRequest(DaemonAction.STATUS)]
        lost_at = trio.current_time()
        clients[0].lost.set()
        await trio.testing.wait_all_tasks_blocked()
        assert not is_connected(app)
        assert app.state.retry_at == lost_at + BACKOFF[0]
        assert app.state.notice is not None
        assert "Lost the daemon: the daemon closed the connection" in app.state.notice.text
        assert "lost the daemon: reconnecting in" in status_text(app.state, trio.current_time())
        await trio.sleep(BACKOFF[0])
        await trio.testing.wait_all_tasks_blocked()
        assert is_connected(app)
        assert len(clients) == 2
        assert clients[1].sent == [
            DaemonRequest(DaemonAction.STATUS),
            PendingRequest(PendingAction.LIST),
        ]
        bridge.stop()


async def test_no_daemon_starts_one_and_says_so(
    monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.testing.MockClock
) -> None:
    from agentrt.protocol.client import DaemonNotRunningError

    started: list[Path] = []
    answering = False

    async def connect(cls: type[Client], *args: Any, **kwargs: Any) -> FakeClient:
        await trio.lowlevel.checkpoint()
        if not answering:
            raise DaemonNotRunningError("no daemon answers")
        return FakeClient(Welcome(1, "0.1.0", "w1"))

    @attrs.frozen
    class Process:
        pid: int = 4242

    @attrs.frozen
    class Started:
        process: Process = Process()
        log: Path = Path("/state/daemon.log")

    async def start_daemon(socket_path: Path, **options: Any) -> Started:
        nonlocal answering
        assert app.state.starting_daemon
        assert "starting the daemon" in status_text(app.state, trio.current_time())
        started.append(socket_path)
        await trio.sleep(1.0)
        answering = True
        return Started()

    monkeypatch.setattr(Client, "connect", classmethod(connect))
    monkeypatch.setattr(_bridge, "start_daemon", start_daemon)
    bridge, app = make_bridge()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(bridge.run)
        await trio.sleep(2.0)
        assert started == [SOCKET]
        assert app.state.connected
        assert app.state.notice is not None
        assert "Started a daemon (pid 4242)" in app.state.notice.text
        assert "Started a daemon (pid 4242)" in app.state.transcript[-1].text
        bridge.stop()


async def test_a_daemon_that_fails_to_start_twice_is_started_no_more(
    monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.testing.MockClock
) -> None:
    from agentrt.protocol.client import DaemonNotRunningError
    from agenttui._launch import DaemonStartError

    clients: list[FakeClient] = []
    starts: list[float] = []
    answering = True

    async def connect(cls: type[Client], *args: Any, **kwargs: Any) -> FakeClient:
        await trio.lowlevel.checkpoint()
        if not answering:
            raise DaemonNotRunningError("no daemon answers")
        clients.append(FakeClient(Welcome(1, "0.1.0", "w1")))
        return clients[-1]

    async def start_daemon(socket_path: Path, **options: Any) -> None:
        await trio.lowlevel.checkpoint()
        starts.append(trio.current_time())
        raise DaemonStartError(f"the daemon exited with status 1 (attempt {len(starts)})")

    monkeypatch.setattr(Client, "connect", classmethod(connect))
    monkeypatch.setattr(_bridge, "start_daemon", start_daemon)
    bridge, app = make_bridge()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(bridge.run)
        await trio.testing.wait_all_tasks_blocked()
        assert is_connected(app)
        answering = False
        clients[0].lost.set()
        # Far longer than the pauses between attempts: the window keeps looking, no more.
        await trio.sleep(10 * BACKOFF[-1])
        assert len(starts) == 2
        assert gave_up(app)
        assert app.state.notice is not None
        assert app.state.notice.text.startswith(
            "The daemon failed to start 2 times: this window starts it no more. Its last "
            "error: the daemon exited with status 1 (attempt 2)"
        )
        assert "looking again in" in status_text(app.state, trio.current_time())
        # A daemon started by hand is found, and a later failure may start one again.
        answering = True
        await trio.sleep(BACKOFF[-1])
        await trio.testing.wait_all_tasks_blocked()
        assert is_connected(app)
        assert not gave_up(app)
        assert len(clients) == 2
        bridge.stop()


@attrs.define(eq=False)
class StreamingClient:
    """A connection whose frames the test hands over; those handed over together arrive
    together, as one read of the socket brings them."""

    welcome: Welcome
    frames: list[DaemonFrame] = attrs.field(factory=list)
    arrived: trio.Event = attrs.field(factory=trio.Event)

    def hand_over(self, *frames: DaemonFrame) -> None:
        self.frames += frames
        self.arrived.set()

    @property
    def ready(self) -> bool:
        return bool(self.frames)

    async def receive(self) -> DaemonFrame:
        while not self.frames:
            self.arrived = trio.Event()
            await self.arrived.wait()
        return self.frames.pop(0)

    async def send(self, frame: ClientFrame) -> None:
        await trio.lowlevel.checkpoint()

    async def __aenter__(self) -> StreamingClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await trio.lowlevel.checkpoint()


async def test_pieces_of_a_reply_are_read_together_once_per_redraw_interval(
    monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.testing.MockClock
) -> None:
    client = StreamingClient(Welcome(1, "0.1.0", "w1"))

    async def connect(cls: type[Client], *args: Any, **kwargs: Any) -> StreamingClient:
        await trio.lowlevel.checkpoint()
        return client

    monkeypatch.setattr(Client, "connect", classmethod(connect))
    bridge, app = make_bridge()
    read_at: list[float] = []
    on_frame = _transitions_daemon.on_frame

    def record(state: TuiState, frame: DaemonFrame) -> list[Action]:
        read_at.append(trio.current_time())
        return on_frame(state, frame)

    monkeypatch.setattr(_transitions_daemon, "on_frame", record)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(bridge.run)
        await trio.testing.wait_all_tasks_blocked()
        start = trio.current_time()
        client.hand_over(*(TextFrame("t1", f"word{n} ") for n in range(10)))
        await trio.testing.wait_all_tasks_blocked()
        # The ten that came together are handled at once, one after the other.
        assert read_at[1:] == [start] * 10
        client.hand_over(TextFrame("t1", "later "))
        await trio.testing.wait_all_tasks_blocked()
        # The next piece waits for the window's redraw interval: read with what came with it.
        assert len(read_at) == 11
        await trio.sleep(app.interval)
        await trio.testing.wait_all_tasks_blocked()
        assert read_at[11:] == [start + app.interval]
        assert app.state.transcript[-1].text.endswith("word9 later ")
        bridge.stop()


@attrs.define(eq=False)
class _IdleBridge(Bridge):
    """A bridge whose Trio side waits until stopped and connects to nothing."""

    async def run(self) -> None:
        with trio.CancelScope() as scope:
            self._scope = scope
            self._token = trio.lowlevel.current_trio_token()
            if not self._stopped:
                await trio.sleep_forever()


def test_the_first_screen_is_told_once_it_is_drawn() -> None:
    bridge = _IdleBridge(SOCKET, "w1")
    drawn: list[int] = []

    def first_screen() -> None:
        assert bridge.app is not None
        drawn.append(bridge.app.application.render_counter)
        bridge.app.application.exit()

    with create_pipe_input() as pipe, create_app_session(input=pipe, output=DummyOutput()):
        asyncio.run(_bridge._host(bridge, None, first_screen))
    # Called after the first drawing, and only once (the exit draws again).
    assert drawn == [1]
