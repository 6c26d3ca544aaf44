"""An MCP server's elicitation answered through Telegram (the Bot API fake on loopback): choices
as an inline keyboard, typed fields as the chat's next message, and a password field refused."""

from __future__ import annotations

from pathlib import Path

import trio

from .fakes.telegram_server import FakeTelegram
from .test_mcp import mcp_runtime
from .test_mcp import replay
from .test_mcp import server_table
from .test_telegram import CHAT
from .test_telegram import OWNER
from .test_telegram import confirmation
from .test_telegram import data_of
from .test_telegram import last_text
from .test_telegram import make_bot
from .test_telegram import server  # noqa: F401  (fixtures)

LIMIT = 20


async def press(fake: FakeTelegram, prompt: str, label: str, after: int) -> int:
    """Press `label` on the keyboard of the question `prompt`, shown after message `after`."""
    message_id: int = await fake.wait_for(
        lambda: (
            (found := confirmation(fake)) is not None
            and found > after
            and prompt in fake.messages[found]["text"]
            and found
        )
    )
    fake.press(OWNER, message_id, data_of(fake, message_id, label))
    return message_id


async def say(fake: FakeTelegram, prompt: str, text: str) -> None:
    """Answer the typed question `prompt` with the chat's next message."""
    await fake.wait_for(lambda: prompt in last_text(fake))
    fake.user_says(CHAT, OWNER, text)


async def test_an_elicitation_is_answered_through_telegram(
    server: FakeTelegram,  # noqa: F811
    tmp_path: Path,
    nursery: trio.Nursery,
) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    model = replay(tmp_path, ("fake__greet", {}))
    async with mcp_runtime(tmp_path, workdir, server_table("fake", "trust = true"), model) as rt:
        bot = make_bot(rt, server)
        await nursery.start(bot.run)
        with trio.fail_after(LIMIT):
            server.user_says(CHAT, OWNER, "who am I?")
            shown = await press(server, "MCP server fake asks: Who are you?", "accept", 0)
            await say(server, "Name (your name)", "Ada")
            await say(server, "Age", "36")
            shown = await press(server, "Colour", "green", shown)
            await press(server, "Subscribe", "yes", shown)
            await server.wait_for(lambda: last_text(server) == "done")
        messages = await rt.store.messages(f"tg-{CHAT}")
    tools = [m.message.content for m in messages.items if m.message.role.value == "tool"]
    assert tools == ["hello Ada, 36, green, subscribed"]
    # Each field went as a question of its own, and each says it was answered.
    assert server.texts(CHAT)[:5] == [
        f"❓ {prompt}\n✔ Answered."
        for prompt in (
            "MCP server fake asks: Who are you?",
            "Name (your name)",
            "Age",
            "Colour",
            "Subscribe",
        )
    ]


async def test_a_password_field_is_refused_through_telegram(
    server: FakeTelegram,  # noqa: F811
    tmp_path: Path,
    nursery: trio.Nursery,
) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    model = replay(tmp_path, ("fake__login", {}))
    async with mcp_runtime(tmp_path, workdir, server_table("fake", "trust = true"), model) as rt:
        bot = make_bot(rt, server)
        await nursery.start(bot.run)
        with trio.fail_after(LIMIT):
            server.user_says(CHAT, OWNER, "log in")
            await press(server, "MCP server fake asks: Your password, please", "accept", 0)
            await server.wait_for(
                lambda: (
                    "asks for a secret, which must not travel through a chat service"
                    in "".join(server.texts(CHAT))
                )
            )
