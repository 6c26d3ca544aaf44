"""An MCP server's elicitation answered through each chat service (its fake on loopback): choices
as buttons (Discord) or an inline keyboard (Telegram), typed fields as the chat's next message,
and a password field refused."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from agentrt import Runtime

from .test_chats_both import Chat
from .test_chats_both import chat  # noqa: F401  (fixtures)
from .test_mcp import mcp_runtime
from .test_mcp import replay
from .test_mcp import server_table

LIMIT = 20


async def press(chat: Chat, prompt: str, label: str, pressed: set[Any]) -> None:  # noqa: F811
    """Press `label` on the buttons of the question `prompt` (one not pressed before)."""
    fake = chat.fake

    def shown() -> Any:
        for mid, message in fake.messages.items():
            text = chat.service.message_text(message)
            if mid not in pressed and prompt in text and fake.buttons(mid):
                return mid
        return None

    message_id = await fake.wait_for(shown)
    pressed.add(message_id)
    chat.press(message_id, label)


@asynccontextmanager
async def answering(
    chat: Chat,  # noqa: F811
    tmp_path: Path,
    nursery: trio.Nursery,
    tool: str,
) -> AsyncIterator[Runtime]:
    """A runtime whose model calls the trusted MCP server's `tool`, and a bot on the chat's
    service that answers for it."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    model = replay(tmp_path, (tool, {}))
    async with mcp_runtime(tmp_path, workdir, server_table("fake", "trust = true"), model) as rt:
        await nursery.start(chat.service.bot(rt, chat.fake).run)
        yield rt


async def say(chat: Chat, prompt: str, text: str) -> None:  # noqa: F811
    """Answer the typed question `prompt` with the chat's next message."""
    await chat.wait_for(lambda: prompt in chat.last())
    chat.says(text)


async def test_an_elicitation_is_answered_through_a_chat(
    chat: Chat,  # noqa: F811
    tmp_path: Path,
    nursery: trio.Nursery,
) -> None:
    async with answering(chat, tmp_path, nursery, "fake__greet") as rt:
        pressed: set[Any] = set()
        with trio.fail_after(LIMIT):
            chat.says("who am I?")
            await press(chat, "MCP server fake asks: Who are you?", "accept", pressed)
            await say(chat, "Name (your name)", "Ada")
            await say(chat, "Age", "36")
            await press(chat, "Colour", "green", pressed)
            await press(chat, "Subscribe", "yes", pressed)
            await chat.wait_for(lambda: chat.last() == "done")
        messages = await rt.store.messages(chat.service.session)
    tools = [m.message.content for m in messages.items if m.message.role.value == "tool"]
    assert tools == ["hello Ada, 36, green, subscribed"]
    # Each field went as a question of its own, and each says it was answered.
    assert chat.texts()[:5] == [
        f"❓ {prompt}\n✔ Answered."
        for prompt in (
            "MCP server fake asks: Who are you?",
            "Name (your name)",
            "Age",
            "Colour",
            "Subscribe",
        )
    ]


async def test_a_password_field_is_refused_through_a_chat(
    chat: Chat,  # noqa: F811
    tmp_path: Path,
    nursery: trio.Nursery,
) -> None:
    async with answering(chat, tmp_path, nursery, "fake__login"):
        pressed: set[Any] = set()
        with trio.fail_after(LIMIT):
            chat.says("log in")
            await press(chat, "MCP server fake asks: Your password, please", "accept", pressed)
            await chat.wait_for(
                lambda: (
                    "asks for a secret, which must not travel through a chat service"
                    in "".join(chat.texts())
                )
            )
