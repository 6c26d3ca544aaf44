"""A 2 MB tool argument, end to end: written whole, and every front-end stays connected.

The model asks to write a 2,000,000-byte file. The live run must write every
byte; what each front-end is sent about the call is shortened, so no frame or
message goes over what its receiver accepts.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import httpx
import pytest
import trio

from agentrt import ALLOW_ONCE
from agentrt import ReplayModel
from agentrt import Runtime
from agentrt import ToolCall
from agentrt import open_runtime
from agentrt.bots import RetryPolicy
from agentrt.bots import TelegramBot
from agentrt.bots import TelegramConfig
from agentrt.daemon import serve
from agentrt.frontends.chats.discord import DiscordBot
from agentrt.frontends.chats.discord import DiscordConfig
from agentrt.http import load_or_create_token
from agentrt.http import serve_http
from agentrt.models.scripted import ReplayTurn
from agentrt.protocol.client import Client
from agentrt.protocol.codec import MAX_FRAME_SIZE
from agentrt.protocol.codec import encode
from agentrt.protocol.frames import AnswerFrame
from agentrt.protocol.frames import AskFrame
from agentrt.protocol.frames import DaemonFrame
from agentrt.protocol.frames import EndedFrame
from agentrt.protocol.frames import Run
from agentrt.protocol.frames import ToolCallFrame

from .fakes.discord_server import TOKEN as DISCORD_TOKEN
from .fakes.discord_server import FakeDiscord
from .fakes.telegram_server import TOKEN
from .fakes.telegram_server import FakeTelegram

SIZE = 2_000_000
CONTENT = ("0123456789abcdef" * (SIZE // 16 + 1))[:SIZE]
LIMIT = 20


def big_write_model() -> ReplayModel:
    call = ToolCall("w1", "write_file", {"path": "big.txt", "content": CONTENT})
    return ReplayModel((ReplayTurn("", (call,)), ReplayTurn("written")))


@pytest.fixture
async def big_runtime(tmp_path: Path, workdir: Path) -> AsyncIterator[Runtime]:
    async with open_runtime(tmp_path / "state", model=big_write_model(), workdir=workdir) as rt:
        yield rt


async def test_terminal_window_gets_a_shortened_call_and_the_file_is_whole(
    big_runtime: Runtime, sock_path: Path, workdir: Path, nursery: trio.Nursery
) -> None:
    await nursery.start(serve, sock_path, big_runtime)
    with trio.fail_after(LIMIT):
        async with await Client.connect(sock_path) as client:
            await client.send(Run("write it"))
            frames: list[DaemonFrame] = []
            while True:
                frame = await client.receive()
                frames.append(frame)
                if isinstance(frame, AskFrame):
                    assert frame.prompt == f"write {SIZE} bytes to {workdir / 'big.txt'}"
                    await client.send(AnswerFrame(frame.id, ALLOW_ONCE))
                if isinstance(frame, EndedFrame):
                    break
    last = frames[-1]
    assert isinstance(last, EndedFrame)
    assert last.outcome.value == "finished"
    (call,) = [f for f in frames if isinstance(f, ToolCallFrame)]
    assert "elided" in call.arguments["content"]
    assert all(len(encode(f)) <= MAX_FRAME_SIZE for f in frames)
    assert (workdir / "big.txt").read_text() == CONTENT


async def test_http_events_carry_a_shortened_call_and_the_file_is_whole(
    big_runtime: Runtime, workdir: Path, nursery: trio.Nursery
) -> None:
    token = load_or_create_token(big_runtime.state_dir)
    port = await nursery.start(partial(serve_http, big_runtime, "127.0.0.1", 0, token=token))
    headers = {"Authorization": f"Bearer {token}"}
    seen: list[dict[str, object]] = []
    with trio.fail_after(LIMIT):
        async with (
            httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=10
            ) as http,
            http.stream("GET", "/v1/events") as stream,
        ):
            lines = stream.aiter_lines()
            async for line in lines:
                if line.startswith("data: ") and json.loads(line[6:])["type"] == "ready":
                    break
            started = await http.post("/v1/session/big/run", json={"text": "write it"})
            assert started.status_code == 202, started.text
            async for line in lines:
                if not line.startswith("data: "):
                    continue
                event = json.loads(line[6:])
                seen.append(event)
                if event["type"] == "question":
                    answered = await http.post(
                        f"/v1/questions/{event['id']}/answer", json={"value": ALLOW_ONCE}
                    )
                    assert answered.status_code == 200, answered.text
                if event["type"] == "run_ended":
                    break
    assert seen[-1]["outcome"] == "finished"
    (call,) = [e for e in seen if e["type"] == "tool_call"]
    assert len(json.dumps(call)) < 16 * 1024
    assert (workdir / "big.txt").read_text() == CONTENT


async def test_telegram_chat_gets_short_messages_and_the_file_is_whole(
    big_runtime: Runtime, workdir: Path, nursery: trio.Nursery
) -> None:
    server = FakeTelegram()
    await nursery.start(server.run)
    config = TelegramConfig(
        TOKEN,
        frozenset({"42"}),
        server.base_url,
        poll_timeout=5,
        edit_interval=0.01,
        retry=RetryPolicy(max_attempts=6, base_delay=0.01, max_delay=0.05),
    )
    bot = TelegramBot(config, big_runtime.executor)
    await nursery.start(bot.run)

    def keyboard() -> int | None:
        for message_id, held in sorted(server.messages.items()):
            if held.get("reply_markup"):
                return message_id
        return None

    with trio.fail_after(LIMIT):
        server.user_says(42, 42, "write it")
        message_id = await server.wait_for(keyboard)
        assert f"{SIZE} bytes" in server.messages[message_id]["text"]
        allow = next(
            b["callback_data"] for b in server.buttons(message_id) if b["text"] == "Allow once"
        )
        server.press(42, message_id, str(allow))
        await server.wait_for(lambda: any("written" in t for t in server.texts(42)))
        await bot.bridge.wait_idle()
    assert all(len(text) <= 4096 for text in server.texts(42))
    assert (workdir / "big.txt").read_text() == CONTENT


async def test_discord_channel_gets_short_messages_and_the_file_is_whole(
    big_runtime: Runtime, workdir: Path, nursery: trio.Nursery
) -> None:
    server = FakeDiscord(heartbeat_ms=100)
    await nursery.start(server.run)
    config = DiscordConfig(
        DISCORD_TOKEN,
        frozenset({"1001"}),
        server.api_url,
        server.gateway_url,
        edit_interval=0.01,
        retry=RetryPolicy(max_attempts=6, base_delay=0.01, max_delay=0.05),
        invalid_session_delay=0.01,
    )
    bot = DiscordBot(config, big_runtime.executor)
    await nursery.start(bot.run)

    def confirmation() -> str | None:
        for message_id, message in server.messages.items():
            if message["channel_id"] == "5000" and "Allow this?" in message["content"]:
                return message_id
        return None

    with trio.fail_after(LIMIT):
        server.user_says("5000", "1001", "write it")
        message_id = await server.wait_for(confirmation)
        assert f"{SIZE} bytes" in server.messages[message_id]["content"]
        allow = next(
            b["custom_id"] for b in server.buttons(message_id) if b["label"] == "Allow once"
        )
        server.press("1001", message_id, str(allow))
        await server.wait_for(lambda: any("written" in c for c in server.contents("5000")))
        await bot.bridge.wait_idle()
    assert all(len(content) <= 2000 for content in server.contents("5000"))
    assert (workdir / "big.txt").read_text() == CONTENT
