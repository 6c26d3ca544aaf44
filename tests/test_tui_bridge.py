"""The window's Trio side: connecting, losing the daemon, reconnecting with growing pauses."""

from __future__ import annotations

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
from agentrt.protocol.frames import Welcome
from agenttui import _bridge
from agenttui._app import TuiApp
from agenttui._bridge import BACKOFF
from agenttui._bridge import Bridge
from agenttui._bridge import backoff
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
