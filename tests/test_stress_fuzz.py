"""Bad input, a fixed sample: the fuzz suite's properties on a few hundred inputs, plus the
inputs that once broke the daemon."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
from stress._common import TrackedDaemon, inprocess_daemon
from stress.fuzz import _big_numbers_socket, _Canary

from agentrt import Runtime
from agentrt.client import Client
from agentrt.frames import EndedFrame, ErrorCode, ErrorFrame, PendingList

TIMEOUT = 20


@pytest.fixture
async def served(short_dir: Path) -> AsyncIterator[tuple[Runtime, TrackedDaemon]]:
    async with inprocess_daemon(short_dir) as (runtime, daemon, _):
        yield runtime, daemon


@pytest.mark.parametrize(
    "line",
    [
        b'{"type":"pending","action":"resume","session":"cli-\\ud800"}',
        b'{"type":"pending","action":"discard","session":"cli-a\\udfffb"}',
        b'{"type":"run","text":"hi \\ud800 there","session":"cli-sur"}',
        b'{"type":"answer","ask":"\\udc00","value":"allow"}',
    ],
)
async def test_a_lone_surrogate_escape_gets_an_error_frame_and_the_connection_lives_on(
    served: tuple[Runtime, TrackedDaemon], line: bytes
) -> None:
    runtime, daemon = served
    with trio.fail_after(TIMEOUT):
        async with await Client.connect(daemon.socket_path) as client:
            await client.send_raw(line + b"\n")
            frame = await client.receive()
            assert isinstance(frame, ErrorFrame)
            assert frame.code is ErrorCode.INVALID
            assert "lone surrogate" in frame.message
            await client.send_raw(b'{"type":"pending","action":"list"}\n')
            assert isinstance(await client.receive(), PendingList)
    assert await runtime.store.list() == []


async def test_a_run_after_a_refused_surrogate_still_finishes(
    served: tuple[Runtime, TrackedDaemon],
) -> None:
    _, daemon = served
    with trio.fail_after(TIMEOUT):
        async with await Client.connect(daemon.socket_path) as client:
            await client.send_raw(b'{"type":"run","text":"\\ud800","session":"cli-s1"}\n')
            assert isinstance(await client.receive(), ErrorFrame)
            await client.send_raw(b'{"type":"run","text":"hello","session":"cli-s1"}\n')
            ended = await client.wait_for(EndedFrame)
            assert ended.outcome.value == "finished"


async def test_an_unknown_field_named_by_a_lone_surrogate_gets_an_error_frame(
    served: tuple[Runtime, TrackedDaemon],
) -> None:
    _, daemon = served
    with trio.fail_after(TIMEOUT):
        async with await Client.connect(daemon.socket_path) as client:
            await client.send_raw(b'{"type":"pending","action":"list","\\ud800":1}\n')
            frame = await client.receive()
            assert isinstance(frame, ErrorFrame)
            assert frame.code is ErrorCode.INVALID
            assert "unknown field ?" in frame.message
            await client.send_raw(b'{"type":"pending","action":"list"}\n')
            assert isinstance(await client.receive(), PendingList)


async def test_an_encoded_surrogate_is_not_utf8_and_gets_an_error_frame(
    served: tuple[Runtime, TrackedDaemon],
) -> None:
    _, daemon = served
    with trio.fail_after(TIMEOUT):
        async with await Client.connect(daemon.socket_path) as client:
            await client.send_raw(b'{"type":"run","text":"a\xed\xa0\x80b","session":"cli-e"}\n')
            frame = await client.receive()
            assert isinstance(frame, ErrorFrame)
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
