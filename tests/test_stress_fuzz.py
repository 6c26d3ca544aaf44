"""Bad input, a fixed sample: the fuzz suite's properties on a few hundred inputs, plus the
inputs that once broke the daemon."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
from stress._common import DaemonProcess
from stress._common import TrackedDaemon
from stress._common import inprocess_daemon
from stress.fuzz import _big_numbers_socket
from stress.fuzz import _Canary
from stress.fuzz import tcp_states

from agentrt import Runtime
from agentrt.protocol.client import Client
from agentrt.protocol.frames import EndedFrame
from agentrt.protocol.frames import ErrorCode
from agentrt.protocol.frames import PendingList

from .conftest import refused

TIMEOUT = 20


@pytest.fixture
async def served(short_dir: Path) -> AsyncIterator[tuple[Runtime, TrackedDaemon]]:
    async with inprocess_daemon(short_dir) as (runtime, daemon, _):
        yield runtime, daemon


@pytest.fixture
async def client(served: tuple[Runtime, TrackedDaemon]) -> AsyncIterator[Client]:
    async with await Client.connect(served[1].socket_path) as connected:
        yield connected


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (b'{"type":"pending","action":"resume","session":"cli-\\ud800"}', "lone surrogate"),
        (b'{"type":"pending","action":"discard","session":"cli-a\\udfffb"}', "lone surrogate"),
        (b'{"type":"run","text":"hi \\ud800 there","session":"cli-sur"}', "lone surrogate"),
        (b'{"type":"answer","ask":"\\udc00","value":"allow"}', "lone surrogate"),
        # A field named by a lone surrogate is an unknown field, shown with a "?".
        (b'{"type":"pending","action":"list","\\ud800":1}', "unknown field ?"),
    ],
)
async def test_a_lone_surrogate_escape_gets_an_error_frame_and_the_connection_lives_on(
    served: tuple[Runtime, TrackedDaemon], client: Client, line: bytes, said: str
) -> None:
    runtime, _ = served
    with trio.fail_after(TIMEOUT):
        frame = await refused(client, line)
        assert frame.code is ErrorCode.INVALID
        assert said in frame.message
        await client.send_raw(b'{"type":"pending","action":"list"}\n')
        assert isinstance(await client.receive(), PendingList)
    assert await runtime.store.list() == []


async def test_a_run_after_a_refused_surrogate_still_finishes(client: Client) -> None:
    with trio.fail_after(TIMEOUT):
        await refused(client, b'{"type":"run","text":"\\ud800","session":"cli-s1"}')
        await client.send_raw(b'{"type":"run","text":"hello","session":"cli-s1"}\n')
        ended = await client.wait_for(EndedFrame)
        assert ended.outcome.value == "finished"


async def test_an_encoded_surrogate_is_not_utf8_and_gets_an_error_frame(client: Client) -> None:
    with trio.fail_after(TIMEOUT):
        frame = await refused(client, b'{"type":"run","text":"a\xed\xa0\x80b","session":"cli-e"}')
        assert frame.code is ErrorCode.MALFORMED
        assert frame.message == "frame is not valid UTF-8"


async def test_integers_of_5000_digits_get_error_frames_and_no_other_connection_notices(
    served: tuple[Runtime, TrackedDaemon],
) -> None:
    _, daemon = served
    with trio.fail_after(TIMEOUT):
        canary = await trio.to_thread.run_sync(_Canary.open, daemon.socket_path)
        try:
            sent = await trio.to_thread.run_sync(_big_numbers_socket, daemon.socket_path, canary)
            await trio.to_thread.run_sync(canary.finish)
        finally:
            canary.conn.close()
    assert sent > 20


# -- what a failure of the HTTP fuzzing says of the server --------------------------------


async def test_tcp_states_count_a_servers_listening_and_accepted_sockets() -> None:
    listener = trio.socket.socket()
    with listener:
        await listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert tcp_states(port) == {"listen": 1}
        with trio.socket.socket() as client:
            await client.connect(("127.0.0.1", port))
            accepted, _ = await listener.accept()
            with accepted:
                assert tcp_states(port) == {"listen": 1, "established": 1}
                await client.send(b"x")
                client.close()
                assert await accepted.recv(10) == b"x"
                assert await accepted.recv(10) == b""  # the client hung up; we did not
                assert tcp_states(port) == {"listen": 1, "close-wait": 1}


async def test_a_daemon_process_tells_where_its_threads_stand(short_dir: Path) -> None:
    (short_dir / "work").mkdir()
    daemon = DaemonProcess(
        short_dir / "d.sock", short_dir / "state", short_dir / "work", short_dir / "d.log"
    )
    async with trio.open_nursery() as nursery:
        await daemon.start(nursery)
        try:
            stacks = await trio.to_thread.run_sync(daemon.stacks)
        finally:
            await daemon.terminate()
    assert "(most recent call first)" in stacks
    assert "apps/daemon.py" in stacks and "trio" in stacks
    assert stacks in daemon.log_text()
