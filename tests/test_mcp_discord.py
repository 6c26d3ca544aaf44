"""An MCP server's elicitation answered through Discord (the gateway and REST fake on loopback):
choices as buttons, typed fields as the channel's next message."""

from __future__ import annotations

from pathlib import Path

import trio

from .fakes.discord_server import FakeDiscord
from .test_discord import CHANNEL
from .test_discord import OWNER
from .test_discord import custom_id
from .test_discord import last
from .test_discord import make_bot
from .test_discord import server  # noqa: F401  (fixtures)
from .test_mcp import mcp_runtime
from .test_mcp import replay
from .test_mcp import server_table

LIMIT = 20


async def press(fake: FakeDiscord, prompt: str, label: str, pressed: set[str]) -> None:
    """Press `label` on the buttons of the question `prompt` (one not pressed before)."""

    def shown() -> str | None:
        for mid, message in fake.messages.items():
            if mid not in pressed and prompt in message["content"] and fake.buttons(mid):
                return mid
        return None

    message_id: str = await fake.wait_for(shown)
    pressed.add(message_id)
    fake.press(OWNER, message_id, custom_id(fake, message_id, label))


async def say(fake: FakeDiscord, prompt: str, text: str) -> None:
    """Answer the typed question `prompt` with the channel's next message."""
    await fake.wait_for(lambda: prompt in last(fake))
    fake.user_says(CHANNEL, OWNER, text)


async def test_an_elicitation_is_answered_through_discord(
    server: FakeDiscord,  # noqa: F811
    tmp_path: Path,
    nursery: trio.Nursery,
) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    model = replay(tmp_path, ("fake__greet", {}))
    async with mcp_runtime(tmp_path, workdir, server_table("fake", "trust = true"), model) as rt:
        bot = make_bot(rt, server)
        await nursery.start(bot.run)
        pressed: set[str] = set()
        with trio.fail_after(LIMIT):
            server.user_says(CHANNEL, OWNER, "who am I?")
            await press(server, "MCP server fake asks: Who are you?", "accept", pressed)
            await say(server, "Name (your name)", "Ada")
            await say(server, "Age", "36")
            await press(server, "Colour", "green", pressed)
            await press(server, "Subscribe", "yes", pressed)
            await server.wait_for(lambda: last(server) == "done")
        messages = await rt.store.messages(f"dc-{CHANNEL}")
    tools = [m.message.content for m in messages.items if m.message.role.value == "tool"]
    assert tools == ["hello Ada, 36, green, subscribed"]
