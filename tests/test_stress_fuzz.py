"""Bad input, a fixed sample: the fuzz suite's properties on a few hundred inputs, plus the
inputs that once broke the daemon."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
from stress._common import TrackedDaemon
from stress._common import inprocess_daemon
from stress.fuzz import _big_numbers_socket
from stress.fuzz import _Canary

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
